#include "broadcast/transport/tcp/listener.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "broadcast/transport/handshake.h"
#include "core/byte_io.h"
#include "core/log.h"

namespace deltacast::tcp {

namespace {
constexpr size_t kMaxDropsKept = 64;
constexpr size_t kDiscardBytes = 256 << 10;
}  // namespace

Result<std::unique_ptr<TcpListener>> TcpListener::create(const std::vector<Endpoint>& endpoints, SliceSink* sink,
                                                         const ListenOptions& options) {
  std::unique_ptr<TcpListener> l(new TcpListener(sink, options));
  for (const Endpoint& e : endpoints) {
    DC_ASSIGN_OR_RETURN(auto bound, net::listen_socket(options.netns, e));
    l->listen_fds_.push_back(bound.first);
    l->endpoints_.push_back(bound.second);
  }
  for (int fd : l->listen_fds_) l->acceptors_.emplace_back([listener = l.get(), fd] { listener->accept_loop(fd); });
  l->heartbeat_ = std::thread([listener = l.get()] { listener->heartbeat_loop(); });
  return l;
}

TcpListener::~TcpListener() { close(); }

void TcpListener::close() {
  if (closed_.exchange(true)) return;
  for (auto& t : acceptors_) t.join();
  if (heartbeat_.joinable()) heartbeat_.join();
  for (int fd : listen_fds_) ::close(fd);
  std::list<std::unique_ptr<Connection>> connections;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : connections_) shutdown(c->fd, SHUT_RDWR);
    connections.swap(connections_);
  }
  for (auto& c : connections) {
    if (c->thread.joinable()) c->thread.join();
    ::close(c->fd);
  }
}

std::vector<std::string> TcpListener::recent_drops() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {drops_.begin(), drops_.end()};
}

size_t TcpListener::live_connections() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& c : connections_) n += !c->finished;
  return n;
}

void TcpListener::drop(Connection* c, const Status& why) {
  const std::string reason = fmt::format("{}: {}", c->peer, why.message());
  log().warn("dropping connection from {}", reason);
  std::lock_guard<std::mutex> lock(mu_);
  drops_.push_back(reason);
  if (drops_.size() > kMaxDropsKept) drops_.pop_front();
}

void TcpListener::reap_finished() {
  std::list<std::unique_ptr<Connection>> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      if ((*it)->finished) {
        done.push_back(std::move(*it));
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : done) {
    if (c->thread.joinable()) c->thread.join();
    ::close(c->fd);
  }
}

void TcpListener::accept_loop(int listen_fd) {
  while (!closed_) {
    pollfd p{listen_fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) {
      reap_finished();
      continue;
    }
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    c->peer = net::peer_name(fd);
    reap_finished();
    std::lock_guard<std::mutex> lock(mu_);
    if (connections_.size() >= options_.max_connections) {
      log().warn("refusing connection from {}: {} connections already", c->peer, connections_.size());
      drops_.push_back(c->peer + ": too many connections");
      if (drops_.size() > kMaxDropsKept) drops_.pop_front();
      ::close(fd);
      continue;
    }
    net::tune_socket(fd, net::SocketOptions{});
    Connection* raw = c.get();
    connections_.push_back(std::move(c));
    raw->thread = std::thread([this, raw] { serve(raw); });
  }
}

void TcpListener::heartbeat_loop() {
  uint8_t beat[kFrameHeaderBytes + 8];
  write_frame_header(beat, kHeartbeat);
  while (!closed_) {
    std::this_thread::sleep_for(options_.heartbeat);
    store_le<uint64_t>(beat + 8, static_cast<uint64_t>(Clock::now().time_since_epoch().count()));
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : connections_) {
      if (c->finished) continue;
      // Never wait here: a connection that is being written to, or whose send buffer has no room,
      // gets no heartbeat this round. A heartbeat once sealed must go out whole (the peer counts
      // frames), so one that cannot within a moment ends its connection.
      std::unique_lock<std::mutex> write(c->write_mu, std::try_to_lock);
      if (!write.owns_lock() || !c->session.seals.outgoing) continue;
      pollfd room{c->fd, POLLOUT, 0};
      if (poll(&room, 1, 0) != 1 || (room.revents & POLLOUT) == 0) continue;
      if (!write_sealed(c->fd, *c->session.seals.outgoing, beat, sizeof(beat), Clock::now() + Millis(200), &closed_).ok()) {
        shutdown(c->fd, SHUT_RDWR);
      }
    }
  }
}

