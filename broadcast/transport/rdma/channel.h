// The RDMA backend's sender end of a rail: one reliable connection from the
// rail's local address, kept up by one thread that connects (reconnecting
// with backoff), offers each slice to the receiver, writes it from the
// caller's memory straight to the place the receiver grants (no copy: the
// transfer's memory is registered once per connection, on its first slice),
// and completes it when the receiver's final reply comes back. A failed work
// completion (a retry timeout after a silent loss, a flushed queue), a
// disconnect, the port going down, or silence (slices out, nothing back for
// silence_limit) fails everything the connection held at once, so the
// sprayer re-sends it on another rail; the dead connection's queue pair is
// put in the error state first, so the NIC no longer reads the callers'
// memory, and its verbs objects are destroyed on a thread of their own, since
// disconnecting over a dead path can block for a long while.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "broadcast/transport/rdma/transport.h"
#include "broadcast/transport/rdma/verbs/memory.h"
#include "broadcast/transport/rdma/verbs/slot_table.h"
#include "core/aligned_buffer.h"

namespace deltacast::rdma {

class RdmaChannel : public Channel {
 public:
  RdmaChannel(RailSpec rail, ChannelOptions options, RdmaConfig config);
  ~RdmaChannel() override;

  void send(const SliceRef& slice, const uint8_t* data, SliceDone done) override;
  bool ready() const override { return connected_ && !port_down_; }
  void reset() override;
  void close() override;
  const RailSpec& rail() const override { return rail_; }
  std::optional<trust::Protection> protection() const override {
    const int agreed = agreed_.load();
    return agreed < 0 ? std::nullopt : std::optional<trust::Protection>(static_cast<trust::Protection>(agreed));
  }

 private:
  struct Record {
    SliceRef slice;
    const uint8_t* data = nullptr;
    SliceDone done;
    bool written = false;  // granted and written: only the final reply is awaited
  };
  struct Connection;

  void run();
  Status connect_once();
  void teardown(const Status& why);
  // Disconnects and destroys a torn-down connection off the channel's thread.
  void retire(std::unique_ptr<Connection> connection);
  void reap_retired(bool all);
  void pump();
  // The registration of the memory `record` is read from: its transfer's, made on first use.
  Result<uint32_t> source_key(const Record& record);
  Status on_reply(const Reply& reply);
  Status drain_completions();
  void finish(Record record, Status result);
  void wake();

  RailSpec rail_;
  ChannelOptions options_;
  RdmaConfig config_;
  const Millis silence_limit_;  // slices out and no completion at all for this long: the connection is dead
  int wake_fd_ = -1;
  std::mutex mu_;
  std::deque<Record> queue_;
  bool finished_ = false;  // under mu_: close() has drained the queue for the last time
  std::atomic<bool> closed_{false};
  std::atomic<bool> reset_requested_{false};
  std::atomic<bool> connected_{false};
  std::atomic<int> agreed_{-1};  // the last connection's trust::Protection (-1: none yet)
  std::atomic<bool> port_down_{false};
  // Owned by the connection thread.
  std::unique_ptr<Connection> connection_;
  uint64_t next_record_ = 1;
  Clock::time_point last_heard_{};
  std::map<uint64_t, Record> inflight_;
  struct Retired {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Retired> retired_;
  std::thread thread_;  // last: it starts in the constructor and touches every member above
};

}  // namespace deltacast::rdma
