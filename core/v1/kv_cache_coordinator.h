#pragma once
// KVCacheCoordinator: vLLM v0.20.1's KV cache coordinator (vllm/v1/core/kv_cache_coordinator.py)
// with the parts of its KVCacheManager that drive it (kv_cache_manager.py get_computed_blocks,
// can_fit_full_sequence, allocate_slots, free, usage, prefix-cache stats): one SingleTypeManager
// per KV cache group over one shared BlockPool. The KVCacheManager of a profile with the policy
// kv_cache_coordinator owns one and forwards to it (shared/spec/vllm-0.20-semantics.md §1-§7).
//
// Hits are searched across groups: groups with identical specs are looked up together, full
// attention first, and the hit length shrinks until every group accepts it (a multiple of the lcm
// of the block sizes). Hashes are kept at hash_block_size granularity on the request; a group of
// k times that block size keys its block by the last of its k hashes.

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/common/block_hash.h"
#include "core/common/engine_config.h"
#include "core/common/request.h"
#include "core/v1/block_pool.h"
#include "core/v1/single_type_manager.h"

namespace kvsim {

/// vLLM's PrefixCacheStats: lookups since the last drain.
struct PrefixCacheStats {
  std::int64_t requests = 0, queries = 0, hits = 0;
  std::int64_t preempted_requests = 0, preempted_queries = 0, preempted_hits = 0;
  bool reset = false;
};

class KVCacheCoordinator {
 public:
  /// The groups of `config` (one full-attention or sliding-window group when it lists none) over
  /// `pool`, hashes interned in `hashes` (whose block size is hash_block_size()); with
  /// `admission_cap` (vLLM v0.20) sliding-window and chunked-local groups cap the blocks a request
  /// is counted for. Precondition: a valid layout (check_layout() is empty).
  KVCacheCoordinator(const KVCacheConfig& config, BlockPool& pool, BlockHashTable& hashes,
                     bool admission_cap);

  /// Why vLLM refuses `config`'s layout ("" if it is fine): group block sizes not multiples of the
  /// hash block size, windows or chunks not positive, several groups of one spec with caching.
  static std::string check_layout(const KVCacheConfig& config);
  /// The groups a config describes (kv_cache_groups, or the one implied by block_size and
  /// sliding_window).
  static std::vector<KVGroupSpec> groups_of(const KVCacheConfig& config);
  /// resolve_kv_cache_block_sizes: the hash block size (the one group's block size, or the gcd).
  static std::int32_t hash_block_size_of(const KVCacheConfig& config);

  std::int32_t num_groups() const { return static_cast<std::int32_t>(managers_.size()); }
  const SingleTypeManager& manager(std::int32_t g) const {
    return managers_[static_cast<std::size_t>(g)];
  }
  SingleTypeManager& manager(std::int32_t g) { return managers_[static_cast<std::size_t>(g)]; }
  std::int32_t hash_block_size() const { return static_cast<std::int32_t>(hash_block_.value()); }
  /// The token alignment of hits and of the scheduler (lcm of the group block sizes).
  std::int64_t lcm_block_size() const { return lcm_block_size_; }

