#pragma once
// KVCacheManager: vLLM V1's vllm/v1/core/kv_cache_manager.py, exactly, at v0.7.2 (see
// shared/spec/vllm-kv-cache-semantics.md §1-§8) or at v0.8.5.post1 (§11), as its V1Policy says:
// prefix-cache lookup (through the SpecializedManager of the model's attention type), slot
// allocation (with preallocation, lookahead slots), caching of newly full blocks, tail-first
// freeing, usage, prefix-cache reset. With the policy kv_cache_coordinator (vLLM v0.20.1,
// shared/spec/vllm-0.20-semantics.md) it drives a KVCacheCoordinator instead: one table per KV
// cache group, the grouped calls below; the single-table calls are then not used.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/common/block_hash.h"
#include "core/common/engine_config.h"
#include "core/common/request.h"
#include "core/common/types.h"
#include "core/v1/block_pool.h"
#include "core/v1/kv_cache_coordinator.h"
#include "core/v1/single_type_manager.h"
#include "core/v1/specialized_manager.h"
#include "core/v1/v1_policy.h"

namespace kvsim {

struct AllocResult {
  AllocStatus status = AllocStatus::kOk;
  /// The newly allocated blocks are the last num_new_blocks entries of request.blocks.
  std::int32_t num_new_blocks = 0;
  bool ok() const { return status == AllocStatus::kOk; }
};

class KVCacheManager {
 public:
  /// The manager of the release `policy` describes. `hash_fn` picks hash buckets only (equality
  /// is exact); tests inject a colliding one.
  explicit KVCacheManager(const KVCacheConfig& config, const V1Policy& policy = kVllm072Policy,
                          BlockHashTable::BucketHashFn hash_fn = nullptr);

  const KVCacheConfig& config() const { return config_; }
  const V1Policy& policy() const { return policy_; }
  const SpecializedManager& specialized_manager() const { return specialized_; }
  std::int32_t block_size() const { return config_.block_size; }
  std::int32_t num_preallocate_blocks() const { return num_preallocate_blocks_; }
  std::int64_t max_num_blocks_per_req() const { return max_num_blocks_per_req_; }

  /// get_computed_blocks: computes the request's hash list if empty, then the hits of the
  /// specialized manager's lookup (full attention: the longest run of cached blocks from the
  /// start), under the policy's last-block, prompt-logprobs and eagle rules. Replaces `hits`;
  /// returns the number of hit tokens. No state changes besides the hash list. O(blocks of the
  /// request).
  std::int64_t get_computed_blocks(Request& request, std::vector<BlockId>& hits);

  /// allocate_slots(request, num_tokens, new_computed_blocks, num_lookahead_tokens) (spec §4,
  /// §11). Allocates nothing on the heap once the request's table has grown to its final size.
  AllocResult allocate_slots(Request& request, std::int64_t num_tokens,
                             std::span<const BlockId> new_computed_blocks = {},
                             std::int64_t num_lookahead_tokens = 0) {
    // Most calls are a decode step inside the last block: no hit, no new block, no block
    // completed, nothing outside a window. Exactly what the full path returns for them, without
    // its work.
    if (num_tokens > 0 && new_computed_blocks.empty() && !specialized_.skips_blocks()) {
      const std::int64_t computed = request.num_computed_tokens;
      const std::int64_t end = computed + num_tokens;
      if (blocks_for(end + num_lookahead_tokens) <=
              static_cast<std::int64_t>(request.blocks.size()) &&
          (!config_.enable_caching ||
           (policy_.cache_from_num_cached_block ? request.num_cached_block == full_blocks(end)
                                                : full_blocks(end) == full_blocks(computed))))
        return {AllocStatus::kOk, 0};
    }
    return allocate_slots_full(request, num_tokens, new_computed_blocks, num_lookahead_tokens);
  }

  /// For a request that decodes one token per step (allocate_slots(request, 1, {}, lookahead)
  /// every step, nothing skipped by a window): the smallest num_computed_tokens >= the request's
  /// at which that call leaves the fast path above (it allocates or caches a block), given the
  /// table and cached count it holds now. The fast-forward's next event for the request.
  std::int64_t next_decode_event(const Request& request, std::int64_t num_lookahead_tokens) const {
    const std::int64_t bs = config_.block_size;
    const std::int64_t c = request.num_computed_tokens;
    // blocks_for(c + 1 + lookahead) > table size from this count on.
    std::int64_t next =
        std::max(c, static_cast<std::int64_t>(request.blocks.size()) * bs - num_lookahead_tokens);
    if (!config_.enable_caching) return next;
    if (policy_.cache_from_num_cached_block) {
      // num_cached_block != full_blocks(c + 1): now, or once the next block fills.
      const std::int64_t n = request.num_cached_block;
      return std::min(next, n == full_blocks(c + 1) ? (n + 1) * bs - 1 : c);
    }
    // full_blocks(c + 1) != full_blocks(c): c + 1 a multiple of the block size.
    return std::min(next, c + (bs - 1 - c % bs));
  }

