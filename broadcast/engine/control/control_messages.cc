#include "broadcast/engine/control/control_messages.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <initializer_list>
#include <set>

#include <fmt/format.h>

#include "broadcast/engine/control/control_frame.h"

namespace deltacast::control {

namespace {

[[noreturn]] void refuse(const std::string& what) { throw ProtocolError(what); }

// The fields of one untrusted message (or nested object): it must be an object holding
// exactly `required` (plus "type" at the top level), and every read names where it failed.
class Fields {
 public:
  Fields(const Json& j, std::string where, std::initializer_list<const char*> required)
      : j_(j), where_(std::move(where)) {
    if (!j.is_object()) refuse(fmt::format("{} is not an object", where_));
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "type") continue;
      if (std::none_of(required.begin(), required.end(), [&](const char* k) { return it.key() == k; })) {
        refuse(fmt::format("{} has an unknown field '{}'", where_, it.key().substr(0, 64)));
      }
    }
  }
  const Json& at(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end()) refuse(fmt::format("{} without '{}'", where_, key));
    return *it;
  }
  std::string where(const char* key) const { return fmt::format("{}.{}", where_, key); }

  uint64_t u64(const char* key) const;
  uint32_t u32(const char* key) const;
  double number(const char* key) const;  // finite, non-negative
  bool boolean(const char* key) const;
  std::string text(const char* key, size_t max_bytes = kMaxTextBytes) const;

 private:
  const Json& j_;
  std::string where_;
};

uint64_t as_u64(const Json& v, const std::string& where) {
  if (!v.is_number_unsigned()) refuse(fmt::format("{} is not a non-negative integer", where));
  return v.get<uint64_t>();
}

uint32_t as_u32(const Json& v, const std::string& where) {
  const uint64_t x = as_u64(v, where);
  if (x > UINT32_MAX) refuse(fmt::format("{} is out of range ({})", where, x));
  return static_cast<uint32_t>(x);
}

uint32_t as_id(const Json& v, const std::string& where) {
  const uint32_t id = as_u32(v, where);
  if (id == 0) refuse(fmt::format("{} is 0, which names no member", where));
  return id;
}

// Member ids as object keys: decimal text, no sign, no leading zeros.
uint32_t id_key(const std::string& key, const std::string& where) {
  uint32_t id = 0;
  const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
  if (ec != std::errc() || end != key.data() + key.size() || key.empty() || key[0] == '0' || key.size() > 10) {
    refuse(fmt::format("{} has a key '{}' that is not a member id", where, key.substr(0, 16)));
  }
  return id;
}

double as_number(const Json& v, const std::string& where) {
  if (!v.is_number()) refuse(fmt::format("{} is not a number", where));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < 0) refuse(fmt::format("{} is not a finite non-negative number", where));
  return x;
}

std::string as_text(const Json& v, const std::string& where, size_t max_bytes) {
  if (!v.is_string()) refuse(fmt::format("{} is not a string", where));
  const auto& s = v.get_ref<const std::string&>();
  if (s.size() > max_bytes) refuse(fmt::format("{} is {} bytes long (at most {})", where, s.size(), max_bytes));
  return s;
}

const Json& as_array(const Json& v, const std::string& where, size_t max_items) {
  if (!v.is_array()) refuse(fmt::format("{} is not a list", where));
  if (v.size() > max_items) refuse(fmt::format("{} has {} entries (at most {})", where, v.size(), max_items));
  return v;
}

const Json& as_object(const Json& v, const std::string& where, size_t max_items) {
  if (!v.is_object()) refuse(fmt::format("{} is not an object", where));
  if (v.size() > max_items) refuse(fmt::format("{} has {} entries (at most {})", where, v.size(), max_items));
  return v;
}

uint64_t Fields::u64(const char* key) const { return as_u64(at(key), where(key)); }
uint32_t Fields::u32(const char* key) const { return as_u32(at(key), where(key)); }
double Fields::number(const char* key) const { return as_number(at(key), where(key)); }
bool Fields::boolean(const char* key) const {
  const Json& v = at(key);
  if (!v.is_boolean()) refuse(fmt::format("{} is not true or false", where(key)));
  return v.get<bool>();
}
std::string Fields::text(const char* key, size_t max_bytes) const { return as_text(at(key), where(key), max_bytes); }

