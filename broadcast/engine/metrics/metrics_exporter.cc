#include "broadcast/engine/metrics/metrics_exporter.h"

#include <utility>

#ifdef DELTACAST_HAVE_METRICS
#include <unistd.h>

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>

#include "broadcast/transport/socket.h"
#endif

namespace deltacast {

void MetricsSink::add(const std::string& name, const std::string& help, Type type, double value, MetricLabels labels) {
  Family& family = families_[name];
  if (family.samples.empty()) {
    family.help = help;
    family.type = type;
  }
  family.samples.push_back(Sample{std::move(labels), value});
}

void MetricsSink::counter(const std::string& name, const std::string& help, double value, MetricLabels labels) {
  add(name, help, Type::kCounter, value, std::move(labels));
}

void MetricsSink::gauge(const std::string& name, const std::string& help, double value, MetricLabels labels) {
  add(name, help, Type::kGauge, value, std::move(labels));
}

#ifdef DELTACAST_HAVE_METRICS

namespace {

// What the exposer asks at every scrape: the owner's samples, as prometheus-cpp's families.
class CallbackCollectable : public prometheus::Collectable {
 public:
  explicit CallbackCollectable(MetricsExporter::Collect collect) : collect_(std::move(collect)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    MetricsSink sink;
    collect_(sink);
    std::vector<prometheus::MetricFamily> out;
    for (const auto& [name, family] : sink.families()) {
      prometheus::MetricFamily f;
      f.name = name;
      f.help = family.help;
      f.type = family.type == MetricsSink::Type::kCounter ? prometheus::MetricType::Counter
                                                          : prometheus::MetricType::Gauge;
      for (const auto& sample : family.samples) {
        prometheus::ClientMetric m;
        for (const auto& [key, value] : sample.labels) m.label.push_back({key, value});
        if (family.type == MetricsSink::Type::kCounter) {
          m.counter.value = sample.value;
        } else {
          m.gauge.value = sample.value;
        }
        f.metric.push_back(std::move(m));
      }
      out.push_back(std::move(f));
    }
    return out;
  }

 private:
  MetricsExporter::Collect collect_;
};

// A port free on `host` now (civetweb does not take port 0): bound by the kernel, then let go.
Result<uint16_t> free_port(const std::string& host) {
  auto bound = net::listen_socket("", Endpoint{host, 0}, 1);
  if (!bound.ok()) return Status(bound.status().code(), "metrics: " + bound.status().message());
  ::close(bound->first);
  return bound->second.port;
}

}  // namespace

struct MetricsExporter::Impl {
  std::unique_ptr<prometheus::Exposer> exposer;
  std::shared_ptr<CallbackCollectable> collectable;
};

bool MetricsExporter::available() { return true; }

Result<std::unique_ptr<MetricsExporter>> MetricsExporter::start(const Endpoint& listen, Collect collect) {
  if (!collect) return invalid_argument("metrics: nothing to collect");
  auto impl = std::make_unique<Impl>();
  const std::string host = listen.host.empty() ? "0.0.0.0" : listen.host;
  // Port 0: a free port, tried again if another process takes it before the exposer binds it.
  Status last;
  for (int attempt = 0; attempt < (listen.port == 0 ? 5 : 1) && !impl->exposer; ++attempt) {
    uint16_t port = listen.port;
    if (port == 0) {
      DC_ASSIGN_OR_RETURN(port, free_port(host));
    }
    try {
      // One thread: scrapes are rare and cheap.
      impl->exposer = std::make_unique<prometheus::Exposer>(host + ":" + std::to_string(port), 1);
    } catch (const std::exception& e) {
      last = unavailable("metrics: cannot listen on {}:{}: {}", host, port, e.what());
    }
  }
  if (!impl->exposer) return last;
  const std::vector<int> ports = impl->exposer->GetListeningPorts();
  if (ports.empty()) return unavailable("metrics: {}:{} gave no listening port", host, listen.port);
  impl->collectable = std::make_shared<CallbackCollectable>(std::move(collect));
  impl->exposer->RegisterCollectable(impl->collectable);
  return std::unique_ptr<MetricsExporter>(
      new MetricsExporter(std::move(impl), Endpoint{host, static_cast<uint16_t>(ports.front())}));
}

#else

struct MetricsExporter::Impl {};

bool MetricsExporter::available() { return false; }

Result<std::unique_ptr<MetricsExporter>> MetricsExporter::start(const Endpoint& listen, Collect) {
  return unimplemented("metrics on {}:{} asked for, but deltacast was built without prometheus-cpp "
                       "(install prometheus-cpp-dev and rebuild)",
                       listen.host, listen.port);
}

#endif

MetricsExporter::MetricsExporter(std::unique_ptr<Impl> impl, Endpoint endpoint)
    : impl_(std::move(impl)), endpoint_(std::move(endpoint)) {}

MetricsExporter::~MetricsExporter() = default;

}  // namespace deltacast
