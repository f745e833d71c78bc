#include "broadcast/transport/tcp/channel.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "broadcast/transport/handshake.h"
#include "core/byte_io.h"
#include "core/log.h"

namespace deltacast::tcp {

TcpChannel::TcpChannel(RailSpec rail, ChannelOptions options)
    : rail_(std::move(rail)),
      options_(std::move(options)),
      silence_limit_(std::max<Millis>(Millis(250), 8 * options_.heartbeat)),
      helper_(use_piece_helper(options_.piece_helper) ? std::make_unique<PieceHelper>() : nullptr),
      writer_([this] { run(); }) {}

TcpChannel::~TcpChannel() { close(); }

void TcpChannel::send(const SliceRef& slice, const uint8_t* data, SliceDone done) {
  auto record = std::make_shared<Record>();
  record->slice = slice;
  record->data = data;
  record->done = std::move(done);
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) {
    record->completed = true;
    record->result = unavailable("{}: channel closed", rail_.to_string());
    finished_.push_back(record);
  } else {
    queue_.push_back(record);
  }
  cv_.notify_all();
}

std::optional<Millis> TcpChannel::receiver_silent_for() const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = Clock::now();
  if (!ever_connected_) {
    // Still dialling its first connection: not silent yet for the dial grace (2 s), silent since
    // it was made after that, or once two connects in a row failed (a cut path, or nobody
    // listening: a slow path answers the connect and is slow in the handshake; two, for a SYN a
    // full queue dropped).
    const bool unanswered = unanswered_dials_ >= kUnansweredDials;
    return silence_while_dialling(now - created_, unanswered ? Millis(0) : dial_grace(options_));
  }
  return std::chrono::duration_cast<Millis>(now - last_heard_);
}

bool TcpChannel::ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fd_ >= 0 && !closed_ && Clock::now() - last_heard_ < silence_limit_;
}

void TcpChannel::fail(const RecordPtr& record, const Status& why) {
  if (record->completed) return;
  record->completed = true;
  record->result = why;
  finished_.push_back(record);
}

void TcpChannel::disconnect(uint64_t generation, const Status& why) {
  if (generation != generation_ || fd_ < 0) return;
  log().debug("{}: connection lost: {}", rail_.to_string(), why.to_string());
  stop_connection_ = true;
  shutdown(fd_, SHUT_RDWR);  // wakes the reader; the fd is closed by the writer once the reader is gone
  for (auto& r : inflight_) {
    if (!r->writing) fail(r, why);  // a record being written is failed by the writer, after its write returns
  }
  inflight_.clear();
  for (auto& r : queue_) fail(r, why);
  queue_.clear();
  ++generation_;  // marks the connection gone; fd_ stays until the writer reaps it
  cv_.notify_all();
}

void TcpChannel::complete_finished() {
  std::vector<RecordPtr> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done.swap(finished_);
  }
  for (auto& r : done) r->done(r->result);
}

void TcpChannel::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ >= 0) {
    disconnect(generation_, unavailable("{}: connection reset", rail_.to_string()));
  } else {
    for (auto& r : queue_) fail(r, unavailable("{}: not connected", rail_.to_string()));
    queue_.clear();
  }
  cv_.notify_all();
}

void TcpChannel::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) {
      if (!writer_.joinable()) return;
    }
    closed_ = true;
    stop_connection_ = true;
    if (fd_ >= 0) disconnect(generation_, unavailable("{}: channel closed", rail_.to_string()));
    for (auto& r : queue_) fail(r, unavailable("{}: channel closed", rail_.to_string()));
    queue_.clear();
    cv_.notify_all();
  }
  if (writer_.joinable() && writer_.get_id() != std::this_thread::get_id()) writer_.join();
  complete_finished();
}