Json endpoints_json(const PeerEndpoints& endpoints) {
  Json list = Json::array();
  for (const auto& e : endpoints) list.push_back(e.to_string());
  return list;
}

PeerEndpoints as_endpoints(const Json& v, const std::string& where) {
  as_array(v, where, kMaxRails);
  if (v.empty()) refuse(fmt::format("{} lists no data endpoint", where));
  PeerEndpoints out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", where, i);
    auto e = parse_endpoint(as_text(v[i], at, 64));
    if (!e.ok()) refuse(fmt::format("{}: {}", at, e.status().message()));
    if (e->port == 0) refuse(fmt::format("{} has no port", at));
    out.push_back(*e);
  }
  return out;
}

std::string as_bitmap(const Json& v, const std::string& where) {
  std::string hex = as_text(v, where, kMaxControlMessageBytes);
  if (hex.size() % 2 != 0 ||
      !std::all_of(hex.begin(), hex.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); })) {
    refuse(fmt::format("{} is not a bitmap in lower-case hex", where));
  }
  return hex;
}

Json manifest_json(const std::vector<TensorSpec>& tensors) {
  Json list = Json::array();
  for (const auto& t : tensors) list.push_back({{"name", t.name}, {"dtype", std::string(dtype_name(t.dtype))}, {"shape", t.shape}});
  return list;
}

std::vector<TensorSpec> as_manifest(const Json& v, const std::string& where) {
  as_array(v, where, Manifest::kMaxTensors);
  std::vector<TensorSpec> specs;
  specs.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const Fields f(v[i], fmt::format("{}[{}]", where, i), {"name", "dtype", "shape"});
    TensorSpec spec;
    spec.name = f.text("name", Manifest::kMaxNameBytes);
    auto dtype = parse_dtype(f.text("dtype", 16));
    if (!dtype.ok()) refuse(fmt::format("{}: {}", f.where("dtype"), dtype.status().message()));
    spec.dtype = *dtype;
    const Json& shape = as_array(f.at("shape"), f.where("shape"), Manifest::kMaxRank);
    for (size_t d = 0; d < shape.size(); ++d) spec.shape.push_back(as_u64(shape[d], fmt::format("{}[{}]", f.where("shape"), d)));
    specs.push_back(std::move(spec));
  }
  return specs;
}

Json links_json(const std::map<uint32_t, LinkSample>& links) {
  Json out = Json::object();
  for (const auto& [id, s] : links) {
    out[std::to_string(id)] = {{"bytes", s.bytes},
                               {"slices", s.slices},
                               {"busy_seconds", s.busy_seconds},
                               {"backlogged_seconds", s.backlogged_seconds},
                               {"rail_rate", s.rail_rate},
                               {"round_trip", s.round_trip}};
  }
  return out;
}

std::map<uint32_t, LinkSample> as_links(const Json& v, const std::string& where) {
  as_object(v, where, kMaxMembers);
  std::map<uint32_t, LinkSample> links;
  for (auto it = v.begin(); it != v.end(); ++it) {
    const uint32_t id = id_key(it.key(), where);
    const Fields f(it.value(), fmt::format("{}.{}", where, it.key()), {"bytes", "slices", "busy_seconds", "backlogged_seconds", "rail_rate",
                                                                        "round_trip"});
    LinkSample s;
    s.bytes = f.u64("bytes");
    s.slices = f.u32("slices");
    s.busy_seconds = f.number("busy_seconds");
    s.backlogged_seconds = f.number("backlogged_seconds");
    s.rail_rate = f.number("rail_rate");
    s.round_trip = f.number("round_trip");
    if (s.backlogged_seconds > s.busy_seconds * 1.001 + 1e-6) {
      refuse(fmt::format("{}.{}: backlogged longer than busy", where, it.key()));
    }
    links[id] = s;
  }
  return links;
}

