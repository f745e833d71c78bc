#include "status_errors.h"

#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace deltacast::python {

namespace {

// Status codes by the exception a Python caller would catch.
const char* class_for(StatusCode code) {
  switch (code) {
    case StatusCode::kMismatch: return "ManifestMismatchError";
    case StatusCode::kPermissionDenied: return "TokenError";
    case StatusCode::kDeadlineExceeded: return "TimeoutError";
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange: return "InvalidArgumentError";
    case StatusCode::kUnavailable:
    case StatusCode::kIoError: return "ConnectionError";
    case StatusCode::kCorrupt: return "CorruptDataError";
    default: return "DeltacastError";
  }
}

}  // namespace

void raise(const char* python_class, const std::string& message) {
  py::object cls = py::module_::import("deltacast.errors").attr(python_class);
  PyErr_SetString(cls.ptr(), message.c_str());
  throw py::error_already_set();
}

void raise_if_error(const Status& status) {
  if (!status.ok()) raise(class_for(status.code()), status.message());
}

}  // namespace deltacast::python
