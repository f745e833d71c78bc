// What a producer and a consumer tell Prometheus (docs/metrics.md): made at scrape time from
// their public stats, reports and rail telemetry.
#pragma once

#include "broadcast/engine/metrics/metrics_exporter.h"

namespace deltacast {

class Producer;
class Consumer;

void collect_producer_metrics(MetricsSink& sink, const Producer& producer);
void collect_consumer_metrics(MetricsSink& sink, const Consumer& consumer);

}  // namespace deltacast
