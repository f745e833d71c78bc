// The control plane's frames and typed messages from untrusted peers: every
// message round-trips, and a frame or message that breaks a rule (bad magic,
// oversized, truncated, not JSON, unknown type, unknown, missing, mistyped or
// out-of-bounds field, an inconsistent plan, a forged manifest) is refused
// with a reason that names what was wrong, never a crash.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "broadcast/engine/control/control_frame.h"
#include "broadcast/engine/control/control_messages.h"
#include "broadcast/transport/handshake.h"
#include "core/byte_io.h"
#include "support/control_examples.h"

namespace deltacast {
namespace {

using namespace control;

// Two ends of a control connection after their handshake: fds_[0] writes, fds_[1] reads.
class SocketPair : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0);
    trust::Trust t;
    t.secret = trust::GroupSecret::from_legacy_token(0xc0de);
    const auto deadline = ControlClock::now() + std::chrono::seconds(5);
    std::thread server([&] {
      auto s = net::shake_hands(fds_[1], trust::Role::kServer, t, trust::Purpose::kControl, deadline);
      ASSERT_TRUE(s.ok()) << s.status().to_string();
      reader_ = std::move(s).value();
    });
    auto c = net::shake_hands(fds_[0], trust::Role::kClient, t, trust::Purpose::kControl, deadline);
    server.join();
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    writer_ = std::move(c).value();
  }
  void TearDown() override {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  Status write(const std::string& text) {
    return write_control_frame(fds_[0], text, *writer_.seals.outgoing, ControlClock::now() + std::chrono::seconds(1));
  }
  Result<std::string> read(std::chrono::milliseconds wait = std::chrono::milliseconds(200)) {
    return read_control_frame(fds_[1], *reader_.seals.incoming, ControlClock::now() + wait,
                              std::chrono::milliseconds(200));
  }
  void write_raw(const void* data, size_t n) { ASSERT_EQ(::write(fds_[0], data, n), static_cast<ssize_t>(n)); }
  void write_frame(uint32_t magic, const std::string& text, uint32_t claimed) {
    uint8_t header[8];
    store_le<uint32_t>(header, magic);
    store_le<uint32_t>(header + 4, claimed);
    write_raw(header, 8);
    write_raw(text.data(), text.size());
  }
  // The bytes the writer's seal makes of a frame, captured as an on-path attacker would.
  std::vector<uint8_t> captured(const std::string& text) {
    int pipe[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pipe), 0);
    EXPECT_TRUE(write_control_frame(pipe[0], text, *writer_.seals.outgoing, ControlClock::now() + std::chrono::seconds(1))
                    .ok());
    std::vector<uint8_t> bytes(8 + text.size() + trust::kTagBytes);
    EXPECT_EQ(::read(pipe[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    ::close(pipe[0]);
    ::close(pipe[1]);
    return bytes;
  }
  int fds_[2];
  net::Session writer_, reader_;
};

TEST_F(SocketPair, FramesRoundTrip) {
  for (uint64_t v = 1; v <= 3; ++v) {
    const std::string text = encode_text(Done{v});
    ASSERT_TRUE(write(text).ok());
    auto got = read();
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(*got, text);
  }
}

TEST_F(SocketPair, AFrameAlteredOrReplayedInFlightIsRefused) {
  const auto first = captured(encode_text(Done{1}));
  write_raw(first.data(), first.size());
  ASSERT_TRUE(read().ok());
  write_raw(first.data(), first.size());  // the same frame again
  auto replayed = read();
  EXPECT_EQ(replayed.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(replayed.status().message().find("failed its authentication tag"), std::string::npos);
}

TEST_F(SocketPair, AFrameWithOneBitChangedIsRefused) {
  const std::string text = encode_text(Done{1});
  auto bytes = captured(text);
  bytes[8 + text.find("1")] ^= 0x01;  // "1" becomes "0": version 0 instead of 1
  write_raw(bytes.data(), bytes.size());
  EXPECT_EQ(read().status().code(), StatusCode::kCorrupt);
}

TEST_F(SocketPair, BadMagicIsRefused) {
  write_frame(0x12345678, "{}", 2);
  EXPECT_EQ(read().status().code(), StatusCode::kCorrupt);
}

TEST_F(SocketPair, OversizedLengthIsRefusedBeforeAllocating) {
  write_frame(kControlMagic, "", kMaxControlMessageBytes + 1);
  auto got = read();
  EXPECT_EQ(got.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(got.status().message().find("exceeds"), std::string::npos);
}

TEST_F(SocketPair, ATruncatedFrameTimesOutInsteadOfHanging) {
  write_frame(kControlMagic, "{\"ty", 40);
  EXPECT_FALSE(read().ok());
}

using testing::every_control_message;
using testing::some_forwarding;

TEST(ControlMessages, EveryTypeRoundTrips) {
  const auto messages = every_control_message();
  ASSERT_EQ(messages.size(), std::variant_size_v<Message>);
  for (const Message& m : messages) {
    const Json json = encode(m);
    EXPECT_EQ(json["type"], type_name(m));
    auto back = decode_text(json.dump());
    ASSERT_TRUE(back.ok()) << back.status().to_string() << " " << json.dump();
    EXPECT_EQ(back->index(), m.index());
    EXPECT_EQ(encode(*back), json) << "fields lost on the way";
  }
}

// The reason a message is refused for, or "" when it is not.
std::string refusal(const Json& j) {
  auto m = decode(j);
  if (m.ok()) return "";
  EXPECT_EQ(m.status().code(), StatusCode::kCorrupt);
  return m.status().message();
}

TEST(ControlMessages, NotObjectsAndUnknownTypesAreRefused) {
  EXPECT_NE(refusal(Json::array({1, 2})), "");
  EXPECT_NE(refusal(Json::object()).find("type"), std::string::npos);
  EXPECT_NE(refusal(Json{{"type", 5}}).find("type"), std::string::npos);
  EXPECT_NE(refusal(Json{{"type", "reboot"}}).find("reboot"), std::string::npos);
  EXPECT_FALSE(decode_text("not json").ok());
  EXPECT_FALSE(decode_text("").ok());
}

TEST(ControlMessages, UnknownMissingAndMistypedFieldsAreNamed) {
  Json j = encode(Committed{3, 0.1});
  j["surprise"] = 1;
  EXPECT_NE(refusal(j).find("surprise"), std::string::npos);
  j = encode(Committed{3, 0.1});
  j.erase("apply_seconds");
  EXPECT_NE(refusal(j).find("apply_seconds"), std::string::npos);
  for (const Json& bad : {Json("seven"), Json(-1), Json(1.5), Json(true), Json::array()}) {
    j = encode(Committed{3, 0.1});
    j["version"] = bad;
    EXPECT_NE(refusal(j).find("version"), std::string::npos) << bad.dump();
  }
  for (const Json& bad : {Json(-0.5), Json("x"), Json(nullptr)}) {
    j = encode(Committed{3, 0.1});
    j["apply_seconds"] = bad;
    EXPECT_NE(refusal(j).find("apply_seconds"), std::string::npos) << bad.dump();
  }
  j = encode(Progress{1, 2, 0.5, "ff"});
  j["arrived"] = uint64_t{1} << 40;
  EXPECT_NE(refusal(j).find("out of range"), std::string::npos);
  j = encode(Progress{1, 2, 0.5, "ff"});
  j["have"] = "FG";
  EXPECT_NE(refusal(j).find("have"), std::string::npos);
  j = encode(Failed{1, "x"});
  j["reason"] = std::string(100000, 'x');
  EXPECT_NE(refusal(j).find("reason"), std::string::npos);
}

TEST(ControlMessages, InconsistentForwardingIsRefused) {
  const auto with_forwarding = [](const std::function<void(Json&)>& edit) {
    Json j = encode(Announce{10, 9, false, 1, 1 << 20, 65536, 1, some_forwarding()});
    edit(j["forwarding"]);
    return refusal(j);
  };
  EXPECT_EQ(with_forwarding([](Json&) {}), "");
  // Stripes with one child at most go as numbers, as chains always have; one that fans out as a list.
  EXPECT_EQ(encode(Announce{10, 9, false, 1, 1 << 20, 65536, 1, some_forwarding()})["forwarding"]["children"],
            Json::parse("[3, 0, 5, 3, [5, 9]]"));
  EXPECT_NE(with_forwarding([](Json& p) { p["children"] = Json::parse("[3, 11, 5, 9]"); }).find("directory"),
            std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["children"] = Json::parse("[3, -1]"); }).find("children[1]"), std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["children"] = Json::parse("[[3, 3], 5, 9]"); }).find("twice"),
            std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["children"] = Json::parse("[[3, 0], 5, 9]"); }).find("children[0][1] is 0"),
            std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["children"] = Json::parse("[[3, 11], 5, 9]"); }).find("directory"),
            std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["children"] = Json::parse("[[3, \"x\"], 5, 9]"); }).find("children[0][1]"),
            std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) {
              p["children"] = Json::array({Json(std::vector<int>(kMaxFanout + 1, 3)), 5, 9});
            }).find("entries"),
            std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["children"] = Json::parse("[3]"); }).find("no child"), std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["children"] = Json::array(); }).find("stripes"), std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["children"] = Json(std::vector<int>(kMaxStripes + 1, 3)); }).find("entries"),
            std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["directory"]["03"] = Json::array({"10.0.0.9:1"}); }).find("member id"),
            std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["directory"]["3"] = Json::array({"10.0.0.3"}); }).find("port"), std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["directory"]["3"] = Json::array({"host:1"}); }).find("directory"),
            std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["directory"]["3"] = Json::array(); }).find("no data endpoint"), std::string::npos);
  // The WAN paths into children in other sites: [bytes per second, round trip], for a child only,
  // both positive and in bounds.
  EXPECT_EQ(encode(Announce{10, 9, false, 1, 1 << 20, 65536, 1, some_forwarding()})["forwarding"]["paths"],
            Json::parse("{\"9\": [1562500000.0, 0.136]}"));
  EXPECT_EQ(with_forwarding([](Json& p) { p.erase("paths"); }), "") << "paths are optional";
  EXPECT_NE(with_forwarding([](Json& p) { p["paths"]["7"] = Json::array({1e9, 0.1}); }).find("paths.7 is for member 7"),
            std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["paths"]["9"] = Json::array({1e9}); }).find("paths.9"), std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["paths"]["9"] = Json::array({1e9, 0.1, 3}); }).find("paths.9"),
            std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["paths"]["9"] = Json::array({0, 0.1}); }).find("paths.9[0]"),
            std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["paths"]["9"] = Json::array({-1e9, 0.1}); }).find("paths.9[0]"),
            std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["paths"]["9"] = Json::array({1e14, 0.1}); }).find("paths.9[0]"),
            std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["paths"]["9"] = Json::array({1e-300, 0.1}); }).find("paths.9[0]"),
            std::string::npos)
      << "a rate whose window's time would overflow a deadline";
  EXPECT_NE(with_forwarding([](Json& p) { p["paths"]["9"] = Json::array({1e9, 0}); }).find("paths.9[1]"),
            std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["paths"]["9"] = Json::array({1e9, 11}); }).find("paths.9[1]"),
            std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["paths"]["9"] = Json::array({"fast", 0.1}); }).find("paths.9[0]"),
            std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["paths"] = Json::array(); }).find("paths"), std::string::npos);
  // Standby links: members (not children) and where they take data; optional.
  EXPECT_EQ(encode(Announce{10, 9, false, 1, 1 << 20, 65536, 1, some_forwarding()})["forwarding"]["watch"],
            Json::parse(R"({"12": ["10.2.0.12:7001", "10.3.0.12:7002"]})"));
  EXPECT_EQ(with_forwarding([](Json& p) { p.erase("watch"); }), "") << "standby links are optional";
  EXPECT_NE(with_forwarding([](Json& p) { p["watch"]["x"] = Json::array({"10.0.0.9:1"}); }).find("forwarding.watch"),
            std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["watch"]["12"] = Json::array(); }).find("no data endpoint"),
            std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["watch"]["12"] = Json::array({"10.2.0.12"}); }).find("port"),
            std::string::npos);
  EXPECT_NE(with_forwarding([](Json& p) { p["watch"] = Json::array(); }).find("watch"), std::string::npos);
  // A re-plan's `have` covers the receiver's children only.
  Json replan = encode(Replan{1, some_forwarding(), {{5, "ff"}}});
  EXPECT_EQ(refusal(replan), "");
  replan["have"]["7"] = "ff";
  EXPECT_NE(refusal(replan).find("no child"), std::string::npos);
  // A full version has no base, a delta has one.
  Json j = encode(Announce{10, 9, true, 1, 1 << 20, 65536, 1, some_forwarding()});
  EXPECT_NE(refusal(j).find("base"), std::string::npos);
}