Status TcpListener::handshake(Connection* c) {
  const auto deadline = Clock::now() + options_.handshake_timeout;
  auto shaken = net::shake_hands(c->fd, trust::Role::kServer, options_.trust, trust::Purpose::kData, deadline, &closed_);
  DC_RETURN_IF_ERROR(shaken.status());
  // The connection's session is set only with the HELLO_ACK written: the heartbeat thread writes
  // to every connection that has one, and a heartbeat sent before the ack is read by the sender
  // as its ack ("the receiver did not accept the handshake"). Across a 40 ms WAN the HELLO takes
  // most of a 50 ms heartbeat period to arrive, so most reconnections failed that way, and a
  // relay's rail to its child could not come back for seconds.
  net::Session session = std::move(shaken).value();
  uint8_t hello[kFrameHeaderBytes + 24];
  DC_RETURN_IF_ERROR(net::read_full(c->fd, hello, sizeof(hello), deadline, &closed_).with_context("handshake"));
  DC_RETURN_IF_ERROR(read_tag(c->fd, *session.seals.incoming, hello, sizeof(hello), deadline, &closed_)
                         .with_context("handshake"));
  DC_ASSIGN_OR_RETURN(FrameHeader header, parse_frame_header(hello));
  if (header.type != kHello) return corrupt("handshake: expected HELLO, got frame type {}", header.type);
  const uint32_t protocol = load_le<uint32_t>(hello + 8);
  if (protocol != kProtocolVersion) return corrupt("handshake: protocol {} (this receiver speaks {})", protocol, kProtocolVersion);
  if (load_le<uint64_t>(hello + 16) != 0) return corrupt("handshake: reserved HELLO field set");
  uint8_t ack[kFrameHeaderBytes + 8];
  write_frame_header(ack, kHelloAck);
  store_le<uint32_t>(ack + 8, kProtocolVersion);
  store_le<uint32_t>(ack + 12, 0);
  std::lock_guard<std::mutex> write(c->write_mu);
  const Status written = write_sealed(c->fd, *session.seals.outgoing, ack, sizeof(ack), deadline, &closed_);
  c->session = std::move(session);
  return written;
}

