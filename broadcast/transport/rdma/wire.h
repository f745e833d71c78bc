// The RDMA backend's wire: what the two ends exchange and the verbs plumbing
// both ends share.
//
// A connection is set up with the RDMA connection manager over the rail's IP
// addresses, and the trust handshake (core/trust/handshake.h) rides in it:
// - the sender's connect request carries CONNECT private data (u32 magic
//   "DCR1", u32 protocol, u32 rail index, u32 reserved, its 40-byte HELLO);
// - the receiver's accept carries ACCEPT private data (u32 magic, u32 protocol,
//   u32 offer slots, u32 largest slice, its HELLO, its 32-byte PROOF);
// - the sender checks that proof and SENDs its own first, as a PROOF message
//   (u32 magic "DCP1", u32 reserved, PROOF, 24 bytes reserved). The receiver
//   takes no offer before that proof holds; a wrong one drops the connection.
// The sender needs nothing replayable: both proofs cover both fresh nonces.
//
// Slices go straight from the sender's memory to their place in the
// receiver's staging memory, with no copy on either end, and a peer can only
// write where the receiver told it to:
// 1. The sender SENDs an OFFER (u32 magic, u32 immediate, the same 40-byte
//    slice header as on TCP, a 16-byte tag) from one of its offer slots;
//    the immediate (slot | sequence << 16, verbs::SlotTable) names it. The
//    tag is AES-256-GCM's GMAC under the session's sender-to-receiver key over
//    the offer's first 48 bytes and the slice's payload, numbered by the
//    offer's place in the connection (the n-th offer sent is the n-th taken:
//    SENDs arrive in order), so no offer or payload can be altered, replayed
//    or moved from another connection. Insecure sessions leave it zero.
// 2. The receiver validates the header like any untrusted frame, asks its
//    SliceSink where the slice goes, registers exactly those bytes for remote
//    writes (in the connection's own protection domain) and answers with a
//    REPLY (u32 magic, u32 immediate, u32 kind, u32 reserved, u64 address,
//    u32 rkey, u32 reserved) of kind GRANTED naming them. A slice the
//    receiver already holds is answered IN PLACE at once.
// 3. The sender writes the slice from its registered memory to that address
//    with one RDMA WRITE with the offer's immediate.
// 4. The receiver deregisters the grant (a late or repeated write now fails
//    at the NIC and ends the connection), checks the offer's tag over the
//    bytes where they landed (a slice that fails drops the connection: it was
//    altered on the way) and then the slice's checksum, and answers IN PLACE
//    or REJECTED, which frees the slot. Nothing counts before both held.
// A write whose immediate matches no open grant, or whose length is not the
// slice's, drops the connection. Replies are not tagged: one altered or
// injected on the way can send a slice to another place the receiver granted
// on the same connection (its tag fails there), call a slice refused (it is
// re-sent) or call it in place when it is not: the receiver never counted it,
// so that version does not commit there (the consumer catches up as after any
// failed round); nothing unverified ever counts.
// RDMA rails do not encrypt (the NIC reads the slices where they are); an
// encrypted session is refused on them.
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
#include "core/trust/frame_seal.h"
#include "core/trust/handshake.h"
#include "core/trust/trust.h"

