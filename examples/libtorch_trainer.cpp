// A C++ trainer loop on libtorch publishing through deltacast's C++ API:
// a small bf16 MLP trained with AdamW; every step is published to whoever
// joined (run consumers with `deltacast-bench sync --role consumer`-style
// code, or the Python Consumer). Built only when CMake finds libtorch
// (e.g. Debian's libtorch-dev): examples/CMakeLists.txt.
//
//   build/bin/libtorch_trainer [steps] [listen address]
#include <torch/torch.h>

#include <cstdio>
#include <string>
#include <vector>

#include "broadcast/engine/producer.h"

using namespace deltacast;

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::stoi(argv[1]) : 20;
  const std::string listen = argc > 2 ? argv[2] : "127.0.0.1:0";
  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(256, 1024), torch::nn::GELU(), torch::nn::Linear(1024, 256));
  model->to(torch::kBFloat16);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-5));

  // The manifest and in-place views of the parameters: publish() reads them as they are.
  std::vector<TensorSpec> specs;
  std::vector<TensorView> views;
  for (const auto& item : model->named_parameters()) {
    const torch::Tensor& p = item.value();
    std::vector<uint64_t> shape(p.sizes().begin(), p.sizes().end());
    specs.push_back({item.key(), DType::kBF16, shape});
    views.push_back(TensorView{p.data_ptr(), DType::kBF16, static_cast<uint64_t>(p.numel()), Device{}});
  }
  auto manifest = Manifest::create(specs);
  auto address = parse_endpoint(listen);
  if (!manifest.ok() || !address.ok()) {
    std::fprintf(stderr, "error: %s\n", (manifest.ok() ? address.status() : manifest.status()).to_string().c_str());
    return 1;
  }
  ProducerOptions options;
  options.listen = *address;
  auto producer = Producer::create(*manifest, views, options);
  if (!producer.ok()) {
    std::fprintf(stderr, "error: %s\n", producer.status().to_string().c_str());
    return 1;
  }
  std::printf("publishing on %s\n", (*producer)->address().to_string().c_str());
  for (int step = 0; step < steps; ++step) {
    torch::Tensor x = torch::randn({64, 256}).to(torch::kBFloat16);
    torch::Tensor loss = (model->forward(x) - x).pow(2).mean();
    optimizer.zero_grad();
    loss.backward();
    {
      torch::NoGradGuard no_grad;
      optimizer.step();
    }
    auto version = (*producer)->publish();
    if (!version.ok()) {
      std::fprintf(stderr, "error: %s\n", version.status().to_string().c_str());
      return 1;
    }
    if (auto s = (*producer)->wait(*version, Millis(60000)); !s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
      return 1;
    }
    const auto report = (*producer)->report(*version);
    std::printf("step %2d: version %llu, %.2f%% changed, %llu wire bytes\n", step + 1,
                static_cast<unsigned long long>(*version), report ? 100 * report->stats.density() : 0.0,
                report ? static_cast<unsigned long long>(report->stats.wire_bytes) : 0ull);
  }
  (*producer)->close();
  return 0;
}
