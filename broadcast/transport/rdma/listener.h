// The RDMA backend's receiver end: listens with the connection manager on one
// or more addresses (one per rail) and serves every connection from one
// thread. A connection request must carry the token; an accepted connection
// gets a protection domain of its own (a memory key works on every queue pair
// of its domain: in a shared one, a peer that learned another's key could
// write where that one was granted). Each offer is checked like any untrusted
// frame; its slice's place in staging, and nothing else, is registered for
// the peer to write into, and deregistered as soon as the write arrives,
// before the checksum is checked where the bytes landed and the answer sent.
// Anything malformed drops that connection alone, with the reason logged.
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
  // The sender's first message: its proof of the secret (a wrong one drops the connection).
  Status serve_proof(Connection& c, const uint8_t* message, uint32_t length);
  Status serve_offer(Connection& c, const uint8_t* message, uint32_t length);
  Status serve_write(Connection& c, uint32_t imm, uint32_t length);
  Status reply(Connection& c, const Reply& answer);
  // Connections one of whose grants a newer copy of its slice superseded: dropped, as over TCP.
  void drop_superseded();
  // Connections whose sender has not proven the secret within handshake_timeout: dropped.
  void drop_unproven();
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
  std::atomic<bool> superseded_{false};  // some grant was cancelled: look for it
  // Owned by the serving thread.
  std::map<ibv_context*, Device> devices_;
  std::map<Connection*, std::unique_ptr<Connection>> connections_;
  std::map<rdma_cm_id*, Connection*> by_id_;
  std::thread thread_;
};

}  // namespace deltacast::rdma
