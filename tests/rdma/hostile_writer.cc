// rdma_hostile_writer: a peer that holds the token but breaks the RDMA offer
// and grant protocol (broadcast/transport/rdma/wire.h), one attack per run.
// Exits 0 when the receiver dropped the connection or its NIC refused the
// write (what must happen), 1 when the receiver kept the connection or
// answered as if nothing were wrong, 2 when the attack could not even be made.
//
//   rdma_hostile_writer --rail LOCAL=REMOTE:PORT --token T --attack NAME
//
// Attacks on the offer: bad-magic (no offer header), slot-range (a slot the
// connection does not have), oversize (a slice over the receiver's limit),
// slice-range (a slice outside the transfer it names), double-offer (a second
// offer in a slot whose grant is open), send (a message larger than an offer).
// Attacks on a grant the receiver gave for a genuine offer: stale-imm (a write
// carrying another immediate than the grant's), short-write (fewer bytes than
// the slice), overrun (more bytes than the granted window), late-write (a
// second write once the first was answered: the grant is revoked by then),
// forged-slice (other bytes than the offer's tag covers, as an attacker on the
// path would write them). Attacks on the handshake: no-proof (an offer where the
// proof must come first), silent (connected, and never a proof).
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "broadcast/transport/rdma/verbs/slot_table.h"
#include "broadcast/transport/rdma/wire.h"
#include "core/trust/handshake.h"

using namespace deltacast;
using namespace deltacast::rdma;

namespace {

constexpr uint32_t kSliceBytes = 64 << 10;
// A transfer of its own (the receiver takes unannounced ones up to its size): nothing of a real
// sender's is touched even where the receiver grants a place.
const SliceRef kSlice{77, 1 << 20, kSliceBytes, 0, kSliceBytes, 0x1234};

enum class Outcome { kDropped, kAnswered, kNothing };

// Waits for the receiver's next move: a drop (a disconnect or a failed completion), or a reply.
Outcome await(Dialed& c, std::chrono::seconds limit, Reply* reply, std::string* why) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    rdma_cm_event* event = nullptr;
    if (rdma_get_cm_event(c.events, &event) == 0) {
      const bool gone = event->event == RDMA_CM_EVENT_DISCONNECTED;
      rdma_ack_cm_event(event);
      if (gone) {
        *why = "disconnected";
        return Outcome::kDropped;
      }
    }
    ibv_wc wc[4];
    auto n = poll_completions(c.queues.cq, wc, 4);
    for (int i = 0; n.ok() && i < *n; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        *why = ibv_wc_status_str(wc[i].status);
        return Outcome::kDropped;
      }
      if ((wc[i].wr_id & kReplyReceiveTag) == 0) continue;
      const uint8_t* buffer = c.replies.data() + (wc[i].wr_id & 0xffffffffu) * kReplyBytes;
      auto decoded = decode_reply(buffer, wc[i].byte_len);
      if (decoded.ok()) *reply = *decoded;
      return Outcome::kAnswered;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return Outcome::kNothing;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Breaks the RDMA offer and grant protocol against a receiver"};
  std::string rail_text, attack;
  std::string token = "0";
  const std::set<std::string> offer_attacks = {"bad-magic",    "slot-range", "oversize", "slice-range",
                                               "double-offer", "send",       "no-proof"};
  const std::set<std::string> write_attacks = {"stale-imm", "short-write", "overrun", "late-write", "forged-slice"};
  std::set<std::string> all = offer_attacks;
  all.insert("silent");
  all.insert(write_attacks.begin(), write_attacks.end());
  app.add_option("--rail", rail_text, "LOCAL=REMOTE:PORT")->required();
  app.add_option("--token", token, "The receiver's group secret (as deltacast-bench's --token)")->required();
  app.add_option("--attack", attack, "What to break")->required()->check(CLI::IsMember(all));
  CLI11_PARSE(app, argc, argv);
  auto rail = parse_rail(rail_text, 0);
  if (!rail.ok()) {
    fmt::print(stderr, "{}\n", rail.status().to_string());
    return 2;
  }
  auto secret = trust::GroupSecret::parse(token);
  if (!secret.ok()) {
    fmt::print(stderr, "{}\n", secret.status().to_string());
    return 2;
  }
  const bool withhold_proof = attack == "no-proof" || attack == "silent";
  auto link = dial(*rail, 0, trust::Trust{*secret, trust::Protection::kAuthenticated}, 4, QpTimeouts{},
                   std::chrono::seconds(30), !withhold_proof);
  if (!link.ok()) {
    fmt::print(stderr, "{}: no connection: {}\n", attack, link.status().to_string());
    return 2;
  }
  Dialed& c = **link;
  AlignedBuffer memory(kOfferBytes + 2 * kSliceBytes);
  std::memset(memory.data(), 0xab, memory.size());
  auto registration = verbs::register_host(c.pd, memory.data(), memory.size(), verbs::kLocalWrite);
  if (!registration.ok()) return 2;
  uint8_t* offer = memory.data();
  uint8_t* payload = memory.data() + kOfferBytes;
  const uint32_t imm = verbs::SlotTable::immediate(0, 1);
  const auto send_offer = [&](SliceRef slice, uint32_t with_imm, uint32_t length = kOfferBytes) {
    encode_offer(slice, with_imm, offer);
    c.tag_offer(offer, payload, kSliceBytes);  // the genuine slice's tag: the receiver must get past it
    if (attack == "bad-magic") std::memset(offer, 0, 4);
    return c.queues.queue_pair->send(1, {length == kOfferBytes ? offer : payload, length, registration->lkey()});
  };
  const auto report = [&](Outcome outcome, const std::string& why) {
    if (outcome == Outcome::kDropped) {
      fmt::print("{}: dropped ({})\n", attack, why);
      return 0;
    }
    fmt::print("{}: {}\n", attack, outcome == Outcome::kAnswered ? "the receiver answered as if nothing were wrong"
                                                                   : "the receiver kept the connection");
    return 1;
  };
  Reply reply;
  std::string why;
  if (attack == "silent") return report(await(c, std::chrono::seconds(20), &reply, &why), why);