Status TcpListener::receive_slice(Connection* c, const FrameHeader& frame, const uint8_t* head,
                                  std::vector<uint8_t>& discard, ContentHashStream& hash) {
  SliceRef slice = decode_slice_header(head + kFrameHeaderBytes);
  const bool trailer = (frame.flags & kChecksumTrailer) != 0;
  if (trailer && slice.checksum != 0) return corrupt("slice {} has a checksum in its header and after it", slice.index);
  if (slice.length == 0 || slice.length > options_.max_slice_bytes) {
    return corrupt("slice {} of transfer {} claims {} bytes", slice.index, slice.transfer, slice.length);
  }
  // A slice that starts on a leaf may come with its leaves' tags: read before the payload, and
  // covered by the frame's tag in place of the payload, which is checked leaf by leaf.
  const bool leaf_tagged = (frame.flags & kLeafTagged) != 0;
  trust::FrameSeal& seal = *c->session.seals.incoming;
  std::shared_ptr<const trust::LeafTags> tags;  // leaf-tagged: the ones it came with
  if (leaf_tagged) {
    DC_ASSIGN_OR_RETURN(tags, read_leaf_tags(c, slice, head, Clock::now() + options_.frame_timeout));
    seal.begin_open(c->lead.data(), c->lead.size());
  } else {
    seal.begin_open(head, kFrameHeaderBytes + kSliceHeaderBytes);
  }
  // If a newer copy supersedes this one (this path stalled mid-slice), the connection is shut down:
  // its read fails at once and nothing more lands in the slot from here.
  DC_ASSIGN_OR_RETURN(Landing landing, sink_->begin(slice, [c, index = slice.index] {
                        c->superseded_slice = index;
                        shutdown(c->fd, SHUT_RDWR);
                      }));
  // A slow sender must still finish a started frame in time: no slow-loris.
  const auto deadline = Clock::now() + options_.frame_timeout;
  Status s;
  // The first of the slice's leaves that failed its tag (leaf-tagged slices).
  std::optional<uint64_t> failed_leaf;
  if (landing.bytes != nullptr) {
    // Opened (decrypted or tagged, or checked leaf by leaf) and hashed piece by piece as it lands:
    // inline while each piece is still in cache, so the checks cost no second pass over memory, or
    // on the helper while the next piece is read. Nothing counts until the tags held (complete()
    // below); the helper is drained before anything else touches the seal, the tagger, the hash or
    // the slot (which may go back to missing below, or be handed to a newer copy).
    const uint8_t* slot = landing.bytes;
    static_assert(kHashedPieceBytes % kHashLeafBytes == 0, "pieces must start on leaves");
    const auto open_piece = [&, slot](const uint8_t* in, uint8_t* out, size_t n) {
      if (!leaf_tagged) {
        seal.add_open(in, out, n);
      } else {  // pieces start on leaves (they start on multiples of kHashedPieceBytes): each leaf is checked whole
        for (size_t at = 0; at < n; at += kHashLeafBytes) {
          const uint64_t leaf = slice.first_leaf() + (in + at - slot) / kHashLeafBytes;  // within the transfer
          trust::LeafTagger& tagger = *c->leaf_tagger;
          tagger.begin(slice.transfer_bytes, leaf);
          tagger.add(in + at, std::min<size_t>(kHashLeafBytes, n - at));
          if (!tagger.verify(tags->of(leaf)) && !failed_leaf) failed_leaf = leaf;
        }
      }
      hash.update(out, n);
    };
    hash.reset();
    if (c->helper) c->helper->begin(open_piece);
    DrainOnExit drained(c->helper.get());
    for (uint32_t done = 0; s.ok() && done < slice.length;) {
      const uint32_t n = std::min<uint32_t>(slice.length - done, kHashedPieceBytes);
      s = net::read_full(c->fd, landing.bytes + done, n, deadline, &closed_);
      if (s.ok()) {
        if (c->helper) {
          c->helper->post(landing.bytes + done, landing.bytes + done, n);
        } else {
          open_piece(landing.bytes + done, landing.bytes + done, n);
        }
      }
      done += n;
    }
  } else {
    for (uint32_t left = slice.length; s.ok() && left > 0;) {  // a duplicate: read and throw away
      const uint32_t n = std::min<uint32_t>(left, static_cast<uint32_t>(discard.size()));
      s = net::read_full(c->fd, discard.data(), n, deadline, &closed_);
      if (s.ok() && !leaf_tagged) seal.add_open(discard.data(), discard.data(), n);
      left -= n;
    }
  }
  if (s.ok() && trailer) {
    uint8_t checksum[kChecksumTrailerBytes];
    s = net::read_full(c->fd, checksum, sizeof(checksum), deadline, &closed_);
    if (s.ok()) {
      seal.add_open(checksum, checksum, sizeof(checksum));
      slice.checksum = load_le<uint64_t>(checksum);
    }
  }
  // A slice that fails its tag was altered in flight (or is not from this session): refused like a
  // corrupt one, and the connection dropped; the sender re-sends it and judges the rail.
  if (s.ok()) s = check_tag(c->fd, seal, deadline, &closed_);
  // A leaf that fails its tag under a header that held was altered in flight (or made by no
  // holder of the secret): refused like a frame that fails its tag.
  if (s.ok() && failed_leaf) {
    s = corrupt("leaf {} failed its tag: the payload was altered in flight or not made by a holder of the secret",
                *failed_leaf);
  }
  if (!s.ok()) {
    sink_->complete(slice, landing, false);  // the slot goes back to missing
    return s.with_context(fmt::format("payload of slice {}", slice.index));
  }
  const bool verified = landing.bytes != nullptr && hash.digest() == slice.checksum;
  // The tags it came with go on with it (a relay forwards them instead of tagging the payload).
  if (verified) slice.leaf_tags = std::move(tags);
  const bool accepted = sink_->complete(slice, landing, verified);
  uint8_t ack[kFrameHeaderBytes + 16];
  write_frame_header(ack, kAck);
  store_le<uint64_t>(ack + 8, slice.transfer);
  store_le<uint32_t>(ack + 16, slice.index);
  store_le<uint32_t>(ack + 20, accepted ? 0 : 1);
  std::lock_guard<std::mutex> write(c->write_mu);
  return write_sealed(c->fd, *c->session.seals.outgoing, ack, sizeof(ack), Clock::now() + options_.frame_timeout,
                      &closed_);
}

