#include "group_engines.h"

#include <nlohmann/json.hpp>

#include "broadcast/engine/group/group_client.h"
#include "status_errors.h"

namespace py = pybind11;
using Json = nlohmann::json;

namespace deltacast::python {

namespace {

Json parse_json(const std::string& text, const char* what) {
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    raise("InvalidArgumentError", std::string(what) + ": not JSON: " + e.what());
  }
}

// Reads JSON built by the Python layer (python/deltacast/group.py); a malformed one raises.
template <typename F>
auto reading(const char* what, F&& f) {
  try {
    return f();
  } catch (const Json::exception& e) {
    raise("InvalidArgumentError", std::string(what) + ": " + e.what());
  }
}

std::vector<TensorSpec> logical_specs(const std::string& text) {
  const Json j = parse_json(text, "group tensors");
  return reading("group tensors", [&] {
    std::vector<TensorSpec> specs;
    for (const Json& t : j) {
      const std::string name = t.at("name").get<std::string>();
      auto dtype = parse_dtype(t.at("dtype").get<std::string>());
      if (!dtype.ok()) raise("InvalidArgumentError", "group tensor '" + name + "': " + dtype.status().message());
      specs.push_back(TensorSpec{name, *dtype, t.at("shape").get<std::vector<uint64_t>>()});
    }
    return specs;
  });
}

std::vector<LocalTensorSpec> local_specs(const Json& j, const char* what) {
  return reading(what, [&] {
    std::vector<LocalTensorSpec> locals;
    for (const Json& t : j) {
      LocalTensorSpec local;
      local.name = t.at("name").get<std::string>();
      local.concat_dim = t.at("dim").get<uint32_t>();
      for (const Json& p : t.at("pieces")) {
        local.pieces.push_back(PieceSpec{p.at("tensor").get<std::string>(), p.at("flat").get<bool>(),
                                         p.at("dim").get<uint32_t>(), p.at("start").get<uint64_t>(),
                                         p.at("stop").get<uint64_t>()});
      }
      locals.push_back(std::move(local));
    }
    return locals;
  });
}

}  // namespace

std::string resolve_layout(const std::string& logical_json, const std::string& locals_json) {
  const auto layout = value_or_raise(
      Layout::resolve(logical_specs(logical_json), local_specs(parse_json(locals_json, "layout"), "layout")));
  Json out = Json::array();
  for (const TensorSpec& t : layout.local_specs()) {
    out.push_back({{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}});
  }
  return out.dump();
}

GroupSeatOptions seat_options(const std::string& logical_json, const std::string& shards_json, uint32_t rank,
                              uint32_t world, const std::vector<std::string>& coordinator, bool host,
                              const std::vector<std::string>& advertise) {
  GroupSeatOptions seat;
  seat.logical = logical_specs(logical_json);
  seat.pieces = local_specs(parse_json(shards_json, "shards"), "shards");
  seat.rank = rank;
  seat.world = world;
  seat.coordinator = endpoints(coordinator, "coordinator");
  seat.host = host;
  seat.advertise = endpoints(advertise, "advertise");
  return seat;
}

std::string group_json(const GroupView& group) {
  Json tensors = Json::array();
  for (const TensorSpec& t : group.logical) {
    tensors.push_back({{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}});
  }
  Json ranks = Json::array();
  for (const RankEntry& r : group.ranks) {
    Json addresses = Json::array();
    for (const Endpoint& e : r.addresses) addresses.push_back(e.to_string());
    ranks.push_back({{"rank", r.rank}, {"addresses", addresses}});
  }
  return Json{{"tensors", tensors}, {"ranks", ranks}}.dump();
}

std::string find_group(const std::vector<std::string>& connect, const std::string& token, double timeout_seconds,
                       const std::string& protection) {
  GroupClientOptions options;
  options.coordinators = endpoints(connect, "connect");
  options.trust = trust_of(token, protection);
  Result<GroupView> found = failed_precondition("not asked");
  {
    py::gil_scoped_release release;
    found = deltacast::find_group(options, to_millis(timeout_seconds));
  }
  return group_json(value_or_raise(std::move(found)));
}

