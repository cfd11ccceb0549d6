#pragma once
// V1Policy: the behaviours in which the vLLM V1 releases kvsim reproduces differ, each a named
// switch read by the one implementation (BlockPool, KVCacheManager, SpecializedManager, Scheduler).
// A V1 profile is a row of v1_policy(); each switch's comment names the release that introduced
// the newer behaviour (shared/spec/vllm-kv-cache-semantics.md §0 and §11; for v0.20.1,
// shared/spec/vllm-0.20-semantics.md).
//
// Not a switch, because kvsim's model already behaves the same for both releases:
//  - where the block-hash list lives (v0.7.2: on the Request; v0.8.5: the manager's
//    req_to_block_hashes by request id, dropped by free_block_hashes when the request finishes):
//    kvsim keeps it on the Request, kept across preemption and released when the request
//    finishes (KVCacheManager::release_request), which is what both releases observe;
//  - the parent of the first block (hash('None') vs NONE_HASH): only hash equality is observable;
//  - "no token for a partial prefill" (v0.8.5's model runner returns none; v0.7.2's scheduler
//    ignores the one it gets): update_from_output appends a token exactly when the request's
//    computed tokens reach its token count, in both;
//  - a running request with nothing to schedule is skipped (v0.8.5 `continue`); at v0.7.2 it
//    cannot happen (asserted), since num_computed_tokens only advances in update_from_output.

#include "core/engine_api.h"

namespace kvsim {

struct V1Policy {
  // ---- BlockPool ------------------------------------------------------------------------------
  /// v0.8.3+: block 0 is the null block: taken from the free queue at construction, never handed
  /// out, never queued again; touch raises and free lowers its ref count (nothing else reads it);
  /// counted as used (usage = 1 - free / num_gpu_blocks still); reset_prefix_cache succeeds iff it
  /// is the only block in use. Sliding-window tables hold it for skipped positions.
  bool null_block = false;

  // ---- KVCacheManager -------------------------------------------------------------------------
  /// v0.7.x-v0.8.4: an allocation that needs new blocks takes ceil(num_preallocate_tokens /
  /// block_size) more, as far as free blocks and max_model_len allow (v0.8.5 removed it).
  bool preallocate = true;
  /// v0.9.1+: the manager is a KV cache coordinator (KVCacheCoordinator) driving one single-type
  /// manager per KV cache group (full attention, sliding window, chunked local, mamba) over the
  /// one pool: cache keys are (hash, group), a request holds one table per group
  /// (Request::kv_groups), hits are searched across groups until they agree, blocks that left a
  /// window are nulled and freed at the start of every allocation (counting the new hits), a
  /// table is freed last block first even without caching, the common prefix compares with the
  /// number of tables in the group, lookahead slots are capped at max_model_len and only tokens
  /// the request holds are cached. The manager switches below do not apply to it.
  bool kv_cache_coordinator = false;
  /// v0.20: sliding-window and chunked-local groups cap the blocks one request is counted for
  /// (max_admission_blocks_per_request, from max_num_batched_tokens), also for a running request
  /// (vLLM's defect: the table's null entries count, and get_new_blocks may then fail).
  bool admission_cap = false;
  /// v0.9+: the block hashes live on the request: computed when it is created and extended
  /// whenever appended tokens complete a block (kvsim: when first read, the same list; see
  /// KVCacheCoordinator::sync_block_hashes), kept across preemption; the lookup reads at most
  /// num_tokens - 1 tokens; extra keys are the LoRA name, (multimodal identifier, offset in the
  /// block) per item and the cache salt (block 0).
  bool hashes_on_request = false;
  /// v0.10+: usage = 1 - free / (num_gpu_blocks - 1): the null block is not part of the pool.
  bool usage_excludes_null_block = false;
  /// v0.8.4+: allocate_slots also reserves num_lookahead_tokens slots (eagle's draft tokens);
  /// a manager with use_eagle drops the last hit block of a lookup.
  bool lookahead_slots = false;
  /// v0.8.3+: when the request's block hashes cover all its tokens, get_computed_blocks leaves the
  /// last hash out of the lookup, so at least one block is recomputed. v0.7.2: the lookup may hit
  /// every block and the scheduler drops the last hit instead.
  bool last_block_excluded_from_lookup = false;
  /// v0.8.0+: a request that asks for prompt logprobs gets no hit (its hashes are still computed).
  bool prompt_logprobs_skip_lookup = false;
  /// v0.7.3+: allocate_slots caches from the request's count of blocks already cached
  /// (num_cached_block: the hits of the allocation that admitted it, then the full blocks of its
  /// previous allocation; dropped by free), excluding speculative tokens, and every candidate must
  /// be unhashed. v0.7.2: from floor(num_computed_tokens / block_size), skipping leading
  /// candidates that already carry a hash.
  bool cache_from_num_cached_block = false;
  /// v0.7.3+: a block of a multimodal request that overlaps no placeholder hashes with extra keys
  /// None, like a text block. v0.7.2: the empty tuple (), a different hash.
  bool empty_extra_keys_are_none = false;
  /// v0.8.3+: a sliding-window model gets the sliding-window SpecializedManager (the lookup needs a
  /// run of cdiv(sliding_window - 1, block_size) hits, found from the right, with the null block
  /// before it; blocks that left the window are freed before every allocation). v0.7.2 stores the
  /// window and ignores it: every layer is treated as full attention.
  bool sliding_window_manager = false;