// Status codes a refusal may carry (the ones a consumer reacts to; UNAVAILABLE: ask again later).
constexpr StatusCode kRejectCodes[] = {StatusCode::kPermissionDenied, StatusCode::kMismatch,
                                       StatusCode::kFailedPrecondition, StatusCode::kResourceExhausted,
                                       StatusCode::kInvalidArgument, StatusCode::kCorrupt,
                                       StatusCode::kUnavailable};

// A rank's pieces: [{name, dim, pieces: [{tensor, flat, dim, begin, end}]}]. Whether they make
// sense against the group's tensors is the group directory's question (Layout::resolve).
Json pieces_json(const std::vector<LocalTensorSpec>& locals) {
  Json list = Json::array();
  for (const LocalTensorSpec& t : locals) {
    Json pieces = Json::array();
    for (const PieceSpec& p : t.pieces) {
      pieces.push_back({{"tensor", p.tensor}, {"flat", p.flat}, {"dim", p.dim}, {"begin", p.begin}, {"end", p.end}});
    }
    list.push_back({{"name", t.name}, {"dim", t.concat_dim}, {"pieces", std::move(pieces)}});
  }
  return list;
}

std::vector<LocalTensorSpec> as_pieces(const Json& v, const std::string& where) {
  as_array(v, where, Manifest::kMaxTensors);
  std::vector<LocalTensorSpec> locals;
  locals.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const Fields f(v[i], fmt::format("{}[{}]", where, i), {"name", "dim", "pieces"});
    LocalTensorSpec local;
    local.name = f.text("name", Manifest::kMaxNameBytes);
    local.concat_dim = f.u32("dim");
    const Json& pieces = as_array(f.at("pieces"), f.where("pieces"), kMaxPiecesPerTensor);
    if (pieces.empty()) refuse(fmt::format("{} lists no piece", f.where("pieces")));
    for (size_t k = 0; k < pieces.size(); ++k) {
      const Fields p(pieces[k], fmt::format("{}[{}]", f.where("pieces"), k), {"tensor", "flat", "dim", "begin", "end"});
      local.pieces.push_back(
          PieceSpec{p.text("tensor", Manifest::kMaxNameBytes), p.boolean("flat"), p.u32("dim"), p.u64("begin"), p.u64("end")});
    }
    locals.push_back(std::move(local));
  }
  return locals;
}

Json rank_json(const RankEntry& r) {
  return {{"rank", r.rank}, {"pieces", pieces_json(r.pieces)}, {"addresses", endpoints_json(r.addresses)}};
}

RankEntry as_rank(const Json& v, const std::string& where) {
  const Fields f(v, where, {"rank", "pieces", "addresses"});
  RankEntry r;
  r.rank = f.u32("rank");
  if (r.rank >= kMaxWorld) refuse(fmt::format("{} is rank {} (ranks are below {})", where, r.rank, kMaxWorld));
  r.pieces = as_pieces(f.at("pieces"), f.where("pieces"));
  r.addresses = as_endpoints(f.at("addresses"), f.where("addresses"));
  return r;
}

uint32_t as_world(const Fields& f) {
  const uint32_t world = f.u32("world");
  if (world == 0 || world > kMaxWorld) refuse(fmt::format("{} is {} (1 to {})", f.where("world"), world, kMaxWorld));
  return world;
}

template <typename T>
Message read_as(const Json& j) {
  T m;
  from_json(j, m);
  return m;
}

}  // namespace

// ---- plan

Forwarding forwarding_of(const Plan& plan, uint32_t id, const std::map<uint32_t, PeerEndpoints>& directory,
                         const std::map<uint32_t, PathEstimate>& paths) {
  Forwarding out;
  out.children = plan.children(id);
  for (const auto& stripe : out.children) {
    for (uint32_t child : stripe) {
      const auto it = directory.find(child);
      if (it != directory.end()) out.directory[child] = it->second;
      const auto path = paths.find(child);
      if (path != paths.end() && path->second.known()) out.paths[child] = path->second;
    }
  }
  return out;
}

