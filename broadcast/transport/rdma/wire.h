// The RDMA backend's wire: what the two ends exchange and the verbs plumbing
// both ends share.
//
// A connection is set up with the RDMA connection manager over the rail's IP
// addresses. The sender's connect request carries CONNECT private data
// (u32 magic "DCR1", u32 protocol, u64 token, u32 rail index, u32 reserved);
// the receiver's accept carries ACCEPT private data (u32 magic, u32 protocol,
// u64 slots address, u32 rkey, u32 slot count, u32 slot bytes, u32 reserved).
//
// The receiver lends each connection `slot count` slots of `slot bytes`,
// registered once. A slice travels as one RDMA WRITE with immediate into a
// free slot: a SLOT header (u32 magic, u32 immediate, then the same 40-byte
// slice header as on TCP, 16 bytes reserved) followed by the payload. The
// immediate (slot | sequence << 16, verbs::SlotTable) tells the receiver which
// slot just filled. The receiver validates the header like any untrusted
// frame, copies the payload into the staging place its SliceSink hands out
// (writes from peers never land in staging directly: only what begin()
// accepted gets there), and answers with an ACK sent (u32 magic, u32
// immediate, u32 status: 0 in place, 1 rejected, u32 reserved), which frees
// the slot.
#pragma once

#include <rdma/rdma_cma.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "broadcast/transport/transport.h"
#include "broadcast/transport/rdma/verbs/memory.h"
#include "broadcast/transport/rdma/verbs/queue_pair.h"
#include "core/aligned_buffer.h"

namespace deltacast::rdma {

inline constexpr uint32_t kMagic = 0x31524344;  // "DCR1"
inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr size_t kConnectBytes = 24;
inline constexpr size_t kAcceptBytes = 32;
inline constexpr size_t kSlotHeaderBytes = 64;
inline constexpr size_t kAckBytes = 16;

struct ConnectData {
  uint64_t token = 0;
  uint32_t rail_index = 0;
};
void encode_connect(const ConnectData& data, uint8_t* out);
Result<ConnectData> decode_connect(const uint8_t* in, size_t length);

struct AcceptData {
  uint64_t slots_address = 0;
  uint32_t rkey = 0;
  uint32_t slot_count = 0;
  uint32_t slot_bytes = 0;  // header included
};
void encode_accept(const AcceptData& data, uint8_t* out);
// Checks what a sender can check: sane slot geometry.
Result<AcceptData> decode_accept(const uint8_t* in, size_t length);

void encode_slot_header(const SliceRef& slice, uint32_t imm, uint8_t* out);
// Validates an untrusted slot: magic, the immediate it was written with, and a
// payload that fits the slot.
Result<SliceRef> decode_slot_header(const uint8_t* in, uint32_t imm, uint32_t slot_bytes);

void encode_ack(uint32_t imm, bool accepted, uint8_t* out);
struct Ack {
  uint32_t imm = 0;
  bool accepted = false;
};
Result<Ack> decode_ack(const uint8_t* in, size_t length);

// Timeouts that decide how fast a silent loss surfaces as a failed work
// completion: local ACK timeout 4.096 us * 2^ack_timeout, retried retry_count
// times (14 and 7 by default on many stacks: seconds; here ~67 ms * 4).
struct QpTimeouts {
  uint8_t ack_timeout = 14;
  uint8_t retry_count = 3;
  uint8_t rnr_retry = 7;
};

// The real shim: rdma_cm computes each transition's attributes for its id,
// with our timeouts on top.
std::unique_ptr<verbs::QueuePairOps> make_queue_pair_ops(rdma_cm_id* id, ibv_qp* qp, const QpTimeouts& timeouts);

using Clock = std::chrono::steady_clock;

// Waits for the next event on `channel` until `deadline`; the caller acks it.
Result<rdma_cm_event*> next_cm_event(rdma_event_channel* channel, Clock::time_point deadline);

// Fills a sockaddr_in from an IPv4 endpoint.
Status to_sockaddr(const Endpoint& endpoint, sockaddr_in* out);

// Per-connection verbs objects, destroyed in the right order.
struct QueueResources {
  ibv_comp_channel* completion_channel = nullptr;  // owned unless shared
  bool owns_completion_channel = true;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  std::unique_ptr<verbs::QueuePair> queue_pair;

  // A CQ of `depth` entries on `completion_channel` (created when null) and an
  // RC queue pair in RESET whose transitions go through the shim.
  Status create(rdma_cm_id* id, ibv_pd* pd, uint32_t depth, const QpTimeouts& timeouts,
                ibv_comp_channel* shared_channel, void* cq_context);
  void destroy();
  ~QueueResources() { destroy(); }
};

// Takes every completion event waiting on `channel` (non-blocking) and asks
// each CQ to signal the next one; its owner polls the CQs after this, so
// nothing arriving meanwhile is missed.
void rearm_completions(ibv_comp_channel* channel);

// Copies up to `max` completions to `out`; an error when the CQ is broken.
Result<int> poll_completions(ibv_cq* cq, ibv_wc* out, int max);

// wr_id of the sender's acknowledgement receives (their index in the low bits); writes use the slot.
inline constexpr uint64_t kAckReceiveTag = 1ull << 32;

// The sender's end of one connection, handshake done: a queue pair in RTS
// with `depth` acknowledgement receives posted, and the receiver's slots.
struct Dialed {
  rdma_event_channel* events = nullptr;
  rdma_cm_id* id = nullptr;
  ibv_pd* pd = nullptr;
  QueueResources queues;
  AlignedBuffer acks;
  verbs::Registration ack_registration;
  AcceptData remote;

  Dialed() = default;
  Dialed(const Dialed&) = delete;
  Dialed& operator=(const Dialed&) = delete;
  ~Dialed();
};

// Connects from the rail's local address to the receiver within `timeout`;
// every failure names its step (and a refusal, the receiver's reason).
Result<std::unique_ptr<Dialed>> dial(const RailSpec& rail, const ConnectData& hello, uint32_t depth,
                                     const QpTimeouts& timeouts, std::chrono::milliseconds timeout);

}  // namespace deltacast::rdma
