// The Producer and Consumer as the extension exposes them: tensors imported
// through DLPack, options from plain Python values, results as JSON text
// (the Python layer turns them into dicts), errors raised as
// deltacast.errors exceptions. Blocking calls release the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "broadcast/engine/consumer.h"
#include "broadcast/engine/producer.h"
#include "dlpack_tensors.h"

namespace deltacast::python {

struct ProducerArgs {
  std::string listen = "127.0.0.1:0";
  std::string token = "0";  // a group secret as trust::GroupSecret::parse reads it
  std::vector<std::string> rails;
  std::string value_codec = "ulp";
  unsigned threads = 0;
  std::string transport = "tcp";
  std::optional<GroupSeatOptions> group;  // a trainer rank registering with its group's coordinator
  double register_timeout = 60;           // how long the constructor waits for the registration
  std::string metrics;                    // "HOST:PORT": serve Prometheus metrics there ("": none)
  uintptr_t cuda_stream = 0;              // tensors on a GPU: the stream publish works on
  std::string shadow = "device";          // tensors on a GPU: where the shadow lives ("device", "host")
  std::string protection = "authenticated";  // trust::parse_protection's names
  std::string shape = "auto";                // parse_shape's names: how versions go out
  std::string site;                          // the producer's site (consumers naming another cross a WAN)
  int wan_zstd = 1;                          // ProducerOptions::wan_zstd_level
};

class PyProducer {
 public:
  PyProducer(const std::vector<std::string>& names, const std::vector<pybind11::capsule>& capsules,
             const std::vector<std::string>& dtypes, const ProducerArgs& args);
  ~PyProducer();

  std::string address() const;
  std::string transport() const;
  std::string metrics_address() const;  // "" when no metrics are served
  std::string progress() const;         // JSON of the round in flight; "" between rounds
  std::string group_coordinator() const;  // the address of the coordinator it hosts ("" when none)
  uint64_t publish(bool full, uint64_t version);
  void wait(uint64_t version, double timeout_seconds);
  void wait_members(size_t count, double timeout_seconds);
  std::string check(uint64_t version, double timeout_seconds);
  std::string report(uint64_t version) const;  // "null" when unknown
  std::string stats() const;
  std::string manifest() const;
  void close();

 private:
  Producer& engine() const;

  std::unique_ptr<ImportedTensors> tensors_;
  std::unique_ptr<Producer> producer_;
};

struct ConsumerArgs {
  std::vector<std::string> connect;
  std::string token = "0";  // a group secret as trust::GroupSecret::parse reads it
  std::vector<std::string> rails;
  std::string name;
  unsigned threads = 0;
  double join_timeout = 30;
  std::string transport = "tcp";
  std::string node;  // empty: the host name
  std::string metrics;  // "HOST:PORT": serve Prometheus metrics there ("": none)
  uintptr_t cuda_stream = 0;  // tensors on a GPU: the stream commits apply on
  std::string protection = "authenticated";  // trust::parse_protection's names
  std::string site;  // empty: the producer's
};

// The trust of a token= and protection= from Python (raises InvalidArgumentError naming which).
trust::Trust trust_of(const std::string& token, const std::string& protection);

// Shared by the bindings of every engine.
Millis to_millis(double seconds);  // raises on a negative timeout
std::vector<Endpoint> endpoints(const std::vector<std::string>& texts, const std::string& what);
// What every consumer binding takes from its arguments (rails default: one on 127.0.0.1).
ConsumerOptions consumer_options(const ConsumerArgs& args);

class PyConsumer {
 public:
  PyConsumer(const std::vector<std::string>& names, const std::vector<pybind11::capsule>& capsules,
             const std::vector<std::string>& dtypes, const ConsumerArgs& args);
  ~PyConsumer();

  uint64_t pull(double timeout_seconds);
  // Commits each version once verified and calls `on_commit(version)` (None: no call).
  void start(pybind11::object on_commit);
  void wait_version(uint64_t version, double timeout_seconds);
  uint64_t version() const;
  std::string transport() const;
  std::string metrics_address() const;  // "" when no metrics are served
  std::string state() const;
  uint64_t model_hash();
  void close();

 private:
  Consumer& engine() const;

  std::unique_ptr<ImportedTensors> tensors_;
  std::unique_ptr<Consumer> consumer_;
  pybind11::object on_commit_;  // read on the commit thread with the GIL held
};

}  // namespace deltacast::python
