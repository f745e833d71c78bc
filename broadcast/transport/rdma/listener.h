// The RDMA backend's receiver end: listens with the connection manager on one
// or more addresses (one per rail) and serves every connection from one
// thread. A connection request must carry the token; an accepted connection
// gets its own slots, registered once for its life in a protection domain of
// its own (a memory key works on every queue pair of its domain: in a shared
// one, a peer that guessed another's key could write into its slots). Each
// filled slot is checked like any untrusted frame, its payload
// copied into the place the SliceSink hands out, its checksum checked, and an
// acknowledgement sent back. Anything malformed drops that connection alone,
// with the reason logged.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "broadcast/transport/rdma/transport.h"
#include "broadcast/transport/rdma/verbs/memory.h"
#include "core/aligned_buffer.h"

namespace deltacast::rdma {

class RdmaListener : public Listener {
 public:
  static Result<std::unique_ptr<RdmaListener>> create(const std::vector<Endpoint>& endpoints, SliceSink* sink,
                                                      const ListenOptions& options, const RdmaConfig& config);
  ~RdmaListener() override;

  std::vector<Endpoint> endpoints() const override { return endpoints_; }
  void close() override;

 private:
  struct Device {
    ibv_comp_channel* completions = nullptr;  // shared by the CQs of the device's connections
  };
  struct Connection;

  RdmaListener(SliceSink* sink, ListenOptions options, RdmaConfig config);
  void run();
  void on_cm_event(rdma_cm_event* event);
  void accept(rdma_cm_id* id, const void* private_data, size_t length);
  Result<Device*> device_for(ibv_context* context);
  // Serves up to a few of the connection's completions; true when there were any.
  bool serve_some(Connection* c);
  Status serve_slot(Connection& c, uint32_t imm);
  void drop(Connection* c, const Status& why);
  void refuse(rdma_cm_id* id, const std::string& peer, const Status& why);
  void note_drop(const std::string& peer, const Status& why);

  SliceSink* sink_;
  ListenOptions options_;
  RdmaConfig config_;
  std::vector<Endpoint> endpoints_;
  rdma_event_channel* events_ = nullptr;
  std::vector<rdma_cm_id*> listen_ids_;
  int wake_fd_ = -1;
  std::atomic<bool> closed_{false};
  // Owned by the serving thread.
  std::map<ibv_context*, Device> devices_;
  std::map<Connection*, std::unique_ptr<Connection>> connections_;
  std::map<rdma_cm_id*, Connection*> by_id_;
  std::thread thread_;
};

}  // namespace deltacast::rdma
