#include "broadcast/engine/producer.h"

#include <algorithm>
#include <random>

#include "broadcast/engine/metrics/engine_metrics.h"
#include "broadcast/engine/plan/planner.h"
#include "broadcast/engine/version_blob.h"
#include "broadcast/engine/wan_compression.h"
#include "broadcast/transport/transport_select.h"
#include "core/hash.h"
#include "core/parallel_memory.h"
#include "core/log.h"
#include "sparse/zstd_stage.h"

namespace deltacast {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
constexpr size_t kReportsKept = 4096;
constexpr size_t kHashesKept = 8;
}  // namespace

// What one version's round sends: a delta's buckets packed as one blob (version_blob.h), or a
// full version's model image (sparse/model_image.h).
struct Producer::Blob {
  uint64_t version = 0;
  std::shared_ptr<AlignedBuffer> memory;  // from the pool: may be larger than `bytes`
  uint64_t bytes = 0;
  std::vector<uint64_t> leaves;  // content-hash leaf digests of the bytes: the round's slice checksums come from them
  // Authenticated: the bytes' leaf tags, made here once so that no hop tags the payload as it
  // sends it (core/trust/leaf_tag.h); null where making them failed (every rail then tags).
  std::shared_ptr<const trust::LeafTags> leaf_tags;
};

// A published version waiting for (or in) its round.
struct Producer::Pending {
  uint64_t version = 0;
  uint64_t base = 0;
  bool full = false;
  Blob blob;
  // A delta's buckets, kept while members hold only parts of the tensors: each such class of
  // members is sent the chunks it holds (sparse/version_select.h).
  std::shared_ptr<const EncodedVersion> buckets;
  Clock::time_point published;
  Clock::time_point encoded;
};

Producer::Blob Producer::make_blob(const EncodedVersion& encoded) {
  Blob blob;
  blob.version = encoded.target_version;
  blob.bytes = blob_bytes(encoded.buckets);
  blob.memory = blob_pool_.acquire(blob.bytes);
  pack_blob_into(encoded.buckets, blob.memory->data(), hash_pool_.get());
  // A delta's blob is a few percent of the model: one pass over it, while it is fresh in cache.
  blob.leaves = content_hash_leaves(blob.memory->data(), blob.bytes, *hash_pool_);
  tag_leaves(blob);
  return blob;
}

Producer::Blob Producer::make_image() {
  Blob blob;
  blob.version = shadow_.version();
  blob.bytes = image_.bytes();
  blob.memory = blob_pool_.acquire(blob.bytes);
  blob.leaves = image_.pack(shadow_.views(), blob.memory->data(), *hash_pool_);
  tag_leaves(blob);
  return blob;
}

void Producer::tag_leaves(Blob& blob) {
  if (options_.trust.protection != trust::Protection::kAuthenticated) return;
  auto tags = trust::make_leaf_tags(options_.trust.secret, blob.memory->data(), blob.bytes, *hash_pool_);
  if (!tags.ok()) {
    log().warn("producer: version {}: no leaf tags ({}): every rail tags the payload instead", blob.version,
               tags.status().to_string());
    return;
  }
  blob.leaf_tags = std::make_shared<const trust::LeafTags>(std::move(tags).value());
}

bool CheckReport::all_exact() const {
  return std::all_of(members.begin(), members.end(), [](const Member& m) { return m.exact; });
}

