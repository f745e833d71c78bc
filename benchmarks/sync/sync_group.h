// deltacast-bench sync with a sharded trainer: --producers M trainer ranks
// (each a Producer of what trainer_shards gives it: row, column and flat
// shards of the synthetic transformer) publish every step in parallel, and
// consumer processes hold inference-engine layouts (--consumer-layout
// tp2,tp2,tp1: tensor-parallel ranks with fused qkv_proj). Per version and
// consumer it reports the bytes received against the consumer's share of the
// version and exactness against the logical model; per version the ranks'
// parallel encode against one encoder holding the whole model.
#pragma once

#include <string>
#include <vector>

#include "sync/sync_roles.h"

namespace deltacast::bench {

// A rollout layout: tensor-parallel rank `rank` of `world`.
struct TpLayout {
  uint32_t world = 1;
  uint32_t rank = 0;
  std::string text() const;  // "tp2:1"
};

// "tp2,tp2,tp1" (or repeated options): each tpN entry takes the next rank of its world, cyclically.
// "tpN:r" names the rank. Errors name the entry.
Result<std::vector<TpLayout>> parse_consumer_layouts(const std::vector<std::string>& texts);

// The orchestrating mode with --producers M (M > 1) or --consumer-layout.
int run_group_sync(const SyncArgs& args);
// --role group-consumer: one rollout process of the group (--layout tpN:r, --ranks ADDR per rank in
// rank order); reports every version it commits with the hash of its tensors, as JSON lines.
int run_group_consumer_role(const SyncArgs& args);
// --role group-producer: trainer rank --rank of --producers, driven by commands on stdin (JSON
// events on stdout). Every rank runs the same trace, so that ranks started at different times
// agree: "step [LR]" (an optimizer step, at learning rate LR from now on), "publish V [full]"
// (its shards of the trace as it is, as version V), "members N [T]", "wait V [T]" (every member
// committed V), "view-hash tpN:r" (the hash a rollout process of that layout must hold now),
// "quit".
int run_group_producer_role(const SyncArgs& args);

}  // namespace deltacast::bench
