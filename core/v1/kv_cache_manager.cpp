#include "core/v1/kv_cache_manager.h"

#include <algorithm>

#include "core/common/assert.h"
#include "core/common/hot.h"

namespace kvsim {

KVCacheManager::KVCacheManager(const KVCacheConfig& config, const V1Policy& policy,
                               BlockHashTable::BucketHashFn hash_fn)
    : config_(config),
      policy_(policy),
      block_(config.block_size),
      num_preallocate_blocks_(
          policy.preallocate
              ? static_cast<std::int32_t>(cdiv(config.num_preallocate_tokens, config.block_size))
              : 0),
      max_num_blocks_per_req_(cdiv(config.max_model_len, config.block_size)),
      hashes_(policy.kv_cache_coordinator ? KVCacheCoordinator::hash_block_size_of(config)
                                          : config.block_size,
              hash_fn),
      pool_(config.num_gpu_blocks, config.enable_caching, policy.null_block, hashes_,
            policy.kv_cache_coordinator
                ? static_cast<std::int32_t>(KVCacheCoordinator::groups_of(config).size())
                : 1),
      specialized_(
          config.block_size,
          policy.sliding_window_manager && !policy.kv_cache_coordinator ? config.sliding_window : 0,
          pool_) {
  KVSIM_ASSERT(config.block_size > 0 && config.num_gpu_blocks > 0 && config.max_model_len > 0);
  KVSIM_ASSERT(config.num_preallocate_tokens >= 0 && config.sliding_window >= 0);
  KVSIM_ASSERT(!config.use_eagle || policy.lookahead_slots, "this release has no use_eagle");
  KVSIM_ASSERT(policy.kv_cache_coordinator || config.kv_cache_groups.empty(),
               "this release has one KV cache group");
  // A cached block holds a hash node: room for a full pool's (untouched pages cost no memory).
  if (config.enable_caching) hashes_.reserve(config.num_gpu_blocks);
  if (policy.kv_cache_coordinator) {
    coordinator_ =
        std::make_unique<KVCacheCoordinator>(config, pool_, hashes_, policy.admission_cap);
    const SingleTypeManager& m = coordinator_->manager(0);
    single_full_group_ = coordinator_->num_groups() == 1 &&
                         m.spec().kind == KVGroupKind::kFullAttention &&
                         m.block_size() == config.block_size;
  }
}

KVSIM_HOT ExtraKeysId KVCacheManager::extra_keys(const Request& request, std::int64_t start,
                                                 std::int64_t end, std::int64_t& mm_idx) {
  const auto& mm = request.mm_positions;
  if (mm.empty()) return kExtraNone;
  if (mm.back().offset + mm.back().length < start) return kExtraNone;
  if (mm_idx < 0) mm_idx += static_cast<std::int64_t>(mm.size());
  mm_scratch_.clear();
  std::int64_t cur = mm_idx;
  while (cur < static_cast<std::int64_t>(mm.size())) {
    const MMPlaceholder& p = mm[static_cast<std::size_t>(cur)];
    if (end <= p.offset) break;         // the block has not reached this placeholder
    if (start > p.offset + p.length) {  // the block is past this placeholder
      ++cur;
      continue;
    }
    mm_scratch_.push_back(p.hash);
    if (end >= p.offset + p.length)
      ++cur;  // the block may also reach the next placeholder
    else
      break;
  }
  mm_idx = cur;
  if (mm_scratch_.empty() && policy_.empty_extra_keys_are_none) return kExtraNone;
  return hashes_.intern_extra(mm_scratch_);
}

KVSIM_HOT void KVCacheManager::hash_request_tokens(Request& request) {
  const std::int64_t bs = config_.block_size;
  const std::vector<Token>& tokens = request.all_token_ids();
  if (request.mm_positions.empty()) {
    const auto full = static_cast<std::size_t>(full_blocks(request.num_tokens()) * bs);
    hashes_.intern_chain(kNoHash, std::span<const Token>(tokens.data(), full), kExtraNone,
                         request.block_hashes);
    return;
  }
  std::int64_t mm_idx = 0;
  HashId parent = kNoHash;
  for (std::int64_t start = 0; start + bs <= static_cast<std::int64_t>(tokens.size());
       start += bs) {
    const ExtraKeysId extra = extra_keys(request, start, start + bs, mm_idx);
    const HashId h = hashes_.intern(
        parent, std::span<const Token>(tokens.data() + start, static_cast<std::size_t>(bs)), extra);
    request.block_hashes.push_back(h);
    parent = h;
  }
}

KVSIM_HOT std::int64_t KVCacheManager::get_computed_blocks(Request& request,
                                                           std::vector<BlockId>& hits) {
  KVSIM_ASSERT(!coordinator_, "a KV cache coordinator's lookup is per group");
  hits.clear();
  if (!config_.enable_caching) return 0;
  if (request.block_hashes.empty()) hash_request_tokens(request);
  if (policy_.prompt_logprobs_skip_lookup && request.wants_prompt_logprobs) return 0;
  std::span<const HashId> lookup = request.block_hashes;
  // The full-hit rule: a prompt whose every block could hit recomputes its last block.
  if (policy_.last_block_excluded_from_lookup && !lookup.empty() &&
      static_cast<std::int64_t>(lookup.size()) * config_.block_size == request.num_tokens())
    lookup = lookup.first(lookup.size() - 1);
  specialized_.find_longest_cache_hit(lookup, hits);
  if (config_.use_eagle && !hits.empty()) hits.pop_back();  // eagle recomputes the last hit
  return static_cast<std::int64_t>(hits.size()) * config_.block_size;
}

KVSIM_HOT AllocResult KVCacheManager::allocate_slots_full(
    Request& request, std::int64_t num_tokens, std::span<const BlockId> new_computed_blocks,
    std::int64_t num_lookahead_tokens) {
  KVSIM_ASSERT(!coordinator_, "a KV cache coordinator allocates per group");
  if (num_tokens == 0) return {AllocStatus::kZeroTokens, 0};
  std::vector<BlockId>& table = request.blocks;
  // Blocks that left the window are freed first, whether or not this allocation succeeds.
  if (!specialized_.free_skipped_blocks(table, request.num_computed_tokens))
    return {AllocStatus::kSkippedBeyondTable, 0};
  const std::int64_t bs = config_.block_size;
  const auto num_hits = static_cast<std::int64_t>(new_computed_blocks.size());
  const std::int64_t num_computed = request.num_computed_tokens + num_hits * bs;
  const std::int64_t num_required = blocks_for(num_computed + num_tokens + num_lookahead_tokens);
  const std::int64_t num_new = num_required - static_cast<std::int64_t>(table.size()) - num_hits;

  // Hits that sit in the free queue leave it when touched: they cannot count as free blocks.
  std::int64_t num_evictable = 0;
  for (BlockId b : new_computed_blocks) num_evictable += pool_.block(b).ref_cnt == 0;
  if (num_new > pool_.num_free_blocks() - num_evictable) return {AllocStatus::kNoFreeBlocks, 0};

  if (config_.enable_caching)
    pool_.touch(new_computed_blocks);
  else if (num_hits > 0)
    return {AllocStatus::kHitsWithoutCache, 0};
  table.insert(table.end(), new_computed_blocks.begin(), new_computed_blocks.end());

  std::int32_t num_allocated = 0;
  if (num_new > 0) {
    // Preallocation is opportunistic: capped by the free blocks and the per-request maximum.
    const std::int64_t n =
        std::min({num_new + num_preallocate_blocks_, std::int64_t{pool_.num_free_blocks()},
                  max_num_blocks_per_req_ - static_cast<std::int64_t>(table.size())});
    if (n <= 0) return {AllocStatus::kBeyondMaxBlocks, 0};
    num_allocated = static_cast<std::int32_t>(n);
    pool_.get_new_blocks(num_allocated, table);
  }
  if (!config_.enable_caching) return {AllocStatus::kOk, num_allocated};

  // Cache the blocks this call completes (lookahead slots are not computed tokens).
  const std::int64_t num_full = full_blocks(num_computed + num_tokens);
  const auto num_table = static_cast<std::int64_t>(table.size());
  if (!policy_.cache_from_num_cached_block) {
    // From floor(computed / block_size): a partially computed block is re-examined.
    return {cache_full_blocks(request, full_blocks(num_computed), std::min(num_full, num_table)),
            num_allocated};
  }
  // From the count of blocks already cached (the hits, for a request without an entry).
  const std::int64_t num_cached =
      request.num_cached_block >= 0 ? request.num_cached_block : num_hits;
  if (num_cached != num_full) {
    if (num_cached > static_cast<std::int64_t>(request.block_hashes.size()) ||
        num_cached > num_table)
      return {AllocStatus::kBadCachedCount, num_allocated};
    const AllocStatus st = cache_full_blocks(request, num_cached, std::min(num_full, num_table));
    if (st != AllocStatus::kOk) return {st, num_allocated};
  }
  request.num_cached_block = num_full;
  return {AllocStatus::kOk, num_allocated};
}

KVSIM_HOT HashId KVCacheManager::hash_generated_block(Request& request, std::int64_t i,
                                                      HashId parent) {
  const std::int64_t bs = config_.block_size;
  const std::int64_t start = i * bs;
  std::int64_t mm_idx = -1;  // a block completed by generated tokens: the last placeholder only
  const ExtraKeysId extra = extra_keys(request, start, start + bs, mm_idx);
  const HashId h = hashes_.intern(
      parent,
      std::span<const Token>(request.all_token_ids().data() + start, static_cast<std::size_t>(bs)),
      extra);
  request.block_hashes.push_back(h);
  return h;
}

KVSIM_HOT AllocStatus KVCacheManager::cache_full_blocks(Request& request, std::int64_t first,
                                                        std::int64_t end) {
  if (first >= end) return AllocStatus::kOk;
  const std::vector<BlockId>& table = request.blocks;
  HashId parent = kNoHash;
  if (first > 0) {
    parent = pool_.block(table[static_cast<std::size_t>(first - 1)]).block_hash;
    if (parent == kNoHash) return AllocStatus::kBadPrevBlock;
  }
  std::int64_t i = first;
  // v0.7.2: skip leading candidates that already carry a hash (a block re-covered by a later
  // call). From v0.7.3 the count of cached blocks makes that impossible: no skip.
  for (; !policy_.cache_from_num_cached_block && i < end; ++i) {
    const HashId h = pool_.block(table[static_cast<std::size_t>(i)]).block_hash;
    if (h == kNoHash) break;
    parent = h;
  }
  const auto num_listed = static_cast<std::int64_t>(request.block_hashes.size());
  for (; i < end; ++i) {
    const BlockId b = table[static_cast<std::size_t>(i)];
    if (pool_.block(b).block_hash != kNoHash) return AllocStatus::kBadPrevBlock;
    HashId h;
    if (i < num_listed) {
      h = request.block_hashes[static_cast<std::size_t>(i)];
    } else {
      if ((i + 1) * config_.block_size > request.num_tokens()) return AllocStatus::kMissingTokens;
      h = hash_generated_block(request, i, parent);
    }
    pool_.cache_block(b, h);
    parent = h;
  }
  return AllocStatus::kOk;
}

namespace {
// Prefetch distance, in table entries, for walks over a finished request's blocks and hashes.
constexpr std::size_t kWalkAhead = 8;
}  // namespace

KVSIM_HOT void KVCacheManager::free(Request& request) {
  if (coordinator_) return coordinator_->free(request);
  std::vector<BlockId>& table = request.blocks;
  const std::size_t n = table.size();
  if (config_.enable_caching) {
    for (std::size_t i = n; i-- > 0;) {
      if (i >= kWalkAhead) pool_.prefetch_block(table[i - kWalkAhead]);
      pool_.free_block(table[i]);
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      if (i + kWalkAhead < n) pool_.prefetch_block(table[i + kWalkAhead]);
      pool_.free_block(table[i]);
    }
  }
  table.clear();
  request.num_cached_block = -1;
}

KVSIM_HOT void KVCacheManager::release_request(Request& request) {
  const std::vector<HashId>& hashes = request.block_hashes;
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    if (i + kWalkAhead < hashes.size()) hashes_.prefetch_node(hashes[i + kWalkAhead]);
    hashes_.release(hashes[i]);
  }
  request.block_hashes.clear();
  request.deferred_hash_tokens = -1;
}