Result<std::unique_ptr<Producer>> Producer::create(Manifest manifest, std::vector<TensorView> tensors,
                                                   ProducerOptions options) {
  DC_RETURN_IF_ERROR(manifest.check_views(tensors));
  if (options.wan_zstd_level < kMinZstdLevel || options.wan_zstd_level > kMaxZstdLevel) {
    return invalid_argument("wan_zstd_level (Python: wan_zstd) {} outside [{}, {}] (0: never)", options.wan_zstd_level,
                            kMinZstdLevel, kMaxZstdLevel);
  }
  if (options.shadow != "device" && options.shadow != "host") {
    return invalid_argument("shadow '{}': give \"device\" or \"host\"", options.shadow);
  }
  // The shapes the planner builds: a name for each (parse_shape), or no such shape.
  DC_RETURN_IF_ERROR(parse_shape(shape_name(options.round.fanout)).status().with_context("round.fanout"));
  DC_ASSIGN_OR_RETURN(const std::optional<int> gpu, cuda_device_of(manifest, tensors));
  std::unique_ptr<DeviceEncoder> device_encoder;
  if (gpu) {
    DC_ASSIGN_OR_RETURN(device_encoder, make_device_encoder(manifest, options.codec, *gpu, options.cuda_stream,
                                                            options.shadow == "host"));
  }
  if (options.epoch == 0) {
    std::random_device random;
    options.epoch = (static_cast<uint64_t>(random()) << 32 | random()) | 1;
  }
  if (options.rails.empty()) options.rails.push_back(Endpoint{"0.0.0.0", 0});
  DC_ASSIGN_OR_RETURN(DeltaEncoder encoder, DeltaEncoder::create(manifest, options.codec));
  DC_ASSIGN_OR_RETURN(std::shared_ptr<Transport> transport,
                      resolve_transport(options.transport, options.transport_backend,
                                        options.trust.protection == trust::Protection::kEncrypted));
  std::unique_ptr<Producer> p(new Producer(std::move(manifest), std::move(tensors), std::move(options), std::move(encoder)));
  p->transport_ = std::move(transport);
  p->device_encoder_ = std::move(device_encoder);
  // The first version is a full one: its shadow and image memory are mapped now, so that it
  // costs what any later full version costs.
  {
    auto image = p->blob_pool_.acquire(p->image_.bytes());
    touch_pages(image->data(), image->size(), *p->hash_pool_);
  }
  MembershipOptions m;
  m.listen = p->options_.listen;
  m.trust = p->options_.trust;
  m.epoch = p->options_.epoch;
  m.transport = std::string(p->transport_->name());
  m.netns = p->options_.netns;
  m.control = p->options_.control;
  m.rates = &p->rates_;
  DC_ASSIGN_OR_RETURN(p->membership_, Membership::create(p->manifest_, m));
  RelayOptions r;
  r.transport = p->transport_;
  r.local_rails = p->options_.rails;
  r.channel.trust = p->options_.trust;
  r.channel.netns = p->options_.netns;
  r.spray = p->options_.spray;
  p->relay_ = std::make_unique<Relay>(r);
  p->driver_ = std::make_unique<RoundDriver>(*p->membership_, *p->relay_, p->rates_, p->options_.round, *p->hash_pool_);
  if (p->options_.metrics) {
    DC_ASSIGN_OR_RETURN(p->metrics_, MetricsExporter::start(*p->options_.metrics, [raw = p.get()](MetricsSink& sink) {
      collect_producer_metrics(sink, *raw);
    }));
  }
  p->rounds_ = std::thread([raw = p.get()] { raw->round_loop(); });
  if (p->options_.group) {
    auto seat = GroupSeat::take(*p->options_.group, p->manifest_, p->address(), p->options_.rails, p->options_.trust,
                                p->options_.netns);
    if (!seat.ok()) return seat.status();
    p->seat_ = std::move(seat).value();
  }
  log().info("producer: {} tensors, {} bytes; control port {}; data over {}; epoch {:x}", p->manifest_.size(),
             p->manifest_.total_bytes(), p->address().to_string(), p->transport(), p->epoch());
  return p;
}

Producer::Producer(Manifest manifest, std::vector<TensorView> tensors, ProducerOptions options, DeltaEncoder encoder)
    : manifest_(std::move(manifest)),
      tensors_(std::move(tensors)),
      options_(std::move(options)),
      encoder_(std::move(encoder)),
      hash_pool_(std::make_unique<ThreadPool>(options_.codec.threads)),
      image_(manifest_),
      shadow_(Shadow::allocate(manifest_, *hash_pool_)) {}

Producer::~Producer() { close(); }

void Producer::close() {
  if (closing_.exchange(true)) return;
  metrics_.reset();  // no scrape reads this producer once it starts closing
  if (seat_) seat_->leave();
  membership_->notify();
  if (rounds_.joinable()) rounds_.join();
  relay_->end();
  membership_->close();
  relay_.reset();
}

Status Producer::wait_registered(Millis timeout) { return seat_ ? seat_->wait_registered(timeout) : Status(); }

std::optional<Endpoint> Producer::group_coordinator() const {
  return seat_ ? seat_->hosted_coordinator() : std::nullopt;
}

