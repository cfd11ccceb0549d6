// Scheduler's read-only views and the requests' lifetime helpers: invariants, cache-only runs,
// table reservations, pool statistics, cached blocks, the KV breakdown (see core/v1/scheduler.h).

#include <algorithm>

#include "core/common/assert.h"
#include "core/v1/scheduler.h"

namespace kvsim {

std::string Scheduler::find_violation() const {
  std::vector<const Request*> live;
  live.reserve(running_.size() + waiting_.size());
  for (const Request* r : running_) {
    KVSIM_CHECK(r->status == RequestStatus::kRunning, "a running request is not RUNNING");
    live.push_back(r);
  }
  for (const Request* r : waiting_) {
    KVSIM_CHECK(r->status == RequestStatus::kWaiting || r->status == RequestStatus::kPreempted ||
                    r->status == RequestStatus::kRunning,
                "a waiting request has a finished status");
    KVSIM_CHECK(r->blocks.empty(), "a waiting request holds blocks");
    for (const KVGroupTable& t : r->kv_groups)
      KVSIM_CHECK(t.blocks.empty(), "a waiting request holds blocks");
    KVSIM_CHECK(r->num_computed_tokens == 0, "a waiting request has computed tokens");
    live.push_back(r);
  }
  // A connector's requests: skipped ones (loading ones hold blocks), finished ones held.
  for (const Request* r : skipped_waiting_) {
    KVSIM_CHECK(r->status == RequestStatus::kWaiting || r->status == RequestStatus::kPreempted ||
                    r->status == RequestStatus::kWaitingForRemoteKvs,
                "a skipped waiting request is neither waiting nor loading");
    live.push_back(r);
  }
  for (const Request* r : held_) {
    KVSIM_CHECK(is_finished(r->status), "a held request is not finished");
    live.push_back(r);
  }
  for (const Request* r : finished_recving_)
    KVSIM_CHECK(r->status == RequestStatus::kWaitingForRemoteKvs &&
                    std::find(skipped_waiting_.begin(), skipped_waiting_.end(), r) !=
                        skipped_waiting_.end(),
                "a request whose load finished is not waiting for it in skipped_waiting");
  KVSIM_CHECK(connector_ || (skipped_waiting_.empty() && held_.empty()),
              "skipped or held requests without a connector");
  std::vector<const Request*> sorted = live;
  std::sort(sorted.begin(), sorted.end());
  KVSIM_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
              "a request is queued twice");
  KVSIM_CHECK(static_cast<std::int64_t>(running_.size()) <= config_.max_num_seqs,
              "more running requests than max_num_seqs");
  std::vector<HashId> connector_refs;
  if (connector_) connector_->hash_references(connector_refs);
  return kv_.find_violation(live, connector_refs);
}

std::int64_t Scheduler::cache_only_request(Request& req) {
  if (kv_.coordinator()) return cache_only_request_v020(req);
  const std::int64_t bs = kv_.block_size();
  std::int64_t computed = kv_.get_computed_blocks(req, hits_);
  std::int64_t todo = req.num_tokens() - computed;
  if (todo == 0 && !kv_.policy().last_block_excluded_from_lookup) {
    // v0.7.2's scheduler full-hit rule: recompute the last block
    computed -= bs;
    todo = bs;
    hits_.pop_back();
  }
  AllocResult res = kv_.allocate_slots(req, todo, hits_);
  if (res.status == AllocStatus::kNoFreeBlocks) {
    // Larger than the pool: allocate the longest prefix that fits beside its hits.
    std::int64_t evictable_hits = 0;
    for (BlockId b : hits_)
      if (kv_.pool().block(b).ref_cnt == 0) ++evictable_hits;
    const std::int64_t fit = (kv_.pool().num_free_blocks() - evictable_hits) * bs;
    const std::int64_t part = std::min(todo, fit);
    if (part > 0) res = kv_.allocate_slots(req, part, hits_);
    KVSIM_ASSERT(part <= 0 || res.ok(), "cache_only: partial allocation failed");
  } else {
    KVSIM_ASSERT(res.ok(), "cache_only: allocate_slots failed");
  }
  kv_.free(req);
  kv_.release_request(req);
  return computed;
}