TEST(ControlMessages, EachMemberIsSentItsOwnPartOfThePlan) {
  const Plan plan = plan_from_chains({{3, 5, 8}, {5, 8, 3}});
  const std::map<uint32_t, PeerEndpoints> directory = {
      {3, {{"10.0.0.3", 1}}}, {5, {{"10.0.0.5", 1}}}, {8, {{"10.0.0.8", 1}}}};
  const Forwarding five = forwarding_of(plan, 5, directory);
  EXPECT_EQ(five.children, (StripeChildren{{8}, {8}}));
  EXPECT_EQ(five.directory.size(), 1u);
  EXPECT_EQ(five.directory.at(8), directory.at(8));
  const Forwarding eight = forwarding_of(plan, 8, directory);
  EXPECT_EQ(eight.children, (StripeChildren{{}, {3}}));
  EXPECT_EQ(eight.directory.count(5), 0u);
  // Whatever the number of members, a member's part is the size of the stripes.
  std::vector<std::vector<uint32_t>> chains(4);
  std::map<uint32_t, PeerEndpoints> everyone;
  for (uint32_t id = 1; id <= 20000; ++id) {
    for (auto& chain : chains) chain.push_back(id);
    everyone[id] = {{"10.0.0.1", static_cast<uint16_t>(id % 60000 + 1)}, {"10.1.0.1", 2}};
  }
  const Plan big = plan_from_chains(std::move(chains));
  const std::string text = encode(Announce{10, 9, false, 1, 1 << 20, 65536, 1, forwarding_of(big, 777, everyone)}).dump();
  EXPECT_LT(text.size(), 600u);
  EXPECT_EQ(refusal(Json::parse(text)), "");
}