uint64_t Producer::next_transfer() {
  std::lock_guard<std::mutex> lock(mu_);
  return (options_.epoch & 0xffffffff00000000ull) | ++transfers_;
}

Result<uint64_t> Producer::publish(bool full, uint64_t wanted) {
  if (closing_) return failed_precondition("the producer is closed");
  std::lock_guard<std::mutex> one_at_a_time(publish_mu_);
  auto pending = std::make_shared<Pending>();
  pending->published = Clock::now();
  EncodedVersion encoded;
  double wan = 0;
  {
    std::unique_lock<std::shared_mutex> exclusive(shadow_mu_);
    if (wanted != 0 && wanted <= shadow_.version()) {
      return invalid_argument("version {} is not above the newest published version, {}", wanted, shadow_.version());
    }
    const uint64_t version = wanted != 0 ? wanted : shadow_.version() + 1;
    full = full || shadow_.version() == 0;  // the first version is a full one
    if (full && device_encoder_) {
      // The GPU shadow takes the tensors, the host shadow the GPU shadow's bytes (the image's source).
      DC_RETURN_IF_ERROR(device_encoder_->assign(tensors_, version));
      DC_RETURN_IF_ERROR(device_encoder_->copy_shadow(shadow_.views()));
      shadow_.set_version(version);
      host_shadow_stale_ = false;
      pending->blob = make_image();
      encoded = full_version_stats(version);
    } else if (full) {
      // No encoding: the shadow takes the tensors and the image is the shadow's bytes.
      DC_RETURN_IF_ERROR(shadow_.assign(tensors_, version, hash_pool_.get()));
      pending->blob = make_image();
      encoded = full_version_stats(version);
    } else {
      const auto members = membership_->snapshot();
      recut_for_members(members);
      wan = wan_rate(members);
      const ZstdChoice choose = zstd_for_wan(wan);
      if (device_encoder_) {
        DC_ASSIGN_OR_RETURN(encoded, device_encoder_->encode_delta(tensors_, version, choose));
        shadow_.set_version(version);
        host_shadow_stale_ = true;
      } else {
        DC_ASSIGN_OR_RETURN(encoded, encoder_.encode_delta(tensors_, shadow_, version, choose));
      }
      pending->blob = make_blob(encoded);
      if (std::any_of(members.begin(), members.end(), [](const MemberRecord& m) { return m.held != nullptr; })) {
        // The buckets move to the pending version (they were only to be dropped here); the stats stay.
        auto kept = std::make_shared<EncodedVersion>();
        kept->base_version = encoded.base_version;
        kept->target_version = encoded.target_version;
        kept->buckets = std::move(encoded.buckets);
        pending->buckets = std::move(kept);
      }
    }
    full_cache_.reset();
  }
  pending->version = encoded.target_version;
  pending->base = full ? 0 : encoded.base_version;
  pending->full = full;
  encoded.buckets.clear();
  pending->encoded = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    VersionReport& report = reports_[pending->version];
    report.version = pending->version;
    report.base = pending->base;
    report.full = full;
    report.stats = encoded.stats;
    report.stats.wire_bytes = pending->blob.bytes;
    report.encode_seconds = seconds_between(pending->published, pending->encoded);
    report.wan_rate = wan;
    while (reports_.size() > kReportsKept) reports_.erase(reports_.begin());
    newest_ = pending->version;
    queue_.push_back(pending);
    ++queued_;
  }
  membership_->notify();
  log().debug("producer: version {} encoded: {} changed of {} ({:.3f}%), {} wire bytes, {:.3f} s", pending->version,
              encoded.stats.changed, encoded.stats.elements, 100 * encoded.stats.density(), pending->blob.bytes,
              seconds_between(pending->published, pending->encoded));
  return pending->version;
}

EncodedVersion Producer::full_version_stats(uint64_t version) const {
  EncodedVersion v;
  v.target_version = version;
  v.full = true;
  v.stats.elements = manifest_.total_elements();
  v.stats.changed = v.stats.elements;
  v.stats.dense_bytes = manifest_.total_bytes();
  v.stats.wire_bytes = image_.bytes();
  return v;
}

std::vector<uint64_t> Producer::queued_bases() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> bases;
  for (const auto& p : queue_) bases.push_back(p->full ? 0 : p->base);
  return bases;
}

