#include "core/v0/prefix_caching_block_allocator.h"

#include <algorithm>

#include "core/common/assert.h"

namespace kvsim::v0 {

// ---- CacheMetricData ------------------------------------------------------------------------

void CacheMetricData::query(bool hit) {
  ++num_incompleted_block_queries;
  if (hit) ++num_incompleted_block_hit;
  if (num_incompleted_block_queries == kBlockSize) {
    const double hit_rate = static_cast<double>(num_incompleted_block_hit) /
                            static_cast<double>(num_incompleted_block_queries);
    completed_block_cache_hit_rate =
        (completed_block_cache_hit_rate * static_cast<double>(num_completed_blocks) + hit_rate) /
        static_cast<double>(num_completed_blocks + 1);
    num_incompleted_block_queries = 0;
    num_incompleted_block_hit = 0;
    ++num_completed_blocks;
  }
}

double CacheMetricData::hit_rate() const {
  const double incomplete_ratio =
      static_cast<double>(num_incompleted_block_queries) / static_cast<double>(kBlockSize);
  const double total_blocks = static_cast<double>(num_completed_blocks) + incomplete_ratio;
  if (total_blocks == 0) return 0.0;
  double completed_block_hit = 0.0, incompleted_block_hit = 0.0;
  if (num_completed_blocks > 0)
    completed_block_hit =
        completed_block_cache_hit_rate * static_cast<double>(num_completed_blocks);
  if (num_incompleted_block_queries > 0) {
    const double r = static_cast<double>(num_incompleted_block_hit) /
                     static_cast<double>(num_incompleted_block_queries);
    incompleted_block_hit = r * incomplete_ratio;
  }
  return (completed_block_hit + incompleted_block_hit) / total_blocks;
}

// ---- allocator ------------------------------------------------------------------------------

PrefixCachingBlockAllocator::PrefixCachingBlockAllocator(BlockId first_id, std::int32_t num_blocks,
                                                         BlockHashTable& hashes)
    : hashes_(hashes),
      hashless_(first_id, num_blocks),
      evictor_(num_blocks, hashes),
      trackers_(static_cast<std::size_t>(num_blocks)),
      touched_flag_(static_cast<std::size_t>(num_blocks), 0) {}

PrefixCachingBlockAllocator::~PrefixCachingBlockAllocator() {
  evictor_.clear();
  for (std::size_t h = 0; h < cached_.size(); ++h)
    if (cached_[h] != kNoBlock) hashes_.release(HashId{static_cast<std::int32_t>(h)});
}

void PrefixCachingBlockAllocator::set_cached(HashId hash, BlockId id) {
  const auto i = static_cast<std::size_t>(to_int(hash));
  if (i >= cached_.size()) cached_.resize(std::max(i + 1, 2 * cached_.size()), kNoBlock);
  KVSIM_ASSERT(cached_[i] == kNoBlock);
  cached_[i] = id;
  hashes_.retain(hash);
  ++num_cached_;
}

void PrefixCachingBlockAllocator::erase_cached(HashId hash) {
  cached_[static_cast<std::size_t>(to_int(hash))] = kNoBlock;
  --num_cached_;
  hashes_.release(hash);
}

void PrefixCachingBlockAllocator::track(BlockId id, bool computed) {
  Tracker& t = tracker(id);
  vllm_assert(!t.active, "assert not self.active");
  t = Tracker{true, computed, -1};
}

void PrefixCachingBlockAllocator::untrack(BlockId id) {
  Tracker& t = tracker(id);
  vllm_assert(t.active, "assert self.active");
  t = Tracker{};
}

BlockId PrefixCachingBlockAllocator::allocate_evicted_block_id() {
  if (evictor_.num_blocks() == 0) return kNoBlock;
  const LruEvictor::Evicted ev = evictor_.evict();
  const BlockId id{to_int(hashless_.first_id()) + ev.block};
  const BlockId registered = cached_block(ev.hash);
  const bool registered_here = registered != kNoBlock;
  const bool free_here = registered_here && hashless_.ref_count(registered) == 0;
  const bool same = registered == id;
  if (registered_here && free_here && same) erase_cached(ev.hash);
  hashes_.release(ev.hash);
  vllm_assert(registered_here, "assert content_hash_to_evict in self._cached_blocks");
  vllm_assert(free_here, "assert self._refcounter.get(_block_id) == 0");
  vllm_assert(same, "assert _block_id == block_id");
  hashless_.incr_ref(id);
  track(id, false);
  ++evictions_;
  return id;
}

BlockId PrefixCachingBlockAllocator::allocate_block_id() {
  const BlockId id = hashless_.allocate_block_id();
  if (id != kNoBlock) {
    track(id, false);
    return id;
  }
  const BlockId evicted = allocate_evicted_block_id();
  if (evicted == kNoBlock) raise("NoFreeBlocksError", "");
  return evicted;
}

void PrefixCachingBlockAllocator::incr_refcount_cached_block(BlockId id) {
  if (hashless_.incr_ref(id) == 1) {
    const std::int32_t phys = physical_id(id);
    if (evictor_.contains(phys)) evictor_.remove(phys);
    track(id, true);
  }
}

void PrefixCachingBlockAllocator::decr_refcount_cached_block(BlockId id, HashId hash,
                                                             std::int64_t num_hashed_tokens) {
  vllm_assert(hash != kNoHash, "assert block.content_hash is not None");
  if (hashless_.decr_ref(id) > 0) return;
  vllm_assert(cached_block(hash) != kNoBlock, "assert block.content_hash in self._cached_blocks");
  evictor_.add(physical_id(id), hash, num_hashed_tokens, tracker(id).last_accessed);
  untrack(id);
}

void PrefixCachingBlockAllocator::decr_refcount_hashless_block(BlockId id) {
  if (hashless_.ref_count(id) == 1) untrack(id);
  hashless_.free_block_id(id);
}

BlockId PrefixCachingBlockAllocator::allocate_immutable(HashId hash) {
  const BlockId cached = cached_block(hash);
  if (cached != kNoBlock) {
    metric_.query(true);
    incr_refcount_cached_block(cached);
    return cached;
  }
  metric_.query(false);
  const BlockId id = allocate_block_id();
  return promote(id, hash);
}

BlockId PrefixCachingBlockAllocator::promote(BlockId id, HashId hash) {
  vllm_assert(hashless_.ref_count(id) > 0, "assert self._refcounter.get(block.block_id) > 0");
  const BlockId cached = cached_block(hash);
  if (cached == kNoBlock) {
    set_cached(hash, id);
    const auto p = static_cast<std::size_t>(physical_id(id));
    if (!touched_flag_[p]) {
      touched_flag_[p] = 1;
      touched_.push_back(id);
    }
    return id;
  }
  decr_refcount_hashless_block(id);
  incr_refcount_cached_block(cached);
  return cached;
}

BlockId PrefixCachingBlockAllocator::cow_if_not_appendable(BlockId id,
                                                           std::vector<BlockIdPair>& cows) {
  if (hashless_.ref_count(id) <= 1) return id;
  decr_refcount_hashless_block(id);
  const BlockId target = allocate_block_id();
  cows.emplace_back(to_int(id), to_int(target));
  return target;
}

void PrefixCachingBlockAllocator::free(BlockId id, HashId hash, std::int64_t num_hashed_tokens) {
  if (hash != kNoHash)
    decr_refcount_cached_block(id, hash, num_hashed_tokens);
  else
    decr_refcount_hashless_block(id);
}

void PrefixCachingBlockAllocator::fork_block(BlockId id) {
  vllm_assert(hashless_.incr_ref(id) != 1, "can't fork free'd block_id");
}

void PrefixCachingBlockAllocator::mark_accessed(std::span<const BlockId> ids, double now) {
  for (BlockId id : ids) {
    if (!owns(id)) raise("KeyError", std::to_string(to_int(id)));
    Tracker& t = tracker(id);
    if (t.active) {
      t.last_accessed = now;
    } else if (evictor_.contains(physical_id(id))) {
      evictor_.update(physical_id(id), now);
    } else {
      raise("ValueError", "Mark block as accessed which is not belonged to GPU");
    }
  }
}

void PrefixCachingBlockAllocator::mark_computed() {
  for (BlockId id : touched_) {
    tracker(id).computed = true;
    touched_flag_[static_cast<std::size_t>(physical_id(id))] = 0;
  }
  touched_.clear();
}

bool PrefixCachingBlockAllocator::block_is_computed(BlockId id) const {
  const Tracker& t = tracker(id);
  return t.active ? t.computed : evictor_.contains(physical_id(id));
}

std::int64_t PrefixCachingBlockAllocator::find_cached_prefix(std::span<const HashId> hashes) const {
  // bisect_left(hashes, True, key=lambda h: not cached(h)), exactly as Python probes it.
  std::size_t lo = 0, hi = hashes.size();
  while (lo < hi) {
    const std::size_t mid = (lo + hi) / 2;
    const BlockId b = cached_block(hashes[mid]);
    const bool cached = b != kNoBlock && block_is_computed(b);
    if (cached)
      lo = mid + 1;
    else
      hi = mid;
  }
  return static_cast<std::int64_t>(lo);
}

bool PrefixCachingBlockAllocator::reset_prefix_cache() {
  if (num_total_blocks() - num_free_blocks() > 0) return false;
  for (BlockId id; (id = allocate_evicted_block_id()) != kNoBlock;) hashless_.free_block_id(id);
  vllm_assert(num_cached_ == 0, "assert not self._cached_blocks");
  evictor_.clear();
  std::fill(trackers_.begin(), trackers_.end(), Tracker{});
  metric_ = CacheMetricData{};
  return true;
}

void PrefixCachingBlockAllocator::cached_block_ids(std::vector<BlockId>& out) const {
  out.clear();
  for (BlockId b : cached_)
    if (b != kNoBlock) out.push_back(b);
  std::sort(out.begin(), out.end());
}

void PrefixCachingBlockAllocator::computed_block_ids(std::vector<BlockId>& out) const {
  out.clear();
  for (std::size_t p = 0; p < trackers_.size(); ++p)
    if (trackers_[p].active && trackers_[p].computed)
      out.push_back(BlockId{to_int(hashless_.first_id()) + static_cast<std::int32_t>(p)});
}

void PrefixCachingBlockAllocator::touched_block_ids(std::vector<BlockId>& out) const {
  out = touched_;
  std::sort(out.begin(), out.end());
}

void PrefixCachingBlockAllocator::count_hash_refs(std::vector<std::int32_t>& refs) const {
  for (std::size_t h = 0; h < cached_.size(); ++h)
    if (cached_[h] != kNoBlock) ++refs[h];
  evictor_.count_hash_refs(refs);
}

std::string PrefixCachingBlockAllocator::find_violation() const {
  const auto n = static_cast<std::size_t>(num_total_blocks());
  std::vector<bool> in_evictor(n, false);
  for (std::size_t p = 0; p < n; ++p)
    in_evictor[p] = evictor_.contains(static_cast<std::int32_t>(p));
  if (std::string v = hashless_.find_violation(&in_evictor); !v.empty()) return v;
  if (std::string v = evictor_.find_violation(); !v.empty()) return v;
  std::vector<char> registered(n, 0);
  std::int64_t count = 0;
  for (std::size_t h = 0; h < cached_.size(); ++h) {
    const BlockId b = cached_[h];
    if (b == kNoBlock) continue;
    ++count;
    KVSIM_CHECK(owns(b), "a cached hash maps to another device's block");
    const auto p = static_cast<std::size_t>(physical_id(b));
    KVSIM_CHECK(!registered[p],
                "block " + std::to_string(to_int(b)) + " is cached under two hashes");
    registered[p] = 1;
    KVSIM_CHECK(hashes_.ref_count(HashId{static_cast<std::int32_t>(h)}) > 0,
                "a cached hash is not live");
    if (in_evictor[p])
      KVSIM_CHECK(
          evictor_.hash(static_cast<std::int32_t>(p)) == HashId{static_cast<std::int32_t>(h)},
          "an evictor block's hash differs from its registration");
  }
  KVSIM_CHECK(count == num_cached_, "the cached-hash count disagrees");
  for (std::size_t p = 0; p < n; ++p) {
    const BlockId id{to_int(hashless_.first_id()) + static_cast<std::int32_t>(p)};
    const std::int32_t rc = hashless_.ref_count(id);
    KVSIM_CHECK(trackers_[p].active == (rc > 0),
                "block " + std::to_string(to_int(id)) + ": tracker active disagrees with refcount");
    if (in_evictor[p])
      KVSIM_CHECK(registered[p],
                  "block " + std::to_string(to_int(id)) + " is in the evictor uncached");
  }
  std::int64_t flagged = 0;
  for (char f : touched_flag_) flagged += f;
  KVSIM_CHECK(flagged == static_cast<std::int64_t>(touched_.size()), "touched set disagrees");
  return {};
}

}  // namespace kvsim::v0
