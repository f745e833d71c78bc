// Where an engine's tensors live (sparse/device_codec.h): all on the host, all on one GPU, or a
// mistake named by tensor. No GPU is touched: only the views' device fields are read.
#include <gtest/gtest.h>

#include "sparse/device_codec.h"
#include "support/test_tensors.h"

namespace deltacast {
namespace {

std::vector<TensorView> placed(const Manifest& m, std::vector<Device> devices) {
  std::vector<TensorView> views;
  static uint8_t memory[64];  // never read
  for (size_t i = 0; i < m.size(); ++i) views.push_back(TensorView{memory, m[i].dtype, m[i].numel(), devices[i]});
  return views;
}

TEST(DevicePlacement, HostTensorsAndOneGpusTensorsAreAccepted) {
  const Manifest m = testing::make_manifest({{"a", DType::kBF16, {4}}, {"b", DType::kF32, {2}}});
  auto host = cuda_device_of(m, placed(m, {Device{}, Device{}}));
  ASSERT_TRUE(host.ok());
  EXPECT_FALSE(host->has_value());
  const Device gpu1{DeviceKind::kCuda, 1};
  auto gpu = cuda_device_of(m, placed(m, {gpu1, gpu1}));
  ASSERT_TRUE(gpu.ok());
  EXPECT_EQ(gpu->value(), 1);
}

TEST(DevicePlacement, MixedPlacementsAreRefusedNamingTheTensors) {
  const Manifest m = testing::make_manifest({{"embed", DType::kBF16, {4}}, {"norm", DType::kF32, {2}}});
  auto mixed = cuda_device_of(m, placed(m, {Device{DeviceKind::kCuda, 0}, Device{}}));
  ASSERT_FALSE(mixed.ok());
  EXPECT_EQ(mixed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mixed.status().message().find("'norm' is in host memory"), std::string::npos) << mixed.status().message();
  EXPECT_NE(mixed.status().message().find("'embed' on CUDA device 0"), std::string::npos);
  auto two_gpus = cuda_device_of(m, placed(m, {Device{DeviceKind::kCuda, 0}, Device{DeviceKind::kCuda, 3}}));
  ASSERT_FALSE(two_gpus.ok());
  EXPECT_NE(two_gpus.status().message().find("'norm' is on CUDA device 3"), std::string::npos)
      << two_gpus.status().message();
}

TEST(DevicePlacement, ViewsOnAnotherDeviceAreRefusedByName) {
  const Manifest m = testing::make_manifest({{"embed", DType::kBF16, {4}}, {"head", DType::kBF16, {4}}});
  const Device gpu2{DeviceKind::kCuda, 2};
  EXPECT_TRUE(check_views_on_cuda(m, placed(m, {gpu2, gpu2}), 2).ok());
  const Status elsewhere = check_views_on_cuda(m, placed(m, {gpu2, Device{DeviceKind::kCuda, 0}}), 2);
  ASSERT_FALSE(elsewhere.ok());
  EXPECT_EQ(elsewhere.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(elsewhere.message().find("'head' is not on CUDA device 2"), std::string::npos) << elsewhere.message();
  EXPECT_FALSE(check_views_on_cuda(m, placed(m, {Device{}, Device{}}), 2).ok());
  std::vector<TensorView> one_short = placed(m, {gpu2, gpu2});
  one_short.pop_back();
  EXPECT_FALSE(check_views_on_cuda(m, one_short, 2).ok()) << "the manifest's count is checked too";
}

}  // namespace
}  // namespace deltacast