bool Producer::needs_full_sync(const MemberRecord& m, const std::vector<uint64_t>& bases, uint64_t newest) const {
  if (newest == 0 || m.base == newest) return false;
  // A queued full version reaches everyone; a queued delta extends its own base.
  for (uint64_t b : bases) {
    if (b == 0 || (m.base != 0 && b == m.base)) return false;
  }
  return true;
}

// Members that hold the same elements of the tensors (or all of them: `held` null).
struct Producer::TargetClass {
  std::shared_ptr<const HeldRanges> held;
  std::vector<uint32_t> targets;
  std::vector<std::string> names;
};

std::vector<std::vector<uint64_t>> Producer::member_cuts(const std::vector<MemberRecord>& members) const {
  std::vector<std::vector<uint64_t>> cuts(manifest_.size());
  for (const MemberRecord& m : members) {
    if (!m.held) continue;
    const auto edges = m.held->edges(manifest_.size());
    for (size_t t = 0; t < edges.size(); ++t) cuts[t].insert(cuts[t].end(), edges[t].begin(), edges[t].end());
  }
  for (auto& c : cuts) {
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
  }
  return cuts;
}

double Producer::wan_rate(const std::vector<MemberRecord>& members) const {
  if (options_.wan_zstd_level == 0 || options_.codec.zstd_level != 0) return 0;  // not asked for
  SiteOf sites;
  for (const auto& m : members) {
    if (m.away_from(options_.round.site)) sites[m.id] = m.site;
  }
  if (sites.empty()) return 0;
  // The producer's links (sender kProducerSender) are in its site, which has no name here.
  double slowest = rates_.slowest_link_rate(
      [&](uint32_t sender, uint32_t child) { return site_of(sites, sender) != site_of(sites, child); });
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(wan_receive_rates_, [&](const auto& seen) { return !sites.count(seen.first); });  // gone
  for (const auto& m : members) {
    if (!sites.count(m.id)) continue;
    // What it was sent of its last version, where it staged that version in the version's own
    // round (not a catch-up's full image; a resharded member is sent only what it holds). A
    // version under kWanSampleBytes took a round trip or two, not a rate: the last one that
    // measured it stands.
    const auto report = reports_.find(m.base);
    if (m.receive_seconds > 0 && report != reports_.end() && report->second.staged_by.count(m.name)) {
      const auto sent = report->second.bytes_to.find(m.name);
      if (sent != report->second.bytes_to.end() && sent->second >= kWanSampleBytes) {
        wan_receive_rates_[m.id] = static_cast<double>(sent->second) / m.receive_seconds;
      }
    }
    const auto seen = wan_receive_rates_.find(m.id);
    if (seen != wan_receive_rates_.end() && (slowest == 0 || seen->second < slowest)) slowest = seen->second;
  }
  return slowest;
}

ZstdChoice Producer::zstd_for_wan(double wan_rate) const {
  if (wan_rate <= 0) return {};  // wan_rate is 0 where no choice is asked for, too
  return [level = options_.wan_zstd_level, wan_rate, threads = hash_pool_->size()](std::span<const std::span<const uint8_t>> chunks) {
    const ZstdSample sample = sample_zstd(chunks, level);
    const bool pays = zstd_pays_off(sample, wan_rate, threads);
    log().debug("producer: zstd {} for the WAN ({:.1f} MB/s at its slowest link): {:.3f} of the bytes, {:.0f} MB/s "
                "compressing on {} threads, {:.0f} MB/s decompressing",
                pays ? "on" : "off", wan_rate / 1e6, sample.ratio, sample.compress_rate / 1e6, threads,
                sample.decompress_rate / 1e6);
    return pays ? level : 0;
  };
}

void Producer::recut_for_members(const std::vector<MemberRecord>& members) {
  auto cuts = member_cuts(members);
  if (cuts == cuts_) return;
  if (device_encoder_) {
    if (Status s = device_encoder_->set_cuts(cuts); !s.ok()) {
      log().error("producer: chunks cut for what the members hold: {}", s.to_string());
      return;
    }
    cuts_ = std::move(cuts);
    return;
  }
  auto encoder = DeltaEncoder::create(manifest_, options_.codec, cuts);
  if (!encoder.ok()) {
    log().error("producer: chunks cut for what the members hold: {}", encoder.status().to_string());
    return;
  }
  encoder_ = std::move(encoder).value();
  cuts_ = std::move(cuts);
}

