// tdist-bench driver: one rank's whole run, from init_process_group to the summary.
//
// run_rank() joins the job through env:// (so it works under torchrun, tdistrun, mpirun
// and under this tool's own --nproc), runs each selected collective over the size steps
// and has rank 0 print nccl-tests' table. For each size: warm-up iterations, a barrier,
// the timed iterations (each call waited for before the next is issued), then the mean
// time per call of the slowest rank (an all_reduce max over ranks: more honest than
// nccl-tests' mean over ranks). With --check 1 the inputs are rewritten and one more
// call is checked element by element; the wrong counts are summed over ranks.
// After the tables rank 0 prints the bus-bandwidth average, the wrong total, and each
// rank's peak RSS next to its buffer bytes, so the library's own memory can be read off:
// the peak (VmHWM) is restarted before each collective (memory.h), the buffers are
// mmap'd, and "peak - RSS after init - buffers" is what the library held on top of the
// caller's data (scratch, plus anything it kept from earlier collectives).
// With --csv rank 0 also writes each row to a CSV file (header: collective, backend,
// nranks, bytes, count, dtype, redop, root, inplace, iters, time_us, algbw_GBps,
// busbw_GBps, wrong), opened before the first collective and flushed row by row.
//
// Returns the process exit status (0 ok, 1 wrong results or a failed CSV write, 2 bad
// arguments found only after joining, e.g. a root beyond the world or a CSV file that
// cannot be opened). tdist errors propagate as exceptions.
#pragma once

#include "tdist_bench/options.h"

namespace tdist_bench {

int run_rank(const Options& options);

}  // namespace tdist_bench
