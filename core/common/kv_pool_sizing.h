#pragma once
// From per-layer KV cache specs and the bytes each worker can give the KV cache to the pool an
// engine allocates: KV cache groups, page size, num_blocks, the tensors, what one request needs,
// the maximum concurrency, and the start-up check that one max_model_len request fits. The rules
// are a release's (KVSizingRules, selected by the profile):
//   kV072Uniform  vLLM v0.7.2 (kv_cache_utils.py get_kv_cache_config): every layer is full
//                 attention in one group; the check counts max_model_len tokens on every layer.
//   kV085Uniform  vLLM v0.8.5: sliding-window layers count only their window in the check, then
//                 become full attention when full-attention layers exist; one group.
//   kV020Hybrid   vLLM v0.20.1 (get_kv_cache_configs, kv_cache_utils.py:1920): uniform, uniform
//                 type, or the hybrid allocator (page-size unification, groups of group_size
//                 layers sharing one block pool); num_gpu_blocks_override and --max-model-len auto
//                 before the check; PP workers get the smallest num_blocks.
// The algorithm, with vLLM file:line references: the shared spec vllm-0.20-kv-sizing.md; the
// acceptance cases: tests/cases/kv-sizing-vllm-0.20.1. Pure computation: no I/O. Messages and
// log lines are vLLM's own wording, so callers can print them as the engine would.
//
// What an engine of the vllm-0.20 profile takes from here: KVPoolLayout (num_blocks of the one
// shared pool, engine/scheduler/hash block sizes) and, per KVCacheGroup, the merged spec (kind,
// block_size, sliding_window / attention_chunk_size), its layers and max_blocks_per_request, the
// per-request admission cap of vLLM's single-type managers.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/common/kv_cache_spec.h"

namespace kvsim {

/// The sizing rules of one release (a named policy the profile selects).
enum class KVSizingRules : std::uint8_t { kV072Uniform, kV085Uniform, kV020Hybrid };

/// The rules behind a profile name: vllm-0.7.2, vllm-0.8.5, vllm-0.20; nullopt for another name.
/// The one place that maps profiles to sizing rules.
[[nodiscard]] std::optional<KVSizingRules> kv_sizing_rules_for_profile(std::string_view profile);
/// "vllm-0.7.2, vllm-0.8.5, vllm-0.20" (for messages).
[[nodiscard]] const char* kv_sizing_profile_names();
/// The vLLM release whose rules these are ("v0.7.2", "v0.8.5", "v0.20.1").
[[nodiscard]] const char* kv_sizing_release(KVSizingRules rules);

/// One sizing question (what vLLM's engine passes to get_kv_cache_configs, plus its configs).
struct KVSizingInput {
  std::vector<NamedLayerSpec> layers;  // every KV layer of the model in order, per-worker values
  std::int64_t tensor_parallel_size = 1;
  std::int64_t pipeline_parallel_size = 1;  // kV020Hybrid only; stages split `layers` evenly
  std::vector<std::int64_t> available_memory_bytes;  // one for every worker, or one per rank
  std::int64_t max_model_len = 8192;                 // with auto_fit: the model's derived maximum
  bool auto_fit_max_model_len = false;               // --max-model-len auto (kV020Hybrid only)
  std::int64_t max_num_batched_tokens = 8192;
  std::optional<std::int64_t> num_gpu_blocks_override;
  /// The pool is taken as the override gives it: the max_model_len check of
  /// _check_enough_kv_cache_memory logs its refusal as a warning ("kvsim: vLLM ... would refuse
  /// to start: ...") instead of refusing (kvsim's scenarios; vLLM itself refuses).
  bool override_check_warns = false;
  bool disable_hybrid_kv_cache_manager = false;
  bool enable_prefix_caching = true;
  MambaCacheMode mamba_cache_mode = MambaCacheMode::kNone;
};

/// One KV cache group: layers sharing a block table (vLLM's KVCacheGroupSpec).
struct KVCacheGroup {
  std::vector<std::string> layer_names;
  LayerKVSpec spec;  // the merged spec; for a uniform-type group, its first layer's
  /// Non-empty for a UniformTypeKVCacheSpecs group: each layer's own spec (pages summed).
  std::vector<NamedLayerSpec> uniform_type_layers;
  std::int64_t page_size_bytes = 0;         // one block of this group (uniform type: the sum)
  std::int64_t max_memory_usage_bytes = 0;  // one max_model_len request, this group's spec
  std::int64_t max_blocks_per_request = 0;  // the same in blocks: the admission cap
};

/// One tensor a worker allocates (vLLM's KVCacheTensor), used by the layers in `shared_by`.
struct KVCacheTensor {
  std::int64_t size_bytes = 0;
  std::vector<std::string> shared_by;
};

/// The configuration of one worker (the first rank of its pipeline stage).
struct WorkerKVConfig {
  std::int64_t rank = 0;
  std::int64_t num_blocks = 0;
  std::vector<KVCacheGroup> groups;  // projected onto this worker's layers
  std::vector<KVCacheTensor> tensors;
};

/// What the engine allocates: one block pool of num_blocks blocks (block 0 is the null block)
/// shared by every group, as worker 0 (the scheduler) sees it.
struct KVPoolLayout {
  std::int64_t num_blocks = 0;
  std::int64_t max_model_len = 0;  // after --max-model-len auto
  RequestLimits limits;            // what the per-request needs were computed for
  std::int64_t group_size = 0;     // layers per group (the most in any group)
  std::vector<KVCacheGroup> groups;
  std::vector<KVCacheTensor> tensors;
  std::vector<WorkerKVConfig> stages;  // one per pipeline stage
  std::int64_t max_memory_usage_bytes_per_request = 0;
  double max_concurrency = 0;             // max_model_len requests the pool holds at once
  std::int64_t gpu_kv_cache_tokens = 0;   // vLLM's "GPU KV cache size: N tokens"
  std::int64_t engine_block_size = 0;     // cache_config.block_size: the smallest group block
  std::int64_t scheduler_block_size = 0;  // token alignment (LCM of group block sizes)
  std::int64_t hash_block_size = 0;       // granularity of prefix-cache block hashes
};

/// Where vLLM refuses: the exception class, vLLM's message and where it is raised.
struct KVSizingError {
  std::string type;  // "ValueError", "NotImplementedError", "AssertionError"
  std::string message;
  std::string raised_at;  // "vllm/v1/core/kv_cache_utils.py:714 _check_enough_kv_cache_memory"
};

/// The answer: a layout, or vLLM's error; `log` holds vLLM's log lines ("info: ...",
/// "warning: ...") in order, up to the error.
struct KVSizingResult {
  std::optional<KVPoolLayout> layout;
  std::optional<KVSizingError> error;
  std::vector<std::string> log;
};

/// Sizes the pool by `rules`. Preconditions (KVSIM_ASSERT): block sizes, heads and head sizes
/// positive; memory given for one or tp * pp workers; pp == 1 and no auto-fit unless
/// kV020Hybrid. O(layers * groups) plus a binary search over max_model_len when it is checked.
[[nodiscard]] KVSizingResult size_kv_pool(const KVSizingInput& in, KVSizingRules rules);

/// vLLM's format_gib: round(bytes / 2^30, 2) as Python prints it ("16.0", "4.79").
[[nodiscard]] std::string format_gib(std::int64_t bytes);
/// 1234567 -> "1,234,567" (Python's "{:,}").
[[nodiscard]] std::string with_thousands(std::int64_t v);

}  // namespace kvsim
