// Queue-pair transitions through the verbs shim, with a fake shim: the order
// is enforced, failures leave ERROR, nothing is posted where the hardware
// would refuse it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "broadcast/transport/rdma/verbs/queue_pair.h"

namespace deltacast::verbs {
namespace {

struct Calls {
  std::vector<std::string> log;
  bool fail_modify_to_rtr = false;
  bool fail_posts = false;
};

class FakeOps : public QueuePairOps {
 public:
  explicit FakeOps(Calls* calls) : calls_(calls) {}
  Status modify(QpState target) override {
    calls_->log.push_back("modify " + std::string(qp_state_name(target)));
    if (calls_->fail_modify_to_rtr && target == QpState::kReadyToReceive) return io_error("RTR refused");
    return Status();
  }
  Status post_write_with_imm(uint64_t wr_id, const LocalBuffer&, const RemoteBuffer&, uint32_t imm) override {
    calls_->log.push_back("write " + std::to_string(wr_id) + " imm " + std::to_string(imm));
    return calls_->fail_posts ? io_error("queue full") : Status();
  }
  Status post_send(uint64_t wr_id, const LocalBuffer&) override {
    calls_->log.push_back("send " + std::to_string(wr_id));
    return calls_->fail_posts ? io_error("queue full") : Status();
  }
  Status post_recv(uint64_t wr_id, const LocalBuffer&) override {
    calls_->log.push_back("recv " + std::to_string(wr_id));
    return calls_->fail_posts ? io_error("queue full") : Status();
  }

 private:
  Calls* calls_;
};

TEST(QueuePair, ComesUpInOrderAndPostsWhereTheHardwareTakesThem) {
  Calls calls;
  QueuePair qp(std::make_unique<FakeOps>(&calls));
  EXPECT_FALSE(qp.post_recv(1, {}).ok()) << "no receives in RESET";
  ASSERT_TRUE(qp.to_init().ok());
  ASSERT_TRUE(qp.post_recv(1, {}).ok()) << "receives go in before the peer can write";
  EXPECT_FALSE(qp.write_with_imm(2, {}, {}, 7).ok()) << "no writes before RTS";
  ASSERT_TRUE(qp.to_ready_to_receive().ok());
  EXPECT_FALSE(qp.send(3, {}).ok()) << "no sends in RTR";
  ASSERT_TRUE(qp.to_ready_to_send().ok());
  ASSERT_TRUE(qp.write_with_imm(2, {}, {}, 7).ok());
  ASSERT_TRUE(qp.send(3, {}).ok());
  EXPECT_EQ(qp.state(), QpState::kReadyToSend);
  EXPECT_EQ(calls.log, (std::vector<std::string>{"modify INIT", "recv 1", "modify RTR", "modify RTS", "write 2 imm 7",
                                                 "send 3"}));
}

TEST(QueuePair, TransitionsOutOfOrderAreRefusedWithoutTouchingTheDevice) {
  Calls calls;
  QueuePair qp(std::make_unique<FakeOps>(&calls));
  EXPECT_FALSE(qp.to_ready_to_send().ok());
  EXPECT_FALSE(qp.to_ready_to_receive().ok());
  ASSERT_TRUE(qp.to_init().ok());
  EXPECT_FALSE(qp.to_init().ok()) << "once only";
  EXPECT_FALSE(qp.to_ready_to_send().ok()) << "RTR comes first";
  EXPECT_EQ(calls.log, std::vector<std::string>{"modify INIT"});
  EXPECT_EQ(qp.state(), QpState::kInit);
}

TEST(QueuePair, AFailedTransitionLeavesErrorForGood) {
  Calls calls;
  calls.fail_modify_to_rtr = true;
  QueuePair qp(std::make_unique<FakeOps>(&calls));
  ASSERT_TRUE(qp.to_init().ok());
  const Status s = qp.to_ready_to_receive();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("INIT -> RTR"), std::string::npos) << s.to_string();
  EXPECT_EQ(qp.state(), QpState::kError);
  EXPECT_EQ(calls.log.back(), "modify ERROR") << "the device queue pair is flushed too";
  calls.fail_modify_to_rtr = false;
  EXPECT_FALSE(qp.to_ready_to_receive().ok());
  EXPECT_FALSE(qp.post_recv(1, {}).ok());
}

TEST(QueuePair, AFailedPostLeavesErrorSoTheConnectionIsRebuilt) {
  Calls calls;
  QueuePair qp(std::make_unique<FakeOps>(&calls));
  ASSERT_TRUE(qp.to_init().ok());
  ASSERT_TRUE(qp.to_ready_to_receive().ok());
  ASSERT_TRUE(qp.to_ready_to_send().ok());
  calls.fail_posts = true;
  EXPECT_FALSE(qp.write_with_imm(1, {}, {}, 1).ok());
  EXPECT_EQ(qp.state(), QpState::kError);
  calls.fail_posts = false;
  EXPECT_FALSE(qp.send(2, {}).ok());
}

TEST(QueuePair, ErrorFromResetNeedsNoDeviceCall) {
  Calls calls;
  QueuePair qp(std::make_unique<FakeOps>(&calls));
  qp.to_error();
  qp.to_error();
  EXPECT_EQ(qp.state(), QpState::kError);
  EXPECT_TRUE(calls.log.empty());
}

}  // namespace
}  // namespace deltacast::verbs
