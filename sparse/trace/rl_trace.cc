#include "sparse/trace/rl_trace.h"

#include <cmath>
#include <cstring>
#include <numbers>

#include "sparse/trace/float_rounding.h"

namespace deltacast {

namespace {

constexpr uint64_t kBlockElements = 1 << 16;

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// xoshiro256** seeded from a (seed, tensor, step, block) tuple; Box-Muller on top.
class NormalStream {
 public:
  NormalStream(uint64_t seed, uint64_t tensor, uint64_t step, uint64_t block) {
    uint64_t x = splitmix64(seed ^ splitmix64(tensor ^ splitmix64(step ^ splitmix64(block))));
    for (auto& word : s_) word = x = splitmix64(x);
  }

  double next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = (static_cast<double>(bits() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(bits() >> 11) * 0x1.0p-53;          // [0, 1)
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double angle = 2.0 * std::numbers::pi * u2;
    spare_ = r * std::sin(angle);
    has_spare_ = true;
    return r * std::cos(angle);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t bits() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  uint64_t s_[4];
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace

Result<std::unique_ptr<RlTrace>> RlTrace::create(std::vector<TensorSpec> layout, const TraceOptions& options) {
  switch (options.publish_dtype) {
    case DType::kBF16:
    case DType::kF16:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kF32:
      break;
    default:
      return invalid_argument("the trace publishes float dtypes only, not {}", dtype_name(options.publish_dtype));
  }
  if (!(options.lr >= 0) || !(options.init_std >= 0) || !(options.grad_std >= 0)) {
    return invalid_argument("trace lr, init_std and grad_std must be non-negative");
  }
  for (auto& t : layout) t.dtype = options.publish_dtype;
  DC_ASSIGN_OR_RETURN(Manifest manifest, Manifest::create(std::move(layout)));
  std::unique_ptr<RlTrace> trace(new RlTrace());
  trace->options_ = options;
  trace->manifest_ = std::move(manifest);
  trace->pool_ = std::make_unique<ThreadPool>(options.threads);
  trace->initialise();
  return trace;
}

void RlTrace::initialise() {
  const uint32_t out_size = dtype_size(options_.publish_dtype);
  for (size_t t = 0; t < manifest_.size(); ++t) {
    const uint64_t n = manifest_[t].numel();
    master_.emplace_back(n * sizeof(float));
    m_.emplace_back(n * sizeof(float));
    v_.emplace_back(n * sizeof(float));
    published_.emplace_back(n * out_size);
    published_views_.push_back(TensorView{published_.back().data(), options_.publish_dtype, n, Device{}});
    for (uint64_t start = 0; start < n; start += kBlockElements) {
      blocks_.push_back(Block{static_cast<uint32_t>(t), start, std::min(kBlockElements, n - start)});
    }
  }
  // Adam's moments start at zero, as AlignedBuffer comes: left untouched here, their pages are
  // not made until the first step (a trace published only once never makes them; at 2^27
  // elements that was a gigabyte written for nothing, a sixth of the time to prepare it).
  pool_->parallel_for(blocks_.size(), [&](size_t b) {
    const Block& blk = blocks_[b];
    float* w = reinterpret_cast<float*>(master_[blk.tensor].data()) + blk.start;
    NormalStream normal(options_.seed, blk.tensor, 0, blk.start);
    for (uint64_t i = 0; i < blk.count; ++i) w[i] = static_cast<float>(normal.next() * options_.init_std);
    publish(b);
  });
}

void RlTrace::publish(size_t b) {
  const Block& blk = blocks_[b];
  const float* w = reinterpret_cast<const float*>(master_[blk.tensor].data()) + blk.start;
  uint8_t* out = published_[blk.tensor].data();
  switch (dtype_size(options_.publish_dtype)) {
    case 4:
      std::memcpy(out + blk.start * 4, w, blk.count * 4);
      break;
    case 2: {
      auto* o = reinterpret_cast<uint16_t*>(out) + blk.start;
      for (uint64_t i = 0; i < blk.count; ++i) o[i] = static_cast<uint16_t>(round_f32_to(w[i], options_.publish_dtype));
      break;
    }
    default: {
      uint8_t* o = out + blk.start;
      for (uint64_t i = 0; i < blk.count; ++i) o[i] = static_cast<uint8_t>(round_f32_to(w[i], options_.publish_dtype));
      break;
    }
  }
}

void RlTrace::step() {
  ++steps_;
  // PyTorch's Adam in fp32: m, v moments, bias corrections computed in double once per step.
  const float beta1 = static_cast<float>(options_.beta1);
  const float beta2 = static_cast<float>(options_.beta2);
  const float step_size =
      static_cast<float>(options_.lr / (1.0 - std::pow(options_.beta1, static_cast<double>(steps_))));
  const float correction2_sqrt =
      static_cast<float>(std::sqrt(1.0 - std::pow(options_.beta2, static_cast<double>(steps_))));
  const float eps = static_cast<float>(options_.eps);
  pool_->parallel_for(blocks_.size(), [&](size_t b) {
    const Block& blk = blocks_[b];
    float* w = reinterpret_cast<float*>(master_[blk.tensor].data()) + blk.start;
    float* m = reinterpret_cast<float*>(m_[blk.tensor].data()) + blk.start;
    float* v = reinterpret_cast<float*>(v_[blk.tensor].data()) + blk.start;
    NormalStream normal(options_.seed, blk.tensor, steps_, blk.start);
    for (uint64_t i = 0; i < blk.count; ++i) {
      const float g = static_cast<float>(normal.next() * options_.grad_std);
      m[i] = beta1 * m[i] + (1.0f - beta1) * g;
      v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
      const float denom = std::sqrt(v[i]) / correction2_sqrt + eps;
      w[i] -= step_size * (m[i] / denom);
    }
    publish(b);
  });
}

std::span<const float> RlTrace::master(size_t i) const {
  return {reinterpret_cast<const float*>(master_[i].data()), manifest_[i].numel()};
}

Status RlTrace::set_lr(double lr) {
  if (!(lr >= 0)) return invalid_argument("trace lr must be non-negative, got {}", lr);
  options_.lr = lr;
  return Status();
}

}  // namespace deltacast
