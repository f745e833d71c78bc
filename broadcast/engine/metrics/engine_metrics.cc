#include "broadcast/engine/metrics/engine_metrics.h"

#include <algorithm>
#include <span>
#include <string>

#include "broadcast/engine/consumer.h"
#include "broadcast/engine/producer.h"
#include "core/trust/aes_gcm.h"

namespace deltacast {

namespace {

// A site's sentinel's standby links (standby_links.h), by the peer each watches.
void collect_standby_links(MetricsSink& sink, const std::map<uint32_t, bool>& heard_by_peer) {
  for (const auto& [peer, heard] : heard_by_peer) {
    sink.gauge("deltacast_standby_link_heard",
               "1 while the member of another site this sentinel keeps a standby link to is heard, 0 once it is not",
               heard ? 1.0 : 0.0, {{"peer", std::to_string(peer)}});
  }
}

// The rails a process sends over, one sample per child and rail: what its sprayers did.
void collect_rails(MetricsSink& sink, const std::map<uint32_t, std::vector<RailTelemetry>>& by_child) {
  static constexpr RailState kStates[] = {RailState::kHealthy, RailState::kSuspect, RailState::kPaused,
                                          RailState::kProbing};
  for (const auto& [child, rails] : by_child) {
    for (size_t r = 0; r < rails.size(); ++r) {
      const RailTelemetry& t = rails[r];
      const MetricLabels labels = {{"child", std::to_string(child)}, {"rail", std::to_string(r)}};
      sink.counter("deltacast_rail_bytes_total", "Bytes the child acknowledged over the rail (probes included)",
                   static_cast<double>(t.bytes_acked), labels);
      sink.counter("deltacast_rail_slices_total", "Slices the child acknowledged over the rail",
                   static_cast<double>(t.slices_acked), labels);
      sink.counter("deltacast_rail_resent_slices_total", "Slices the rail failed that had to go again",
                   static_cast<double>(t.resent_slices), labels);
      sink.counter("deltacast_rail_stalls_total", "Sends over the rail that missed their deadline",
                   static_cast<double>(t.timeouts), labels);
      sink.counter("deltacast_rail_errors_total", "Sends over the rail that failed", static_cast<double>(t.errors),
                   labels);
      sink.gauge("deltacast_rail_rate_bytes_per_second", "The rail's measured delivery rate (0: not measured yet)",
                 t.bandwidth_bps, labels);
      sink.gauge("deltacast_rail_inflight_bytes", "Bytes in flight on the rail", static_cast<double>(t.inflight_bytes),
                 labels);
      if (t.protection) {
        MetricLabels with_mode = labels;
        with_mode.emplace_back("protection", std::string(trust::protection_name(*t.protection)));
        sink.gauge("deltacast_rail_protection_info",
                   "1, labelled with what the rail's connection runs (insecure, authenticated or encrypted)", 1.0,
                   std::move(with_mode));
      }
      for (RailState state : kStates) {
        MetricLabels with_state = labels;
        with_state.emplace_back("state", std::string(rail_state_name(state)));
        sink.gauge("deltacast_rail_state", "1 for the rail's health state, 0 for the others",
                   t.state == state ? 1.0 : 0.0, std::move(with_state));
      }
    }
  }
}

// A counter without labels: its name, help and value.
struct Count {
  const char* name;
  const char* help;
  uint64_t value;
};

void add_counts(MetricsSink& sink, std::span<const Count> counts) {
  for (const Count& c : counts) sink.counter(c.name, c.help, static_cast<double>(c.value));
}

}  // namespace

void collect_producer_metrics(MetricsSink& sink, const Producer& producer) {
  const ProducerStats stats = producer.stats();
  sink.gauge("deltacast_info", "Always 1; the labels say what this process is", 1.0,
             {{"role", "producer"},
              {"transport", stats.transport},
              {"protection", stats.protection},
              {"aes_gcm", std::string(trust::aes_gcm_library_name())}});
  sink.gauge("deltacast_version", "The newest version published", static_cast<double>(stats.version));
  sink.gauge("deltacast_versions_queued", "Versions published whose rounds have not ended",
             static_cast<double>(stats.queued));
  const Count counts[] = {
      {"deltacast_versions_total", "Published versions whose rounds ended", stats.versions_done},
      {"deltacast_commits_total", "Consumers that committed a published version (summed over versions)", stats.commits},
      {"deltacast_failures_total", "Consumers that failed a published version (summed over versions)", stats.failures},
      {"deltacast_lost_total", "Consumers lost during a version's round (summed over versions)", stats.lost},
      {"deltacast_full_syncs_total", "Catch-up rounds (full versions to consumers behind)", stats.full_syncs},
      {"deltacast_wire_bytes_total", "Bytes of every round's version as the producer sent it", stats.wire_bytes}};
  add_counts(sink, counts);
  const std::optional<VersionReport> last =
      stats.last_done != 0 ? producer.report(stats.last_done) : std::optional<VersionReport>{};
  if (last) {
    const VersionReport& report = *last;
    const MetricLabels labels = {{"kind", report.full ? "full" : "delta"}};
    sink.gauge("deltacast_last_version", "The newest version whose round ended", static_cast<double>(report.version),
               labels);
    sink.gauge("deltacast_last_version_wire_bytes", "Its bytes on the wire",
               static_cast<double>(report.stats.wire_bytes), labels);
    sink.gauge("deltacast_last_version_density", "Its share of elements that changed (1 for a full version)",
               report.full ? 1.0 : report.stats.density(), labels);
    sink.gauge("deltacast_last_version_encode_seconds", "Its diff, encode and bucketing", report.encode_seconds,
               labels);
    sink.gauge("deltacast_last_version_wire_seconds", "Its round start until every target staged it",
               report.wire_seconds, labels);
    sink.gauge("deltacast_last_version_apply_seconds", "Its slowest target's commit", report.apply_seconds, labels);
    sink.gauge("deltacast_last_version_seconds", "Its publish until every target committed", report.seconds,
               labels);
    sink.gauge("deltacast_last_version_committed", "Its targets that committed it",
               static_cast<double>(report.committed), labels);
  }
  const std::optional<RoundProgress> round = producer.progress();
  sink.gauge("deltacast_round_in_flight", "1 while a round (a version or a catch-up full sync) is under way",
             round ? 1.0 : 0.0);
  if (round) {
    const MetricLabels labels = {{"version", std::to_string(round->version)}, {"kind", round->full ? "full" : "delta"}};
    sink.gauge("deltacast_round_received_bytes", "Bytes of the round in flight its targets hold so far (all together)",
               static_cast<double>(round->received_bytes), labels);
    sink.gauge("deltacast_round_fraction", "Share of the round in flight's bytes its targets hold", round->fraction(),
               labels);
    sink.gauge("deltacast_round_eta_seconds", "Seconds the round in flight takes yet, at its rate so far (-1: no byte yet)",
               round->eta_seconds(), labels);
  }
  size_t alive = 0;
  for (const MemberRecord& m : stats.members) {
    alive += m.alive ? 1 : 0;
    const MetricLabels labels = {{"member", m.name}, {"id", std::to_string(m.id)}};
    const MemberRates rates = stats.rates_of(m.id);
    const bool at_tails =
        last && std::find(last->slow.begin(), last->slow.end(), m.name) != last->slow.end();
    sink.gauge("deltacast_member_alive", "1 while the member is connected", m.alive ? 1.0 : 0.0, labels);
    sink.gauge("deltacast_member_info", "Always 1; the labels say what the member's control link runs", 1.0,
               {{"member", m.name}, {"id", std::to_string(m.id)}, {"protection", m.protection}});
    sink.gauge("deltacast_member_slow", "1 while the rate book holds the member slow", rates.slow ? 1.0 : 0.0, labels);
    sink.gauge("deltacast_member_at_tails", "1 if the newest ended round placed the member at the chains' tails",
               at_tails ? 1.0 : 0.0, labels);
    sink.gauge("deltacast_member_committed_version", "The newest version the member committed",
               static_cast<double>(m.committed), labels);
    sink.gauge("deltacast_member_inbound_bytes_per_second", "What the member took from its parents, last measured",
               rates.inbound, labels);
  }
  sink.gauge("deltacast_members", "Members known to the producer", static_cast<double>(alive), {{"state", "alive"}});
  sink.gauge("deltacast_members", "Members known to the producer", static_cast<double>(stats.members.size() - alive),
             {{"state", "gone"}});
  collect_rails(sink, producer.rail_telemetry());
  collect_standby_links(sink, producer.standby_links());
}

void collect_consumer_metrics(MetricsSink& sink, const Consumer& consumer) {
  const ConsumerState state = consumer.state();
  sink.gauge("deltacast_info", "Always 1; the labels say what this process is", 1.0,
             {{"role", "consumer"},
              {"transport", std::string(consumer.transport())},
              {"id", std::to_string(state.id)},
              {"protection", std::string(trust::protection_name(consumer.protection()))},
              {"aes_gcm", std::string(trust::aes_gcm_library_name())}});
  if (!state.protection.empty()) {
    sink.gauge("deltacast_control_link_info", "Always 1; the labels say what the control link to the producer runs",
               1.0, {{"protection", state.protection}});
  }
  sink.gauge("deltacast_version", "The newest version committed", static_cast<double>(state.version));
  sink.gauge("deltacast_connected", "1 while joined to a producer", state.connected ? 1.0 : 0.0);
  const Count counts[] = {
      {"deltacast_staged_total", "Versions received and verified", state.staged},
      {"deltacast_commits_total", "Versions committed", state.commits},
      {"deltacast_failures_total", "Versions failed (not received, not verified or not applied)", state.failures},
      {"deltacast_received_bytes_total", "Bytes of the versions received and verified", state.received_bytes}};
  add_counts(sink, counts);
  sink.gauge("deltacast_last_version_receive_seconds", "The newest staged version: first slice until verified",
             state.last_receive_seconds);
  sink.gauge("deltacast_last_version_apply_seconds", "The newest commit's apply", state.last_apply_seconds);
  collect_rails(sink, consumer.rail_telemetry());
  collect_standby_links(sink, consumer.standby_links());
}

}  // namespace deltacast
