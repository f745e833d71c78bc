// Forwarding of one node's share of a broadcast: for the transfer in
// progress, every slice that is in place here (received, or all of them at
// the producer) goes to this node's children for that slice's stripe, as soon
// as it is here (cut-through). Children change when the plan does (a node died,
// a new one joined); a new child is sent what this node holds minus what the
// child reported holding. One sprayer per child, kept across transfers so
// that its connections and rate estimates stay warm. A sprayer belongs to the
// child's data endpoints, not only its id: ids come from the producer, and a
// new producer hands them out afresh. Channels come from the Transport the
// relay is given, whatever backend it is.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include "broadcast/engine/plan/stripe_children.h"
#include "broadcast/transport/sprayer.h"
#include "broadcast/transport/transfer.h"
#include "broadcast/transport/transport.h"

namespace deltacast {

struct RelayOptions {
  std::shared_ptr<Transport> transport;  // opens the channels to children
  std::vector<Endpoint> local_rails;     // this node's address per rail (the local end of each rail)
  ChannelOptions channel;
  SprayOptions spray;
  // A child silent this long while it owes slices, and not heard on any rail (heartbeats, where
  // the backend has them) for this long either, is reported unreachable (moved to the tails);
  // a slow or congested child still acknowledges something in that time. Plus twice what its
  // rails hold in flight needs at their measured rates and round trips (Sprayer::expected_silence;
  // twice: a WAN link shared with another flow), so that a far, slow link is not taken for a
  // cut one; on a LAN that adds milliseconds.
  Millis unreachable_after{500};
  // Sooner where the backend tells when the child was last heard (its heartbeats come every
  // 50 ms on TCP): a child that owes slices and was heard on no rail, acknowledgements and
  // heartbeats alike, for this long is reported without waiting for the allowance above. (A TCP
  // channel gives up on a connection silent for 400 ms.)
  Millis unheard_after{300};
  // A member watched on a standby link (watch) heard on no rail for this long is unheard: the
  // link between the two sites is likely cut. Shorter than unheard_after, so the round knows it
  // before it moves a site cut off at the same moment (three TCP heartbeats missed). A report
  // steers that move's detour; a new plan waits for it to last (RoundOptions::unheard_to_plan).
  Millis watch_unheard_after{150};
};

class Relay {
 public:
  explicit Relay(RelayOptions options) : options_(std::move(options)) {}
  ~Relay();

  // Starts forwarding `shape` (its bytes at `data`). `source_checksums` (one per slice) given:
  // every slice is here already (the producer) with these checksums; nullptr: slices arrive one
  // by one (on_slice), each with the checksum it was verified against.
  // `leaf_tags`: the bytes' leaf tags where the producer made them (authenticated), sent with the
  // slices in place of each rail tagging the payload.
  void begin(const TransferShape& shape, const uint8_t* data, uint32_t stripes,
             const std::vector<uint64_t>* source_checksums, std::shared_ptr<const trust::LeafTags> leaf_tags = nullptr);
  // children[s]: who gets stripe s from this node (none: nobody); `have[id]`: slices that child holds;
  // `paths[id]`: how the round measured the way to that child (a WAN into its site), what a new
  // sprayer to it starts from instead of what this node's other children measured.
  Status set_children(const StripeChildren& children, const std::map<uint32_t, PeerEndpoints>& directory,
                      const std::map<uint32_t, std::vector<bool>>& have,
                      const std::map<uint32_t, PathEstimate>& paths = {});
  // A slice of the current transfer is in place here, with the checksum it arrived with.
  // `leaf_tags`: the ones it arrived with (leaf-tagged on an authenticated rail), forwarded with it.
  void on_slice(uint64_t transfer, uint32_t slice, uint64_t checksum,
                std::shared_ptr<const trust::LeafTags> leaf_tags = nullptr);
  // Stops forwarding the current transfer (its data may go away after this returns).
  void end();
  // Drops the sprayer (and connections) to a peer that left.
  void forget_peer(uint32_t id);
  // Standby links between sites (standby_links.h): a sprayer to each of `peers` (where each takes
  // data) that forwards nothing unless the peer becomes a child; the receiver's heartbeats say
  // whether it is heard. Replaces the last set: a peer no longer named, and no child of the
  // transfer under way, has its sprayer (and connections) dropped.
  Status watch(const std::map<uint32_t, PeerEndpoints>& peers);
  // The watched peers heard on no rail for RelayOptions::watch_unheard_after and `longer` more,
  // sorted (none on a backend without heartbeats).
  std::vector<uint32_t> unheard_watched(Millis longer = Millis(0)) const;
  // Every watched peer, and whether it is heard (not unheard as above; heard on a backend without
  // heartbeats).
  std::map<uint32_t, bool> watched() const;