PyGroupConsumer::PyGroupConsumer(const std::vector<std::string>& names, const std::vector<py::capsule>& capsules,
                                 const std::vector<std::string>& dtypes, const std::string& logical_json,
                                 const std::string& layout_json, const std::string& ranks_json,
                                 const ConsumerArgs& args, uint64_t commit_limit)
    : tensors_(std::make_unique<ImportedTensors>(names, capsules, dtypes)) {
  auto layout = local_specs(parse_json(layout_json, "layout"), "layout");
  const Millis join_timeout = to_millis(args.join_timeout);
  if (ranks_json.empty()) {
    // Through the group's coordinator: the group (and, unless given, its tensors) come from there.
    const auto coordinator = endpoints(args.connect, "connect");
    const auto logical = logical_json.empty() ? std::vector<TensorSpec>{} : logical_specs(logical_json);
    const ConsumerOptions options = consumer_options(args);
    Result<std::unique_ptr<GroupConsumer>> found = failed_precondition("not found");
    {
      py::gil_scoped_release release;  // raising needs it back: the error is raised below
      found = GroupConsumer::find(coordinator, std::move(layout), tensors_->views(), options, join_timeout,
                                  logical.empty() ? nullptr : &logical);
    }
    consumer_ = value_or_raise(std::move(found));
  } else {
    const auto logical = logical_specs(logical_json);
    std::vector<GroupRank> ranks;
    const Json rank_list = parse_json(ranks_json, "ranks");
    for (size_t r = 0; r < rank_list.size(); ++r) {
      const std::string what = "rank " + std::to_string(r);
      GroupRank rank;
      rank.pieces = local_specs(reading(what.c_str(), [&] { return rank_list[r].at("pieces"); }), what.c_str());
      const auto connect = reading(what.c_str(), [&] { return rank_list[r].at("connect").get<std::vector<std::string>>(); });
      rank.coordinators = endpoints(connect, what + ": address");
      ranks.push_back(std::move(rank));
    }
    consumer_ = value_or_raise(
        GroupConsumer::create(logical, std::move(layout), tensors_->views(), std::move(ranks), consumer_options(args)));
  }
  consumer_->set_commit_limit(commit_limit);
  Status joined;
  {
    py::gil_scoped_release release;
    joined = consumer_->start(join_timeout);
  }
  if (!joined.ok()) {
    close();
    raise_if_error(joined);
  }
}

PyGroupConsumer::~PyGroupConsumer() { close(); }

GroupConsumer& PyGroupConsumer::engine() const {
  if (!consumer_) raise("ClosedError", "this consumer is closed");
  return *consumer_;
}

void PyGroupConsumer::wait_version(uint64_t version, double timeout_seconds) {
  GroupConsumer& c = engine();
  const Millis timeout = to_millis(timeout_seconds);
  Status s;
  {
    py::gil_scoped_release release;
    s = c.wait_version(version, timeout);
  }
  raise_if_error(s);
}

uint64_t PyGroupConsumer::version() const { return engine().version(); }

std::string PyGroupConsumer::transport() const { return std::string(engine().transport()); }

void PyGroupConsumer::set_commit_limit(uint64_t through) { engine().set_commit_limit(through); }

bool PyGroupConsumer::staged(uint64_t version) const { return engine().staged(version); }

std::string PyGroupConsumer::state() const {
  const GroupConsumerState s = engine().state();
  return Json{{"version", s.version},
              {"ranks", s.ranks},
              {"rank_versions", s.rank_versions},
              {"received_bytes", s.received_bytes},
              {"protections", s.protections},
              {"transport", std::string(engine().transport())},
              {"last_error", s.last_error.ok() ? "" : s.last_error.to_string()}}
      .dump();
}

void PyGroupConsumer::close() {
  if (!consumer_) return;
  {
    py::gil_scoped_release release;
    consumer_->close();
  }
  consumer_.reset();
}

PyGroupCoordinator::PyGroupCoordinator(uint32_t world, const std::string& listen, const std::string& token,
                                       const std::string& protection) {
  GroupCoordinatorOptions options;
  options.listen = value_or_raise(parse_endpoint(listen));
  options.trust = trust_of(token, protection);
  coordinator_ = value_or_raise(GroupCoordinator::create({}, world, options));
}

PyGroupCoordinator::~PyGroupCoordinator() { close(); }

GroupCoordinator& PyGroupCoordinator::engine() const {
  if (!coordinator_) raise("ClosedError", "this coordinator is closed");
  return *coordinator_;
}

std::string PyGroupCoordinator::address() const { return engine().address().to_string(); }

size_t PyGroupCoordinator::registered() const { return engine().directory().registered(); }

std::string PyGroupCoordinator::group() const {
  auto group = engine().directory().group();
  return group.ok() ? group_json(*group) : "null";
}

void PyGroupCoordinator::close() {
  if (!coordinator_) return;
  {
    py::gil_scoped_release release;
    coordinator_->close();
  }
  coordinator_.reset();
}

}  // namespace deltacast::python
