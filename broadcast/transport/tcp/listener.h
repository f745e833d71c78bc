// The TCP backend's receiver end: listens on one or more addresses (one per
// rail), and serves each connection from its own thread: handshake (token
// checked), then frames. A slice's payload is read straight into the staging
// slot the SliceSink hands out, its checksum checked, and an acknowledgement
// sent back on the same connection. Anything malformed, forged, out of range
// or too slow drops that connection alone, with the reason logged; a
// heartbeat thread keeps every live connection's sender informed.
#pragma once

#include <atomic>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "broadcast/transport/handshake.h"
#include "broadcast/transport/piece_helper.h"
#include "broadcast/transport/tcp/wire.h"

namespace deltacast::tcp {

class TcpListener : public Listener {
 public:
  static Result<std::unique_ptr<TcpListener>> create(const std::vector<Endpoint>& endpoints, SliceSink* sink,
                                                     const ListenOptions& options);
  ~TcpListener() override;

  std::vector<Endpoint> endpoints() const override { return endpoints_; }
  void close() override;

  // Why recent connections were dropped ("peer: reason"), newest last.
  std::vector<std::string> recent_drops() const;
  size_t live_connections() const;

 private:
  struct Connection {
    int fd = -1;
    std::string peer;
    std::mutex write_mu;  // and the outgoing seal (acknowledgements, heartbeats)
    net::Session session;  // the handshake's: incoming seal for serve(), outgoing under write_mu
    std::atomic<bool> finished{false};
    std::atomic<int64_t> superseded_slice{-1};  // set when a newer copy took over this connection's slice
    // Where the machine has a core for it (ListenOptions::piece_helper): payloads are opened and
    // hashed on it while the connection's thread reads the next piece.
    std::unique_ptr<PieceHelper> helper;
    // A leaf-tagged slice's header, body and tags, read before its payload; and the tagger of the
    // last salt seen (a transfer's slices share one).
    std::vector<uint8_t> lead;
    std::unique_ptr<trust::LeafTagger> leaf_tagger;
    std::thread thread;
  };

  TcpListener(SliceSink* sink, ListenOptions options) : sink_(sink), options_(std::move(options)) {}
  void accept_loop(int listen_fd);
  void serve(Connection* c);
  Status handshake(Connection* c);
  // `head`: the frame's header and body, as read.
  Status receive_slice(Connection* c, const FrameHeader& frame, const uint8_t* head, std::vector<uint8_t>& discard,
                       ContentHashStream& hash);
  // Reads a leaf-tagged slice's salt and tags into c->lead (after `head`: the frame's tag covers
  // them all) and has c->leaf_tagger take its salt; returns them, to check its leaves against and
  // to go on with it once verified.
  Result<std::shared_ptr<const trust::LeafTags>> read_leaf_tags(Connection* c, const SliceRef& slice,
                                                                const uint8_t* head, Clock::time_point deadline);
  void heartbeat_loop();
  void drop(Connection* c, const Status& why);
  void reap_finished();

  SliceSink* sink_;
  ListenOptions options_;
  std::vector<Endpoint> endpoints_;
  std::vector<int> listen_fds_;
  std::vector<std::thread> acceptors_;
  std::thread heartbeat_;
  std::atomic<bool> closed_{false};
  mutable std::mutex mu_;
  std::list<std::unique_ptr<Connection>> connections_;
  std::deque<std::string> drops_;
};

}  // namespace deltacast::tcp