  /// free(request): releases the block table, tail first when caching, and forgets the request's
  /// num_cached_block. The hash list is kept. (Coordinator: every group's table, last first.)
  void free(Request& request);

  // ---- vLLM v0.20 (policy kv_cache_coordinator) -------------------------------------------
  /// The coordinator (nullptr for the releases before it).
  KVCacheCoordinator* coordinator() { return coordinator_.get(); }
  const KVCacheCoordinator* coordinator() const { return coordinator_.get(); }
  std::int32_t num_groups() const { return coordinator_ ? coordinator_->num_groups() : 1; }
  /// A new request: sizes its per-group tables; its hashes are computed when first read
  /// (KVCacheCoordinator::defer_prompt_hashes), appended tokens need no call. O(groups).
  void add_request(Request& request) {
    coordinator_->init_request(request);
    coordinator_->defer_prompt_hashes(request);
  }
  /// The request's hash list as vLLM holds it now (KVCacheCoordinator::sync_block_hashes), for
  /// readers outside the manager. O(1) when nothing is new.
  void sync_block_hashes(Request& request) {
    if (coordinator_) coordinator_->sync_block_hashes(request);
  }
  /// get_computed_blocks: hits per group (replaced) and the hit tokens; the lookup is recorded in
  /// the prefix-cache stats.
  std::int64_t get_computed_blocks(Request& request, GroupBlockLists& hits, AllocStatus& status) {
    return coordinator_->get_computed_blocks(request, hits, status);
  }
  /// allocate_slots' test for a call that changes nothing (vLLM v0.20, one full-attention group):
  /// no hits, the new tokens inside the table, no block completed (most decode steps). A value
  /// holding its constants, so that the scheduler's running loop keeps them in registers; never
  /// true for other layouts.
  struct NoOpAllocation {
    bool enabled = false;
    bool caching = false;
    std::int64_t block_size = 1;
    std::int64_t max_model_len = 0;

    /// Whether allocate_slots(request, num_new_tokens, 0, no hits, num_lookahead_tokens,
    /// delay_cache_blocks) would allocate, skip and cache nothing.
    bool operator()(const Request& request, std::int64_t num_new_tokens,
                    std::int64_t num_lookahead_tokens, bool delay_cache_blocks = false) const {
      if (!enabled || num_new_tokens <= 0) return false;
      const std::int64_t end =
          std::min(request.num_computed_tokens, max_model_len) + num_new_tokens;
      return fits(request.kv_groups[0], end, std::min(end + num_lookahead_tokens, max_model_len),
                  request.num_tokens(), delay_cache_blocks);
    }
    /// The same test for a request of `num_tokens` tokens whose computed tokens (below
    /// max_model_len) and new tokens end at `end`, with `need` = min(end + lookahead,
    /// max_model_len): ceil(need / block_size) <= the table's blocks, and with caching
    /// floor(min(end, num_tokens) / block_size) <= num_cached_block (as products: no division).
    bool fits(const KVGroupTable& t, std::int64_t end, std::int64_t need, std::int64_t num_tokens,
              bool delay_cache_blocks) const {
      return need <= static_cast<std::int64_t>(t.blocks.size()) * block_size &&
             (!caching || delay_cache_blocks ||
              std::min(end, num_tokens) < (t.num_cached_block + 1) * block_size);
    }
  };
  NoOpAllocation no_op_allocation() const {
    return {single_full_group_, config_.enable_caching, config_.block_size, config_.max_model_len};
  }