std::vector<Producer::TargetClass> Producer::classes_of(const std::vector<MemberRecord>& members, bool routed) const {
  std::vector<TargetClass> classes;
  for (const MemberRecord& m : members) {
    const auto held = routed ? m.held : nullptr;
    auto it = std::find_if(classes.begin(), classes.end(), [&](const TargetClass& c) {
      return c.held == held || (c.held && held && *c.held == *held);
    });
    if (it == classes.end()) it = classes.insert(classes.end(), TargetClass{held, {}, {}});
    it->targets.push_back(m.id);
    it->names.push_back(m.name);
  }
  return classes;
}

Producer::Blob Producer::selected(const EncodedVersion& version, const HeldRanges& held) {
  auto picked = select_chunks(version, manifest_, held, options_.codec, *hash_pool_);
  if (!picked.ok()) {
    // Only a bug gets here (the buckets are the producer's own): log it, send nothing wrong.
    log().error("producer: version {}: selecting chunks: {}", version.target_version, picked.status().to_string());
    return Blob{};
  }
  return make_blob(*picked);
}

std::shared_ptr<const EncodedVersion> Producer::full_chunks(const Blob& image) {
  // The image is the version's tensors back to back: encoded as dense chunks cut where the
  // members' holdings end, so that each class's selection is its share.
  auto encoder = DeltaEncoder::create(manifest_, options_.codec, member_cuts(membership_->snapshot()));
  if (!encoder.ok()) return nullptr;
  auto encoded = encoder->encode_full(image_.views_of(image.memory->data()), image.version);
  if (!encoded.ok()) {
    log().error("producer: version {}: encoding it in full: {}", image.version, encoded.status().to_string());
    return nullptr;
  }
  return std::make_shared<const EncodedVersion>(std::move(encoded).value());
}

RoundResult Producer::run_classes(RoundSpec spec, const std::vector<TargetClass>& classes, const Blob& whole,
                                  const std::function<std::shared_ptr<const EncodedVersion>()>& chunks,
                                  std::map<std::string, uint64_t>& bytes_to, uint64_t& sent) {
  const auto start = Clock::now();
  RoundResult result;  // all classes' rounds together
  std::shared_ptr<const EncodedVersion> encoded;
  for (const TargetClass& c : classes) {
    Blob cut;
    const Blob* blob = &whole;
    if (c.held) {
      if (!encoded) encoded = chunks();
      if (encoded) cut = selected(*encoded, *c.held);
      if (cut.memory) blob = &cut;  // else the whole version, which serves any holding
    }
    spec.transfer = next_transfer();
    spec.image = spec.full && blob == &whole;
    spec.data = blob->memory->data();
    spec.bytes = blob->bytes;
    spec.leaves = blob->leaves;
    spec.leaf_tags = blob->leaf_tags;
    spec.targets = c.targets;
    const double offset = seconds_between(start, Clock::now());
    const RoundResult r = driver_->run(spec, [this] { return closing_.load(); });
    for (const std::string& name : c.names) bytes_to[name] = spec.bytes;
    sent += spec.bytes;
    result.committed.insert(result.committed.end(), r.committed.begin(), r.committed.end());
    result.failed.insert(result.failed.end(), r.failed.begin(), r.failed.end());
    result.lost.insert(result.lost.end(), r.lost.begin(), r.lost.end());
    result.why_not.insert(r.why_not.begin(), r.why_not.end());
    result.staged_seconds = std::max(result.staged_seconds, offset + r.staged_seconds);
    result.max_apply_seconds = std::max(result.max_apply_seconds, r.max_apply_seconds);
    for (const auto& [id, at] : r.staged_at) result.staged_at[id] = offset + at;
    result.slice_bytes = std::max(result.slice_bytes, r.slice_bytes);
    result.stripes = std::max(result.stripes, r.stripes);
    result.fanout = std::max(result.fanout, r.fanout);
    result.replans += r.replans;
    result.standby_replans += r.standby_replans;
    result.first_plan.slow.insert(result.first_plan.slow.end(), r.first_plan.slow.begin(), r.first_plan.slow.end());
  }
  return result;
}