  /// Sizes the request's per-group state (once, when it arrives), with room in every table and
  /// in the hash list for `reserve_tokens` tokens (none when 0). O(groups).
  void init_request(Request& request, std::int64_t reserve_tokens = 0) const;
  /// A new request's hashes are computed when something reads them (with caching): vLLM hashes
  /// the prompt when the request is created and extends the list whenever appended tokens
  /// complete a block; kvsim records the prompt's length here, and sync_block_hashes computes
  /// the same list on demand. A request that never leaves the waiting queue holds none. O(1).
  void defer_prompt_hashes(Request& request) const {
    if (hashing_) request.deferred_hash_tokens = request.num_tokens();
  }
  /// remove_skipped_blocks of every group that skips blocks (sliding window, chunked local).
  void remove_skipped_blocks(Request& request, std::int64_t total_computed_tokens) {
    for (SingleTypeManager& m : managers_)
      if (m.skips_blocks()) m.remove_skipped_blocks(request, total_computed_tokens);
  }
  /// Requests are hashed even with prefix caching off (EngineCore builds the block hasher when a
  /// KV connector is set). Call before the first request.
  void hash_without_caching() { hashing_ = true; }
  /// The hash list vLLM's request holds now: the prompt's full blocks in one pass from block 0
  /// (as vLLM hashed them at creation, if still deferred), then every block the appended tokens
  /// completed since, in one pass. That is vLLM's list although vLLM extended it append by
  /// append: tokens are only ever appended, and a block's extra keys depend on its pass only
  /// through whether the pass starts at block 0 (the multimodal items are then searched from the
  /// first, else from the last; only the prompt's pass, or a first block completed by outputs,
  /// starts there). Every reader of block_hashes calls it first. O(1) when nothing is new, else
  /// O(new blocks).
  void sync_block_hashes(Request& request) {
    if (request.deferred_hash_tokens >= 0) hash_deferred_prompt(request);
    if (!block_hash_due(request)) return;
    // Every decode step's case inline: one block past the first, completed by a text request
    // without a LoRA (no extra keys; a salt keys block 0 only). hash_blocks takes the others.
    const std::int64_t bs = hash_block_.value();
    const std::int64_t start = static_cast<std::int64_t>(request.block_hashes.size()) * bs;
    if (start > 0 && start + 2 * bs > request.num_tokens() &&
        request.mm_positions.empty() && !request.lora_name) {
      request.block_hashes.push_back(hashes_.intern(
          request.block_hashes.back(),
          std::span<const Token>(request.all_token_ids().data() + start,
                                 static_cast<std::size_t>(bs)),
          kExtraNone));
      return;
    }
    hash_blocks(request, request.num_tokens());
  }