void to_json(Json& j, const Forwarding& m) {
  Json directory = Json::object();
  for (const auto& [id, rails] : m.directory) directory[std::to_string(id)] = endpoints_json(rails);
  // A stripe with one child at most is a number (0: none), as chains have always been sent; one
  // that fans out is a list.
  Json children = Json::array();
  for (const auto& stripe : m.children) {
    if (stripe.size() <= 1) {
      children.push_back(stripe.empty() ? 0u : stripe.front());
    } else {
      children.push_back(stripe);
    }
  }
  j = {{"children", children}, {"directory", directory}};
  if (!m.paths.empty()) {
    Json paths = Json::object();
    for (const auto& [id, path] : m.paths) paths[std::to_string(id)] = {path.bytes_per_second, path.round_trip};
    j["paths"] = paths;
  }
  if (!m.watch.empty()) {
    Json watch = Json::object();
    for (const auto& [id, rails] : m.watch) watch[std::to_string(id)] = endpoints_json(rails);
    j["watch"] = watch;
  }
}

void from_json(const Json& j, Forwarding& m) {
  const Fields f(j, "forwarding", {"children", "directory", "paths", "watch"});
  const Json& children = as_array(f.at("children"), f.where("children"), kMaxStripes);
  if (children.empty()) refuse("forwarding has no stripes");
  const Json& directory = as_object(f.at("directory"), f.where("directory"), kMaxChildren);
  m = Forwarding();
  for (auto it = directory.begin(); it != directory.end(); ++it) {
    const std::string at = fmt::format("forwarding.directory.{}", it.key());
    m.directory[id_key(it.key(), "forwarding.directory")] = as_endpoints(it.value(), at);
  }
  std::set<uint32_t> named;
  for (size_t s = 0; s < children.size(); ++s) {
    const std::string at = fmt::format("forwarding.children[{}]", s);
    std::vector<uint32_t> stripe;
    if (children[s].is_array()) {
      const Json& list = as_array(children[s], at, kMaxFanout);
      for (size_t c = 0; c < list.size(); ++c) {
        const uint32_t child = as_u32(list[c], fmt::format("{}[{}]", at, c));
        if (child == 0) refuse(fmt::format("{}[{}] is 0 (no member)", at, c));
        stripe.push_back(child);
      }
    } else {
      const uint32_t child = as_u32(children[s], at);  // 0: the stripe ends here
      if (child != 0) stripe.push_back(child);
    }
    for (uint32_t child : stripe) {
      if (!m.directory.count(child)) refuse(fmt::format("{} names member {}, which the directory does not", at, child));
      if (std::count(stripe.begin(), stripe.end(), child) > 1) {
        refuse(fmt::format("{} names member {} twice", at, child));
      }
      named.insert(child);
    }
    m.children.push_back(std::move(stripe));
  }
  for (const auto& [id, rails] : m.directory) {
    if (!named.count(id)) refuse(fmt::format("forwarding.directory lists member {}, which is no child", id));
  }
  if (j.contains("watch")) {
    const Json& watch = as_object(f.at("watch"), f.where("watch"), kMaxChildren);
    for (auto it = watch.begin(); it != watch.end(); ++it) {
      const std::string at = fmt::format("forwarding.watch.{}", it.key().substr(0, 64));
      m.watch[id_key(it.key(), "forwarding.watch")] = as_endpoints(it.value(), at);
    }
  }
  if (!j.contains("paths")) return;
  const Json& paths = as_object(f.at("paths"), f.where("paths"), kMaxChildren);
  for (auto it = paths.begin(); it != paths.end(); ++it) {
    const std::string at = fmt::format("forwarding.paths.{}", it.key().substr(0, 64));
    const uint32_t id = id_key(it.key(), "forwarding.paths");
    if (!named.count(id)) refuse(fmt::format("{} is for member {}, which is no child", at, id));
    const Json& pair = as_array(it.value(), at, 2);
    if (pair.size() != 2) refuse(fmt::format("{} is not [bytes per second, round trip]", at));
    const PathEstimate path{as_number(pair[0], at + "[0]"), as_number(pair[1], at + "[1]")};
    if (path.bytes_per_second < PathEstimate::kMinBytesPerSecond ||
        path.bytes_per_second > PathEstimate::kMaxBytesPerSecond) {
      refuse(fmt::format("{}[0] is a rate out of [{:g}, {:g}] bytes/s", at, PathEstimate::kMinBytesPerSecond,
                         PathEstimate::kMaxBytesPerSecond));
    }
    if (path.round_trip <= 0 || path.round_trip > PathEstimate::kMaxRoundTrip) {
      refuse(fmt::format("{}[1] is a round trip out of (0, {:g}] s", at, PathEstimate::kMaxRoundTrip));
    }
    m.paths[id] = path;
  }
}