Result<TcpChannel::Connection> TcpChannel::dial(bool* answered) {
  *answered = false;
  Connection c;
  DC_ASSIGN_OR_RETURN(c.fd, net::open_socket(""));  // the writer thread already lives in the channel's namespace
  const int fd = c.fd;
  net::tune_socket(fd, net::SocketOptions{options_.user_timeout, options_.send_buffer_bytes});
  Status s = net::connect_socket(fd, rail_.local, rail_.remote, options_.connect_timeout);
  *answered = s.ok();
  const auto deadline = Clock::now() + options_.connect_timeout;
  if (s.ok()) {
    // The receiver learns this side holds the group's secret without seeing it; a refusal says
    // why on both ends (the listener keeps it in recent_drops()).
    auto session = net::shake_hands(fd, trust::Role::kClient, options_.trust, trust::Purpose::kData, deadline, &closed_);
    s = session.status().with_context(rail_.to_string());
    if (s.ok()) c.session = std::move(session).value();
  }
  if (s.ok()) {
    uint8_t hello[kFrameHeaderBytes + 24];
    write_frame_header(hello, kHello);
    store_le<uint32_t>(hello + 8, kProtocolVersion);
    store_le<uint32_t>(hello + 12, options_.rail_index);
    store_le<uint64_t>(hello + 16, 0);
    store_le<uint64_t>(hello + 24, static_cast<uint64_t>(getpid()));
    s = write_sealed(fd, *c.session.seals.outgoing, hello, sizeof(hello), deadline, &closed_);
    uint8_t ack[kFrameHeaderBytes + 8];
    if (s.ok()) s = net::read_full(fd, ack, sizeof(ack), deadline, &closed_);
    if (s.ok()) s = read_tag(fd, *c.session.seals.incoming, ack, sizeof(ack), deadline, &closed_);
    if (s.ok()) {
      auto header = parse_frame_header(ack);
      if (!header.ok() || header->type != kHelloAck || load_le<uint32_t>(ack + 8) != kProtocolVersion) {
        s = unavailable("{}: the receiver did not accept the handshake", rail_.to_string());
      }
    }
  }
  if (!s.ok()) {
    ::close(fd);
    return s;
  }
  return c;
}

void TcpChannel::run() {
  if (Status s = net::enter_netns(options_.netns); !s.ok()) {
    log().error("{}: {}", rail_.to_string(), s.to_string());
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    for (auto& r : queue_) fail(r, s);
    queue_.clear();
    return;
  }
  Millis backoff(20);
  std::unique_lock<std::mutex> lock(mu_);
  while (!closed_) {
    // While stream_for has the connection, the writer neither writes nor reaps nor dials (which
    // would free the seal it is using). Closing shuts the socket down, so it returns soon.
    if (streaming_) {
      cv_.wait(lock, [&] { return !streaming_; });
      continue;
    }
    // Reap a connection that died: its reader must be gone before the fd is closed.
    if (fd_ >= 0 && stop_connection_) {
      const int fd = fd_;
      fd_ = -1;  // before the number is closed: nothing may shut down a reused descriptor
      lock.unlock();
      if (reader_.joinable()) reader_.join();
      ::close(fd);
      complete_finished();
      lock.lock();
      continue;
    }
    if (fd_ < 0) {
      lock.unlock();
      complete_finished();
      bool answered = false;
      auto dialled = dial(&answered);
      lock.lock();
      unanswered_dials_ = answered ? 0 : unanswered_dials_ + 1;
      if (closed_) {
        if (dialled.ok()) ::close(dialled->fd);
        break;
      }
      if (!dialled.ok()) {
        log().debug("{}: dialling failed (again in {} ms): {}", rail_.to_string(), backoff.count(),
                    dialled.status().to_string());
        // Slices cannot wait for a rail that is not there: they fail, and the sprayer
        // places them elsewhere.
        for (auto& r : queue_) fail(r, dialled.status());
        queue_.clear();
        lock.unlock();
        complete_finished();
        lock.lock();
        cv_.wait_for(lock, backoff, [&] { return closed_.load(); });
        backoff = std::min<Millis>(backoff * 2, Millis(500));
        continue;
      }
      backoff = Millis(20);
      fd_ = dialled->fd;
      agreed_ = static_cast<int>(dialled->session.mode());
      out_seal_ = std::move(dialled->session.seals.outgoing);
      in_seal_ = std::move(dialled->session.seals.incoming);
      ++generation_;
      stop_connection_ = false;
      last_heard_ = last_written_ = Clock::now();
      ever_connected_ = true;
      log().debug("{}: connected", rail_.to_string());
      reader_ = std::thread(
          [this, fd = fd_, generation = generation_, seal = in_seal_.get()] { read_loop(fd, generation, seal); });
      continue;
    }
    cv_.wait_for(lock, options_.heartbeat, [&] { return closed_ || stop_connection_ || !queue_.empty(); });
    if (closed_ || stop_connection_ || streaming_) continue;
    const int fd = fd_;
    const uint64_t generation = generation_;
    if (queue_.empty()) {
      if (Clock::now() - last_written_ < options_.heartbeat) continue;
      uint8_t beat[kFrameHeaderBytes + 8];
      write_frame_header(beat, kHeartbeat);
      store_le<uint64_t>(beat + 8, static_cast<uint64_t>(Clock::now().time_since_epoch().count()));
      last_written_ = Clock::now();
      writing_ = true;
      lock.unlock();
      Status s = write_sealed(fd, *out_seal_, beat, sizeof(beat), Clock::now() + silence_limit_, &stop_connection_);
      lock.lock();
      writing_ = false;
      cv_.notify_all();
      if (!s.ok()) disconnect(generation, s);
      continue;
    }
    RecordPtr r = queue_.front();
    queue_.pop_front();
    r->writing = true;
    inflight_.push_back(r);
    last_written_ = Clock::now();
    writing_ = true;
    lock.unlock();
    // The write may take as long as the rail is slow; a stalled rail is cut by reset() or the
    // silence check, which stop this wait.
    Status s = write_slice(fd, r->slice, r->data);
    lock.lock();
    writing_ = false;
    cv_.notify_all();
    r->writing = false;
    if (!s.ok()) disconnect(generation, s);
    if (generation != generation_) {
      // The connection is gone: this record was not failed by disconnect() while it was being written.
      fail(r, s.ok() ? unavailable("{}: connection lost", rail_.to_string()) : s);
    }
    if (!finished_.empty()) {
      lock.unlock();
      complete_finished();
      lock.lock();
    }
  }
  // Closing: tear down whatever is left, once a stream still under way has given the connection
  // back (the writer may have left its loop without waiting for it; close() shut the socket down,
  // so it ends at once).
  cv_.wait(lock, [&] { return !streaming_; });
  const int fd = fd_;
  fd_ = -1;
  lock.unlock();
  if (fd >= 0) shutdown(fd, SHUT_RDWR);
  if (reader_.joinable()) reader_.join();
  if (fd >= 0) ::close(fd);
  complete_finished();
}