  /// get_computed_blocks: the hits per group (replaced) and the hit tokens; records the lookup in
  /// the prefix-cache stats. No state changes.
  std::int64_t get_computed_blocks(Request& request, GroupBlockLists& hits, AllocStatus& status);
  /// can_fit_full_sequence: would the blocks of the request's whole sequence fit.
  bool can_fit_full_sequence(const Request& request, std::int64_t num_new_computed_tokens,
                             const GroupBlockLists& hits, AllocStatus& status,
                             std::int64_t num_external_computed_tokens = 0) const;
  /// allocate_slots (kv_cache_manager.py:264). `hits` all empty stands for vLLM's shared empty
  /// KVCacheBlocks. The new blocks of group g are the last new_blocks(g) of its table.
  /// `num_external_computed_tokens`: tokens a KV connector provides after the local hits (they
  /// get new blocks; num_new_tokens may then be 0).
  AllocStatus allocate_slots(Request& request, std::int64_t num_new_tokens,
                             std::int64_t num_new_computed_tokens, const GroupBlockLists& hits,
                             std::int64_t num_lookahead_tokens, bool delay_cache_blocks,
                             std::int64_t num_external_computed_tokens = 0);
  /// allocate_slots(request, num_new_tokens, 0, no hits, num_lookahead_tokens, false) for a
  /// layout of one full-attention group (the scheduler's running loop): the same result and
  /// effects, without the general path's hit handling and loops over groups. Precondition: one
  /// full-attention group, num_new_tokens > 0.
  AllocStatus allocate_slots_running(Request& request, std::int64_t num_new_tokens,
                                     std::int64_t num_lookahead_tokens) {
    KVSIM_ASSERT(managers_.size() == 1 && !managers_[0].skips_blocks() && num_new_tokens > 0,
                 "allocate_slots_running: one full-attention group and new tokens only");
    SingleTypeManager& m = managers_[0];
    const std::int64_t max_len = config_.max_model_len;
    const std::int64_t total = std::min(request.num_computed_tokens, max_len);
    const std::int64_t need = std::min(total + num_new_tokens + num_lookahead_tokens, max_len);
    // Full attention without hits: the blocks needed are the table's growth.
    if (m.blocks_for(need) - static_cast<std::int64_t>(request.kv_groups[0].blocks.size()) >
        pool_.num_free_blocks()) {
      new_blocks_[0] = 0;
      return AllocStatus::kNoFreeBlocks;
    }
    return grow_and_cache_one_group(request, need, total + num_new_tokens, false);
  }
  /// Zeroes new_blocks() (an allocation that needed none). O(groups), no call for one group.
  void clear_new_blocks() {
    if (new_blocks_.size() == 1)
      new_blocks_[0] = 0;
    else
      std::fill(new_blocks_.begin(), new_blocks_.end(), 0);
  }
  /// New blocks per group of the last allocate_slots.
  std::int32_t new_blocks(std::int32_t g) const { return new_blocks_[static_cast<std::size_t>(g)]; }
  /// cache_blocks' test for a call that caches nothing, one group (a value, so that a caller's
  /// loop keeps it in a register): no prompt hashes deferred, and no block completed since the
  /// last cached one, floor(num_computed_tokens / block_size) <= num_cached_block (as a product).
  struct NothingToCache {
    /// The one group's block size; 0 with several groups: then true only for a negative count,
    /// for which no group has a block to cache either.
    std::int64_t block_size = 0;
    bool operator()(const Request& request, std::int64_t num_computed_tokens) const {
      return request.deferred_hash_tokens < 0 &&
             num_computed_tokens < (request.kv_groups[0].num_cached_block + 1) * block_size;
    }
  };
  NothingToCache nothing_to_cache() const {
    return {managers_.size() == 1 ? std::int64_t{managers_[0].block_size()} : 0};
  }
  /// cache_blocks(request, num_computed_tokens) in every group (with caching). O(1) when no
  /// block completed (one group: inline).
  AllocStatus cache_blocks(Request& request, std::int64_t num_computed_tokens) {
    if (nothing_to_cache()(request, num_computed_tokens)) return AllocStatus::kOk;
    return cache_blocks_of_groups(request, num_computed_tokens);
  }
  /// free: every group in order, each table last block first.
  void free(Request& request);
  /// A mamba group caches in 'align' mode: the scheduler splits prefill chunks at block
  /// boundaries (vLLM's need_mamba_block_aligned_split).
  bool mamba_align() const { return mamba_align_; }
  /// new_step_starts of every group (only mamba groups keep anything across a step). O(1)
  /// without mamba groups.
  void new_step_starts() {
    if (has_mamba_)
      for (SingleTypeManager& m : managers_) m.new_step_starts();
  }
  /// get_num_common_prefix_blocks: one count per group into `out` (replaced).
  void num_common_prefix_blocks(Request& request, std::vector<std::int32_t>& out);
  /// 1 - free / (num_gpu_blocks - 1); 0 for a pool of the null block only.
  double usage() const;
  bool reset_prefix_cache();
  /// The stats since the last call, then cleared.
  PrefixCacheStats take_prefix_cache_stats();
  const PrefixCacheStats& prefix_cache_stats() const { return stats_; }

  /// Consistency of the groups' tables over `live` (requests that may hold blocks): ids in range,
  /// every non-null block in at most one group and counted exactly by its ref count, nulls only
  /// as a prefix of a group that skips blocks, a cached block in a table keyed by that table's
  /// group, entry counts. Returns the first violation ("" if none).
  /// (`extra_hash_refs`: references held outside the requests and the pool, one entry each.)
  std::string find_violation(std::span<const Request* const> live,
                             std::span<const HashId> extra_hash_refs = {}) const;