// ---- messages

void to_json(Json& j, const Join& m) {
  Json rails = endpoints_json(m.rails);
  j = {{"protocol", m.protocol},         {"name", m.name}, {"node", m.node}, {"site", m.site},
       {"transport", m.transport},       {"manifest_hash", m.manifest_hash},
       {"manifest", manifest_json(m.manifest)}, {"version", m.version}, {"epoch", m.epoch},
       {"rails", rails}, {"defers_commit", m.defers_commit}, {"held", nullptr}};
  if (m.held) {
    Json held = Json::array();
    for (const HeldRange& r : *m.held) held.push_back(Json::array({r.tensor, r.begin, r.end}));
    j["held"] = std::move(held);
  }
}

void from_json(const Json& j, Join& m) {
  const Fields f(j, "join",
                 {"protocol", "name", "node", "site", "transport", "manifest_hash", "manifest", "version", "epoch", "rails",
                  "defers_commit", "held"});
  m.protocol = f.u32("protocol");
  m.name = f.text("name");
  m.node = f.text("node", 255);
  m.site = f.text("site", 255);
  m.transport = f.text("transport", 32);
  m.manifest_hash = f.u64("manifest_hash");
  m.manifest = as_manifest(f.at("manifest"), f.where("manifest"));
  m.version = f.u64("version");
  m.epoch = f.u64("epoch");
  m.rails = as_endpoints(f.at("rails"), f.where("rails"));
  m.defers_commit = f.boolean("defers_commit");
  const Json& held = f.at("held");
  if (!held.is_null()) {
    const std::string where = f.where("held");
    if (!held.is_array()) refuse(fmt::format("{} is neither null nor a list", where));
    if (held.size() > HeldRanges::kMaxRanges) refuse(fmt::format("{} has {} ranges (at most {})", where, held.size(), HeldRanges::kMaxRanges));
    std::vector<HeldRange> ranges;
    ranges.reserve(held.size());
    for (size_t i = 0; i < held.size(); ++i) {
      const Json& r = held[i];
      const std::string at = fmt::format("{}[{}]", where, i);
      if (!r.is_array() || r.size() != 3) refuse(fmt::format("{} is not [tensor, begin, end]", at));
      ranges.push_back({as_u32(r[0], at + "[0]"), as_u64(r[1], at + "[1]"), as_u64(r[2], at + "[2]")});
    }
    m.held = std::move(ranges);
  }
}

void to_json(Json& j, const Welcome& m) { j = {{"id", m.id}, {"epoch", m.epoch}, {"version", m.version}}; }

void from_json(const Json& j, Welcome& m) {
  const Fields f(j, "welcome", {"id", "epoch", "version"});
  m.id = as_id(f.at("id"), f.where("id"));
  m.epoch = f.u64("epoch");
  m.version = f.u64("version");
}

void to_json(Json& j, const Reject& m) {
  j = {{"code", std::string(status_code_name(m.code))}, {"reason", m.reason}};
}

void from_json(const Json& j, Reject& m) {
  const Fields f(j, "reject", {"code", "reason"});
  const std::string code = f.text("code", 32);
  const auto* known = std::find_if(std::begin(kRejectCodes), std::end(kRejectCodes),
                                   [&](StatusCode c) { return status_code_name(c) == code; });
  m.code = known == std::end(kRejectCodes) ? StatusCode::kFailedPrecondition : *known;
  m.reason = f.text("reason");
}