  if (offer_attacks.count(attack) != 0) {
    SliceRef slice = kSlice;
    uint32_t with_imm = imm;
    if (attack == "slot-range") with_imm = verbs::SlotTable::immediate(c.remote.slot_count + 5, 1);
    if (attack == "oversize") slice.length = c.remote.max_slice_bytes + 1;
    if (attack == "slice-range") slice.index = 1u << 30;  // far past the end of a 1 MiB transfer
    Status posted = attack == "send" ? send_offer(slice, with_imm, kSliceBytes) : send_offer(slice, with_imm);
    if (posted.ok() && attack == "double-offer") {
      if (await(c, std::chrono::seconds(20), &reply, &why) != Outcome::kAnswered || reply.kind != ReplyKind::kGranted) {
        fmt::print(stderr, "{}: no grant for the first offer\n", attack);
        return 2;
      }
      slice.index = 1;  // another slice, same slot, the first grant still open
      posted = send_offer(slice, verbs::SlotTable::immediate(0, 2));
    }
    if (!posted.ok()) {
      fmt::print(stderr, "{}: {}\n", attack, posted.to_string());
      return 2;
    }
    return report(await(c, std::chrono::seconds(20), &reply, &why), why);
  }

  // A genuine offer first: the receiver lends the slice's place.
  if (Status posted = send_offer(kSlice, imm); !posted.ok()) return 2;
  if (await(c, std::chrono::seconds(20), &reply, &why) != Outcome::kAnswered || reply.kind != ReplyKind::kGranted) {
    fmt::print(stderr, "{}: no grant for a genuine offer\n", attack);
    return 2;
  }
  const verbs::RemoteBuffer granted{reply.address, reply.rkey};
  const auto write = [&](uint32_t length, uint32_t with_imm) {
    return c.queues.queue_pair->write_with_imm(2, {payload, length, registration->lkey()}, granted, with_imm);
  };
  Status posted;
  if (attack == "stale-imm") posted = write(kSliceBytes, imm + (1u << 16));
  if (attack == "short-write") posted = write(kSliceBytes / 16, imm);
  if (attack == "overrun") posted = write(2 * kSliceBytes, imm);
  if (attack == "forged-slice") {
    payload[100] ^= 0x40;
    posted = write(kSliceBytes, imm);
  }
  if (attack == "late-write") {
    // A whole write of the tagged bytes, whose checksum is not the offer's: answered (rejected),
    // which closes the grant; then again.
    posted = write(kSliceBytes, imm);
    if (posted.ok() && (await(c, std::chrono::seconds(20), &reply, &why) != Outcome::kAnswered ||
                        reply.kind != ReplyKind::kRejected)) {
      fmt::print(stderr, "{}: the first write was not answered as rejected ({})\n", attack, why);
      return 2;
    }
    if (posted.ok()) posted = write(kSliceBytes, imm);
  }
  if (!posted.ok()) {
    fmt::print(stderr, "{}: {}\n", attack, posted.to_string());
    return 2;
  }
  return report(await(c, std::chrono::seconds(20), &reply, &why), why);
}