// A tree's re-plans may hand a dead member's children to its parent, whose fan-out then passes
// the shape's width: its part of the plan must still be a message it accepts.
TEST(ControlMessages, AForwardingWidenedByDeathsInATreeIsStillAccepted) {
  std::map<uint32_t, PeerEndpoints> directory;
  for (uint32_t id = 1; id <= 700; ++id) directory[id] = {{"10.0.0.1", static_cast<uint16_t>(id)}};
  // Deaths where no uplink has room left (every member slow, or the stripe at twice its depth)
  // leave the orphans with their nearest ancestor: x feeds 80 children in stripe 0.
  Plan plan;
  plan.fanout = 8;
  plan.order.assign(8, {});
  plan.fed_by.assign(8, {});
  for (uint32_t s = 0; s < 8; ++s) {
    for (uint32_t id = 1; id <= 81; ++id) {
      plan.order[s].push_back(s == 0 ? id : 82 - id);
      plan.fed_by[s].push_back(id == 1 ? Plan::kFromProducer : (s == 0 ? 0 : id - 2));
    }
  }
  const uint32_t x = 1;
  const Forwarding wide = forwarding_of(plan, x, directory);
  EXPECT_EQ(wide.children[0].size(), 80u);
  const Json j = encode(Announce{10, 9, false, 1, 1 << 20, 65536, 1, wide});
  EXPECT_EQ(refusal(j), "");
}

