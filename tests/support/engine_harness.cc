#include "engine_harness.h"

#include <gtest/gtest.h>

#include <cstring>

#include "sparse/trace/model_layout.h"

namespace deltacast::testing {

Trainer::Trainer(uint64_t elements, double lr, const ProducerOptions& given) {
  TraceOptions t;
  t.lr = lr;
  t.threads = 2;
  trace = RlTrace::create(transformer_layout(elements, DType::kBF16), t).value();
  ProducerOptions options = given;
  options.trust = engine_trust();
  if (options.codec.threads == 0) options.codec.threads = 2;
  const auto published = trace->published();
  auto created = Producer::create(trace->manifest(), std::vector<TensorView>(published.begin(), published.end()), options);
  EXPECT_TRUE(created.ok()) << created.status().to_string();
  if (created.ok()) producer = std::move(created).value();
}

Rollout::Rollout(const Manifest& manifest, const Endpoint& producer, const ConsumerOptions& given) {
  tensors = std::make_unique<TensorSet>(manifest);
  ConsumerOptions options = given;
  if (options.coordinators.empty()) options.coordinators = {producer};
  if (options.trust.secret == trust::GroupSecret()) options.trust.secret = engine_trust().secret;
  if (options.threads == 0) options.threads = 1;
  auto created = Consumer::create(manifest, tensors->views(), options);
  EXPECT_TRUE(created.ok()) << created.status().to_string();
  if (created.ok()) consumer = std::move(created).value();
}

bool Rollout::matches(const RlTrace& trace) const {
  const auto published = trace.published();
  for (size_t i = 0; i < published.size(); ++i) {
    if (std::memcmp(published[i].data, tensors->tensors[i].data(), published[i].nbytes()) != 0) return false;
  }
  return tensors->guards_intact();
}

std::unique_ptr<Consumer> start_consumer(const Manifest& manifest, std::vector<TensorView> tensors,
                                         const Producer& producer, const std::string& name, unsigned threads,
                                         uintptr_t cuda_stream) {
  ConsumerOptions options;
  options.coordinators = {producer.address()};
  options.trust = engine_trust();
  options.rails = {Endpoint{"127.0.0.1", 0}};
  options.name = name;
  options.threads = threads;
  options.cuda_stream = cuda_stream;
  auto c = Consumer::create(manifest, std::move(tensors), options);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  if (!c.ok()) return nullptr;
  EXPECT_TRUE((*c)->start(kEngineWait).ok());
  return std::move(c).value();
}

void expect_all_exact(Producer& producer, uint64_t version, size_t members) {
  auto check = producer.check(version, kEngineWait);
  ASSERT_TRUE(check.ok()) << check.status().to_string();
  EXPECT_EQ(check->members.size(), members);
  for (const auto& m : check->members) {
    EXPECT_TRUE(m.exact) << "consumer " << m.name << " holds " << m.held << " hash " << m.hash << " vs "
                         << check->expected_hash;
  }
}

}  // namespace deltacast::testing