void Producer::run_pending(const std::shared_ptr<Pending>& pending) {
  // The targets by what they hold: each class gets a round of its own with the chunks it holds
  // elements of; members holding everything get the version as it is.
  std::vector<MemberRecord> members;
  for (MemberRecord& m : membership_->snapshot()) {
    if (pending->full || m.base == pending->base) members.push_back(std::move(m));
  }
  const auto classes = classes_of(members, pending->full || pending->buckets != nullptr);
  std::vector<uint32_t> targets;
  for (const auto& c : classes) targets.insert(targets.end(), c.targets.begin(), c.targets.end());
  RoundSpec spec;
  spec.version = pending->version;
  spec.base = pending->base;
  spec.full = pending->full;
  std::map<std::string, uint64_t> bytes_to;
  uint64_t sent = 0;
  const auto start = Clock::now();
  const RoundResult result = run_classes(
      spec, classes, pending->blob,
      [&] { return pending->full ? full_chunks(pending->blob) : pending->buckets; }, bytes_to, sent);
  // Whoever did not finish holds no usable base: a full sync follows.
  membership_->update([&](std::map<uint32_t, MemberRecord>& all) {
    for (uint32_t id : result.failed) {
      if (auto it = all.find(id); it != all.end() && it->second.committed < pending->version) it->second.base = 0;
    }
  });
  const auto end = Clock::now();
  std::map<std::string, double> staged_by;
  std::vector<std::string> slow;
  const auto& tails = result.first_plan.slow;
  for (const MemberRecord& m : membership_->snapshot()) {
    if (auto it = result.staged_at.find(m.id); it != result.staged_at.end()) staged_by[m.name] = it->second;
    if (std::find(tails.begin(), tails.end(), m.id) != tails.end()) slow.push_back(m.name);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    VersionReport& report = reports_[pending->version];
    report.staged_by = std::move(staged_by);
    report.slow = std::move(slow);
    report.queue_seconds = seconds_between(pending->encoded, start);
    report.wire_seconds = result.staged_seconds;
    report.apply_seconds = result.max_apply_seconds;
    report.seconds = seconds_between(pending->published, end);
    report.targets = static_cast<uint32_t>(targets.size());
    report.bytes_to = std::move(bytes_to);
    report.committed = static_cast<uint32_t>(result.committed.size());
    report.failed = static_cast<uint32_t>(result.failed.size());
    report.lost = static_cast<uint32_t>(result.lost.size());
    report.why_not = result.why_not;
    report.slice_bytes = result.slice_bytes;
    report.stripes = result.stripes;
    report.fanout = result.fanout;
    report.replans = result.replans;
    report.standby_replans = result.standby_replans;
    report.done = true;
    wire_bytes_ += sent;
    ++versions_done_;
    commits_ += report.committed;
    failures_ += report.failed;
    lost_ += report.lost;
    last_done_ = std::max(last_done_, report.version);
    queue_.pop_front();
    --queued_;
    log().info("producer: version {} ({}, {} bytes) committed by {}/{} consumers in {:.3f} s "
               "(encode {:.3f}, wire {:.3f}, apply {:.3f}){}",
               report.version, report.full ? "full" : "delta", sent, report.committed, report.targets,
               report.seconds, report.encode_seconds, report.wire_seconds, report.apply_seconds,
               report.lost + report.failed > 0 ? fmt::format("; {} lost, {} failed", report.lost, report.failed) : "");
  }
  membership_->notify();
}

Status Producer::refresh_host_shadow() {
  if (!device_encoder_) return Status();
  std::unique_lock<std::shared_mutex> exclusive(shadow_mu_);
  if (!host_shadow_stale_) return Status();
  DC_RETURN_IF_ERROR(device_encoder_->copy_shadow(shadow_.views()));
  host_shadow_stale_ = false;
  return Status();
}

Result<std::shared_lock<std::shared_mutex>> Producer::read_fresh_shadow() {
  for (;;) {
    DC_RETURN_IF_ERROR(refresh_host_shadow());
    std::shared_lock<std::shared_mutex> shared(shadow_mu_);
    if (!host_shadow_stale_) return Result<std::shared_lock<std::shared_mutex>>(std::move(shared));
    // A delta was published between the copy and the lock: copy again.
  }
}

std::shared_ptr<Producer::Blob> Producer::full_blob() {
  auto shared = read_fresh_shadow();
  if (!shared.ok()) {
    log().error("producer: copying the GPU shadow to the host for a full sync: {}", shared.status().to_string());
    return nullptr;
  }
  if (shadow_.version() == 0) return nullptr;
  std::lock_guard<std::mutex> lock(full_cache_mu_);  // readers of the shadow may be several
  if (!full_cache_ || full_cache_->version != shadow_.version()) full_cache_ = std::make_shared<Blob>(make_image());
  return full_cache_;
}

