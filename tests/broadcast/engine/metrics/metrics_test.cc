// Prometheus metrics of a live producer and its consumers over loopback: a scrape over HTTP shows
// the numbers of the run (versions, commits, bytes, members, rails), and an exporter that cannot
// listen says where.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>

#include "broadcast/engine/metrics/metrics_exporter.h"
#include "support/engine_harness.h"

namespace deltacast {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kWait = testing::kEngineWait;

std::vector<Endpoint> loopback_rails() { return {{"127.0.0.1", 0}, {"127.0.0.2", 0}}; }

// GET /metrics from `at`; the body, or "" when the request failed.
std::string scrape(const Endpoint& at) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(at.port);
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  std::string response;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
    if (::send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size())) {
      char buf[4096];
      for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) response.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

// The text format's samples: "name{labels}" (labels as printed) -> value.
std::map<std::string, double> parse(const std::string& text) {
  std::map<std::string, double> samples;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    samples[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return samples;
}

// Every sample of `name` (any labels), one per line: what a failure shows.
std::string samples_of(const std::map<std::string, double>& samples, const std::string& name) {
  std::string out;
  for (const auto& [key, value] : samples) {
    if (key == name || key.rfind(name + "{", 0) == 0) out += key + " " + std::to_string(value) + "\n";
  }
  return out;
}

// The sum of every sample of `name` (any labels).
double total(const std::map<std::string, double>& samples, const std::string& name) {
  double sum = 0;
  for (const auto& [key, value] : samples) {
    if (key == name || key.rfind(name + "{", 0) == 0) sum += value;
  }
  return sum;
}

// How many samples `name` has (any labels).
size_t count(const std::map<std::string, double>& samples, const std::string& name) {
  size_t n = 0;
  for (const auto& [key, value] : samples) n += (key == name || key.rfind(name + "{", 0) == 0) ? 1 : 0;
  return n;
}

TEST(MetricsSink, GroupsSamplesByNameWithOneTypeAndHelp) {
  MetricsSink sink;
  sink.counter("a_total", "help a", 1, {{"rail", "0"}});
  sink.counter("a_total", "ignored", 2, {{"rail", "1"}});
  sink.gauge("b", "help b", 3);
  ASSERT_EQ(sink.families().size(), 2u);
  const auto& a = sink.families().at("a_total");
  EXPECT_EQ(a.help, "help a");
  EXPECT_EQ(a.type, MetricsSink::Type::kCounter);
  ASSERT_EQ(a.samples.size(), 2u);
  EXPECT_EQ(a.samples[1].value, 2);
  EXPECT_EQ(sink.families().at("b").type, MetricsSink::Type::kGauge);
}

TEST(Metrics, AScrapeOfALiveProducerAndConsumersShowsTheRun) {
  if (!MetricsExporter::available()) GTEST_SKIP() << "built without prometheus-cpp";
  ProducerOptions p;
  p.rails = loopback_rails();
  p.metrics = Endpoint{"127.0.0.1", 0};
  testing::Trainer trainer(1 << 20, 3e-7, p);
  ASSERT_TRUE(trainer.producer->metrics_endpoint().has_value());
  std::vector<std::unique_ptr<testing::Rollout>> rollouts;
  for (const char* name : {"a", "b"}) {
    ConsumerOptions c;
    c.rails = loopback_rails();
    c.name = name;
    c.metrics = Endpoint{"127.0.0.1", 0};
    if (std::string(name) == "b") c.trust.protection = trust::Protection::kEncrypted;
    rollouts.push_back(std::make_unique<testing::Rollout>(trainer.trace->manifest(), trainer.producer->address(), c));
    ASSERT_TRUE(rollouts.back()->consumer->start(kWait).ok());
  }
  ASSERT_TRUE(trainer.producer->wait_members(2, kWait).ok());
  for (int step = 0; step < 3; ++step) {
    trainer.trace->step();
    auto v = trainer.producer->publish();
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    ASSERT_TRUE(trainer.producer->wait(*v, kWait).ok());
  }
  const ProducerStats stats = trainer.producer->stats();
  const VersionReport last = *trainer.producer->report(3);

  const auto produced = parse(scrape(*trainer.producer->metrics_endpoint()));
  ASSERT_FALSE(produced.empty()) << "no metrics from the producer";
  // The library that seals this process's frames (core/trust/aes_gcm.h) is a label too.
  const std::string library(trust::aes_gcm_library_name());
  EXPECT_EQ(produced.count("deltacast_info{role=\"producer\",transport=\"tcp\",protection=\"authenticated\",aes_gcm=\"" +
                           library + "\"}"),
            1u)
      << samples_of(produced, "deltacast_info");
  EXPECT_EQ(produced.at("deltacast_version"), 3);
  EXPECT_EQ(produced.at("deltacast_versions_total"), 3);
  EXPECT_EQ(produced.at("deltacast_commits_total"), 6);
  EXPECT_EQ(produced.at("deltacast_failures_total"), 0);
  EXPECT_EQ(produced.at("deltacast_wire_bytes_total"), static_cast<double>(stats.wire_bytes));
  EXPECT_EQ(produced.at("deltacast_last_version{kind=\"delta\"}"), 3);
  EXPECT_EQ(produced.at("deltacast_last_version_wire_bytes{kind=\"delta\"}"), static_cast<double>(last.stats.wire_bytes));
  EXPECT_DOUBLE_EQ(produced.at("deltacast_last_version_density{kind=\"delta\"}"), last.stats.density());
  EXPECT_GT(produced.at("deltacast_last_version_density{kind=\"delta\"}"), 0);
  EXPECT_EQ(produced.at("deltacast_members{state=\"alive\"}"), 2);
  EXPECT_EQ(total(produced, "deltacast_member_alive"), 2);
  // Each member's control link, in the mode its two ends agreed on: the encrypting consumer's is
  // encrypted, the other's authenticated.
  double encrypted = 0, authenticated = 0;
  for (const auto& [key, value] : produced) {
    if (key.rfind("deltacast_member_info{", 0) != 0) continue;
    encrypted += key.find("protection=\"encrypted\"") != std::string::npos ? value : 0;
    authenticated += key.find("protection=\"authenticated\"") != std::string::npos ? value : 0;
  }
  EXPECT_EQ(encrypted, 1) << samples_of(produced, "deltacast_member_info");
  EXPECT_EQ(authenticated, 1) << samples_of(produced, "deltacast_member_info");
  EXPECT_EQ(total(produced, "deltacast_member_committed_version"), 6);
  // The producer's rails carried each version to the heads of the chains at least once.
  EXPECT_GE(total(produced, "deltacast_rail_bytes_total"), static_cast<double>(stats.wire_bytes));
  // Each rail is in exactly one health state, and it is healthy.
  const double rails = static_cast<double>(count(produced, "deltacast_rail_bytes_total"));
  EXPECT_GE(rails, 2);
  EXPECT_EQ(total(produced, "deltacast_rail_state"), rails);
  EXPECT_EQ(count(produced, "deltacast_rail_state"), 4 * rails);
  // Each rail's connection in the mode its two ends agreed on: encrypted into the encrypting
  // consumer, authenticated into the other.
  const std::string b_child = "child=\"" + std::to_string(rollouts[1]->consumer->state().id) + "\"";
  EXPECT_EQ(total(produced, "deltacast_rail_protection_info"), rails) << samples_of(produced, "deltacast_rail_protection_info");
  for (const auto& [key, value] : produced) {
    if (key.rfind("deltacast_rail_protection_info{", 0) != 0) continue;
    const bool into_b = key.find(b_child) != std::string::npos;
    EXPECT_NE(key.find(into_b ? "protection=\"encrypted\"" : "protection=\"authenticated\""), std::string::npos)
        << key;
  }
  double healthy = 0;
  for (const auto& [key, value] : produced) {
    if (key.rfind("deltacast_rail_state{", 0) == 0 && key.find("state=\"healthy\"") != std::string::npos) healthy += value;
  }
  EXPECT_EQ(healthy, rails);
  EXPECT_EQ(total(produced, "deltacast_rail_stalls_total"), 0);

  double forwarded = 0;
  for (auto& r : rollouts) {
    const auto consumed = parse(scrape(*r->consumer->metrics_endpoint()));
    ASSERT_FALSE(consumed.empty()) << "no metrics from a consumer";
    const bool encrypting = r->consumer->protection() == trust::Protection::kEncrypted;
    const std::string mode = encrypting ? "encrypted" : "authenticated";
    EXPECT_EQ(consumed.count("deltacast_control_link_info{protection=\"" + mode + "\"}"), 1u)
        << samples_of(consumed, "deltacast_control_link_info");
    EXPECT_EQ(count(consumed, "deltacast_info"), 1);
    for (const auto& [key, value] : consumed) {
      if (key.rfind("deltacast_info{", 0) == 0) {
        EXPECT_NE(key.find("protection=\"" + mode + "\""), std::string::npos) << key;
        EXPECT_NE(key.find("aes_gcm=\"" + std::string(trust::aes_gcm_library_name()) + "\""), std::string::npos) << key;
      }
    }
    EXPECT_EQ(consumed.at("deltacast_version"), 3);
    EXPECT_EQ(consumed.at("deltacast_connected"), 1);
    EXPECT_EQ(consumed.at("deltacast_staged_total"), 3);
    EXPECT_EQ(consumed.at("deltacast_commits_total"), 3);
    EXPECT_EQ(consumed.at("deltacast_failures_total"), 0);
    EXPECT_EQ(consumed.at("deltacast_received_bytes_total"), static_cast<double>(stats.wire_bytes));
    EXPECT_GT(consumed.at("deltacast_last_version_apply_seconds"), 0);
    forwarded += total(consumed, "deltacast_rail_bytes_total");
  }
  // Each consumer heads some stripes and forwards them to the other.
  EXPECT_GT(forwarded, 0) << "the consumers' relays show no rail traffic";
}

TEST(Metrics, AnExporterThatCannotListenSaysWhere) {
  if (!MetricsExporter::available()) GTEST_SKIP() << "built without prometheus-cpp";
  auto first = MetricsExporter::start({"127.0.0.1", 0}, [](MetricsSink& sink) { sink.gauge("x", "x", 1); });
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  const Endpoint taken = (*first)->endpoint();
  ProducerOptions p;
  p.rails = loopback_rails();
  p.metrics = taken;
  const Manifest manifest = Manifest::create({{"w", DType::kBF16, {64}}}).value();
  testing::TensorSet tensors(manifest);
  auto producer = Producer::create(manifest, tensors.views(), p);
  ASSERT_FALSE(producer.ok()) << "a producer started with its metrics port taken";
  EXPECT_NE(producer.status().message().find(taken.to_string()), std::string::npos) << producer.status().message();
  EXPECT_EQ(parse(scrape(taken)).at("x"), 1) << "the exporter already there was disturbed";
}

}  // namespace
}  // namespace deltacast
