// A sharded group's coordinator over real sockets on loopback: ranks register (and keep
// registering, so a restarted coordinator learns the group again), rollout processes find the
// group once it is formed and are told who is missing before; wrong tokens, other worlds,
// overlapping pieces and garbage are refused or dropped without disturbing anyone else.
#include "broadcast/engine/group/group_coordinator.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <future>
#include <thread>

#include "broadcast/engine/control/control_frame.h"
#include "broadcast/engine/group/group_client.h"
#include "broadcast/transport/socket.h"
#include "core/byte_io.h"
#include "support/test_trust.h"

namespace deltacast {
namespace {

using std::chrono::milliseconds;
constexpr uint64_t kToken = 0x6006;


std::vector<TensorSpec> tensors() { return {{"q", DType::kBF16, {8, 4}}, {"e", DType::kF32, {10}}}; }

// Rank r of 2: rows 4r..4r+3 of q, a flat half of e.
std::vector<LocalTensorSpec> half(uint32_t r) {
  return {{"q", {{"q", false, 0, 4 * r, 4 * (r + 1)}}}, {"e", {{"e", true, 0, 5 * r, 5 * (r + 1)}}}};
}

control::Register registration(uint32_t r, std::vector<LocalTensorSpec> pieces, uint16_t port = 7000) {
  control::Register m;
  m.world = 2;
  m.logical = tensors();
  m.rank = RankEntry{r, std::move(pieces), {Endpoint{"127.0.0.1", port}}};
  return m;
}

std::unique_ptr<GroupCoordinator> coordinator(std::vector<TensorSpec> logical = tensors(), uint16_t port = 0) {
  GroupCoordinatorOptions o;
  o.listen = Endpoint{"127.0.0.1", port};
  o.trust = testing::test_trust(kToken);
  o.request_timeout = milliseconds(300);
  auto c = GroupCoordinator::create(std::move(logical), 2, o);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? std::move(c).value() : nullptr;
}

GroupClientOptions client(const GroupCoordinator& c, uint64_t token = kToken) {
  GroupClientOptions o;
  o.coordinators = {c.address()};
  o.trust = testing::test_trust(token);
  o.request_timeout = milliseconds(1000);
  return o;
}

// The answer to one request: the message, or a reject's reason.
std::string answer(const GroupCoordinator& c, const control::Message& request, uint64_t token = kToken) {
  auto reply = ask_coordinator(c.address(), request, client(c, token));
  if (!reply.ok()) return "no answer: " + reply.status().to_string();
  if (const auto* r = std::get_if<control::Reject>(&*reply)) return std::string(status_code_name(r->code)) + ": " + r->reason;
  return std::string(control::type_name(*reply));
}

TEST(GroupCoordinator, RanksRegisterAndRolloutProcessesFindTheFormedGroup) {
  auto c = coordinator();
  ASSERT_TRUE(c);
  // Nothing yet: a rollout process is told who is missing, and told again until its time is up.
  auto early = find_group(client(*c), milliseconds(300), milliseconds(50));
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(early.status().message().find("missing 0, 1"), std::string::npos) << early.status().to_string();

  RankRegistration one(client(*c), registration(1, half(1)), milliseconds(100));
  ASSERT_TRUE(one.wait(milliseconds(5000)).ok());
  EXPECT_NE(find_group(client(*c), milliseconds(100)).status().message().find("missing 0"), std::string::npos);
  // The group forms while a rollout process is waiting for it.
  auto waiting = std::async(std::launch::async, [&] { return find_group(client(*c), milliseconds(5000), milliseconds(20)); });
  std::this_thread::sleep_for(milliseconds(100));
  RankRegistration zero(client(*c), registration(0, half(0), 7001), milliseconds(100));
  ASSERT_TRUE(zero.wait(milliseconds(5000)).ok());
  auto group = waiting.get();
  ASSERT_TRUE(group.ok()) << group.status().to_string();
  EXPECT_EQ(group->logical, tensors());
  ASSERT_EQ(group->ranks.size(), 2u);
  EXPECT_EQ(group->ranks[0].pieces, half(0));
  EXPECT_EQ(group->ranks[0].addresses, (std::vector<Endpoint>{{"127.0.0.1", 7001}}));
  EXPECT_EQ(group->ranks[1].addresses, (std::vector<Endpoint>{{"127.0.0.1", 7000}}));
}

TEST(GroupCoordinator, ACoordinatorToldNothingLearnsTheTensorsFromTheFirstRank) {
  auto c = coordinator({});
  ASSERT_TRUE(c);
  EXPECT_EQ(answer(*c, registration(0, half(0))), "registered");
  auto other = registration(1, half(1));
  other.logical[1].shape = {12};
  EXPECT_NE(answer(*c, other).find("MISMATCH: rank 1 holds pieces of other tensors than the group's"), std::string::npos)
      << answer(*c, other);
  EXPECT_EQ(answer(*c, registration(1, half(1))), "registered");
  EXPECT_TRUE(c->directory().group().ok());
}

TEST(GroupCoordinator, WrongSecretsOtherWorldsAndOverlapsAreRefusedNamingWhat) {
  auto c = coordinator();
  ASSERT_TRUE(c);
  const std::string refused_secret =
      "PERMISSION_DENIED: handshake: wrong secret (the peer does not hold this group's secret, or the handshake was "
      "replayed or altered on the way)";
  EXPECT_EQ(answer(*c, registration(0, half(0)), /*token=*/1), refused_secret);
  EXPECT_EQ(answer(*c, control::FindGroup{control::kProtocolVersion}, /*token=*/1), refused_secret);
  // A wrong secret is final: find_group does not ask again until its time is up.
  const auto before = std::chrono::steady_clock::now();
  auto found = find_group(client(*c, 1), milliseconds(5000), milliseconds(50));
  EXPECT_EQ(found.status().code(), StatusCode::kPermissionDenied) << found.status().to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - before, milliseconds(2000));
  EXPECT_NE(answer(*c, control::FindGroup{control::kProtocolVersion - 1}).find("control protocol"), std::string::npos);
  auto wider = registration(0, half(0));
  wider.world = 3;
  EXPECT_NE(answer(*c, wider).find("a group of 3 ranks; this coordinator's has 2"), std::string::npos);
  // Rank 1 claims rows 2..5 of q, which rank 0 owns half of: refused for good, naming the tensor.
  ASSERT_EQ(answer(*c, registration(0, half(0))), "registered");
  auto greedy = half(1);
  greedy[0].pieces[0].begin = 2;
  greedy[0].pieces[0].end = 6;
  RankRegistration refused(client(*c), registration(1, greedy), milliseconds(50));
  const Status s = refused.wait(milliseconds(5000));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("'q'"), std::string::npos) << s.to_string();
  // A consumer's message is not a request here.
  EXPECT_NE(answer(*c, control::Heartbeat{}).find("answers register and find_group"), std::string::npos);
  EXPECT_EQ(c->directory().registered(), 1u);
}

