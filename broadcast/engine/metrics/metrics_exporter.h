// Prometheus metrics over HTTP (prometheus-cpp's exposer, GET /metrics). What a scrape returns is
// made at scrape time by the owner's callback from the counters and telemetry it keeps anyway,
// so nothing on the data path does extra work for metrics. Names and labels: docs/metrics.md.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "broadcast/transport/rail.h"

namespace deltacast {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// One scrape's samples, grouped into families by name (each family one type and help text).
class MetricsSink {
 public:
  enum class Type { kCounter, kGauge };
  struct Sample {
    MetricLabels labels;
    double value = 0;
  };
  struct Family {
    std::string help;
    Type type = Type::kGauge;
    std::vector<Sample> samples;
  };

  void counter(const std::string& name, const std::string& help, double value, MetricLabels labels = {});
  void gauge(const std::string& name, const std::string& help, double value, MetricLabels labels = {});
  const std::map<std::string, Family>& families() const { return families_; }

 private:
  void add(const std::string& name, const std::string& help, Type type, double value, MetricLabels labels);
  std::map<std::string, Family> families_;
};

class MetricsExporter {
 public:
  using Collect = std::function<void(MetricsSink&)>;

  // Serves `collect`'s samples at http://listen/metrics (port 0: any free one). Fails with a
  // message naming the address when it cannot listen, or when deltacast was built without
  // prometheus-cpp.
  static Result<std::unique_ptr<MetricsExporter>> start(const Endpoint& listen, Collect collect);
  ~MetricsExporter();
  MetricsExporter(const MetricsExporter&) = delete;
  MetricsExporter& operator=(const MetricsExporter&) = delete;

  // Where it listens (the port it was given, or the one it got).
  Endpoint endpoint() const { return endpoint_; }
  // Whether deltacast was built with prometheus-cpp.
  static bool available();

 private:
  struct Impl;
  explicit MetricsExporter(std::unique_ptr<Impl> impl, Endpoint endpoint);
  std::unique_ptr<Impl> impl_;
  Endpoint endpoint_;
};

}  // namespace deltacast