void to_json(Json& j, const Heartbeat&) { j = Json::object(); }
void from_json(const Json& j, Heartbeat&) { const Fields f(j, "heartbeat", {}); }

void to_json(Json& j, const Announce& m) {
  j = {{"version", m.version},     {"base", m.base},   {"full", m.full},           {"transfer", m.transfer},
       {"bytes", m.bytes},         {"slice_bytes", m.slice_bytes},                 {"digest", m.digest},
       {"forwarding", m.forwarding}, {"image", m.image}};
}

void from_json(const Json& j, Announce& m) {
  const Fields f(j, "version", {"version", "base", "full", "transfer", "bytes", "slice_bytes", "digest", "forwarding", "image"});
  m.version = f.u64("version");
  m.base = f.u64("base");
  m.full = f.boolean("full");
  m.transfer = f.u64("transfer");
  m.bytes = f.u64("bytes");
  m.slice_bytes = f.u32("slice_bytes");
  if (m.slice_bytes == 0) refuse("version.slice_bytes is 0");
  m.digest = f.u64("digest");
  from_json(f.at("forwarding"), m.forwarding);
  if (m.version == 0) refuse("version.version is 0");
  if (m.full != (m.base == 0)) refuse("version: a full version has base 0, a delta a base");
  m.image = f.boolean("image");
  if (m.image && !m.full) refuse("version: only a full version travels as the model image");
}

void to_json(Json& j, const Replan& m) {
  Json have = Json::object();
  for (const auto& [id, hex] : m.have) have[std::to_string(id)] = hex;
  j = {{"transfer", m.transfer}, {"forwarding", m.forwarding}, {"have", have}};
}

void from_json(const Json& j, Replan& m) {
  const Fields f(j, "replan", {"transfer", "forwarding", "have"});
  m.transfer = f.u64("transfer");
  from_json(f.at("forwarding"), m.forwarding);
  const Json& have = as_object(f.at("have"), f.where("have"), kMaxStripes);
  m.have.clear();
  for (auto it = have.begin(); it != have.end(); ++it) {
    const uint32_t child = id_key(it.key(), "replan.have");
    if (!m.forwarding.directory.count(child)) refuse(fmt::format("replan.have lists member {}, which is no child", child));
    m.have[child] = as_bitmap(it.value(), fmt::format("replan.have.{}", it.key()));
  }
}

void to_json(Json& j, const Progress& m) {
  j = {{"transfer", m.transfer}, {"arrived", m.arrived}, {"seconds", m.seconds}, {"have", m.have}};
}

void from_json(const Json& j, Progress& m) {
  const Fields f(j, "progress", {"transfer", "arrived", "seconds", "have"});
  m.transfer = f.u64("transfer");
  m.arrived = f.u32("arrived");
  m.seconds = f.number("seconds");
  m.have = as_bitmap(f.at("have"), f.where("have"));
}

void to_json(Json& j, const Staged& m) {
  j = {{"version", m.version},
       {"receive_seconds", m.receive_seconds},
       {"verify_seconds", m.verify_seconds},
       {"links", links_json(m.links)}};
}

void from_json(const Json& j, Staged& m) {
  const Fields f(j, "staged", {"version", "receive_seconds", "verify_seconds", "links"});
  m.version = f.u64("version");
  m.receive_seconds = f.number("receive_seconds");
  m.verify_seconds = f.number("verify_seconds");
  m.links = as_links(f.at("links"), f.where("links"));
}

void to_json(Json& j, const Forwarded& m) { j = {{"version", m.version}, {"links", links_json(m.links)}}; }

void from_json(const Json& j, Forwarded& m) {
  const Fields f(j, "forwarded", {"version", "links"});
  m.version = f.u64("version");
  m.links = as_links(f.at("links"), f.where("links"));
}

void to_json(Json& j, const Committed& m) { j = {{"version", m.version}, {"apply_seconds", m.apply_seconds}}; }