double KVCacheManager::usage() const {
  if (policy_.usage_excludes_null_block) {  // the null block is not part of the pool
    if (config_.num_gpu_blocks == 1) return 0.0;
    return 1.0 - static_cast<double>(pool_.num_free_blocks()) / (config_.num_gpu_blocks - 1);
  }
  return 1.0 - static_cast<double>(pool_.num_free_blocks()) / config_.num_gpu_blocks;
}

KVSIM_HOT std::int32_t KVCacheManager::get_num_common_prefix_blocks(
    const Request& request, std::int64_t num_running) const {
  std::int32_t n = 0;
  for (BlockId b : request.blocks) {
    if (pool_.block(b).ref_cnt != num_running) break;
    ++n;
  }
  return n;
}

std::string KVCacheManager::find_violation(std::span<const Request* const> live,
                                          std::span<const HashId> extra_hash_refs) const {
  if (std::string v = pool_.find_violation(); !v.empty()) return v;
  if (std::string v = hashes_.find_violation(); !v.empty()) return v;
  if (coordinator_) return coordinator_->find_violation(live, extra_hash_refs);
  std::vector<std::int32_t> block_refs(static_cast<std::size_t>(pool_.num_blocks()), 0);
  std::vector<std::int32_t> hash_refs(hashes_.capacity(), 0);
  for (const Request* r : live) {
    KVSIM_CHECK(static_cast<std::int64_t>(r->blocks.size()) <= max_num_blocks_per_req_,
                "block table longer than max_model_len allows");
    for (BlockId b : r->blocks) {
      KVSIM_CHECK(to_int(b) >= 0 && to_int(b) < pool_.num_blocks(), "block id out of range");
      ++block_refs[static_cast<std::size_t>(to_int(b))];
    }
    for (HashId h : r->block_hashes) ++hash_refs[static_cast<std::size_t>(to_int(h))];
  }
  for (std::int32_t i = 0; i < pool_.num_blocks(); ++i) {
    const KVCacheBlock& blk = pool_.block(BlockId{i});
    // The null block's count is not maintained (vLLM raises it on touch, lowers it on free).
    KVSIM_CHECK(
        BlockId{i} == pool_.null_block() || blk.ref_cnt == block_refs[static_cast<std::size_t>(i)],
        "a block's ref count differs from the number of tables holding it");
    if (blk.block_hash != kNoHash)
      ++hash_refs[static_cast<std::size_t>(to_int(pool_.hash_of_key(blk.block_hash)))];
  }
  return hashes_.find_ref_count_violation(hash_refs);
}

void KVCacheManager::check_invariants(std::span<const Request* const> live) const {
  KVSIM_ASSERT_NO_VIOLATION(find_violation(live));
}

}  // namespace kvsim