TEST(ControlMessages, ForgedManifestsAndLinkReportsAreRefused) {
  const Json valid = encode(every_control_message()[0]);
  for (const Json& forged : {Json::object(), Json::array({1}),
                             Json::array({{{"name", "a"}, {"dtype", "nope"}, {"shape", {1}}}}),
                             Json::array({{{"name", "a"}, {"dtype", "bf16"}, {"shape", "x"}}}),
                             Json::array({{{"name", "a"}, {"dtype", "bf16"}, {"shape", {-1}}}}),
                             Json::array({{{"name", "a"}, {"dtype", "bf16"}, {"shape", {1}}, {"extra", 1}}})}) {
    Json j = valid;
    j["manifest"] = forged;
    EXPECT_NE(refusal(j).find("manifest"), std::string::npos) << forged.dump();
  }
  Json j = encode(Staged{1, 0, 0, {{5, testing::some_link_sample()}}});
  j["links"]["5"]["backlogged_seconds"] = 10.0;
  EXPECT_NE(refusal(j).find("backlogged"), std::string::npos);
  j = encode(Staged{1, 0, 0, {{5, testing::some_link_sample()}}});
  j["links"]["-5"] = j["links"]["5"];
  EXPECT_NE(refusal(j).find("member id"), std::string::npos);
}

