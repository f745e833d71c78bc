#include "support/control_examples.h"

namespace deltacast::testing {

using namespace control;

Forwarding some_forwarding() {
  Forwarding f;
  // Five stripes: two to member 3, one to 5, one ends here, one fans out to 5 and 9.
  f.children = {{3}, {}, {5}, {3}, {5, 9}};
  f.directory[3] = {{"10.0.0.3", 7001}, {"10.1.0.3", 7002}};
  f.directory[5] = {{"10.0.0.5", 7001}};
  f.directory[9] = {{"10.0.0.9", 7001}};
  f.paths[9] = {1.5625e9, 0.136};  // member 9 in another site: the WAN into it, 136 ms a round trip
  f.watch[12] = {{"10.2.0.12", 7001}, {"10.3.0.12", 7002}};  // a standby link to another site's sentinel
  return f;
}

LinkSample some_link_sample() {
  LinkSample s;
  s.bytes = 1 << 20;
  s.slices = 16;
  s.busy_seconds = 0.25;
  s.backlogged_seconds = 0.125;
  s.rail_rate = 123.5e6;
  s.round_trip = 0.0405;
  return s;
}

Register some_registration() {
  Register r;
  r.world = 1;
  r.logical = {{"q", DType::kBF16, {8, 4}}, {"o", DType::kBF16, {4, 8}}};
  r.rank.rank = 0;
  r.rank.pieces = {{"qkv", {{"q", false, 0, 0, 8}}, 0}, {"o_flat", {{"o", true, 0, 0, 32}}, 0}};
  r.rank.addresses = {{"10.0.0.1", 7400}, {"10.1.0.1", 7400}};
  return r;
}

std::vector<Message> every_control_message() {
  Join join;
  join.name = "rollout-3";
  join.node = "gpu-node-7";
  join.transport = "rdma";
  join.manifest_hash = 42;
  join.manifest = {{"a.weight", DType::kBF16, {4, 8}}, {"b", DType::kF32, {3}}};
  join.version = 9;
  join.epoch = 77;
  join.rails = {{"10.0.0.3", 7001}};
  return {join,
          Welcome{4, 77, 9},
          Reject{StatusCode::kMismatch, "manifest mismatch: tensor 1"},
          Heartbeat{},
          Announce{10, 9, false, 1234, 1 << 20, 65536, 0xabc, some_forwarding()},
          Replan{1234, some_forwarding(), {{3, "ff01"}}},
          Progress{1234, 9, 0.5, "ff01"},
          Staged{10, 0.5, 0.01, {{5, some_link_sample()}}},
          Committed{10, 0.02},
          Failed{10, "the received bytes do not match their hash"},
          Done{10},
          Check{10},
          Checked{10, 10, 0x1234},
          some_registration(),
          Registered{1, 2},
          FindGroup{kProtocolVersion},
          Group{GroupView{some_registration().logical, {some_registration().rank}}},
          Unreachable{1234, 5, true},
          Forwarded{10, {{9, some_link_sample()}}},
          Unheard{{12, 40}}};
}

}  // namespace deltacast::testing
