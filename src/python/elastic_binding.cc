// tdist._C's elastic part (elastic_binding.h).
#include "elastic_binding.h"

#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/python.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "backend.h"
#include "store_adapter.h"
#include "tdist/elastic.h"
#include "torch_work.h"

namespace tdist::python {
namespace {

namespace py = pybind11;
using Seconds = std::chrono::duration<double>;

// Runs `fn` without the GIL; StaleMemberError stays itself (its own Python exception), the
// rest become torch's errors.
template <typename F>
auto released(F&& fn) {
  py::gil_scoped_release no_gil;
  try {
    return fn();
  } catch (const StaleMemberError&) {
    throw;
  } catch (...) {
    std::rethrow_exception(to_torch_error(std::current_exception()));
  }
}

ElasticOptions options_of(const std::string& engine, Seconds timeout, Seconds join_window,
                          int min_size) {
  ElasticOptions o;
  o.backend = engine;
  // Negative: TDIST_TIMEOUT (ElasticOptions' default).
  if (timeout.count() >= 0)
    o.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  // Negative: TDIST_ELASTIC_JOIN_WINDOW.
  o.join_window = join_window.count() < 0
                      ? std::chrono::milliseconds(-1)
                      : std::chrono::duration_cast<std::chrono::milliseconds>(join_window);
  o.min_size = min_size;
  return o;
}

}  // namespace

void bind_elastic(py::module_& m) {
  py::register_exception<StaleMemberError>(m, "StaleMemberError", PyExc_RuntimeError);
  py::class_<ElasticGroup>(m, "ElasticGroup",
                           "tdist::ElasticGroup: generations of a job's group (tdist/elastic.h)")
      .def_static(
          "join",
          [](const std::string& engine, Seconds timeout, Seconds join_window, int min_size,
             const std::string& init_method) {
            return released([&] {
              return ElasticGroup::join(options_of(engine, timeout, join_window, min_size),
                                        init_method);
            });
          },
          py::arg("engine"), py::arg("timeout"), py::arg("join_window"), py::arg("min_size"),
          py::arg("init_method"))
      .def_static(
          "join_store",
          [](const c10::intrusive_ptr<::c10d::Store>& store, int slot, int slots,
             const std::string& engine, Seconds timeout, Seconds join_window, int min_size) {
            return released([&] {
              ElasticOptions o = options_of(engine, timeout, join_window, min_size);
              auto adapter = std::make_shared<C10dStore>(store);
              adapter->set_timeout(o.timeout);
              return ElasticGroup::join(std::move(adapter), slot, slots, std::move(o));
            });
          },
          py::arg("store"), py::arg("slot"), py::arg("slots"), py::arg("engine"),
          py::arg("timeout"), py::arg("join_window"), py::arg("min_size"))
      .def_property_readonly("rank", &ElasticGroup::rank)
      .def_property_readonly("size", &ElasticGroup::size)
      .def_property_readonly("slot", &ElasticGroup::slot)
      .def_property_readonly("slots", &ElasticGroup::slots)
      .def_property_readonly("generation", &ElasticGroup::generation)
      .def_property_readonly("members", &ElasticGroup::members)
      .def_property_readonly("newcomer", &ElasticGroup::newcomer)
      .def_property_readonly("last_reconfigure",
                             [](const ElasticGroup& g) {
                               return std::chrono::duration<double>(g.last_reconfigure()).count();
                             })
      .def("reconfigure", [](ElasticGroup& g) { released([&] { g.reconfigure(); }); })
      .def(
          "commit", [](ElasticGroup& g, bool ok) { return released([&] { return g.commit(ok); }); },
          py::arg("ok") = true)
      .def("abort", [](ElasticGroup& g) { released([&] { g.group()->abort(); }); })
      .def(
          "backend",
          [](const ElasticGroup& g, const std::string& engine) {
            return c10::intrusive_ptr<TorchBackendBase>(
                c10::make_intrusive<TdistBackend>(g.group(), engine));
          },
          py::arg("engine"), "A torch backend over the current generation's group");
}

}  // namespace tdist::python