// A sentinel's report of the members it no longer hears names members; anything else is refused
// naming where.
TEST(ControlMessages, UnheardReportsNameMembersOrAreRefused) {
  EXPECT_EQ(encode(Unheard{{12, 40}}), Json::parse(R"({"type": "unheard", "members": [12, 40]})"));
  EXPECT_EQ(refusal(encode(Unheard{})), "") << "none unheard: every one is heard again";
  for (const Json& members : {Json::array({0}), Json::array({-1}), Json::array({"12"}), Json(12), Json::object()}) {
    Json j = encode(Unheard{{12}});
    j["members"] = members;
    EXPECT_NE(refusal(j).find("members"), std::string::npos) << members.dump();
  }
  Json j = encode(Unheard{{12}});
  j["members"] = Json(std::vector<uint32_t>(kMaxChildren + 1, 3));
  EXPECT_NE(refusal(j).find("entries"), std::string::npos);
}

// An unreachable report says whether it is early (the child heard on no rail for a little while
// only); one that does not say, or says it with something else than a boolean, is refused.
TEST(ControlMessages, UnreachableReportsSayWhetherTheyAreEarly) {
  EXPECT_EQ(encode(Unreachable{7, 3, true}),
            Json::parse(R"({"type": "unreachable", "transfer": 7, "member": 3, "early": true})"));
  for (bool early : {false, true}) {
    auto back = decode_text(encode(Unreachable{7, 3, early}).dump());
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(std::get<Unreachable>(*back).early, early);
  }
  Json j = encode(Unreachable{7, 3});
  j.erase("early");
  EXPECT_NE(refusal(j).find("early"), std::string::npos) << refusal(j);
  for (const Json& early : {Json(1), Json("true"), Json::array()}) {
    j["early"] = early;
    EXPECT_NE(refusal(j).find("early"), std::string::npos) << early.dump();
  }
}

// A resharded consumer's join carries what it holds as [tensor, begin, end] triples; malformed
// ones are refused naming the field (their meaning is checked against the manifest at admission).
TEST(ControlMessages, HeldRangesRoundTripAndMalformedOnesAreRefused) {
  auto join = std::get<Join>(every_control_message()[0]);
  join.defers_commit = true;
  join.held = std::vector<HeldRange>{{0, 0, 16}, {1, 1, 3}};
  const Json json = encode(join);
  auto back = decode_text(json.dump());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  const auto& got = std::get<Join>(*back);
  ASSERT_TRUE(got.held.has_value());
  EXPECT_EQ(*got.held, *join.held);
  EXPECT_TRUE(got.defers_commit);
  EXPECT_FALSE(std::get<Join>(*decode_text(encode(every_control_message()[0]).dump())).held.has_value());
  for (const Json& forged : {Json("all"), Json::array({1}), Json::array({Json::array({0, 1})}),
                             Json::array({Json::array({0, -1, 3})}), Json::array({Json::array({1ull << 33, 0, 3})})}) {
    Json j = json;
    j["held"] = forged;
    EXPECT_NE(refusal(j).find("held"), std::string::npos) << forged.dump();
  }
}

// A sharded group's registrations and groups: pieces, ranks and worlds out of bounds or out of
// order are refused naming the field (whether pieces make sense is the group directory's question).
TEST(ControlMessages, MalformedRegistrationsAndGroupsAreRefusedNamingTheField) {
  const Json reg = encode(testing::some_registration());
  const auto damaged = [&](const Json& base, const std::function<void(Json&)>& damage) {
    Json j = base;
    damage(j);
    return refusal(j);
  };
  EXPECT_NE(damaged(reg, [](Json& j) { j["world"] = 0u; }).find("world"), std::string::npos);
  EXPECT_NE(damaged(reg, [](Json& j) { j["world"] = 1u << 20; }).find("world"), std::string::npos);
  EXPECT_NE(damaged(reg, [](Json& j) { j["rank"]["rank"] = 1u; }).find("rank 1 of a world of 1"), std::string::npos);
  EXPECT_NE(damaged(reg, [](Json& j) { j["rank"]["pieces"][0]["pieces"] = Json::array(); }).find("no piece"),
            std::string::npos);
  EXPECT_NE(damaged(reg, [](Json& j) { j["rank"]["pieces"][0]["pieces"][0]["begin"] = -1; }).find("begin"),
            std::string::npos);
  EXPECT_NE(damaged(reg, [](Json& j) { j["rank"]["pieces"][0]["pieces"][0]["flat"] = 1; }).find("flat"),
            std::string::npos);
  EXPECT_NE(damaged(reg, [](Json& j) { j["rank"]["addresses"] = Json::array({"10.0.0.1"}); }).find("addresses"),
            std::string::npos);
  EXPECT_NE(damaged(reg, [](Json& j) { j["rank"]["pieces"][0]["pieces"] = Json::array({Json::object()}); }).find("tensor"),
            std::string::npos);
  const Json group = encode(every_control_message()[16]);
  ASSERT_EQ(group["type"], "group");
  EXPECT_NE(damaged(group, [](Json& j) { j["ranks"] = Json::array(); }).find("no ranks"), std::string::npos);
  EXPECT_NE(damaged(group, [](Json& j) { j["ranks"][0]["rank"] = 3u; }).find("in order"), std::string::npos);
  EXPECT_NE(damaged(encode(Registered{1, 2}), [](Json& j) { j["registered"] = 3u; }).find("registered"),
            std::string::npos);
}