 private:
  struct AttentionGroup {
    std::int32_t manager;  // the first group's manager (all have the same spec)
    std::vector<std::int32_t> group_ids;
    bool eagle = false;
  };
  GroupHashView view(const Request& r, const SingleTypeManager& m) const {
    return {r.block_hashes.data(), r.block_hashes.size(),
            hash_ratio_[static_cast<std::size_t>(m.group_id())]};
  }
  /// Hashes the blocks tokens [hashed, num_tokens) complete, as vLLM's block hasher does when the
  /// request holds num_tokens tokens.
  void hash_blocks(Request& request, std::int64_t num_tokens);
  void hash_deferred_prompt(Request& request);
  /// Whether the tokens complete a hash block past the request's list. O(1).
  bool block_hash_due(const Request& request) const {
    return hashing_ &&
           static_cast<std::int64_t>(request.block_hashes.size() + 1) * hash_block_.value() <=
               request.num_tokens();
  }
  AllocStatus allocate_slots_one_group(Request& request, std::int64_t num_new_tokens,
                                       std::int64_t num_new_computed_tokens,
                                       const GroupBlockLists& hits,
                                       std::int64_t num_lookahead_tokens, bool delay_cache_blocks,
                                       std::int64_t num_external_computed_tokens);
  /// allocate_slots' last steps for one group: its table grows to `need` slots, then (with
  /// caching, unless delayed) the blocks that min(computed_end, num_tokens) tokens fill are cached.
  AllocStatus grow_and_cache_one_group(Request& request, std::int64_t need,
                                       std::int64_t computed_end, bool delay_cache_blocks) {
    SingleTypeManager& m = managers_[0];
    // (computed_end is also the allocation's tokens without lookahead: num_tokens_main_model.)
    const AllocStatus st = m.allocate_new_blocks(request, need, computed_end, new_blocks_[0]);
    if (st != AllocStatus::kOk || !config_.enable_caching || delay_cache_blocks) return st;
    // Lookahead slots and unverified drafts are not cached. (cache_blocks for the one group,
    // inline.)
    const std::int64_t end = std::min(computed_end, request.num_tokens());
    if (nothing_to_cache()(request, end)) return AllocStatus::kOk;
    return cache_one_group(request, end);
  }
  /// cache_blocks of the one group (with caching), its hashes brought up to date first. (Inline
  /// in the running loop's allocation: as a call it cost 2 M instructions on bench_replay's
  /// 300 k-op sched trace.)
  [[gnu::always_inline]] AllocStatus cache_one_group(Request& request,
                                                     std::int64_t num_computed_tokens) {
    sync_block_hashes(request);
    return managers_[0].cache_blocks(request, num_computed_tokens, view(request, managers_[0]));
  }
  AllocStatus cache_blocks_of_groups(Request& request, std::int64_t num_computed_tokens);
  std::int64_t find_longest_cache_hit(const Request& request, std::int64_t max_length,
                                      GroupBlockLists& hits, AllocStatus& status);
  /// Sum over groups of num_blocks_to_allocate.
  std::int64_t num_blocks_to_allocate(const Request& request, std::int64_t num_tokens,
                                      const GroupBlockLists& hits, std::int64_t total_computed,
                                      std::int64_t main_tokens, AllocStatus& status) const;
  ExtraKeysId extra_keys(const Request& request, std::int64_t start, std::int64_t end,
                         std::int64_t& mm_idx);

  KVCacheConfig config_;
  BlockPool& pool_;
  BlockHashTable& hashes_;
  Divisor hash_block_;               // the hash block size
  std::vector<Divisor> hash_ratio_;  // by group: its block size / the hash block size
  std::int64_t lcm_block_size_;
  std::vector<SingleTypeManager> managers_;
  bool has_mamba_ = false;  // a mamba group (the only type new_step_starts changes)
  bool mamba_align_ = false;  // a mamba group in 'align' mode
  bool hashing_ = config_.enable_caching;  // requests get block hashes
  std::vector<AttentionGroup> attention_groups_;  // full attention first
  std::vector<char> eagle_groups_;                // by group
  PrefixCacheStats stats_;
  std::vector<std::int32_t> new_blocks_;
  std::vector<char> assigned_;        // find_longest_cache_hit's scratch
  std::vector<char> eagle_verified_;  // the same
  std::vector<std::string> extra_scratch_;
  const std::vector<BlockId> no_blocks_;  // an empty hit list
};

}  // namespace kvsim
