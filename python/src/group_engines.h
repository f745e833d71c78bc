// Sharded groups as the extension exposes them: layouts given as JSON text
// (the Python layer builds it from deltacast.rows/columns/flat/fused), the
// group consumer over imported tensors, and a check of a trainer rank's
// shards against the group's tensors.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "broadcast/engine/group_consumer.h"
#include "dlpack_tensors.h"
#include "engines.h"

namespace deltacast::python {

// Resolves `locals_json` (local tensors as views of the logical tensors in `logical_json`) and
// returns the local tensors' specs as JSON ([{name, dtype, shape}]); raises naming the tensor.
std::string resolve_layout(const std::string& logical_json, const std::string& locals_json);

class PyGroupConsumer {
 public:
  // `ranks_json`: [{"pieces": <locals>, "connect": ["host:port", ...]}] for every rank of the group.
  PyGroupConsumer(const std::vector<std::string>& names, const std::vector<pybind11::capsule>& capsules,
                  const std::vector<std::string>& dtypes, const std::string& logical_json,
                  const std::string& layout_json, const std::string& ranks_json, const ConsumerArgs& args);
  ~PyGroupConsumer();

  void wait_version(uint64_t version, double timeout_seconds);
  uint64_t version() const;
  std::string transport() const;
  std::string state() const;
  void close();

 private:
  GroupConsumer& engine() const;

  std::unique_ptr<ImportedTensors> tensors_;
  std::unique_ptr<GroupConsumer> consumer_;
};

}  // namespace deltacast::python