  // ---- Scheduler ------------------------------------------------------------------------------
  /// v0.8.3+: a request's chunk is capped by SchedulerConfig::long_prefill_token_threshold when
  /// that is > 0 (v0.7.2 has no such setting).
  bool long_prefill_token_threshold = false;
  /// v0.8.5: a running request's chunk is also capped by max_model_len - num_computed_tokens.
  bool running_chunk_capped_by_max_model_len = false;
  /// v0.8.3+: schedule() advances every scheduled request's num_computed_tokens at its end, and
  /// update_from_output does not. v0.7.2: update_from_output advances it.
  bool advance_computed_in_schedule = false;
  /// v0.20: the running cap leaves the last position: max_model_len - 1 - num_computed_tokens.
  bool running_chunk_cap_leaves_last_position = false;
  /// v0.20: scheduler outputs queue up (EngineCore's batch queue): update_from_output processes
  /// the oldest, walking its requests in scheduling order (skipping finished ones); a request
  /// that was a partial prefill when scheduled gets no token; a stopped request is freed at once.
  /// Also: the scheduler calls new_step_starts, the cached requests of an output list the running
  /// ones before the resumed ones, and the prefix-cache stats count every lookup.
  bool outputs_in_scheduling_order = false;
  /// v0.20's check_stop: nothing stops before min_tokens outputs; then EOS and stop tokens
  /// ("stop") before the length limits ("length"). Earlier: the length limits first.
  bool stop_tokens_before_length = false;
  /// v0.20: the scheduler settings of that release exist: priority policy,
  /// scheduler_reserve_full_isl, enable_chunked_prefill = false, async scheduling,
  /// max_num_scheduled_tokens, min_tokens.
  bool v020_scheduler_settings = false;
};

/// vLLM v0.7.2 (the default profile).
inline constexpr V1Policy kVllm072Policy{};

/// vLLM v0.8.5.post1.
inline constexpr V1Policy kVllm085Policy{
    .null_block = true,
    .preallocate = false,
    .lookahead_slots = true,
    .last_block_excluded_from_lookup = true,
    .prompt_logprobs_skip_lookup = true,
    .cache_from_num_cached_block = true,
    .empty_extra_keys_are_none = true,
    .sliding_window_manager = true,
    .long_prefill_token_threshold = true,
    .running_chunk_capped_by_max_model_len = true,
    .advance_computed_in_schedule = true,
};

/// vLLM v0.20.1: v0.8.5.post1's behaviours, and these.
inline constexpr V1Policy kVllm020Policy = [] {
  V1Policy p = kVllm085Policy;
  p.kv_cache_coordinator = true;
  p.admission_cap = true;
  p.hashes_on_request = true;
  p.usage_excludes_null_block = true;
  p.running_chunk_cap_leaves_last_position = true;
  p.outputs_in_scheduling_order = true;
  p.stop_tokens_before_length = true;
  p.v020_scheduler_settings = true;
  return p;
}();

/// The policy of a profile of the V1 family. Precondition: profile_info(p).family == kV1.
const V1Policy& v1_policy(Profile p);

}  // namespace kvsim