  // With sprayers that run no scheduler thread (a simulation, RelayOptions::spray): one round of
  // each sprayer's scheduling; returns when to call again (TimePoint::max(): nothing open).
  TimePoint poll();

  std::vector<RailTelemetry> telemetry(uint32_t child) const;
  // Every child's rails (by member id), current or past, whose sprayer is still kept.
  std::map<uint32_t, std::vector<RailTelemetry>> telemetry_by_child() const;
  // Children of the current transfer that acknowledged nothing for RelayOptions::unreachable_after
  // while they owed slices (a child that hangs, or every link to it cut); none while no slice has
  // reached this relay for half as long (then the fault is likely its own).
  std::vector<uint32_t> unreachable_children() const;
  // Sooner, and only a suspicion: the children of the current transfer that owe slices and were
  // heard on no rail (heartbeats included) for RelayOptions::watch_unheard_after, as a standby
  // link is unheard (none on a backend without heartbeats). A round moves such a child only where
  // the standby links say the link between its site and this relay's is cut.
  std::vector<uint32_t> unheard_children() const;
  // How the link to each current child did in this transfer (see LinkSample).
  std::map<uint32_t, LinkSample> child_links() const;
  // How the links to the children of `transfer` that have every slice they get from here did
  // (whole samples), while it is forwarded or after it ended; none for another transfer, and none
  // for children cut off by its end.
  std::map<uint32_t, LinkSample> finished_links(uint64_t transfer) const;

 private:
  // The sprayer to `id` (made if new); `child`: it carries a transfer to it (else a standby link).
  Result<Sprayer*> sender_for(uint32_t id, const PeerEndpoints& endpoints, const PathEstimate* path, bool child);
  // What a sprayer starts a child's transfer from: this node's measured rate, and `path` (a WAN's).
  void prime(Sprayer& sprayer, uint32_t id, const PathEstimate* path) const;
  TimePoint now() const;  // the sprayers' clock
  double measured_rate() const;  // what a new child's rails are taken at before they are measured
  // `fed`, by stripe: whether the child takes it from here.
  void open_child(Sprayer& sender, const std::vector<bool>& fed, const std::vector<bool>* have);
  // The stripes a child whose transfer is open here takes from here changed (by stripe: whether
  // it did before, and does now).
  void extend_child(Sprayer& sender, const std::vector<bool>& fed_before, const std::vector<bool>& fed_now,
                    const std::vector<bool>* have);
  void offer(Sprayer& sender, uint32_t slice);
  // How long each watched peer has been heard on no rail (nothing: the backend cannot tell).
  std::map<uint32_t, std::optional<Millis>> watched_silence() const;

  RelayOptions options_;
  mutable std::mutex mu_;
  struct Sender {
    PeerEndpoints endpoints;
    std::unique_ptr<Sprayer> sprayer;
    bool primed = false;  // started as a child's (prime); a standby link's is not until it becomes one
  };
  std::map<uint32_t, Sender> senders_;
  std::set<uint32_t> watched_;  // peers on standby links (watch)
  std::vector<std::unique_ptr<Sprayer>> retired_;  // replaced in set_children, destroyed once the lock is released
  bool active_ = false;
  TransferShape shape_;
  const uint8_t* data_ = nullptr;
  uint32_t stripes_ = 1;
  std::vector<uint8_t> present_;
  size_t present_count_ = 0;
  std::vector<uint64_t> checksums_;  // per present slice, as it arrived (forwarded as is)
  std::vector<std::shared_ptr<const trust::LeafTags>> leaf_tags_;  // per present slice, forwarded as is (null: none)
  StripeChildren children_;         // per stripe
  // Whether `id` gets `stripe` from here.
  bool feeds(uint32_t id, uint32_t stripe) const;
  // Every child of the current transfer once, in the order first named.
  std::vector<uint32_t> child_ids() const;
  // Whether no slice reached this relay for a while though some are missing (under mu_).
  bool cut_off_itself() const;
  // The current transfer's children whose sprayers carry it, each once (under mu_).
  std::vector<std::pair<uint32_t, const Sprayer*>> sprayers_of_children() const;
  TimePoint last_arrival_{};        // the last slice in place here (or the transfer's start)
  std::map<uint32_t, LinkSample> ended_links_;  // finished children's links as the transfer ended
  // The links to the current transfer's children (`finished_only`: those whose sprayers have every
  // slice delivered).
  std::map<uint32_t, LinkSample> links_of_children(bool finished_only) const;  // mu_ held
};

}  // namespace deltacast