void from_json(const Json& j, Committed& m) {
  const Fields f(j, "committed", {"version", "apply_seconds"});
  m.version = f.u64("version");
  m.apply_seconds = f.number("apply_seconds");
}

void to_json(Json& j, const Failed& m) { j = {{"version", m.version}, {"reason", m.reason}}; }

void from_json(const Json& j, Failed& m) {
  const Fields f(j, "failed", {"version", "reason"});
  m.version = f.u64("version");
  m.reason = f.text("reason");
}

void to_json(Json& j, const Done& m) { j = {{"version", m.version}}; }
void from_json(const Json& j, Done& m) { m.version = Fields(j, "done", {"version"}).u64("version"); }

void to_json(Json& j, const Check& m) { j = {{"version", m.version}}; }
void from_json(const Json& j, Check& m) { m.version = Fields(j, "check", {"version"}).u64("version"); }

void to_json(Json& j, const Checked& m) {
  j = {{"version", m.version}, {"held", m.held}, {"model_hash", m.model_hash}};
}

void from_json(const Json& j, Checked& m) {
  const Fields f(j, "checked", {"version", "held", "model_hash"});
  m.version = f.u64("version");
  m.held = f.u64("held");
  m.model_hash = f.u64("model_hash");
}

void to_json(Json& j, const Unreachable& m) {
  j = {{"transfer", m.transfer}, {"member", m.member}, {"early", m.early}};
}

void from_json(const Json& j, Unreachable& m) {
  const Fields f(j, "unreachable", {"transfer", "member", "early"});
  m.transfer = f.u64("transfer");
  m.member = as_id(f.at("member"), f.where("member"));
  m.early = f.boolean("early");
}

void to_json(Json& j, const Unheard& m) { j = {{"members", m.members}}; }

void from_json(const Json& j, Unheard& m) {
  const Fields f(j, "unheard", {"members"});
  const Json& members = as_array(f.at("members"), f.where("members"), kMaxChildren);
  m.members.clear();
  for (size_t i = 0; i < members.size(); ++i) m.members.push_back(as_id(members[i], fmt::format("unheard.members[{}]", i)));
}

void to_json(Json& j, const Register& m) {
  j = {{"protocol", m.protocol}, {"world", m.world}, {"logical", manifest_json(m.logical)},
       {"rank", rank_json(m.rank)}};
}

void from_json(const Json& j, Register& m) {
  const Fields f(j, "register", {"protocol", "world", "logical", "rank"});
  m.protocol = f.u32("protocol");
  m.world = as_world(f);
  m.logical = as_manifest(f.at("logical"), f.where("logical"));
  m.rank = as_rank(f.at("rank"), f.where("rank"));
  if (m.rank.rank >= m.world) refuse(fmt::format("register: rank {} of a world of {}", m.rank.rank, m.world));
}

void to_json(Json& j, const Registered& m) { j = {{"registered", m.registered}, {"world", m.world}}; }

void from_json(const Json& j, Registered& m) {
  const Fields f(j, "registered", {"registered", "world"});
  m.world = as_world(f);
  m.registered = f.u32("registered");
  if (m.registered > m.world) refuse(fmt::format("registered: {} ranks of a world of {}", m.registered, m.world));
}

void to_json(Json& j, const FindGroup& m) { j = {{"protocol", m.protocol}}; }

void from_json(const Json& j, FindGroup& m) {
  const Fields f(j, "find_group", {"protocol"});
  m.protocol = f.u32("protocol");
}

void to_json(Json& j, const Group& m) {
  Json ranks = Json::array();
  for (const RankEntry& r : m.view.ranks) ranks.push_back(rank_json(r));
  j = {{"logical", manifest_json(m.view.logical)}, {"ranks", std::move(ranks)}};
}