  /// allocate_slots with per-group hits (all empty: no hits); the new blocks of group g are the
  /// last coordinator()->new_blocks(g) of its table. Allocation-free once the tables are sized.
  AllocStatus allocate_slots(Request& request, std::int64_t num_new_tokens,
                             std::int64_t num_new_computed_tokens, const GroupBlockLists& hits,
                             std::int64_t num_lookahead_tokens, bool delay_cache_blocks = false,
                             std::int64_t num_external_computed_tokens = 0) {
    if (num_new_computed_tokens == 0 && num_external_computed_tokens == 0 &&
        (hits.empty() || hits[0].empty()) &&
        no_op_allocation()(request, num_new_tokens, num_lookahead_tokens, delay_cache_blocks)) {
      coordinator_->clear_new_blocks();
      return AllocStatus::kOk;
    }
    return coordinator_->allocate_slots(request, num_new_tokens, num_new_computed_tokens, hits,
                                        num_lookahead_tokens, delay_cache_blocks,
                                        num_external_computed_tokens);
  }

  /// Drops the request's hash-list references; call when the request object is forgotten
  /// (after free). The request must not be used with this manager afterwards.
  void release_request(Request& request);

  /// 1 - num_free_blocks / num_gpu_blocks (cached-but-free blocks count as free; the null block
  /// counts as used; policy usage_excludes_null_block: 1 - free / (num_gpu_blocks - 1)).
  double usage() const;
  bool reset_prefix_cache() {
    return coordinator_ ? coordinator_->reset_prefix_cache() : pool_.reset_prefix_cache();
  }
  /// Leading blocks of the request's table whose ref_cnt == num_running.
  std::int32_t get_num_common_prefix_blocks(const Request& request, std::int64_t num_running) const;

  const BlockPool& pool() const { return pool_; }
  /// BlockPool::set_event_log of the one pool (every KV cache group's blocks are in it).
  void set_kv_event_log(std::vector<KvEvent>* log) { pool_.set_event_log(log); }
  const BlockHashTable& hashes() const { return hashes_; }
  BlockHashTable& hashes() { return hashes_; }

  /// Full consistency walk: pool and hash-table invariants, and `live` (every request that may
  /// hold blocks or hashes) agrees with the ref counts: each block's ref_cnt equals its number of
  /// occurrences in their tables, each hash node's count equals its holders. Returns the first
  /// violation ("" if none). O(blocks + hash nodes + table entries).
  std::string find_violation(std::span<const Request* const> live,
                             std::span<const HashId> extra_hash_refs = {}) const;
  /// Aborts with the violation's message if find_violation() finds one.
  void check_invariants(std::span<const Request* const> live) const;

 private:
  AllocResult allocate_slots_full(Request& request, std::int64_t num_tokens,
                                  std::span<const BlockId> new_computed_blocks,
                                  std::int64_t num_lookahead_tokens);
  void hash_request_tokens(Request& request);
  /// vLLM's generate_block_hash_extra_keys; `mm_idx` is the cursor (-1: the last placeholder).
  ExtraKeysId extra_keys(const Request& request, std::int64_t start, std::int64_t end,
                         std::int64_t& mm_idx);
  /// The hash of block `i` of the request (its tokens, the last placeholder's extra keys) under
  /// `parent`, appended to its hash list. Precondition: the request holds the block's tokens.
  HashId hash_generated_block(Request& request, std::int64_t i, HashId parent);
  /// _cache_full_blocks (v0.7.2) / BlockPool.cache_full_blocks (v0.8.5) over table[first, end):
  /// the parent is block first - 1's hash; v0.7.2 skips leading candidates that carry a hash;
  /// every other candidate must be unhashed. Hashes come from the request's list, or are computed
  /// and appended for blocks completed by generated tokens.
  AllocStatus cache_full_blocks(Request& request, std::int64_t first, std::int64_t end);
  /// floor(tokens / block_size) and ceil(...) for tokens >= 0: a shift when the block size is a
  /// power of two (every step divides; a 64-bit idiv costs tens of cycles).
  std::int64_t full_blocks(std::int64_t tokens) const { return block_.div(tokens); }
  std::int64_t blocks_for(std::int64_t tokens) const { return block_.ceil(tokens); }

  KVCacheConfig config_;
  V1Policy policy_;
  Divisor block_;  // config_.block_size
  std::int32_t num_preallocate_blocks_;
  std::int64_t max_num_blocks_per_req_;
  BlockHashTable hashes_;
  BlockPool pool_;
  SpecializedManager specialized_;
  std::unique_ptr<KVCacheCoordinator> coordinator_;  // policy kv_cache_coordinator
  bool single_full_group_ = false;  // the coordinator's one group is full attention of block_size
  std::vector<std::string> mm_scratch_;
};

}  // namespace kvsim
