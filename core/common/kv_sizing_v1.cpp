// The pool sizing of vLLM v0.7.2 and v0.8.5 (vllm/v1/core/kv_cache_utils.py get_kv_cache_config):
// one group of every layer, num_blocks = memory // page // layers, and the check that one
// max_model_len request fits, made before num_gpu_blocks_override applies.
//   v0.7.2  every decoder layer is a FullAttentionSpec (no sliding-window spec yet); the check
//           counts cdiv(max_model_len, block_size) pages on every layer.
//   v0.8.5  sliding-window layers are SlidingWindowSpecs in the check (their window need), then
//           become full attention when full-attention layers exist; an estimated maximum length
//           is computed for the message (whose f-string bug drops the number: vLLM prints
//           "Based on the available memory,  Try increasing ...").
// Chunked-local layers are full attention in both; MLA pages hold one latent vector per token.
// Neither release has a spec for mamba layers.
#include <algorithm>

#include "core/common/assert.h"
#include "core/common/kv_pool_detail.h"

namespace kvsim::detail {

namespace {

const std::string kUtils = "vllm/v1/core/kv_cache_utils.py:";

// The spec the release's model runner builds for a layer.
LayerKVSpec release_spec(const LayerKVSpec& s, KVSizingRules rules) {
  LayerKVSpec r = s;
  const bool keep_window =
      rules == KVSizingRules::kV085Uniform && s.kind == KVSpecKind::kSlidingWindow;
  if (s.kind == KVSpecKind::kChunkedLocal ||
      (s.kind == KVSpecKind::kSlidingWindow && !keep_window)) {
    r.kind = KVSpecKind::kFull;
    r.sliding_window = r.attention_chunk_size = 0;
    r.head_size_v = r.head_size;
  }
  return r;
}

// type_id of v0.7.2/v0.8.5 specs: layers with equal ids are "uniform".
bool same_type_id(const LayerKVSpec& a, const LayerKVSpec& b) {
  const auto full_like = [](const LayerKVSpec& s) {
    return s.kind == KVSpecKind::kFull || s.kind == KVSpecKind::kMLA;
  };
  if (full_like(a) != full_like(b)) return false;
  if (!full_like(a) && a.sliding_window != b.sliding_window) return false;
  return a.block_size == b.block_size && page_size_bytes(a) == page_size_bytes(b);
}

std::string check_message(KVSizingRules rules, std::int64_t max_model_len, std::int64_t need,
                          std::int64_t available, std::int64_t estimated) {
  const double gib = 1073741824.0;
  if (rules == KVSizingRules::kV072Uniform)
    return strprintf(
        "To serve at least one request with the models's max seq len (%lld), (%.2f GB KV cache is "
        "needed, which is larger than the available KV cache memory (%.2f GB). Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
        static_cast<long long>(max_model_len), static_cast<double>(need) / gib,
        static_cast<double>(available) / gib);
  return strprintf(
      "To serve at least one request with the models's max seq len (%lld), (%.2f GiB KV cache is "
      "needed, which is larger than the available KV cache memory (%.2f GiB).%s  Try increasing "
      "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
      static_cast<long long>(max_model_len), static_cast<double>(need) / gib,
      static_cast<double>(available) / gib, estimated > 0 ? " Based on the available memory," : "");
}

}  // namespace

KVSizingResult size_kv_pool_v1(const KVSizingInput& in, KVSizingRules rules) {
  KVSIM_ASSERT(in.pipeline_parallel_size == 1 && !in.auto_fit_max_model_len);
  KVSizingResult result;
  KVLog log{result.log, {}};
  const bool v072 = rules == KVSizingRules::kV072Uniform;
  std::vector<NamedLayerSpec> layers;
  for (const NamedLayerSpec& l : in.layers) {
    if (l.spec.kind == KVSpecKind::kMamba) {
      result.error = {"NotImplementedError",
                      std::string("vLLM ") + kv_sizing_release(rules) +
                          " has no KV cache spec for mamba (linear-attention) layers such as '" +
                          l.name + "': its V1 engine does not run this model (use vllm-0.20)",
                      "vllm/v1/worker/gpu_model_runner.py get_kv_cache_spec"};
      return result;
    }
    layers.push_back({l.name, release_spec(l.spec, rules)});
  }
  const std::int64_t memory =
      *std::min_element(in.available_memory_bytes.begin(), in.available_memory_bytes.end());
  const RequestLimits limits{in.max_model_len, in.max_num_batched_tokens, in.mamba_cache_mode};
  const auto need_at = [&layers, &limits](std::int64_t len) {
    RequestLimits r = limits;
    r.max_model_len = len;
    std::int64_t sum = 0;
    for (const NamedLayerSpec& l : layers) sum = sat_add(sum, max_memory_usage_bytes(l.spec, r));
    return sum;
  };
  const std::int64_t need = layers.empty() ? 0 : need_at(in.max_model_len);
  if (!layers.empty()) {  // check_enough_kv_cache_memory
    if (memory <= 0) {
      result.error = {"ValueError",
                      "No available memory for the cache blocks. Try increasing "
                      "`gpu_memory_utilization` when initializing the engine.",
                      kUtils + (v072 ? "342" : "527") + " check_enough_kv_cache_memory"};
      return result;
    }
    if (need > memory) {
      const std::int64_t est = v072 ? 0 : estimate_max_model_len(in.max_model_len, memory, need_at);
      result.error = {"ValueError", check_message(rules, in.max_model_len, need, memory, est),
                      kUtils + (v072 ? "352" : "545") + " check_enough_kv_cache_memory"};
      return result;
    }
  }
  if (!v072) {  // unify_hybrid_kv_cache_specs: sliding windows become full attention
    const bool full = std::any_of(layers.begin(), layers.end(), [](const NamedLayerSpec& l) {
      return l.spec.kind == KVSpecKind::kFull || l.spec.kind == KVSpecKind::kMLA;
    });
    for (NamedLayerSpec& l : layers)
      if (full && l.spec.kind == KVSpecKind::kSlidingWindow)
        l.spec = release_spec(l.spec, KVSizingRules::kV072Uniform);
  }
  KVPoolLayout L;
  L.max_model_len = in.max_model_len;
  L.limits = limits;
  if (layers.empty()) {  // no KV layers: nothing to size
    result.layout = std::move(L);
    return result;
  }
  for (const NamedLayerSpec& l : layers) {
    if (!same_type_id(l.spec, layers.front().spec)) {
      result.error = {"NotImplementedError",
                      "layers with different KV cache pages or kinds ('" + layers.front().name +
                          "' and '" + l.name + "') need the hybrid allocator of vllm-0.20",
                      kUtils + (v072 ? "447" : "708") + " get_kv_cache_config"};
      return result;
    }
  }
  const LayerKVSpec& spec = layers.front().spec;
  const std::int64_t page = page_size_bytes(spec), block_size = spec.block_size;
  const auto n = static_cast<std::int64_t>(layers.size());
  L.num_blocks = std::max<std::int64_t>(memory / page / n, 0);
  if (in.num_gpu_blocks_override) {
    log.info(strprintf("Overriding num_gpu_blocks=%lld with num_gpu_blocks_override=%lld",
                       static_cast<long long>(L.num_blocks),
                       static_cast<long long>(*in.num_gpu_blocks_override)));
    L.num_blocks = *in.num_gpu_blocks_override;
  }
  const std::int64_t tokens = sat_mul(L.num_blocks, block_size);
  L.max_concurrency = static_cast<double>(tokens) / static_cast<double>(in.max_model_len);
  L.gpu_kv_cache_tokens = tokens;
  if (v072) {
    log.info(strprintf("# GPU blocks: %lld", static_cast<long long>(L.num_blocks)));
    log.info(strprintf("Maximum concurrency for %lld tokens per request: %.2fx",
                       static_cast<long long>(in.max_model_len), L.max_concurrency));
  } else {
    log.info("GPU KV cache size: " + with_thousands(tokens) + " tokens");
    log.info(strprintf("Maximum concurrency for %s tokens per request: %.2fx",
                       with_thousands(in.max_model_len).c_str(), L.max_concurrency));
  }
  KVCacheGroup g;
  g.spec = spec;
  for (const NamedLayerSpec& l : layers) {
    g.layer_names.push_back(l.name);
    L.tensors.push_back({sat_mul(page, L.num_blocks), {l.name}});
  }
  annotate_group(g, limits);
  L.groups.push_back(std::move(g));
  L.group_size = n;
  WorkerKVConfig w0{0, L.num_blocks, L.groups, L.tensors};
  L.stages.push_back(std::move(w0));
  L.max_memory_usage_bytes_per_request = need;  // as the check counted it
  L.engine_block_size = L.scheduler_block_size = L.hash_block_size = block_size;
  result.layout = std::move(L);
  return result;
}

}  // namespace kvsim::detail
