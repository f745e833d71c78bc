// C++ Status -> Python exception (the classes of deltacast.errors), and
// raising one of those classes directly from binding code.
#pragma once

#include <string>

#include "core/status.h"

namespace deltacast::python {

// Raises the deltacast.errors class named `python_class` with `message`.
[[noreturn]] void raise(const char* python_class, const std::string& message);

// Raises the exception that matches `status` when it is not ok.
void raise_if_error(const Status& status);

template <typename T>
T value_or_raise(Result<T> result) {
  raise_if_error(result.status());
  return std::move(result).value();
}

}  // namespace deltacast::python
