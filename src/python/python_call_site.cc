// PythonCallSite (python_call_site.h): the walk out of torch's frames.
#include "python_call_site.h"

#include <Python.h>
#include <frameobject.h>

#include <string_view>

namespace tdist::python {
namespace {

// A file of the installed torch package (site-packages/torch/..., dist-packages/torch/...).
bool torch_file(std::string_view path) {
  for (std::string_view root : {"site-packages/torch/", "dist-packages/torch/"}) {
    if (path.find(root) != std::string_view::npos) return true;
  }
  return false;
}

}  // namespace

PythonCallSite::PythonCallSite(const ProcessGroup& group) {
  if (!group.debug_callsite() || CallSite::outermost() != nullptr) return;
  if (Py_IsInitialized() == 0 || PyGILState_GetThisThreadState() == nullptr) return;
  const PyGILState_STATE gil = PyGILState_Ensure();
  int line = 0;
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  while (frame != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);  // a new reference
    PyObject* name = PyObject_GetAttrString(reinterpret_cast<PyObject*>(code), "co_filename");
    const char* text = name != nullptr ? PyUnicode_AsUTF8(name) : nullptr;
    const bool inside_torch = text != nullptr && torch_file(text);
    if (text != nullptr && !inside_torch) {
      file_ = text;
      line = PyFrame_GetLineNumber(frame);
    }
    Py_XDECREF(name);
    Py_DECREF(code);
    PyFrameObject* back = inside_torch ? PyFrame_GetBack(frame) : nullptr;  // a new reference
    Py_DECREF(frame);
    frame = back;
  }
  PyErr_Clear();  // an attribute that could not be read leaves no error behind
  PyGILState_Release(gil);
  if (line > 0) site_.emplace(file_.c_str(), static_cast<uint32_t>(line));
}

}  // namespace tdist::python
