// The TCP backend's sender end of a rail: one connection from the rail's
// local address to the receiver, kept up by its own thread (reconnecting
// with backoff), which writes slice frames and heartbeats; a second thread
// per connection reads acknowledgements and the receiver's heartbeats. A
// connection that falls silent (no frame for silence_limit) is torn down and
// redialled, so failure detection does not wait for TCP's own timeouts.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "broadcast/transport/handshake.h"
#include "broadcast/transport/piece_helper.h"
#include "broadcast/transport/tcp/wire.h"

namespace deltacast::tcp {

class TcpChannel : public Channel {
 public:
  TcpChannel(RailSpec rail, ChannelOptions options);
  ~TcpChannel() override;

  void send(const SliceRef& slice, const uint8_t* data, SliceDone done) override;
  bool ready() const override;
  std::optional<Millis> receiver_silent_for() const override;
  // Linux starts a connection, and restarts one idle past its retransmission timeout, at ten
  // segments (RFC 6928).
  uint32_t initial_window() const override { return 10 * 1448; }
  void reset() override;
  void close() override;
  const RailSpec& rail() const override { return rail_; }
  std::optional<trust::Protection> protection() const override {
    const int agreed = agreed_.load();
    return agreed < 0 ? std::nullopt : std::optional<trust::Protection>(static_cast<trust::Protection>(agreed));
  }

  // Writes raw bytes outside the slice protocol for `duration` (the
  // plain-stream baseline of deltacast-bench wire); returns how many. It has the
  // connection to itself meanwhile: a slice being written goes out whole first,
  // queued ones wait until it returns. One caller at a time.
  Result<uint64_t> stream_for(Millis duration);

 private:
  struct Record {
    SliceRef slice;
    const uint8_t* data;
    SliceDone done;
    bool writing = false;    // the writer may still read `data`: only it may complete the record
    bool completed = false;
    Status result;
  };
  using RecordPtr = std::shared_ptr<Record>;

  struct Connection {
    int fd = -1;
    net::Session session;
  };

  void run();
  void read_loop(int fd, uint64_t generation, trust::FrameSeal* seal);
  // `answered`: whether the connect went through (the handshake may still fail).
  Result<Connection> dial(bool* answered);
  // Writes one SLICE frame, sealed as it goes (the writer thread's).
  Status write_slice(int fd, const SliceRef& slice, const uint8_t* data);
  // ... one whose transfer's bytes were leaf-tagged where they were made (authenticated sessions):
  // its leaves' tags go before the payload, and only the frame's header is tagged here.
  Status write_leaf_tagged_slice(int fd, const SliceRef& slice, const uint8_t* data);
  // Writes `lead` (a frame's header, begun on the outgoing seal) and `bytes` of payload through the
  // seal, piece by piece: encrypted into scratch_ in an encrypted session, else written as they
  // are and tagged right after (still in cache), or beside the write on helper_; each piece hashed
  // into `hash` if given.
  Status write_payload(int fd, const uint8_t* lead, size_t lead_bytes, const uint8_t* data, size_t bytes,
                       ContentHashStream* hash, Clock::time_point deadline);
  // write_payload's encrypted pieces on helper_ (begun with their work): each encrypted into one
  // half of scratch_ while the other half is written.
  Status write_encrypted_helped(int fd, const uint8_t* lead, size_t lead_bytes, const uint8_t* data, size_t bytes,
                                Clock::time_point deadline);
  // With mu_ held: tears down connection `generation` and fails what it held.
  void disconnect(uint64_t generation, const Status& why);
  void fail(const RecordPtr& record, const Status& why);
  void complete_finished();

  RailSpec rail_;
  ChannelOptions options_;
  const Millis silence_limit_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RecordPtr> queue_;
  std::deque<RecordPtr> inflight_;   // written (or being written), acknowledged in order
  std::vector<RecordPtr> finished_;  // completed under the lock, callbacks run outside it
  int fd_ = -1;
  uint64_t generation_ = 0;
  Clock::time_point last_heard_{};
  Clock::time_point last_written_{};
  const Clock::time_point created_ = Clock::now();
  bool ever_connected_ = false;  // receiver_silent_for: a rail still dialling its first connection
  int unanswered_dials_ = 0;     // ... and its last dials in a row whose connect failed
  std::atomic<bool> closed_{false};
  std::atomic<int> agreed_{-1};  // the last connection's trust::Protection (-1: none yet)
  std::atomic<bool> stop_connection_{false};
  // stream_for and the writer take turns on the connection (its fd, seal and scratch_): one may
  // start only while the other is not at it. A frame of one begun inside the other's corrupts
  // both, and the seal's cipher refuses outright (a baseline started while a late copy of a slice
  // was still going out on a rail that had come back aborted the process).
  bool streaming_ = false;  // stream_for has the connection
  bool writing_ = false;    // the writer has it (a slice or a heartbeat going out)
  ContentHashStream hash_;  // the writer's, for checksums sent after the payload
  // The connection's seals: outgoing the writer's (stream_for's while it streams), incoming its
  // reader's; both replaced when a connection is dialled, after the last one's reader ended.
  std::unique_ptr<trust::FrameSeal> out_seal_;
  std::unique_ptr<trust::FrameSeal> in_seal_;
  std::vector<uint8_t> scratch_;  // the writer's, for encrypted pieces
  std::vector<uint8_t> lead_;     // the writer's, for a leaf-tagged slice's header and tags
  // Where the machine has a core for it (ChannelOptions::piece_helper): the payload's tag,
  // encryption and hash, beside the writer.
  std::unique_ptr<PieceHelper> helper_;
  std::thread reader_;
  std::thread writer_;  // last: it starts in the constructor and touches every member above
};

}  // namespace deltacast::tcp