// v0.20: the lookup, then the longest prefix of the rest that fits (a binary search on
// allocate_slots, which changes nothing when it fails for a request without blocks).
std::int64_t Scheduler::cache_only_request_v020(Request& req) {
  kv_.add_request(req);
  AllocStatus st = AllocStatus::kOk;
  const std::int64_t computed = kv_.get_computed_blocks(req, group_hits_, st);
  KVSIM_ASSERT(st == AllocStatus::kOk, "cache_only: lookup failed");
  const std::int64_t todo = req.num_tokens() - computed;
  st = kv_.allocate_slots(req, todo, computed, group_hits_, 0);
  if (st == AllocStatus::kNoFreeBlocks) {
    std::int64_t lo = 0, hi = todo - 1;  // the largest part that fits is in [lo, hi]
    while (lo < hi) {
      const std::int64_t mid = lo + (hi - lo + 1) / 2;
      const AllocStatus probe = kv_.allocate_slots(req, mid, computed, group_hits_, 0);
      if (probe == AllocStatus::kOk) {
        kv_.free(req);
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    if (lo > 0) st = kv_.allocate_slots(req, lo, computed, group_hits_, 0);
    KVSIM_ASSERT(lo == 0 || st == AllocStatus::kOk, "cache_only: partial allocation failed");
  } else {
    KVSIM_ASSERT(st == AllocStatus::kOk, "cache_only: allocate_slots failed");
  }
  kv_.free(req);
  kv_.release_request(req);
  return computed;
}

KVPoolStats Scheduler::pool_stats() const {
  const BlockPool& pool = kv_.pool();
  KVPoolStats s;
  s.block_size = kv_.block_size();
  s.num_blocks = pool.num_blocks();
  s.num_free_blocks = pool.num_free_blocks();
  s.usage = kv_.usage();
  s.evictions = pool.stats().evictions;
  s.blocks_allocated = pool.stats().blocks_allocated;
  return s;
}

std::span<const BlockId> Scheduler::group_block_table(const Request& request,
                                                      std::int32_t group) const {
  if (kv_.coordinator()) return request.kv_groups[static_cast<std::size_t>(group)].blocks;
  return group == 0 ? std::span<const BlockId>(request.blocks) : std::span<const BlockId>{};
}

void Scheduler::cached_blocks(std::vector<BlockId>& out) const {
  const BlockPool& pool = kv_.pool();
  out.clear();
  for (const KVCacheBlock& blk : pool.free_queue())
    if (blk.block_hash != kNoHash) out.push_back(pool.id_of(blk));
  for (std::int32_t b = 0; b < pool.num_blocks(); ++b)
    if (pool.block(BlockId{b}).ref_cnt > 0 && pool.block(BlockId{b}).block_hash != kNoHash)
      out.push_back(BlockId{b});
}

KVBreakdown Scheduler::kv_breakdown(std::span<const std::int64_t> final_kv_tokens) const {
  return breakdown(final_kv_tokens, {});
}

KVBreakdown Scheduler::kv_breakdown_by_group(std::span<const std::int64_t> final_kv_tokens,
                                             std::span<KVGroupShare> by_group) const {
  KVSIM_ASSERT(by_group.size() == static_cast<std::size_t>(num_kv_cache_groups()),
               "kv_breakdown_by_group: one share per KV cache group");
  return breakdown(final_kv_tokens, by_group);
}

KVBreakdown Scheduler::breakdown(std::span<const std::int64_t> final_kv_tokens,
                                 std::span<KVGroupShare> by_group) const {
  const BlockPool& pool = kv_.pool();
  const std::int64_t bs = kv_.block_size();
  if (stamp_.size() < static_cast<std::size_t>(pool.num_blocks()))
    stamp_.assign(static_cast<std::size_t>(pool.num_blocks()), 0);
  if (++epoch_ == 0) {  // wrapped: clear the stamps once every 2^32 calls
    std::fill(stamp_.begin(), stamp_.end(), 0);
    epoch_ = 1;
  }
  // vLLM v0.20: several groups, or one that skips blocks, walk every table block by block; one
  // full-attention group is the one table per request of the earlier releases (its shared blocks
  // a prefix), its cached blocks the first num_cached_block of the table.
  const KVCacheCoordinator* coord = kv_.coordinator();
  const bool group_tables = coord != nullptr;  // the tables live in Request::kv_groups
  if (group_tables && (coord->num_groups() > 1 || coord->manager(0).skips_blocks() ||
                       coord->manager(0).block_size() != bs))
    return kv_breakdown_groups(final_kv_tokens, by_group);
  KVBreakdown b;
  std::int64_t used_blocks = 0, used_hashed = 0;
  const bool caching = pool.enable_caching();
  const BlockId null = pool.null_block();
  if (null != kNoBlock) {  // reserved, counted as used, never filled
    b.internal_fragmentation += bs;
    ++used_blocks;
  }
  // Counts a shared block (ref_cnt > 1: full and computed) once over all tables.
  const auto count_shared = [&](BlockId blk) {
    std::uint32_t& st = stamp_[static_cast<std::size_t>(to_int(blk))];
    if (st == epoch_) return;
    st = epoch_;
    b.token_states += bs;
    ++used_blocks;
    ++used_hashed;
  };
  const bool window = !group_tables && kv_.specialized_manager().skips_blocks();
  // With a connector (P/D, the CPU tier) blocks are cached late (a read's at its promotion), so
  // two blocks of one hash are common and a request's table may share a block past one it owns:
  // the shared blocks are not a prefix of the table. Block by block then, as for a window.
  const bool per_block = window || connector_ != nullptr;
  const auto walk = [&](const Request* r) {
    const std::vector<BlockId>& table = group_tables ? r->kv_groups[0].blocks : r->blocks;
    const auto nb = static_cast<std::int64_t>(table.size());
    const std::int64_t idx = r->index();
    const std::int64_t fin = idx >= 0 && static_cast<std::size_t>(idx) < final_kv_tokens.size()
                                 ? final_kv_tokens[static_cast<std::size_t>(idx)]
                                 : r->num_tokens();
    if (per_block) {
      // Sliding window: null entries (positions that left the window) hold nothing, and a hit
      // run may share blocks anywhere in the table: block by block.
      for (std::int64_t k = 0; k < nb; ++k) {
        const BlockId blk = table[static_cast<std::size_t>(k)];
        if (blk == null) continue;
        if (pool.block(blk).ref_cnt > 1) {
          count_shared(blk);
          continue;
        }
        const std::int64_t c = std::clamp<std::int64_t>(r->num_computed_tokens - k * bs, 0, bs);
        const std::int64_t f = std::clamp<std::int64_t>(fin - k * bs, c, bs);
        b.token_states += c;
        b.reservation += f - c;
        b.internal_fragmentation += bs - f;
        ++used_blocks;
        used_hashed += pool.block(blk).block_hash != kNoHash;
      }
      return;
    }
    // Shared blocks (ref_cnt > 1) are a prefix of the table, full and computed: count each once.
    std::int64_t ks = 0;
    while (ks < nb && pool.block(table[static_cast<std::size_t>(ks)]).ref_cnt > 1) {
      count_shared(table[static_cast<std::size_t>(ks)]);
      ++ks;
    }
    const std::int64_t base = ks * bs;
    const std::int64_t own = (nb - ks) * bs;
    const std::int64_t c = std::clamp<std::int64_t>(r->num_computed_tokens - base, 0, own);
    const std::int64_t f = std::clamp<std::int64_t>(fin - base, c, own);
    b.token_states += c;
    b.reservation += f - c;
    b.internal_fragmentation += own - f;
    used_blocks += nb - ks;
    if (caching) {
      // v0.20 caches output blocks a step late under async scheduling: its count says which.
      const std::int64_t cached = group_tables
                                      ? std::max<std::int64_t>(r->kv_groups[0].num_cached_block, 0)
                                      : r->num_computed_tokens / bs;
      used_hashed += std::max<std::int64_t>(0, std::min(cached, nb) - ks);
    }
  };
  for_each_table_holder(walk);
  const std::int64_t num_free = pool.num_free_blocks();
  KVSIM_ASSERT(used_blocks == pool.num_blocks() - num_free,
               "KV breakdown: blocks in running tables disagree with the free count");
  const std::int64_t cached_free_blocks = caching ? pool.num_cached_blocks() - used_hashed : 0;
  b.cached_free = cached_free_blocks * bs;
  b.free = (num_free - cached_free_blocks) * bs;
  b.external_fragmentation = 0;
  if (!by_group.empty()) {  // one group: every block in use but the null block
    const std::int64_t null_blocks = null != kNoBlock ? 1 : 0;
    by_group[0] = KVGroupShare{used_blocks - null_blocks, b.token_states, b.reservation,
                               b.internal_fragmentation - null_blocks * bs, b.cached_free};
  }
  return b;
}

// vLLM v0.20: every group's tables, block by block (a block of a group of block size bs_g counts
// as the pool's block size B of slots, its tokens scaled by B / bs_g); a block held by several
// tables (ref_cnt > 1) counts once as token states, in the group whose table holds it (a block is
// in one group only); a block counts as cached when it carries a hash (output blocks are cached one
// step late with async scheduling), a free cached block in the group its cache key names.
KVBreakdown Scheduler::kv_breakdown_groups(std::span<const std::int64_t> final_kv_tokens,
                                           std::span<KVGroupShare> by_group) const {
  const BlockPool& pool = kv_.pool();
  const KVCacheCoordinator& c = *kv_.coordinator();
  const std::int64_t big_b = kv_.block_size();
  const BlockId null = pool.null_block();
  const auto num_groups = static_cast<std::size_t>(c.num_groups());
  if (group_scratch_.size() != num_groups) group_scratch_.resize(num_groups);
  for (GroupTally& t : group_scratch_) t = GroupTally{};
  const auto walk = [&](const Request* r) {
    const std::int64_t idx = r->index();
    const std::int64_t fin = idx >= 0 && static_cast<std::size_t>(idx) < final_kv_tokens.size()
                                 ? final_kv_tokens[static_cast<std::size_t>(idx)]
                                 : r->num_tokens();
    for (std::size_t g = 0; g < num_groups; ++g) {
      GroupTally& t = group_scratch_[g];
      const std::int64_t bs = c.manager(static_cast<std::int32_t>(g)).block_size();
      const auto& table = r->kv_groups[g].blocks;
      for (std::size_t k = 0; k < table.size(); ++k) {
        const BlockId blk = table[k];
        if (blk == null) continue;
        std::uint32_t& st = stamp_[static_cast<std::size_t>(to_int(blk))];
        if (st == epoch_) continue;  // counted in another table
        st = epoch_;
        ++t.share.blocks;
        t.hashed += pool.block(blk).block_hash != kNoHash;
        if (pool.block(blk).ref_cnt > 1) {
          t.share.token_states += big_b;
          continue;
        }
        const auto start = static_cast<std::int64_t>(k) * bs;
        const std::int64_t comp = std::clamp<std::int64_t>(r->num_computed_tokens - start, 0, bs);
        const std::int64_t fill = std::clamp<std::int64_t>(fin - start, comp, bs);
        const std::int64_t comp_slots = comp * big_b / bs;
        const std::int64_t fill_slots = fill * big_b / bs;
        t.share.token_states += comp_slots;
        t.share.reservation += fill_slots - comp_slots;
        t.share.internal_fragmentation += big_b - fill_slots;
      }
    }
  };
  for_each_table_holder(walk);
  KVBreakdown b;
  b.internal_fragmentation += big_b;  // the null block: reserved, never filled
  std::int64_t used_blocks = 1, cached_free_blocks = 0;
  for (std::size_t g = 0; g < num_groups; ++g) {
    GroupTally& t = group_scratch_[g];
    if (pool.enable_caching())
      t.share.cached_free =
          (pool.num_cached_blocks(static_cast<std::int32_t>(g)) - t.hashed) * big_b;
    used_blocks += t.share.blocks;
    cached_free_blocks += t.share.cached_free / big_b;
    b.token_states += t.share.token_states;
    b.reservation += t.share.reservation;
    b.internal_fragmentation += t.share.internal_fragmentation;
    if (!by_group.empty()) by_group[g] = t.share;
  }
  const std::int64_t num_free = pool.num_free_blocks();
  KVSIM_ASSERT(used_blocks == pool.num_blocks() - num_free,
               "KV breakdown: blocks in running tables disagree with the free count");
  b.cached_free = cached_free_blocks * big_b;
  b.free = (num_free - cached_free_blocks) * big_b;
  return b;
}

}  // namespace kvsim