Status TcpChannel::write_payload(int fd, const uint8_t* lead, size_t lead_bytes, const uint8_t* data, size_t bytes,
                                 ContentHashStream* hash, Clock::time_point deadline) {
  trust::FrameSeal& seal = *out_seal_;
  const bool encrypting = seal.mode() == trust::Protection::kEncrypted;
  if (!encrypting && hash == nullptr && seal.overhead() == 0) {  // nothing to do per piece
    return net::write_full(fd, lead, lead_bytes, data, bytes, deadline, &stop_connection_);
  }
  // A piece's per-byte work: its tag (or its encryption into `out`) and its hash.
  const auto work = [&seal, hash](const uint8_t* in, uint8_t* out, size_t n) {
    seal.add(in, out, n);
    if (hash != nullptr) hash->update(in, n);
  };
  if (helper_) helper_->begin(work);
  // Until every piece is done (however this returns): the helper reads `data`, which the record
  // only holds until it completes, and uses the seal the writer goes on with.
  DrainOnExit drained(helper_.get());
  if (encrypting && helper_) return write_encrypted_helped(fd, lead, lead_bytes, data, bytes, deadline);
  if (encrypting && scratch_.size() < kHashedPieceBytes) scratch_.resize(kHashedPieceBytes);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min<size_t>(bytes - done, kHashedPieceBytes);
    // (Authenticated: `out` is `in`, nothing is written.)
    uint8_t* in_place = const_cast<uint8_t*>(data + done);
    if (encrypting) {
      work(data + done, scratch_.data(), n);
      DC_RETURN_IF_ERROR(net::write_full(fd, lead, lead_bytes, scratch_.data(), n, deadline, &stop_connection_));
    } else {
      // On the helper: tagged while the kernel copies the same bytes (both only read them).
      if (helper_) helper_->post(data + done, in_place, n);
      DC_RETURN_IF_ERROR(net::write_full(fd, lead, lead_bytes, data + done, n, deadline, &stop_connection_));
      // Inline: right after the kernel copied the piece into the socket, while it is still in
      // cache, so the bytes are read from memory once.
      if (!helper_) work(data + done, in_place, n);
    }
    done += n;
    lead = nullptr;
    lead_bytes = 0;
  }
  return Status();
}

