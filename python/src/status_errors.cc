#include "status_errors.h"

#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace deltacast::python {

namespace {

// Status codes by the exception a Python caller would catch. The two sides disagree either on
// the tensors or on the data transport; the coordinator's refusal says which.
const char* class_for(const Status& status) {
  switch (status.code()) {
    case StatusCode::kMismatch:
      return status.message().find("transport mismatch") != std::string::npos ? "TransportMismatchError"
                                                                               : "ManifestMismatchError";
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
  if (!status.ok()) raise(class_for(status), status.message());
}

}  // namespace deltacast::python
