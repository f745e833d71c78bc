// rdma_hostile_writer: a peer that holds the token but writes forged slots
// into an RDMA receiver, one attack per run. Exits 0 when the receiver dropped
// the connection (what it must do), 1 when it kept it, 2 when the attack could
// not even be made (no connection).
//
//   rdma_hostile_writer --rail LOCAL=REMOTE:PORT --token T --attack NAME
//
// attacks: bad-magic (no slot header), stale-imm (the header names another
// write), oversize (more bytes than the slot holds), slot-range (an immediate
// naming a slot the connection does not have), slice-range (a slice outside
// any transfer the receiver accepts), send (a send where only writes belong).
#include <rdma/rdma_cma.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "broadcast/transport/rdma/wire.h"
#include "broadcast/transport/rdma/verbs/slot_table.h"
#include "core/byte_io.h"

using namespace deltacast;
using namespace deltacast::rdma;

namespace {

// Fills the local slot with the attack's bytes; returns the immediate to write with.
uint32_t forge(const std::string& attack, const AcceptData& remote, uint8_t* slot) {
  const uint32_t imm = verbs::SlotTable::immediate(0, 1);
  SliceRef slice{77, 1 << 20, 64 << 10, 0, 64 << 10, 0};
  std::memset(slot, 0xab, remote.slot_bytes);
  encode_slot_header(slice, imm, slot);
  if (attack == "bad-magic") store_le<uint32_t>(slot, 0);
  if (attack == "stale-imm") encode_slot_header(slice, imm + (1u << 16), slot);
  if (attack == "oversize") {
    slice.length = remote.slot_bytes;  // the header alone leaves less than that for the payload
    encode_slot_header(slice, imm, slot);
  }
  if (attack == "slice-range") {
    slice.index = 1u << 30;  // far past the end of a 1 MiB transfer
    encode_slot_header(slice, imm, slot);
  }
  if (attack == "slot-range") return verbs::SlotTable::immediate(remote.slot_count + 5, 1);
  return imm;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Writes forged slots into an RDMA receiver"};
  std::string rail_text, attack;
  uint64_t token = 0;
  app.add_option("--rail", rail_text, "LOCAL=REMOTE:PORT")->required();
  app.add_option("--token", token, "The receiver's token")->required();
  app.add_option("--attack", attack, "What to forge")
      ->required()
      ->check(CLI::IsMember({"bad-magic", "stale-imm", "oversize", "slot-range", "slice-range", "send"}));
  CLI11_PARSE(app, argc, argv);
  auto rail = parse_rail(rail_text, 0);
  if (!rail.ok()) {
    fmt::print(stderr, "{}\n", rail.status().to_string());
    return 2;
  }
  auto link = dial(*rail, ConnectData{token, 0}, 4, QpTimeouts{}, std::chrono::seconds(30));
  if (!link.ok()) {
    fmt::print(stderr, "{}: no connection: {}\n", attack, link.status().to_string());
    return 2;
  }
  Dialed& c = **link;
  AlignedBuffer slot(c.remote.slot_bytes);
  auto registration = verbs::register_host(c.pd, slot.data(), slot.size(), verbs::kLocalWrite);
  if (!registration.ok()) return 2;
  const uint32_t imm = forge(attack, c.remote, slot.data());
  const verbs::LocalBuffer local{slot.data(), static_cast<uint32_t>(kSlotHeaderBytes + (64 << 10)), registration->lkey()};
  const Status posted = attack == "send" ? c.queues.queue_pair->send(1, local)
                                         : c.queues.queue_pair->write_with_imm(1, local, {c.remote.slots_address, c.remote.rkey}, imm);
  if (!posted.ok()) {
    fmt::print(stderr, "{}: {}\n", attack, posted.to_string());
    return 2;
  }
  // The receiver's answer: a disconnect (dropped), or an acknowledgement (kept).
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    rdma_cm_event* event = nullptr;
    if (rdma_get_cm_event(c.events, &event) == 0) {
      const bool gone = event->event == RDMA_CM_EVENT_DISCONNECTED;
      rdma_ack_cm_event(event);
      if (gone) {
        fmt::print("{}: dropped by the receiver\n", attack);
        return 0;
      }
    }
    ibv_wc wc[4];
    auto n = poll_completions(c.queues.cq, wc, 4);
    for (int i = 0; n.ok() && i < *n; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        fmt::print("{}: dropped by the receiver ({})\n", attack, ibv_wc_status_str(wc[i].status));
        return 0;
      }
      if (wc[i].wr_id & kAckReceiveTag) {
        fmt::print("{}: the receiver acknowledged a forged slot\n", attack);
        return 1;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  fmt::print("{}: the receiver kept the connection\n", attack);
  return 1;
}
