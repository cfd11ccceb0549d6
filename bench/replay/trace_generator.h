#pragma once
// Seeded generators of large op traces (shared/spec/ops-format.md) for the replay benchmark.
// Each trace is produced by driving kvsim's own manager/scheduler with a scheduler-like policy
// (shared prefixes, chunked prefill, decode, preemption, finishes, aborts, memory pressure),
// recording every op both as a JSON line and as a compact struct for the core-only timing. A kvm
// trace names the hit blocks of one profile's manager, so it is generated per profile; a sched
// trace holds no block ids and serves every profile.

#include <cstdint>
#include <string>
#include <vector>

#include "core/common/engine_config.h"
#include "core/engine_api.h"
#include "sched_op.h"

namespace kvsim::bench {

struct KvmOp {
  enum class Kind : std::uint8_t { kAdd, kLookup, kAlloc, kSetComputed, kAppend, kFree, kFinish };
  Kind kind;
  std::int32_t req;                // request slot
  std::int64_t n = 0;              // num_tokens / computed tokens
  std::vector<std::int32_t> data;  // prompt, hit block ids or appended tokens
};

/// A layout of KV cache groups for vllm-0.20 (empty: the one full-attention group).
struct BenchLayout {
  std::int64_t sliding_window = 0;  // > 0: a sliding-window group of this window, then a full one
};

struct KvmTrace {
  std::int32_t block_size, num_gpu_blocks;
  std::int64_t max_model_len;
  BenchLayout layout;
  std::string text;        // JSON Lines, init first
  std::vector<KvmOp> ops;  // the same ops after init
};

struct SchedTrace {
  std::int32_t block_size, num_gpu_blocks;
  std::int64_t max_model_len, max_num_seqs, max_num_batched_tokens;
  BenchLayout layout;
  std::int64_t rule_mul, rule_add, rule_mod;
  std::string text;
  std::vector<SchedOp> ops;
};

/// A kvm trace recorded on `profile`'s manager (a V1 profile; a layout only for vllm-0.20).
KvmTrace generate_kvm_trace(std::uint64_t seed, std::int64_t num_ops, Profile profile,
                            BenchLayout layout = {});
SchedTrace generate_sched_trace(std::uint64_t seed, std::int64_t num_ops, BenchLayout layout = {});

/// The KV cache configuration of a trace (with the layout's groups).
KVCacheConfig bench_kv_config(std::int32_t block_size, std::int32_t num_gpu_blocks,
                              std::int64_t max_model_len, BenchLayout layout);
/// The init op's "kv_cache_groups" field for a layout ("" for none).
std::string groups_field(const BenchLayout& layout);

}  // namespace kvsim::bench
