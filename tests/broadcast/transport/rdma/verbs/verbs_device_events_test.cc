// Asynchronous device events: which ones pause or resume rails, and that
// each reaches exactly the rails on its port.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <vector>

#include "broadcast/transport/rdma/verbs/device_events.h"

namespace deltacast::verbs {
namespace {

TEST(DeviceEvents, PortAndDeviceEventsMapToRailSignals) {
  EXPECT_EQ(classify_event(IBV_EVENT_PORT_ERR), PortSignal::kPortDown);
  EXPECT_EQ(classify_event(IBV_EVENT_PORT_ACTIVE), PortSignal::kPortUp);
  EXPECT_EQ(classify_event(IBV_EVENT_DEVICE_FATAL), PortSignal::kDeviceFatal);
  // Queue-pair and CQ events reach their owner as failed work completions.
  EXPECT_EQ(classify_event(IBV_EVENT_QP_FATAL), PortSignal::kNone);
  EXPECT_EQ(classify_event(IBV_EVENT_CQ_ERR), PortSignal::kNone);
  EXPECT_EQ(classify_event(IBV_EVENT_GID_CHANGE), PortSignal::kNone);
  EXPECT_EQ(classify_event(-1), PortSignal::kNone);
}

TEST(DeviceEvents, ASignalReachesTheRailsOnItsPortOnly) {
  EventRouter router;
  std::vector<std::pair<int, PortSignal>> seen;
  const int a = router.subscribe("mlx5_0", 1, [&](PortSignal s) { seen.push_back({1, s}); });
  router.subscribe("mlx5_0", 2, [&](PortSignal s) { seen.push_back({2, s}); });
  router.subscribe("mlx5_1", 1, [&](PortSignal s) { seen.push_back({3, s}); });
  router.route("mlx5_0", 1, PortSignal::kPortDown);
  EXPECT_EQ(seen, (std::vector<std::pair<int, PortSignal>>{{1, PortSignal::kPortDown}}));
  seen.clear();
  router.route("mlx5_0", 9, PortSignal::kDeviceFatal);
  EXPECT_EQ(seen, (std::vector<std::pair<int, PortSignal>>{{1, PortSignal::kDeviceFatal}, {2, PortSignal::kDeviceFatal}}));
  seen.clear();
  router.route("mlx5_0", 1, PortSignal::kNone);
  EXPECT_TRUE(seen.empty());
  router.unsubscribe(a);
  router.route("mlx5_0", 1, PortSignal::kPortUp);
  EXPECT_TRUE(seen.empty()) << "an unsubscribed rail hears nothing more";
  EXPECT_EQ(router.subscribers(), 2u);
}

}  // namespace
}  // namespace deltacast::verbs