void from_json(const Json& j, Group& m) {
  const Fields f(j, "group", {"logical", "ranks"});
  m.view.logical = as_manifest(f.at("logical"), f.where("logical"));
  const Json& ranks = as_array(f.at("ranks"), f.where("ranks"), kMaxWorld);
  if (ranks.empty()) refuse("group has no ranks");
  m.view.ranks.clear();
  for (size_t i = 0; i < ranks.size(); ++i) {
    m.view.ranks.push_back(as_rank(ranks[i], fmt::format("group.ranks[{}]", i)));
    if (m.view.ranks.back().rank != i) refuse(fmt::format("group.ranks[{}] is rank {}: ranks go in order", i, m.view.ranks.back().rank));
  }
}

// ---- dispatch

namespace {

struct TypeEntry {
  const char* name;
  Message (*read)(const Json&);
};

// One row per alternative of Message, in its order.
constexpr TypeEntry kTypes[] = {
    {"join", read_as<Join>},           {"welcome", read_as<Welcome>},     {"reject", read_as<Reject>},
    {"heartbeat", read_as<Heartbeat>}, {"version", read_as<Announce>},    {"replan", read_as<Replan>},
    {"progress", read_as<Progress>},   {"staged", read_as<Staged>},       {"committed", read_as<Committed>},
    {"failed", read_as<Failed>},       {"done", read_as<Done>},           {"check", read_as<Check>},
    {"checked", read_as<Checked>},     {"register", read_as<Register>},   {"registered", read_as<Registered>},
    {"find_group", read_as<FindGroup>}, {"group", read_as<Group>},   {"unreachable", read_as<Unreachable>},
    {"forwarded", read_as<Forwarded>}, {"unheard", read_as<Unheard>},
};
static_assert(std::size(kTypes) == std::variant_size_v<Message>);

}  // namespace

std::string_view type_name(const Message& message) { return kTypes[message.index()].name; }

Json encode(const Message& message) {
  Json j;
  std::visit([&](const auto& m) { to_json(j, m); }, message);
  j["type"] = std::string(type_name(message));
  return j;
}

std::string encode_text(const Message& message) { return encode(message).dump(); }

Result<Message> decode(const Json& json) {
  if (!json.is_object()) return corrupt("control message is not a JSON object");
  auto type = json.find("type");
  if (type == json.end() || !type->is_string()) return corrupt("control message without a type");
  const auto& name = type->get_ref<const std::string&>();
  for (const auto& entry : kTypes) {
    if (name != entry.name) continue;
    try {
      return entry.read(json);
    } catch (const ProtocolError& e) {
      return corrupt("control message refused: {}", e.what());
    } catch (const std::exception& e) {
      return corrupt("control message '{}' refused: {}", name.substr(0, 32), e.what());
    }
  }
  return corrupt("unknown control message type '{}'", name.substr(0, 32));
}

Result<Message> decode_text(std::string_view text) {
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return corrupt("control message is not JSON");
  return decode(json);
}

std::string encode_bitmap(const std::vector<uint8_t>& present) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out((present.size() + 7) / 8 * 2, '0');
  for (size_t byte = 0; byte < (present.size() + 7) / 8; ++byte) {
    unsigned v = 0;
    for (unsigned bit = 0; bit < 8 && byte * 8 + bit < present.size(); ++bit) v |= (present[byte * 8 + bit] ? 1u : 0u) << bit;
    out[2 * byte] = kHex[v >> 4];
    out[2 * byte + 1] = kHex[v & 15];
  }
  return out;
}

Result<std::vector<bool>> decode_bitmap(const std::string& hex, size_t bits) {
  if (hex.size() != (bits + 7) / 8 * 2) return corrupt("bitmap of {} hex digits for {} slices", hex.size(), bits);
  std::vector<bool> out(bits);
  const auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t byte = 0; byte < (bits + 7) / 8; ++byte) {
    const int hi = digit(hex[2 * byte]), lo = digit(hex[2 * byte + 1]);
    if (hi < 0 || lo < 0) return corrupt("bitmap is not hex");
    const unsigned v = static_cast<unsigned>(hi * 16 + lo);
    for (unsigned bit = 0; bit < 8 && byte * 8 + bit < bits; ++bit) out[byte * 8 + bit] = (v >> bit) & 1;
  }
  return out;
}

}  // namespace deltacast::control
