// Every message of the control plane, one struct each, with its JSON form
// (nlohmann to_json/from_json) and the checks a message from an untrusted
// peer must pass. docs/control-protocol.md describes the exchange; frames
// are in control_frame.h.
//
// A message is a JSON object with a "type" and exactly the fields of its
// struct: a missing field, a field of the wrong type or out of bounds, and a
// field the struct does not have are all refused with a reason that names
// the message and the field (the peer is then dropped; nobody else notices).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "broadcast/engine/group/group_view.h"
#include "broadcast/engine/plan/planner.h"
#include "broadcast/transport/rail.h"
#include "broadcast/transport/rail_estimator.h"
#include "broadcast/transport/slice_table.h"
#include "core/held_ranges.h"
#include "core/manifest.h"
#include "core/status.h"

namespace deltacast {

using Json = nlohmann::json;

namespace control {

// Bumped whenever a message changes; a join with another protocol is refused.
// 3: slice checksums (and so digests) are content hashes; 4: a join names the consumer's node;
// 5: a join says what a resharded consumer holds; 6: a sharded group's coordinator (register, find_group);
// 8: no token in join, register and find_group (every connection proves the group's secret in its
// handshake instead, and every frame is sealed); 9: a stripe's children may be a list (trees);
// 10: a join names the consumer's site; 11: forwarding may carry WAN paths, and a relay reports
// links to children that were still receiving when it staged (forwarded); 12: standby links
// (forwarding.watch, unheard); 13: early unreachable reports (Unreachable::early).
inline constexpr uint32_t kProtocolVersion = 13;
inline constexpr size_t kMaxRails = 16;        // data endpoints per member
inline constexpr size_t kMaxMembers = 4096;    // ids in one plan
inline constexpr uint32_t kMaxStripes = 64;
// A member's children of one stripe, and over all stripes: bounded by the plan only. A tree's
// re-plans give a dead member's children to its parent, so a fan-out grows past the shape's
// width with deaths; a limit below the plan's would make a consumer refuse its own re-plan.
inline constexpr size_t kMaxFanout = kMaxMembers;
inline constexpr size_t kMaxChildren = kMaxMembers;
inline constexpr size_t kMaxTextBytes = 4096;  // names, reasons, transport names
inline constexpr uint32_t kMaxWorld = 1u << 16;  // trainer ranks in one sharded group
inline constexpr size_t kMaxPiecesPerTensor = 256;  // pieces fused into one local tensor

// A message that breaks these rules; decode() turns it into a kCorrupt Status.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One member's part of a version's plan: whom it forwards each stripe to, and where they take
// data. Each member is sent only its own part, never the trees: the message is the size of its
// children whatever the number of members (a whole plan to every member is quadratic in them).
struct Forwarding {
  StripeChildren children;                      // per stripe: the members it goes on to (none: nobody)
  std::map<uint32_t, PeerEndpoints> directory;  // where each child named above takes data
  // Per child in another site: the WAN path into its site as the round measured it (wan_paths.h;
  // optional, absent in the JSON when empty).
  std::map<uint32_t, PathEstimate> paths;
  // The members of other sites it keeps a standby link to, and where they take data: it forwards
  // them nothing, and reports those it no longer hears (Unheard; standby_links.h; optional, absent
  // in the JSON when empty).
  std::map<uint32_t, PeerEndpoints> watch;
  uint32_t stripes() const { return static_cast<uint32_t>(children.size()); }
};
// `id`'s part of `plan`, with its children's endpoints from `directory` and the paths into those
// that `paths` has.
Forwarding forwarding_of(const Plan& plan, uint32_t id, const std::map<uint32_t, PeerEndpoints>& directory,
                         const std::map<uint32_t, PathEstimate>& paths = {});

// consumer -> coordinator, the first message on a control connection.
struct Join {
  uint32_t protocol = kProtocolVersion;
  std::string name;
  std::string node;       // the host it runs on: members of one node take each version over its rails once
  std::string site;       // the site it runs in (empty: the producer's): each version enters a site once
  std::string transport;  // the data transport it receives with ("tcp", "rdma", ...)
  uint64_t manifest_hash = 0;
  std::vector<TensorSpec> manifest;  // to name the first difference when the hashes differ
  uint64_t version = 0;              // newest version it holds (0: none)
  uint64_t epoch = 0;                // the producer instance that version came from
  PeerEndpoints rails;               // where it takes data, one endpoint per rail
  // It commits when something else says so (a member of a sharded group, which commits a version
  // once every rank's part of it is here): a round counts it done once it holds the version verified.
  bool defers_commit = false;
  // What it holds of the producer's tensors (a resharded consumer: its layout composed with the
  // producer's pieces), as [tensor, begin, end) ranges; none: everything. It is sent only the
  // chunks it holds elements of.
  std::optional<std::vector<HeldRange>> held;
};
// coordinator -> consumer: admitted, with its id for this producer instance.
struct Welcome {
  uint32_t id = 0;
  uint64_t epoch = 0;
  uint64_t version = 0;  // the version the coordinator counts it as holding
};
// coordinator -> consumer, then the connection closes.
struct Reject {
  StatusCode code = StatusCode::kFailedPrecondition;
  std::string reason;
};
// both ways, while nothing else is said.
struct Heartbeat {};
// coordinator -> consumer: a version to stage, and the plan it travels by.
struct Announce {
  uint64_t version = 0;
  uint64_t base = 0;  // 0 with full
  bool full = false;
  uint64_t transfer = 0;
  uint64_t bytes = 0;
  uint32_t slice_bytes = 0;
  uint64_t digest = 0;  // the transfer's digest (transport/transfer.h)
  Forwarding forwarding;  // the receiver's part of the plan
  // The bytes are the model image (sparse/model_image.h); false: buckets (version_blob.h), a
  // delta or a full version cut down to what the receiver holds. Only a full version is an image.
  bool image = false;
};
// coordinator -> consumer: its new part of the plan mid-version (a member died or failed), and
// what each of its children holds already, so that a new parent sends only the rest.
struct Replan {
  uint64_t transfer = 0;
  Forwarding forwarding;
  std::map<uint32_t, std::string> have;  // per child: slice bitmaps (encode_bitmap)
};
// consumer -> coordinator: slices held of the transfer in flight.
struct Progress {
  uint64_t transfer = 0;
  uint32_t arrived = 0;
  double seconds = 0;
  std::string have;
};
// consumer -> coordinator: every slice in place and the whole version verified; how the
// links to its children did (samples for the rate book).
struct Staged {
  uint64_t version = 0;
  double receive_seconds = 0;
  double verify_seconds = 0;
  std::map<uint32_t, LinkSample> links;
};
// consumer -> coordinator: applied.
struct Committed {
  uint64_t version = 0;
  double apply_seconds = 0;
};
// consumer -> coordinator: could not stage or apply this version.
struct Failed {
  uint64_t version = 0;
  std::string reason;
};
// consumer -> coordinator: a child it forwards the transfer in flight to has acknowledged nothing
// for a while though it owes slices (Relay::unreachable_children), so the coordinator can route
// around it before that child's control link times out (a hung host keeps its connections open
// and says nothing for the control link's dead_after).
// `early`: only heard on no rail for a little while (Relay::unheard_children), a suspicion the
// coordinator acts on where the standby links say the link into the child's site is cut.
struct Unreachable {
  uint64_t transfer = 0;
  uint32_t member = 0;
  bool early = false;
};
// consumer -> coordinator: the members it keeps a standby link to (Forwarding::watch) heard on no
// rail for a while, all of them, each time that set changes (none: every one is heard again). The
// links between its site and theirs are likely cut: a detour avoids them.
struct Unheard {
  std::vector<uint32_t> members;
};
// consumer -> coordinator: the children this member still forwarded the version to when it staged
// have it all now: how those links did, whole (Staged's samples of them stopped where the member
// had the version; across a WAN its children then held little of it).
struct Forwarded {
  uint64_t version = 0;
  std::map<uint32_t, LinkSample> links;
};
// coordinator -> consumer: the version finished everywhere; its staging can go.
struct Done {
  uint64_t version = 0;
};
// coordinator -> consumer: hash your tensors.
struct Check {
  uint64_t version = 0;
};
// consumer -> coordinator: the version it holds and the hash of its tensors.
struct Checked {
  uint64_t version = 0;
  uint64_t held = 0;
  uint64_t model_hash = 0;
};


// The group coordinator of a sharded trainer (group_coordinator.h) speaks on connections of one
// request and its answer.
// trainer rank -> group coordinator: registers the rank (again: a restarted rank, a restarted
// coordinator); answered with `registered` or `reject`.
struct Register {
  uint32_t protocol = kProtocolVersion;
  uint32_t world = 0;                // ranks in the group
  std::vector<TensorSpec> logical;   // the group's tensors as the rank knows them
  RankEntry rank;                    // its pieces and its producer's control address(es)
};
// group coordinator -> trainer rank: registered; how many of the world are.
struct Registered {
  uint32_t registered = 0;
  uint32_t world = 0;
};
// rollout process -> group coordinator: the group, please; answered with `group`, or `reject`
// (UNAVAILABLE while ranks are missing: ask again).
struct FindGroup {
  uint32_t protocol = kProtocolVersion;
};
// group coordinator -> rollout process: the formed group.
struct Group {
  GroupView view;
};

using Message = std::variant<Join, Welcome, Reject, Heartbeat, Announce, Replan, Progress, Staged, Committed, Failed,
                             Done, Check, Checked, Register, Registered, FindGroup, Group, Unreachable, Forwarded,
                             Unheard>;

// For std::visit over a Message with one lambda per type handled and a generic one for the rest.
template <typename... Handlers>
struct Overloaded : Handlers... {
  using Handlers::operator()...;
};
template <typename... Handlers>
Overloaded(Handlers...) -> Overloaded<Handlers...>;

// The "type" each message travels under.
std::string_view type_name(const Message& message);

// The JSON object for a message, with its type.
Json encode(const Message& message);
std::string encode_text(const Message& message);
// An untrusted JSON object (or text) back into a message; every rule above is checked.
Result<Message> decode(const Json& json);
Result<Message> decode_text(std::string_view text);

// Slice-presence bitmaps as hex text (bit i of byte i / 8).
std::string encode_bitmap(const std::vector<uint8_t>& present);
Result<std::vector<bool>> decode_bitmap(const std::string& hex, size_t bits);

// The JSON form of each struct (the "type" is added by encode()). from_json throws
// ProtocolError naming the field.
void to_json(Json& j, const Forwarding& m);
void from_json(const Json& j, Forwarding& m);
void to_json(Json& j, const Join& m);
void from_json(const Json& j, Join& m);
void to_json(Json& j, const Welcome& m);
void from_json(const Json& j, Welcome& m);
void to_json(Json& j, const Reject& m);
void from_json(const Json& j, Reject& m);
void to_json(Json& j, const Heartbeat& m);
void from_json(const Json& j, Heartbeat& m);
void to_json(Json& j, const Announce& m);
void from_json(const Json& j, Announce& m);
void to_json(Json& j, const Replan& m);
void from_json(const Json& j, Replan& m);
void to_json(Json& j, const Progress& m);
void from_json(const Json& j, Progress& m);
void to_json(Json& j, const Staged& m);
void from_json(const Json& j, Staged& m);
void to_json(Json& j, const Forwarded& m);
void from_json(const Json& j, Forwarded& m);
void to_json(Json& j, const Committed& m);
void from_json(const Json& j, Committed& m);
void to_json(Json& j, const Failed& m);
void from_json(const Json& j, Failed& m);
void to_json(Json& j, const Done& m);
void from_json(const Json& j, Done& m);
void to_json(Json& j, const Check& m);
void from_json(const Json& j, Check& m);
void to_json(Json& j, const Checked& m);
void from_json(const Json& j, Checked& m);
void to_json(Json& j, const Unreachable& m);
void from_json(const Json& j, Unreachable& m);
void to_json(Json& j, const Unheard& m);
void from_json(const Json& j, Unheard& m);
void to_json(Json& j, const Register& m);
void from_json(const Json& j, Register& m);
void to_json(Json& j, const Registered& m);
void from_json(const Json& j, Registered& m);
void to_json(Json& j, const FindGroup& m);
void from_json(const Json& j, FindGroup& m);
void to_json(Json& j, const Group& m);
void from_json(const Json& j, Group& m);

}  // namespace control
}  // namespace deltacast