Status TcpChannel::write_encrypted_helped(int fd, const uint8_t* lead, size_t lead_bytes, const uint8_t* data,
                                          size_t bytes, Clock::time_point deadline) {
  // Piece k is encrypted into half k % 2 of scratch_, the next one while this one is written.
  if (scratch_.size() < 2 * kHashedPieceBytes) scratch_.resize(2 * kHashedPieceBytes);
  const size_t pieces = (bytes + kHashedPieceBytes - 1) / kHashedPieceBytes;
  auto piece_bytes = [&](size_t k) { return std::min<size_t>(bytes - k * kHashedPieceBytes, kHashedPieceBytes); };
  auto half = [&](size_t k) { return scratch_.data() + (k % 2) * kHashedPieceBytes; };
  uint64_t ticket[2] = {0, 0};
  for (size_t k = 0; k < std::min<size_t>(pieces, 2); ++k) {
    ticket[k % 2] = helper_->post(data + k * kHashedPieceBytes, half(k), piece_bytes(k));
  }
  for (size_t k = 0; k < pieces; ++k) {
    helper_->wait(ticket[k % 2]);
    DC_RETURN_IF_ERROR(net::write_full(fd, lead, lead_bytes, half(k), piece_bytes(k), deadline, &stop_connection_));
    lead = nullptr;
    lead_bytes = 0;
    if (k + 2 < pieces) ticket[k % 2] = helper_->post(data + (k + 2) * kHashedPieceBytes, half(k), piece_bytes(k + 2));
  }
  return Status();
}

Status TcpChannel::write_slice(int fd, const SliceRef& slice, const uint8_t* data) {
  uint8_t header[kFrameHeaderBytes + kSliceHeaderBytes];
  const auto forever = Clock::time_point::max();
  trust::FrameSeal& seal = *out_seal_;
  if (seal.mode() == trust::Protection::kAuthenticated && slice.has_checksum && slice.leaf_tags_fit()) {
    return write_leaf_tagged_slice(fd, slice, data);
  }
  // Without a checksum, it goes after the payload, hashed piece by piece as the payload goes out.
  write_frame_header(header, kSlice, slice.has_checksum ? 0 : kChecksumTrailer);
  encode_slice_header(slice, header + kFrameHeaderBytes);
  seal.begin(header, sizeof(header));
  if (!slice.has_checksum) hash_.reset();
  DC_RETURN_IF_ERROR(write_payload(fd, header, sizeof(header), data, slice.length,
                                   slice.has_checksum ? nullptr : &hash_, forever));
  uint8_t tail[kChecksumTrailerBytes + trust::kTagBytes];
  size_t tail_bytes = 0;
  if (!slice.has_checksum) {
    store_le<uint64_t>(tail, hash_.digest());
    seal.add(tail, tail, kChecksumTrailerBytes);
    tail_bytes = kChecksumTrailerBytes;
  }
  seal.finish(tail + tail_bytes);
  tail_bytes += seal.overhead();
  return net::write_full(fd, tail, tail_bytes, nullptr, 0, forever, &stop_connection_);
}

Status TcpChannel::write_leaf_tagged_slice(int fd, const SliceRef& slice, const uint8_t* data) {
  const auto forever = Clock::time_point::max();
  trust::FrameSeal& seal = *out_seal_;
  const size_t head_bytes = kFrameHeaderBytes + kSliceHeaderBytes;
  const uint32_t leaves = slice.leaf_count();
  lead_.resize(head_bytes + leaf_tag_block_bytes(leaves));
  write_frame_header(lead_.data(), kSlice, kLeafTagged);
  encode_slice_header(slice, lead_.data() + kFrameHeaderBytes);
  const trust::LeafTags& tags = *slice.leaf_tags;
  std::memcpy(lead_.data() + head_bytes, tags.salt.data(), tags.salt.size());
  std::memcpy(lead_.data() + head_bytes + trust::kLeafSaltBytes, tags.of(slice.first_leaf()).data(),
              leaves * trust::kLeafTagBytes);
  // The frame's tag covers what comes before the payload; the payload goes out as it is, its
  // tags made where its bytes were.
  uint8_t tag[trust::kTagBytes];
  seal.begin(lead_.data(), lead_.size());
  seal.finish(tag);
  DC_RETURN_IF_ERROR(net::write_full(fd, lead_.data(), lead_.size(), data, slice.length, forever, &stop_connection_));
  return net::write_full(fd, tag, seal.overhead(), nullptr, 0, forever, &stop_connection_);
}