void Producer::run_catch_up() {
  const uint64_t newest = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    return newest_;
  }();
  const auto bases = queued_bases();
  std::vector<MemberRecord> behind;
  for (MemberRecord& m : membership_->snapshot()) {
    if (needs_full_sync(m, bases, newest)) behind.push_back(std::move(m));
  }
  if (behind.empty()) return;
  auto full = full_blob();
  if (!full) return;
  RoundSpec spec;
  spec.version = full->version;
  spec.full = true;
  log().info("producer: full sync of version {} ({} bytes) to {} consumer(s) that are behind", spec.version, full->bytes,
             behind.size());
  std::map<std::string, uint64_t> bytes_to;
  uint64_t sent = 0;
  const RoundResult result =
      run_classes(spec, classes_of(behind, true), *full, [&] { return full_chunks(*full); }, bytes_to, sent);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++full_syncs_;
    wire_bytes_ += sent;
  }
  if (!result.failed.empty()) {
    // Whatever made them fail (a dead data path, a full disk) is given a moment before the next try.
    log().warn("producer: full sync of version {} failed for {} consumer(s); retrying", spec.version, result.failed.size());
    std::this_thread::sleep_for(Millis(200));
  }
  membership_->notify();
}

void Producer::round_loop() {
  while (!closing_) {
    std::shared_ptr<Pending> pending;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!queue_.empty()) pending = queue_.front();
    }
    if (pending) run_pending(pending);
    if (closing_) return;
    run_catch_up();
    if (queued_ > 0) continue;
    const uint64_t newest = [&] {
      std::lock_guard<std::mutex> lock(mu_);
      return newest_;
    }();
    membership_->wait(Millis(200), [&](const std::map<uint32_t, MemberRecord>& all) {
      if (closing_ || queued_ > 0) return true;
      return std::any_of(all.begin(), all.end(),
                         [&](const auto& m) { return needs_full_sync(m.second, {}, newest); });
    });
  }
}

Status Producer::wait(uint64_t version, Millis timeout) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (version == 0 || version > newest_) return invalid_argument("version {} was not published (newest {})", version, newest_);
  }
  const auto round_done = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = reports_.find(version);
    return it == reports_.end() || it->second.done;
  };
  std::vector<std::string> missing;
  const bool ok = membership_->wait(timeout, [&](const std::map<uint32_t, MemberRecord>& all) {
    missing.clear();
    for (const auto& [id, m] : all) {
      if (m.committed < version) missing.push_back(fmt::format("{} '{}' (holds {})", id, m.name, m.committed));
    }
    return missing.empty() && round_done();
  });
  if (ok) return Status();
  if (closing_) return cancelled("the producer closed");
  return deadline_exceeded("version {} not committed everywhere within {} ms; waiting for: {}", version, timeout.count(),
                           missing.empty() ? std::string("the round to end") : fmt::format("{}", fmt::join(missing, ", ")));
}

Status Producer::wait_members(size_t count, Millis timeout) {
  size_t have = 0;
  if (membership_->wait(timeout, [&](const std::map<uint32_t, MemberRecord>& all) {
        have = all.size();
        return have >= count;
      })) {
    return Status();
  }
  return deadline_exceeded("{} of {} consumers joined within {} ms", have, count, timeout.count());
}

Result<uint64_t> Producer::model_hash(uint64_t version) {
  // Tensors on a GPU: the shadow is hashed where it lives, without copying the model to the host
  // (the GPU shadow is the device encoder's to use, so one at a time). Host tensors: the host
  // shadow, held shared.
  std::shared_lock<std::shared_mutex> shared(shadow_mu_, std::defer_lock);
  std::unique_lock<std::shared_mutex> exclusive(shadow_mu_, std::defer_lock);
  if (device_encoder_) {
    exclusive.lock();
  } else {
    shared.lock();
  }
  if (shadow_.version() == 0 || shadow_.version() != version) {
    return failed_precondition("version {} is not the newest published ({}): only the newest can be hashed or checked",
                               version, shadow_.version());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = model_hashes_.find(version); it != model_hashes_.end()) return it->second;
  }
  // Hashed outside mu_ (the shadow cannot move while shadow_mu_ is held): publishing and the
  // rounds need mu_, and a large model takes a while.
  uint64_t hash = 0;
  if (device_encoder_) {
    DC_ASSIGN_OR_RETURN(hash, device_encoder_->shadow_hash());
  } else {
    hash = ::deltacast::model_hash(shadow_.views().data(), shadow_.views().size(), *hash_pool_);
  }
  std::lock_guard<std::mutex> lock(mu_);
  model_hashes_[version] = hash;
  while (model_hashes_.size() > kHashesKept) model_hashes_.erase(model_hashes_.begin());
  return hash;
}