TEST(GroupCoordinator, GarbageAndSilentPeersAreDroppedAndOthersStillServed) {
  auto c = coordinator();
  ASSERT_TRUE(c);
  // A peer that connects and says nothing, one that sends a frame of garbage, one that hangs up.
  auto silent = net::open_socket("");
  ASSERT_TRUE(silent.ok());
  ASSERT_TRUE(net::connect_socket(*silent, Endpoint{"0.0.0.0", 0}, c->address(), milliseconds(1000)).ok());
  auto garbage = net::open_socket("");
  ASSERT_TRUE(garbage.ok());
  ASSERT_TRUE(net::connect_socket(*garbage, Endpoint{"0.0.0.0", 0}, c->address(), milliseconds(1000)).ok());
  // Bytes that are no handshake (a request as the unauthenticated protocol sent it): dropped.
  const std::string text = "{\"type\":\"register\",\"world\":\"two\"}";
  uint8_t header[8];
  store_le<uint32_t>(header, kControlMagic);
  store_le<uint32_t>(header + 4, static_cast<uint32_t>(text.size()));
  ASSERT_TRUE(net::write_full(*garbage, header, 8, text.data(), text.size(), ControlClock::now() + milliseconds(1000)).ok());
  char byte;
  EXPECT_FALSE(net::read_full(*garbage, &byte, 1, ControlClock::now() + milliseconds(3000)).ok())
      << "garbage was answered";
  ::close(*garbage);
  // A silent peer costs the others at most the request timeout (300 ms here): one that connected
  // just before the request (the first may have timed out during the garbage's exchange).
  auto late_silent = net::open_socket("");
  ASSERT_TRUE(late_silent.ok());
  ASSERT_TRUE(net::connect_socket(*late_silent, Endpoint{"0.0.0.0", 0}, c->address(), milliseconds(1000)).ok());
  const auto before = std::chrono::steady_clock::now();
  EXPECT_EQ(answer(*c, registration(0, half(0))), "registered");
  EXPECT_LT(std::chrono::steady_clock::now() - before, milliseconds(2000));
  ::close(*late_silent);
  ::close(*silent);
  EXPECT_EQ(c->directory().registered(), 1u);
}

TEST(GroupCoordinator, ARestartedCoordinatorLearnsTheGroupAgainFromRanksRegisteringAgain) {
  auto c = coordinator();
  ASSERT_TRUE(c);
  const Endpoint at = c->address();
  GroupClientOptions o = client(*c);
  RankRegistration zero(o, registration(0, half(0)), milliseconds(100));
  RankRegistration one(o, registration(1, half(1)), milliseconds(100));
  ASSERT_TRUE(zero.wait(milliseconds(5000)).ok());
  ASSERT_TRUE(one.wait(milliseconds(5000)).ok());
  ASSERT_TRUE(find_group(o, milliseconds(1000)).ok());
  c.reset();  // the process hosting it died
  c = coordinator(tensors(), at.port);
  ASSERT_TRUE(c);
  auto again = find_group(o, milliseconds(5000), milliseconds(50));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->ranks.size(), 2u);
}

}  // namespace
}  // namespace deltacast