Result<std::shared_ptr<const trust::LeafTags>> TcpListener::read_leaf_tags(Connection* c, const SliceRef& slice,
                                                                           const uint8_t* head,
                                                                           Clock::time_point deadline) {
  if (c->session.mode() != trust::Protection::kAuthenticated) {
    return corrupt("slice {} comes with leaf tags in a {} session", slice.index,
                   trust::protection_name(c->session.mode()));
  }
  if (slice.slice_bytes % kHashLeafBytes != 0) {
    return corrupt("slice {} comes with leaf tags but slices of {} bytes do not start on leaves", slice.index,
                   slice.slice_bytes);
  }
  const size_t head_bytes = kFrameHeaderBytes + kSliceHeaderBytes;
  c->lead.resize(head_bytes + leaf_tag_block_bytes(slice.leaf_count()));
  std::memcpy(c->lead.data(), head, head_bytes);
  DC_RETURN_IF_ERROR(
      net::read_full(c->fd, c->lead.data() + head_bytes, c->lead.size() - head_bytes, deadline, &closed_));
  auto tags = std::make_shared<trust::LeafTags>();
  tags->buffer_bytes = slice.transfer_bytes;
  tags->first_leaf = slice.first_leaf();
  tags->tags.resize(slice.leaf_count());
  std::memcpy(tags->salt.data(), c->lead.data() + head_bytes, tags->salt.size());
  std::memcpy(tags->tags.data(), c->lead.data() + head_bytes + trust::kLeafSaltBytes,
              tags->tags.size() * trust::kLeafTagBytes);
  if (!c->leaf_tagger || c->leaf_tagger->salt() != tags->salt) {
    DC_ASSIGN_OR_RETURN(c->leaf_tagger, trust::LeafTagger::make(options_.trust.secret, tags->salt));
  }
  return std::shared_ptr<const trust::LeafTags>(std::move(tags));
}

void TcpListener::serve(Connection* c) {
  Status s = handshake(c);
  if (s.ok() && use_piece_helper(options_.piece_helper)) c->helper = std::make_unique<PieceHelper>();
  std::vector<uint8_t> discard(kDiscardBytes);
  ContentHashStream hash;
  uint8_t frame[kFrameHeaderBytes + 40];
  while (s.ok() && !closed_) {
    s = net::read_full(c->fd, frame, kFrameHeaderBytes, Clock::now() + options_.idle_timeout, &closed_);
    if (!s.ok()) break;
    auto header = parse_frame_header(frame);
    if (!header.ok()) {
      s = header.status();
      break;
    }
    const size_t head_bytes = kFrameHeaderBytes + frame_body_bytes(header->type);
    s = net::read_full(c->fd, frame + kFrameHeaderBytes, frame_body_bytes(header->type), Clock::now() + options_.frame_timeout,
                  &closed_);
    if (!s.ok()) break;
    switch (header->type) {
      case kSlice:
        s = receive_slice(c, *header, frame, discard, hash);
        break;
      case kHeartbeat:
        s = read_tag(c->fd, *c->session.seals.incoming, frame, head_bytes, Clock::now() + options_.frame_timeout, &closed_);
        break;
      case kStream: {
        // The plain-stream baseline: bytes read, opened like a slice's, and dropped.
        trust::FrameSeal& seal = *c->session.seals.incoming;
        seal.begin_open(frame, head_bytes);
        const uint64_t bytes = load_le<uint64_t>(frame + kFrameHeaderBytes);
        for (uint64_t left = bytes; s.ok() && left > 0;) {
          const size_t n = std::min<uint64_t>(left, discard.size());
          s = net::read_full(c->fd, discard.data(), n, Clock::now() + options_.frame_timeout, &closed_);
          if (s.ok()) seal.add_open(discard.data(), discard.data(), n);
          left -= n;
        }
        if (s.ok()) s = check_tag(c->fd, seal, Clock::now() + options_.frame_timeout, &closed_);
        break;
      }
      default:
        s = corrupt("frame type {} is not for a receiver", header->type);
    }
  }
  if (c->superseded_slice >= 0) {
    s = unavailable("stalled in slice {}, which a newer copy on another connection superseded", c->superseded_slice.load());
    drop(c, s);
  } else if (!closed_ && s.code() != StatusCode::kUnavailable) {
    drop(c, s);  // a clean close by the sender is no drop
  }
  shutdown(c->fd, SHUT_RDWR);
  c->finished = true;
}

}  // namespace deltacast::tcp