Result<CheckReport> Producer::check(uint64_t version, Millis timeout) {
  CheckReport report;
  report.version = version;
  DC_ASSIGN_OR_RETURN(report.expected_hash, model_hash(version));
  membership_->update([&](std::map<uint32_t, MemberRecord>& all) {
    for (auto& [id, m] : all) m.checks.erase(version);
  });
  const control::Message ask = control::Check{version};
  for (const MemberRecord& m : membership_->snapshot()) membership_->send(m.id, ask);
  membership_->wait(timeout, [&](const std::map<uint32_t, MemberRecord>& all) {
    return std::all_of(all.begin(), all.end(), [&](const auto& m) { return m.second.checks.count(version) != 0; });
  });
  for (const MemberRecord& m : membership_->snapshot()) {
    CheckReport::Member out;
    out.id = m.id;
    out.name = m.name;
    auto it = m.checks.find(version);
    if (it != m.checks.end()) {
      out.answered = true;
      out.held = it->second.first;
      out.hash = it->second.second;
      out.exact = out.held == version && out.hash == report.expected_hash;
    }
    report.members.push_back(out);
  }
  // A member that holds the version with other bits has a damaged base: a full sync repairs it.
  membership_->update([&](std::map<uint32_t, MemberRecord>& all) {
    for (const auto& m : report.members) {
      auto it = all.find(m.id);
      if (m.answered && m.held == version && !m.exact && it != all.end()) {
        log().error("producer: consumer {} '{}' holds version {} with hash {:x}, expected {:x}; re-syncing it",
                    m.id, m.name, version, m.hash, report.expected_hash);
        it->second.base = 0;
      }
    }
  });
  return report;
}

std::optional<VersionReport> Producer::report(uint64_t version) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = reports_.find(version);
  if (it == reports_.end()) return std::nullopt;
  return it->second;
}

ProducerStats Producer::stats() const {
  ProducerStats s;
  s.members = membership_->snapshot();
  s.transport = std::string(transport_->name());
  s.protection = std::string(trust::protection_name(options_.trust.protection));
  SiteOf sites;  // the members away from the producer's site
  for (const auto& m : s.members) {
    if (auto r = rates_.rates(m.id)) s.rates[m.id] = *r;
    if (m.away_from(options_.round.site)) sites[m.id] = m.site;
  }
  for (const auto& [id, site] : sites) {
    if (s.wan_into.count(site)) continue;
    const auto wan = rates_.wan_into(site, [&](uint32_t member) { return site_of(sites, member); });
    if (wan) s.wan_into[site] = *wan;
  }
  std::lock_guard<std::mutex> lock(mu_);
  s.epoch = options_.epoch;
  s.version = newest_;
  s.queued = queued_;
  s.full_syncs = full_syncs_;
  s.wire_bytes = wire_bytes_;
  s.versions_done = versions_done_;
  s.commits = commits_;
  s.failures = failures_;
  s.lost = lost_;
  s.last_done = last_done_;
  return s;
}

std::optional<RoundProgress> Producer::progress() const {
  return driver_ ? driver_->progress() : std::nullopt;
}

std::map<uint32_t, std::vector<RailTelemetry>> Producer::rail_telemetry() const {
  return relay_ ? relay_->telemetry_by_child() : std::map<uint32_t, std::vector<RailTelemetry>>{};
}

std::map<uint32_t, bool> Producer::standby_links() const {
  return relay_ ? relay_->watched() : std::map<uint32_t, bool>{};
}

std::optional<Endpoint> Producer::metrics_endpoint() const {
  if (!metrics_) return std::nullopt;
  return metrics_->endpoint();
}

}  // namespace deltacast
