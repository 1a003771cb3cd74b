// PythonCallSite: the Python line that called a torch.distributed collective, for
// TDIST_DEBUG=callsite (ProcessGroup::debug_callsite()): the innermost frame of the calling
// thread outside torch's own package (torch.distributed's wrappers, c10d_logger's), e.g.
// "train.py:42". While it lives it holds a CallSite naming that line, so the collectives the
// backend issues carry it; when the group does not check call sites, an outer CallSite
// exists already, or the thread has never run Python (autograd's engine threads, which
// DDP's hooks run on), it holds nothing and takes no lock. Internal to the Python extension.
// Thread-safety: for the calling thread; takes the GIL (PyGILState) only to read the frames.
#pragma once

#include <optional>
#include <string>

#include "tdist/process_group.h"

namespace tdist::python {

class PythonCallSite {
 public:
  explicit PythonCallSite(const ProcessGroup& group);
  PythonCallSite(const PythonCallSite&) = delete;
  PythonCallSite& operator=(const PythonCallSite&) = delete;

 private:
  std::string file_;
  std::optional<CallSite> site_;
};

}  // namespace tdist::python
