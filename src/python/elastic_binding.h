// tdist._C's elastic part: tdist::ElasticGroup (tdist/elastic.h) for python/tdist/elastic.py,
// which wraps each generation's group as a torch ProcessGroup over a TdistBackend.
// Internal to the Python extension (module.cc calls bind_elastic).
//
// Errors: StaleMemberError as tdist._C.StaleMemberError (a RuntimeError), the others as the
// backend's (torch_work.h: PeerError and TimeoutError as DistBackendError). Every call that
// waits for other processes releases the GIL.
#pragma once

#include <pybind11/pybind11.h>

namespace tdist::python {

void bind_elastic(pybind11::module_& m);

}  // namespace tdist::python
