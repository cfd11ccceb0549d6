#pragma once
// The JSON form of a KV-sizing question and answer, as the acceptance cases of vLLM v0.20.1
// write them (tests/cases/kv-sizing-vllm-0.20.1/README.md): `kvsim kv-size --json-lines` reads
// one question per line and writes one answer per line; `kvsim kv-size --json` writes the answer
// for a model config.
//
// Question keys: id, layers (name, type, num_kv_heads, head_size, dtype, ... per worker: see
// parse_layer_spec in sim/config/layer_specs.h), block_size, tensor_parallel_size,
// pipeline_parallel_size, available_memory_bytes (one number, or one per rank), max_model_len,
// auto_fit_max_model_len, max_num_batched_tokens [8192], num_gpu_blocks_override,
// disable_hybrid_kv_cache_manager [false], enable_prefix_caching [true; false with mamba layers],
// mamba_cache_mode [none], meta (ignored).
// Answer keys: num_blocks, num_usable_blocks, max_model_len, num_groups, engine_block_size,
// group_size, groups (layer_names, num_layers, spec), tensors (size, shared_by),
// total_tensor_bytes, scheduler_groups, max_memory_usage_bytes_per_request, max_concurrency,
// gpu_kv_cache_tokens, scheduler_block_size, hash_block_size, workers (pipeline stages, when
// more than one), log; or error ("ValueError: ..."), raised_at, log.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/common/kv_pool_sizing.h"

namespace kvsim {

/// One parsed question.
struct KVSizingCase {
  std::optional<std::string> id;
  KVSizingInput input;
};

/// Parses one question: `text` is line `line` of `file` (a JSON object on one line). Throws
/// ConfigError "file:line:col: message" on malformed JSON, unknown keys (did-you-mean), missing
/// or out-of-range fields, duplicate layer names or a memory list of the wrong length.
[[nodiscard]] KVSizingCase parse_kv_sizing_case(const std::string& text, const std::string& file,
                                                std::int64_t line);

/// The answer object of `result` (vLLM's key order); `id` is echoed first when given.
[[nodiscard]] nlohmann::ordered_json kv_sizing_result_json(const KVSizingResult& result,
                                                           const std::optional<std::string>& id);

}  // namespace kvsim
