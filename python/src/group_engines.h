// Sharded groups as the extension exposes them: layouts given as JSON text
// (the Python layer builds it from deltacast.rows/columns/flat/fused), the
// group consumer over imported tensors, and a check of a trainer rank's
// shards against the group's tensors.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "broadcast/engine/group/group_consumer.h"
#include "broadcast/engine/group/group_coordinator.h"
#include "dlpack_tensors.h"
#include "engines.h"

namespace deltacast::python {

// Resolves `locals_json` (local tensors as views of the logical tensors in `logical_json`) and
// returns the local tensors' specs as JSON ([{name, dtype, shape}]); raises naming the tensor.
std::string resolve_layout(const std::string& logical_json, const std::string& locals_json);

// A trainer rank's seat in its group (ProducerOptions::group) from what the Python layer gives:
// the group's tensors and the rank's shards as JSON, the coordinator's address(es), whether this
// rank hosts it, and the addresses to advertise (empty: derived, group_seat.h).
GroupSeatOptions seat_options(const std::string& logical_json, const std::string& shards_json, uint32_t rank,
                              uint32_t world, const std::vector<std::string>& coordinator, bool host,
                              const std::vector<std::string>& advertise);

// A formed group as JSON: {"tensors": [{name, dtype, shape}], "ranks": [{rank, addresses}]}.
std::string group_json(const GroupView& group);

// Asks the group coordinator at `connect` for the formed group, waiting up to `timeout_seconds`
// while ranks are missing; the group as group_json, or raises with the last reason.
std::string find_group(const std::vector<std::string>& connect, const std::string& token, double timeout_seconds,
                       const std::string& protection);

class PyGroupConsumer {
 public:
  // `ranks_json`: [{"pieces": <locals>, "connect": ["host:port", ...]}] for every rank of the group;
  // empty: ask the group coordinator at `args.connect` for the group. `logical_json` may then be
  // empty (take the group's tensors as they are) or the tensors to expect. `commit_limit`: set
  // before joining (0: nothing lands until set_commit_limit asks for a version).
  PyGroupConsumer(const std::vector<std::string>& names, const std::vector<pybind11::capsule>& capsules,
                  const std::vector<std::string>& dtypes, const std::string& logical_json,
                  const std::string& layout_json, const std::string& ranks_json, const ConsumerArgs& args,
                  uint64_t commit_limit = UINT64_MAX);
  ~PyGroupConsumer();

  void wait_version(uint64_t version, double timeout_seconds);
  // Commits no version above `through` until raised (group_consumer.h).
  void set_commit_limit(uint64_t through);
  // Every rank's part of `version` staged and verified, or held (group_consumer.h).
  bool staged(uint64_t version) const;
  uint64_t version() const;
  std::string transport() const;
  std::string state() const;
  void close();

 private:
  GroupConsumer& engine() const;

  std::unique_ptr<ImportedTensors> tensors_;
  std::unique_ptr<GroupConsumer> consumer_;
};

// A group coordinator on its own (deltacast.Coordinator).
class PyGroupCoordinator {
 public:
  PyGroupCoordinator(uint32_t world, const std::string& listen, const std::string& token, const std::string& protection);
  ~PyGroupCoordinator();

  std::string address() const;
  // The formed group as JSON ({"tensors": [...], "ranks": [{"rank", "addresses"}]}), or "null"
  // while ranks are missing.
  std::string group() const;
  size_t registered() const;
  void close();

 private:
  GroupCoordinator& engine() const;

  std::unique_ptr<GroupCoordinator> coordinator_;
};

}  // namespace deltacast::python
