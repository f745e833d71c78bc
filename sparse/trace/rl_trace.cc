#include "sparse/trace/rl_trace.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "sparse/trace/float_rounding.h"

namespace deltacast {

namespace {

constexpr uint64_t kBlockElements = 1 << 16;
// Gradients drawn per chunk of a block: small enough to stay in L1.
constexpr uint64_t kChunkElements = 1024;

// glibc's AVX-512 string functions (memset, memmove) may leave the upper halves of the vector
// registers dirty, and the state stays dirty in that thread. From then on each switch between this
// file's legacy-SSE code and libm's VEX-encoded log and sincos costs a transition: a step took ten
// times as long (Sapphire Rapids, glibc 2.36). vzeroupper makes the state clean again; called once
// per block, it costs nothing measurable.
void clean_vector_upper_halves() {
#if defined(__x86_64__) && !defined(__AVX__)
  static const bool has_avx = __builtin_cpu_supports("avx");
  if (has_avx) {
    asm volatile("vzeroupper" ::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
                 "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
  }
#endif
}

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
    double first;
    pair(first, spare_);
    has_spare_ = true;
    return first;
  }

  // The next n numbers, as n calls of next() give them.
  void fill(double* out, size_t n) {
    size_t i = 0;
    if (has_spare_ && n > 0) out[i++] = next();
    for (; i + 1 < n; i += 2) pair(out[i], out[i + 1]);
    if (i < n) out[i] = next();
  }

 private:
  void pair(double& first, double& second) {
    const double u1 = (static_cast<double>(bits() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(bits() >> 11) * 0x1.0p-53;          // [0, 1)
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double angle = 2.0 * std::numbers::pi * u2;
    first = r * std::cos(angle);
    second = r * std::sin(angle);
  }

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

// A block's normal numbers for (seed, tensor, step, block start), `count` of them, handed to
// `use(at, numbers, n)` a chunk at a time: whatever the caller does with a chunk is then one loop
// the compiler vectorizes, and the numbers are those one next() at a time would give.
template <typename Use>
void draw_in_chunks(uint64_t seed, uint64_t tensor, uint64_t step, uint64_t start, uint64_t count, Use use) {
  clean_vector_upper_halves();
  NormalStream normal(seed, tensor, step, start);
  double numbers[kChunkElements];
  for (uint64_t at = 0; at < count; at += kChunkElements) {
    const uint64_t n = std::min(kChunkElements, count - at);
    normal.fill(numbers, n);
    use(at, numbers, n);
  }
}

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
  const double init_std = options_.init_std;
  // Adam's moments start at zero, as AlignedBuffer comes: left untouched here, their pages are
  // not made until the first step (a trace published only once never makes them; at 2^27
  // elements that was a gigabyte written for nothing, a sixth of the time to prepare it).
  pool_->parallel_for(blocks_.size(), [&](size_t b) {
    const Block& blk = blocks_[b];
    float* w = reinterpret_cast<float*>(master_[blk.tensor].data()) + blk.start;
    const auto use = [&](uint64_t at, const double* noise, uint64_t n) {
      for (uint64_t i = 0; i < n; ++i) w[at + i] = static_cast<float>(noise[i] * init_std);
    };
    draw_in_chunks(options_.seed, blk.tensor, 0, blk.start, blk.count, use);
    publish(b);
  });
}

void RlTrace::publish(size_t b) {
  const Block& blk = blocks_[b];
  const float* w = reinterpret_cast<const float*>(master_[blk.tensor].data()) + blk.start;
  uint8_t* out = published_[blk.tensor].data() + blk.start * dtype_size(options_.publish_dtype);
  round_f32s_to({w, blk.count}, out, options_.publish_dtype);
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
  const double grad_std = options_.grad_std;
  pool_->parallel_for(blocks_.size(), [&](size_t b) {
    const Block& blk = blocks_[b];
    float* w = reinterpret_cast<float*>(master_[blk.tensor].data()) + blk.start;
    float* m = reinterpret_cast<float*>(m_[blk.tensor].data()) + blk.start;
    float* v = reinterpret_cast<float*>(v_[blk.tensor].data()) + blk.start;
    // The same operations in the same order as one loop over the block: bit for bit what it gave.
    const auto update = [&](uint64_t at, const double* noise, uint64_t n) {
      for (uint64_t i = 0; i < n; ++i) {
        const float g = static_cast<float>(noise[i] * grad_std);
        float& mi = m[at + i];
        float& vi = v[at + i];
        mi = beta1 * mi + (1.0f - beta1) * g;
        vi = beta2 * vi + (1.0f - beta2) * g * g;
        const float denom = std::sqrt(vi) / correction2_sqrt + eps;
        w[at + i] -= step_size * (mi / denom);
      }
    };
    draw_in_chunks(options_.seed, blk.tensor, steps_, blk.start, blk.count, update);
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