namespace deltacast::rdma {

inline constexpr uint32_t kMagic = 0x31524344;       // "DCR1"
inline constexpr uint32_t kProofMagic = 0x31504344;  // "DCP1"
// 3: slice checksums are content hashes (core/hash.h); 4: a credential replaced the token;
// 5: the trust handshake in the connection's private data and a PROOF message, tagged offers.
inline constexpr uint32_t kProtocolVersion = 5;
inline constexpr size_t kConnectBytes = 16 + trust::kHelloBytes;                      // 56: all a request holds
inline constexpr size_t kAcceptBytes = 16 + trust::kHelloBytes + trust::kProofBytes;  // 88
inline constexpr size_t kOfferBytes = 64;
inline constexpr size_t kOfferTaggedBytes = 48;  // what the tag covers of the offer; the tag follows
inline constexpr size_t kReplyBytes = 32;

struct ConnectData {
  uint32_t rail_index = 0;
  trust::Hello hello;
};
void encode_connect(const ConnectData& data, uint8_t* out);
// Refuses other magic, another protocol, and a malformed hello, saying which.
Result<ConnectData> decode_connect(const uint8_t* in, size_t length);

struct AcceptData {
  uint32_t slot_count = 0;       // offers in flight at once
  uint32_t max_slice_bytes = 0;  // the largest slice the receiver takes
  trust::Hello hello;            // the receiver's
  trust::Proof proof{};          // the receiver's proof over both hellos
};
void encode_accept(const AcceptData& data, uint8_t* out);
// Checks what a sender can check: a sane number of slots and slice limit.
Result<AcceptData> decode_accept(const uint8_t* in, size_t length);

// The sender's proof, its first SEND on the connection (an offer slot's size).
void encode_proof(const trust::Proof& proof, uint8_t out[kOfferBytes]);
Result<trust::Proof> decode_proof(const uint8_t* in, size_t length);

struct Offer {
  uint32_t imm = 0;
  SliceRef slice;
};
void encode_offer(const SliceRef& slice, uint32_t imm, uint8_t* out);
// Validates an untrusted offer: its size, magic, a slot the connection has,
// and a slice length within the receiver's limit.
Result<Offer> decode_offer(const uint8_t* in, size_t length, uint32_t slot_count, uint32_t max_slice_bytes);

enum class ReplyKind : uint32_t {
  kGranted = 0,   // write the slice to address/rkey
  kInPlace = 1,   // the slice is in place and verified: done
  kRejected = 2,  // the slice was refused (failed its checksum): send it again
};
struct Reply {
  uint32_t imm = 0;
  ReplyKind kind = ReplyKind::kRejected;
  uint64_t address = 0;
  uint32_t rkey = 0;
};
void encode_reply(const Reply& reply, uint8_t* out);
Result<Reply> decode_reply(const uint8_t* in, size_t length);

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

// wr_id tags on the sender: reply receives and offer sends (their index in the low bits); writes
// carry the record they send.
inline constexpr uint64_t kReplyReceiveTag = 1ull << 62;
inline constexpr uint64_t kOfferSendTag = 1ull << 61;

// Receives each end keeps posted per slot: an offer and a write on the receiver, a grant and a
// final reply on the sender.
inline constexpr uint32_t kReceivesPerSlot = 2;

// A peer's text (a rejection's reason) as it may be logged: up to its first NUL, anything
// unprintable replaced.
std::string printable(const void* data, size_t length);

// RDMA rails do not encrypt: an encrypted mode is refused, naming what to do instead.
Status refuse_encryption(trust::Protection mode);

// wr_id of the sender's PROOF message.
inline constexpr uint64_t kProofSendTag = 1ull << 60;

// The sender's end of one connection, handshake done: a queue pair in RTS
// with `kReceivesPerSlot * slots` reply receives posted, the receiver's terms,
// its PROOF on its way, and the seal that tags its offers.
struct Dialed {
  rdma_event_channel* events = nullptr;
  rdma_cm_id* id = nullptr;
  ibv_pd* pd = nullptr;
  QueueResources queues;
  AlignedBuffer replies;
  verbs::Registration reply_registration;
  AcceptData remote;
  std::unique_ptr<trust::FrameSeal> seal;  // tags offers (sender to receiver); its mode is the agreed one
  uint64_t offers_sent = 0;                // the next offer's number
  AlignedBuffer proof;                     // the PROOF message, registered while it goes out
  verbs::Registration proof_registration;

  // Tags the offer in `offer` (its first kOfferTaggedBytes written) for `payload`, numbering it.
  void tag_offer(uint8_t* offer, const uint8_t* payload, uint32_t length);

  Dialed() = default;
  Dialed(const Dialed&) = delete;
  Dialed& operator=(const Dialed&) = delete;
  ~Dialed();
};

// Connects from the rail's local address to the receiver within `timeout`,
// for `slots` offers in flight, proving `trust`'s secret and checking the
// receiver's proof; every failure names its step (and a refusal, the
// receiver's reason; a wrong proof, PERMISSION_DENIED). `send_proof` false
// withholds this side's proof: only for testing the receiver's refusal.
Result<std::unique_ptr<Dialed>> dial(const RailSpec& rail, uint32_t rail_index, const trust::Trust& trust,
                                     uint32_t slots, const QpTimeouts& timeouts, std::chrono::milliseconds timeout,
                                     bool send_proof = true);

}  // namespace deltacast::rdma
