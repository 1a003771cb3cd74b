// Single-copy transfers between the processes of one host: the receiver copies a large
// message straight out of the sender's memory with process_vm_readv (Linux's CMA), one
// copy instead of two through the rings (core/wire.h's rendezvous).
//
// The kernel allows it only where the reader may ptrace the sender: same user, and Yama's
// ptrace_scope 0, no seccomp filter against it, CAP_SYS_PTRACE in some containers. The
// first refusal (EPERM, ENOSYS) turns it off for the whole process with one log line;
// large messages then go through the rings. TDIST_SHM_SINGLE_COPY_BYTES sets the size
// from which it is used (0 turns it off); unset, single_copy_pays() decides.
// Thread-safe.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace tdist::transport::shm {

// False once the kernel refused a single copy in this process.
bool single_copy_allowed();

// Whether a single copy beats the rings on this machine, measured once per process: a
// 1 MiB process_vm_readv from this process against a memcpy of the same (best of 3 each,
// under a millisecond in all). The rings copy twice, but each side copies its half at
// memcpy's speed on its own core; the kernel copies once, but pins every page of the
// peer's it touches, which under some hypervisors makes it 3x slower than memcpy (the
// single copy then halved shm busbw from 4 MiB: docs/performance.md). True when the
// kernel's copy takes at most 1.5x memcpy's time; false where the kernel refuses it.
bool single_copy_pays();

// Copies `bytes` at `address` in process `pid` to `dest`. False when the kernel refused
// or the range is not mapped there.
bool single_copy_read(pid_t pid, void* dest, uint64_t address, size_t bytes);

}  // namespace tdist::transport::shm