TEST(ControlMessages, RejectsCarryTheirCode) {
  auto m = decode(encode(Reject{StatusCode::kPermissionDenied, "wrong token"}));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(std::get<Reject>(*m).code, StatusCode::kPermissionDenied);
  Json j = encode(Reject{StatusCode::kPermissionDenied, "wrong token"});
  j["code"] = "SOMETHING_NEW";
  m = decode(j);
  ASSERT_TRUE(m.ok()) << "an unknown code still refuses";
  EXPECT_EQ(std::get<Reject>(*m).code, StatusCode::kFailedPrecondition);
}

// Random damage to valid messages: values swapped for others of any type, fields dropped and
// added, text cut short. Decoding must never crash, and whatever it accepts must encode to a
// message it accepts again.
TEST(ControlMessages, RandomDamageNeverCrashes) {
  std::mt19937_64 rng(13);
  const std::vector<Json> values = {Json(0),  Json(1),   Json(-1),        Json(1.5),        Json(1e300),
                                    Json(""), Json("x"), Json(nullptr),   Json::array(),    Json::object(),
                                    Json(true), Json(uint64_t{1} << 63), Json::array({1, 2}), Json{{"a", 1}}};
  size_t accepted = 0, refused = 0;
  for (int round = 0; round < 3000; ++round) {
    for (const Message& m : every_control_message()) {
      Json j = encode(m);
      const int edits = 1 + static_cast<int>(rng() % 3);
      for (int e = 0; e < edits; ++e) {
        std::vector<std::string> keys;
        for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
        if (keys.empty()) break;
        const std::string key = keys[rng() % keys.size()];
        switch (rng() % 4) {
          case 0: j[key] = values[rng() % values.size()]; break;
          case 1: j.erase(key); break;
          case 2: j["extra" + std::to_string(rng() % 3)] = 1; break;
          default:
            if (j[key].is_object() && !j[key].empty()) j[key].erase(j[key].begin());
            break;
        }
      }
      std::string text = j.dump();
      if (rng() % 8 == 0) text.resize(rng() % (text.size() + 1));
      auto decoded = decode_text(text);
      if (!decoded.ok()) {
        ++refused;
        EXPECT_FALSE(decoded.status().message().empty());
        continue;
      }
      ++accepted;
      EXPECT_TRUE(decode(encode(*decoded)).ok()) << text;
    }
  }
  EXPECT_GT(refused, 0u);
  EXPECT_GT(accepted, 0u);
}

TEST(ControlBitmap, RoundTripsEverySizeAndRejectsBadText) {
  for (size_t bits : {0u, 1u, 7u, 8u, 9u, 63u, 1000u}) {
    std::vector<uint8_t> present(bits);
    for (size_t i = 0; i < bits; ++i) present[i] = (i * 7 + 3) % 5 == 0;
    const std::string hex = encode_bitmap(present);
    auto back = decode_bitmap(hex, bits);
    ASSERT_TRUE(back.ok());
    for (size_t i = 0; i < bits; ++i) EXPECT_EQ((*back)[i], present[i] != 0) << bits << " " << i;
  }
  EXPECT_FALSE(decode_bitmap("0", 8).ok());
  EXPECT_FALSE(decode_bitmap("zz", 8).ok());
  EXPECT_FALSE(decode_bitmap("ff", 100).ok());
}

}  // namespace
}  // namespace deltacast
