// The `nccl` backend's entry point, registered by name in src/backends/builtin.cc when tdist
// is built with CUDA and NCCL (TDIST_HAVE_NCCL).
//
// nccl_backend() returns the factory of world groups: it finds the visible CUDA devices
// (Error "nccl: no CUDA device is visible: <CUDA's reason>" without any), picks this
// process's device (TDIST_NCCL_DEVICE, else LOCAL_RANK modulo the device count, else 0;
// nccl_runtime.h) and makes an NcclProcessGroup on it (nccl_group.h). Blocking: collective
// over every rank of the job. Thread-safe as the registry.
#pragma once

#include "tdist/backend.h"

namespace tdist::backends::nccl {

BackendFactory nccl_backend();

}  // namespace tdist::backends::nccl
