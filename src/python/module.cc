// tdist._C: the Python extension. Binds the backend's constructor for
// python/tdist/__init__.py, which registers it with torch.distributed.Backend, and
// ElasticGroup for python/tdist/elastic.py (elastic_binding.h).
#include <pybind11/chrono.h>
#include <torch/python.h>

#include <chrono>
#include <string>

#include "backend.h"
#include "elastic_binding.h"
#include "tdist/settings.h"

namespace {

c10::intrusive_ptr<tdist::python::TorchBackendBase> create_backend(
    const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
    std::chrono::duration<double> timeout, const std::string& engine, bool defer_group) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  pybind11::gil_scoped_release no_gil;  // the rendezvous blocks on the other ranks
  return tdist::python::TdistBackend::create(store, rank, size, ms, engine, defer_group);
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "tdist's engines as a torch.distributed backend (see the tdist package)";
  m.def("create_backend", &create_backend, pybind11::arg("store"), pybind11::arg("rank"),
        pybind11::arg("size"), pybind11::arg("timeout"), pybind11::arg("engine"),
        pybind11::arg("defer_group") = false,
        "The torch.distributed backend object of one group over tdist's `engine` (with "
        "defer_group, enable_reconfigure's: no peers until reconfigure)");
  m.def(
      "default_engine", [] { return tdist::setting_string("TDIST_ENGINE"); },
      "TDIST_ENGINE: the engine a group uses when its options name none");
  m.attr("torch_version_built") = TORCH_VERSION;
  tdist::python::bind_elastic(m);
}
