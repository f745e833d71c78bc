// A trainer (an RL-like trace and the producer publishing it) and rollouts
// (guarded tensors and a consumer), for engine tests over any transport:
// real sockets on loopback, or the fake backend in one process.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "broadcast/engine/consumer.h"
#include "broadcast/engine/producer.h"
#include "sparse/trace/rl_trace.h"
#include "support/test_tensors.h"
#include "support/test_trust.h"

namespace deltacast::testing {

inline constexpr uint64_t kEngineToken = 0xfeed;
// The trust of an engine test's group (kEngineToken unless given).
inline trust::Trust engine_trust(uint64_t token = kEngineToken) { return test_trust(token); }
inline constexpr std::chrono::milliseconds kEngineWait{20000};

struct Trainer {
  std::unique_ptr<RlTrace> trace;
  std::unique_ptr<Producer> producer;

  // `options` gets the secret, and two codec threads unless it sets them.
  Trainer(uint64_t elements, double lr, const ProducerOptions& options);
};

struct Rollout {
  std::unique_ptr<TensorSet> tensors;
  std::unique_ptr<Consumer> consumer;

  // `options` gets the producer's address unless it lists coordinators, the secret unless it sets
  // one, and one thread.
  Rollout(const Manifest& manifest, const Endpoint& producer, const ConsumerOptions& options);
  // Bit-for-bit equal to the trainer's published tensors, and nothing written outside them.
  bool matches(const RlTrace& trace) const;
};

// A started consumer of `producer` holding `tensors`, on one loopback rail (null, with the test
// failed, when it cannot join).
std::unique_ptr<Consumer> start_consumer(const Manifest& manifest, std::vector<TensorView> tensors,
                                         const Producer& producer, const std::string& name, unsigned threads = 1,
                                         uintptr_t cuda_stream = 0);

// Every member answers a check of `version` with the producer's hash.
void expect_all_exact(Producer& producer, uint64_t version, size_t members);

}  // namespace deltacast::testing
