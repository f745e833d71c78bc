#include "engines.h"

#include <nlohmann/json.hpp>

#include "broadcast/engine/plan/planner.h"
#include "broadcast/transport/rail.h"
#include "sparse/value_codec.h"
#include "status_errors.h"

namespace py = pybind11;
using Json = nlohmann::json;

namespace deltacast::python {

namespace {

// Runs f without the GIL: engine calls that block must let Python threads (and on_commit) run.
template <typename F>
auto without_gil(F&& f) {
  py::gil_scoped_release release;
  return f();
}

Json version_json(const VersionReport& r) {
  Json staged = Json::object();
  for (const auto& [name, seconds] : r.staged_by) staged[name] = seconds;
  Json bytes_to = Json::object();
  for (const auto& [name, bytes] : r.bytes_to) bytes_to[name] = bytes;
  return Json{{"version", r.version},
              {"base", r.base},
              {"full", r.full},
              {"elements", r.stats.elements},
              {"changed", r.stats.changed},
              {"density", r.stats.density()},
              {"dense_bytes", r.stats.dense_bytes},
              {"wire_bytes", r.stats.wire_bytes},
              {"zstd_level", r.stats.zstd_level},
              {"wan_rate", r.wan_rate},
              {"encode_seconds", r.encode_seconds},
              {"queue_seconds", r.queue_seconds},
              {"wire_seconds", r.wire_seconds},
              {"apply_seconds", r.apply_seconds},
              {"seconds", r.seconds},
              {"staged_seconds", staged},
              {"bytes_to", bytes_to},
              {"slow", r.slow},
              {"targets", r.targets},
              {"committed", r.committed},
              {"failed", r.failed},
              {"lost", r.lost},
              {"why_not", r.why_not},
              {"shape", shape_name(r.fanout == 0 ? 1 : r.fanout)},
              {"stripes", r.stripes},
              {"done", r.done}};
}

}  // namespace

Millis to_millis(double seconds) {
  if (seconds < 0) raise("InvalidArgumentError", "a timeout cannot be negative");
  return Millis(static_cast<int64_t>(seconds * 1000.0));
}

std::vector<Endpoint> endpoints(const std::vector<std::string>& texts, const std::string& what) {
  std::vector<Endpoint> out;
  for (const auto& t : texts) {
    auto e = parse_endpoint(t);
    if (!e.ok()) raise("InvalidArgumentError", what + " '" + t + "': " + e.status().message());
    out.push_back(*e);
  }
  return out;
}

namespace {

// "HOST:PORT" of a metrics address (metrics_port and metrics_host in engine.py).
Endpoint metrics_endpoint(const std::string& text) {
  auto e = parse_endpoint(text);
  if (!e.ok()) raise("InvalidArgumentError", "metrics address '" + text + "': " + e.status().message());
  return *e;
}

}  // namespace

trust::Trust trust_of(const std::string& token, const std::string& protection) {
  trust::Trust trust;
  auto secret = trust::GroupSecret::parse(token);
  if (!secret.ok()) raise("InvalidArgumentError", "token: " + secret.status().message());
  trust.secret = *secret;
  auto mode = trust::parse_protection(protection);
  if (!mode.ok()) raise("InvalidArgumentError", mode.status().message());
  trust.protection = *mode;
  return trust;
}

ConsumerOptions consumer_options(const ConsumerArgs& args) {
  ConsumerOptions options;
  options.trust = trust_of(args.token, args.protection);
  options.rails = endpoints(args.rails.empty() ? std::vector<std::string>{"127.0.0.1"} : args.rails, "rail");
  options.name = args.name;
  options.node = args.node;
  options.site = args.site;
  options.threads = args.threads;
  options.transport = args.transport;
  options.cuda_stream = args.cuda_stream;
  if (!args.metrics.empty()) options.metrics = metrics_endpoint(args.metrics);
  return options;
}

PyProducer::PyProducer(const std::vector<std::string>& names, const std::vector<py::capsule>& capsules,
                       const std::vector<std::string>& dtypes, const ProducerArgs& args)
    : tensors_(std::make_unique<ImportedTensors>(names, capsules, dtypes)) {
  ProducerOptions options;
  options.listen = value_or_raise(parse_endpoint(args.listen));
  options.trust = trust_of(args.token, args.protection);
  options.rails = endpoints(args.rails, "rail");
  options.codec.value_codec = value_or_raise(parse_value_codec(args.value_codec));
  if (args.threads > 0) options.codec.threads = args.threads;
  options.transport = args.transport;
  options.group = args.group;
  options.cuda_stream = args.cuda_stream;
  options.shadow = args.shadow;
  options.round.fanout = value_or_raise(parse_shape(args.shape));
  options.round.site = args.site;
  options.wan_zstd_level = args.wan_zstd;
  if (!args.metrics.empty()) options.metrics = metrics_endpoint(args.metrics);
  const Millis register_timeout = to_millis(args.register_timeout);
  // Raising needs the interpreter: errors are raised once it is held again.
  Result<std::unique_ptr<Producer>> created = failed_precondition("not created");
  Status registered;
  {
    py::gil_scoped_release release;
    created = Producer::create(tensors_->manifest(), tensors_->views(), options);
    if (created.ok()) registered = (*created)->wait_registered(register_timeout);
  }
  producer_ = value_or_raise(std::move(created));
  if (!registered.ok()) {
    close();
    raise_if_error(registered);
  }
}

PyProducer::~PyProducer() { close(); }

Producer& PyProducer::engine() const {
  if (!producer_) raise("ClosedError", "this producer is closed");
  return *producer_;
}

std::string PyProducer::address() const { return engine().address().to_string(); }

std::string PyProducer::transport() const { return std::string(engine().transport()); }

std::string PyProducer::progress() const {
  const auto p = engine().progress();
  if (!p) return "";
  return Json{{"version", p->version},
              {"full", p->full},
              {"bytes", p->bytes},
              {"targets", p->targets},
              {"staged", p->staged},
              {"committed", p->committed},
              {"received_bytes", p->received_bytes},
              {"fraction", p->fraction()},
              {"seconds", p->seconds},
              {"bytes_per_second", p->rate()},
              {"eta_seconds", p->eta_seconds()}}
      .dump();
}

std::string PyProducer::metrics_address() const {
  const auto at = engine().metrics_endpoint();
  return at ? at->to_string() : "";
}

std::string PyProducer::group_coordinator() const {
  const auto at = engine().group_coordinator();
  return at ? at->to_string() : "";
}

uint64_t PyProducer::publish(bool full, uint64_t version) {
  Producer& p = engine();
  return value_or_raise(without_gil([&] { return p.publish(full, version); }));
}

void PyProducer::wait(uint64_t version, double timeout_seconds) {
  Producer& p = engine();
  const Millis timeout = to_millis(timeout_seconds);
  raise_if_error(without_gil([&] { return p.wait(version, timeout); }));
}

void PyProducer::wait_members(size_t count, double timeout_seconds) {
  Producer& p = engine();
  const Millis timeout = to_millis(timeout_seconds);
  raise_if_error(without_gil([&] { return p.wait_members(count, timeout); }));
}

std::string PyProducer::check(uint64_t version, double timeout_seconds) {
  Producer& p = engine();
  const Millis timeout = to_millis(timeout_seconds);
  const CheckReport r = value_or_raise(without_gil([&] { return p.check(version, timeout); }));
  Json members = Json::array();
  for (const auto& m : r.members) {
    members.push_back({{"id", m.id}, {"name", m.name}, {"answered", m.answered}, {"held", m.held},
                       {"exact", m.exact}});
  }
  return Json{{"version", r.version}, {"all_exact", r.all_exact()}, {"members", members}}.dump();
}

std::string PyProducer::report(uint64_t version) const {
  const auto r = engine().report(version);
  return r ? version_json(*r).dump() : "null";
}

std::string PyProducer::stats() const {
  const ProducerStats s = engine().stats();
  Json members = Json::array();
  for (const auto& m : s.members) {
    members.push_back({{"id", m.id}, {"name", m.name}, {"alive", m.alive}, {"committed", m.committed},
                       {"slow", s.rates_of(m.id).slow}, {"rate_bytes_per_second", s.rates_of(m.id).known()}});
  }
  return Json{{"epoch", s.epoch},
              {"version", s.version},
              {"queued", s.queued},
              {"full_syncs", s.full_syncs},
              {"wire_bytes", s.wire_bytes},
              {"versions_done", s.versions_done},
              {"commits", s.commits},
              {"failures", s.failures},
              {"lost", s.lost},
              {"transport", s.transport},
              {"members", members}}
      .dump();
}

std::string PyProducer::manifest() const {
  Json tensors = Json::array();
  for (const auto& t : tensors_->manifest().tensors()) {
    tensors.push_back({{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}});
  }
  return tensors.dump();
}

void PyProducer::close() {
  if (!producer_) return;
  {
    py::gil_scoped_release release;
    producer_->close();
  }
  producer_.reset();
}

PyConsumer::PyConsumer(const std::vector<std::string>& names, const std::vector<py::capsule>& capsules,
                       const std::vector<std::string>& dtypes, const ConsumerArgs& args)
    : tensors_(std::make_unique<ImportedTensors>(names, capsules, dtypes)) {
  ConsumerOptions options = consumer_options(args);
  options.coordinators = endpoints(args.connect, "producer address");
  if (options.coordinators.empty()) raise("InvalidArgumentError", "connect: give the producer's address");
  options.auto_commit = false;  // pull() commits, until start() asks for background commits
  const Millis join_timeout = to_millis(args.join_timeout);
  consumer_ = value_or_raise(Consumer::create(tensors_->manifest(), tensors_->views(), options));
  Status joined;
  {
    py::gil_scoped_release release;
    joined = consumer_->start(join_timeout, [this](uint64_t version) {
      py::gil_scoped_acquire gil;
      if (!on_commit_ || on_commit_.is_none()) return;
      try {
        on_commit_(version);
      } catch (py::error_already_set& e) {
        e.discard_as_unraisable("deltacast.Consumer on_commit callback");
      }
    });
  }
  if (!joined.ok()) {
    close();
    raise_if_error(joined);
  }
}

PyConsumer::~PyConsumer() { close(); }

Consumer& PyConsumer::engine() const {
  if (!consumer_) raise("ClosedError", "this consumer is closed");
  return *consumer_;
}

uint64_t PyConsumer::pull(double timeout_seconds) {
  Consumer& c = engine();
  const Millis timeout = to_millis(timeout_seconds);
  return value_or_raise(without_gil([&] { return c.pull(timeout); }));
}

void PyConsumer::start(py::object on_commit) {
  Consumer& c = engine();
  on_commit_ = std::move(on_commit);
  raise_if_error(without_gil([&] { return c.set_auto_commit(true); }));
}

void PyConsumer::wait_version(uint64_t version, double timeout_seconds) {
  Consumer& c = engine();
  const Millis timeout = to_millis(timeout_seconds);
  raise_if_error(without_gil([&] { return c.wait_version(version, timeout); }));
}

uint64_t PyConsumer::version() const { return engine().version(); }

std::string PyConsumer::transport() const { return std::string(engine().transport()); }

std::string PyConsumer::metrics_address() const {
  const auto at = engine().metrics_endpoint();
  return at ? at->to_string() : "";
}

std::string PyConsumer::state() const {
  const ConsumerState s = engine().state();
  return Json{{"id", s.id},
              {"epoch", s.epoch},
              {"version", s.version},
              {"held_epoch", s.held_epoch},
              {"connected", s.connected},
              {"refused", s.refused},
              {"transport", std::string(engine().transport())},
              {"last_error", s.last_error.ok() ? "" : s.last_error.to_string()},
              {"staged", s.staged},
              {"commits", s.commits},
              {"failures", s.failures},
              {"received_bytes", s.received_bytes},
              {"protection", s.protection},
              {"last_receive_seconds", s.last_receive_seconds},
              {"last_apply_seconds", s.last_apply_seconds}}
      .dump();
}

uint64_t PyConsumer::model_hash() {
  Consumer& c = engine();
  py::gil_scoped_release release;
  return c.model_hash_now();
}

void PyConsumer::close() {
  if (!consumer_) return;
  {
    py::gil_scoped_release release;  // the commit thread may be waiting for the GIL
    consumer_->close();
  }
  consumer_.reset();
  on_commit_ = py::none();
}

}  // namespace deltacast::python