void TcpChannel::read_loop(int fd, uint64_t generation, trust::FrameSeal* seal) {
  uint8_t frame[kFrameHeaderBytes + 40];
  for (;;) {
    // The receiver sends heartbeats: silence means the path is gone.
    Status s = net::read_full(fd, frame, kFrameHeaderBytes, Clock::now() + silence_limit_, &stop_connection_);
    FrameHeader header;
    if (s.ok()) {
      auto parsed = parse_frame_header(frame);
      s = parsed.status();
      if (parsed.ok()) header = *parsed;
    }
    if (s.ok()) {
      s = net::read_full(fd, frame + kFrameHeaderBytes, frame_body_bytes(header.type), Clock::now() + silence_limit_,
                    &stop_connection_);
    }
    if (s.ok()) {
      s = read_tag(fd, *seal, frame, kFrameHeaderBytes + frame_body_bytes(header.type), Clock::now() + silence_limit_,
                   &stop_connection_);
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (!s.ok() || generation != generation_) {
      disconnect(generation, s.ok() ? unavailable("connection replaced") : s);
      lock.unlock();
      complete_finished();
      return;
    }
    last_heard_ = Clock::now();
    if (header.type == kAck) {
      const uint64_t transfer = load_le<uint64_t>(frame + 8);
      const uint32_t index = load_le<uint32_t>(frame + 16);
      const uint32_t status = load_le<uint32_t>(frame + 20);
      if (inflight_.empty() || inflight_.front()->slice.transfer != transfer || inflight_.front()->slice.index != index) {
        disconnect(generation, corrupt("{}: acknowledgement for a slice not in flight", rail_.to_string()));
        lock.unlock();
        complete_finished();
        return;
      }
      RecordPtr r = inflight_.front();
      inflight_.pop_front();
      // Once acknowledged, every byte was received, so the kernel copied all of it out of `data`
      // even if the writer has not returned from its last send yet.
      r->completed = true;
      r->result = status == 0 ? Status() : corrupt("{}: the receiver rejected slice {}", rail_.to_string(), index);
      lock.unlock();
      r->done(r->result);
    } else if (header.type != kHeartbeat) {
      disconnect(generation, corrupt("{}: unexpected frame type {}", rail_.to_string(), header.type));
      lock.unlock();
      complete_finished();
      return;
    }
  }
}

Result<uint64_t> TcpChannel::stream_for(Millis duration) {
  std::unique_lock<std::mutex> lock(mu_);
  if (fd_ < 0 || stop_connection_) return unavailable("{}: not connected", rail_.to_string());
  if (streaming_) return failed_precondition("{}: a plain stream is already running on this rail", rail_.to_string());
  // The writer takes no new frame from here (no slice or heartbeat interleaves); one it is
  // writing (a late copy of a slice, say) finishes first.
  streaming_ = true;
  // However this ends (an exception included), the writer gets the connection back: parked until
  // then, it would hold close() up for good.
  struct GiveBack {
    TcpChannel* channel;
    std::unique_lock<std::mutex>& lock;
    ~GiveBack() {
      if (!lock.owns_lock()) lock.lock();
      channel->streaming_ = false;
      channel->cv_.notify_all();
    }
  } give_back{this, lock};
  cv_.wait(lock, [&] { return !writing_; });
  if (fd_ < 0 || stop_connection_) return unavailable("{}: connection lost", rail_.to_string());
  const int fd = fd_;
  const uint64_t generation = generation_;
  trust::FrameSeal& seal = *out_seal_;
  lock.unlock();
  constexpr uint64_t kFrame = 1 << 20;
  std::vector<uint8_t> block(kFrame, 0x42);
  uint8_t header[kFrameHeaderBytes + 8];
  write_frame_header(header, kStream);
  store_le<uint64_t>(header + 8, kFrame);
  const auto until = Clock::now() + duration;
  uint64_t sent = 0;
  Status s;
  while (s.ok() && Clock::now() < until) {
    seal.begin(header, sizeof(header));
    s = write_payload(fd, header, sizeof(header), block.data(), block.size(), nullptr, until + Millis(5000));
    uint8_t tag[trust::kTagBytes];
    seal.finish(tag);
    if (s.ok()) s = net::write_full(fd, tag, seal.overhead(), nullptr, 0, until + Millis(5000), &stop_connection_);
    if (s.ok()) sent += kFrame;
  }
  lock.lock();
  // A frame left half written (its deadline passed on a stalled rail) would have the receiver
  // read the next slices as the rest of it: the connection goes, as after a failed slice.
  if (!s.ok()) {
    disconnect(generation, s);
    return s;
  }
  return sent;
}

}  // namespace deltacast::tcp
