// vLLM v0.20.1's pool sizing (vllm/v1/core/kv_cache_utils.py get_kv_cache_configs, :1920-2051,
// and the functions it calls); the older releases' rules are in kv_sizing_v1.cpp.
#include "core/common/kv_pool_sizing.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <set>
#include <unordered_map>

#include "core/common/assert.h"
#include "core/common/kv_pool_detail.h"

namespace kvsim {

namespace {

using detail::strprintf;

const std::string kUtils = "vllm/v1/core/kv_cache_utils.py:";

// get_pp_indices (vllm/distributed/utils.py): the remainder goes to the stages before the last.
std::pair<std::size_t, std::size_t> pp_range(std::size_t n, std::size_t stage, std::size_t pp) {
  std::vector<std::size_t> parts(pp, n / pp);
  for (std::size_t i = 2; i < n % pp + 2; ++i) parts[pp - i] += 1;
  const std::size_t start = std::accumulate(parts.begin(), parts.begin() + stage, std::size_t{0});
  return {start, start + parts[stage]};
}

std::int64_t uniform_page(const std::vector<KVCacheGroup>& groups) {
  const std::int64_t page = detail::group_page_bytes(groups.front());
  for (const KVCacheGroup& g : groups) KVSIM_ASSERT(detail::group_page_bytes(g) == page);
  return page;
}

std::int64_t max_group_len(const std::vector<KVCacheGroup>& groups) {
  std::size_t n = 0;
  for (const KVCacheGroup& g : groups) n = std::max(n, g.layer_names.size());
  return static_cast<std::int64_t>(n);
}

bool single_uniform_type(const std::vector<KVCacheGroup>& groups) {
  return groups.size() == 1 && !groups.front().uniform_type_layers.empty();
}

// _pool_bytes_per_block (:903): the bytes one block id takes on a worker.
std::int64_t pool_bytes_per_block(const std::vector<KVCacheGroup>& groups) {
  if (single_uniform_type(groups)) return detail::group_page_bytes(groups.front());
  return uniform_page(groups) * max_group_len(groups);
}

// _max_memory_usage_bytes_from_groups (:1716): one max_model_len request, padding slots included.
std::int64_t need_bytes(const std::vector<KVCacheGroup>& groups, const RequestLimits& r) {
  if (groups.empty()) return 0;
  if (single_uniform_type(groups)) {
    std::int64_t sum = 0;
    for (const NamedLayerSpec& l : groups.front().uniform_type_layers)
      sum = sat_add(sum, max_memory_usage_bytes(l.spec, r));
    return sum;
  }
  const std::int64_t page = uniform_page(groups);
  std::int64_t blocks = 0;
  for (const KVCacheGroup& g : groups)
    blocks = sat_add(blocks, sat_cdiv(detail::group_need_bytes(g, r), page));
  return sat_mul(sat_mul(max_group_len(groups), page), blocks);
}

// get_kv_cache_config_from_groups (:1231): num_blocks and the tensors of one worker.
WorkerKVConfig worker_config(const std::vector<KVCacheGroup>& groups, std::int64_t memory,
                             const std::optional<std::int64_t>& override_blocks) {
  WorkerKVConfig w;
  w.groups = groups;
  if (groups.empty()) {
    w.num_blocks = 1;  // attention-free: the null block only
    return w;
  }
  if (single_uniform_type(groups)) {
    w.num_blocks = override_blocks.value_or(memory / detail::group_page_bytes(groups.front()));
    for (const NamedLayerSpec& l : groups.front().uniform_type_layers)
      w.tensors.push_back({sat_mul(page_size_bytes(l.spec), w.num_blocks), {l.name}});
    return w;
  }
  const std::int64_t group_size = max_group_len(groups), page = uniform_page(groups);
  KVSIM_ASSERT(group_size > 0);
  w.num_blocks = override_blocks.value_or(std::max<std::int64_t>(memory / page / group_size, 0));
  for (std::int64_t i = 0; i < group_size; ++i) {
    KVCacheTensor t{sat_mul(page, w.num_blocks), {}};
    for (const KVCacheGroup& g : groups)
      if (static_cast<std::size_t>(i) < g.layer_names.size())
        t.shared_by.push_back(g.layer_names[static_cast<std::size_t>(i)]);
    w.tensors.push_back(std::move(t));
  }
  return w;
}

// get_max_concurrency_for_kv_cache_config (:872).
double max_concurrency(const WorkerKVConfig& w, const RequestLimits& r) {
  const std::int64_t per_group = max_group_len(w.groups);
  std::int64_t need = 0;
  for (const KVCacheGroup& g : w.groups) need = sat_add(need, detail::group_need_bytes(g, r));
  const std::int64_t per_block = detail::group_page_bytes(w.groups.front()) * per_group;
  const std::int64_t blocks = sat_cdiv(sat_mul(per_group, need), per_block);
  return blocks > 0 ? static_cast<double>(w.num_blocks) / static_cast<double>(blocks) : 0.0;
}

std::string check_message(std::int64_t max_model_len, std::int64_t need, std::int64_t available,
                          std::int64_t estimated) {
  std::string est;
  if (estimated > 0)
    est = strprintf("Based on the available memory, the estimated maximum model length is %lld. ",
                    static_cast<long long>(estimated));
  return strprintf(
      "To serve at least one request with the models's max seq len (%lld), (%s GiB KV cache is "
      "needed, which is larger than the available KV cache memory (%s GiB). %sTry increasing "
      "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine. See "
      "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
      static_cast<long long>(max_model_len), format_gib(need).c_str(),
      format_gib(available).c_str(), est.c_str());
}

}  // namespace

namespace detail {

KVSizingResult size_kv_pool_v020(const KVSizingInput& in) {
  KVSizingResult result;
  detail::KVLog log{result.log, {}};
  const auto tp = static_cast<std::size_t>(in.tensor_parallel_size);
  const auto pp = static_cast<std::size_t>(in.pipeline_parallel_size);
  const std::size_t num_workers = tp * pp;
  std::vector<std::int64_t> memory = in.available_memory_bytes;
  if (memory.size() == 1) memory.assign(num_workers, memory.front());
  KVSIM_ASSERT(memory.size() == num_workers);

  std::vector<KVCacheGroup> global;
  if (auto e =
          detail::kv_cache_groups(in.layers, in.disable_hybrid_kv_cache_manager, log, global)) {
    result.error = e;
    return result;
  }
  // Each worker sees its pipeline stage's layers; project the global groups onto them.
  std::unordered_map<std::string, std::size_t> stage_of;
  for (std::size_t s = 0; s < pp; ++s) {
    const auto [begin, end] = pp_range(in.layers.size(), s, pp);
    for (std::size_t i = begin; i < end; ++i) stage_of[in.layers[i].name] = s;
  }
  std::vector<std::vector<KVCacheGroup>> projected(num_workers);
  for (std::size_t w = 0; w < num_workers; ++w) {
    for (const KVCacheGroup& g : global) {
      KVCacheGroup p = g;
      p.layer_names.clear();
      for (const std::string& n : g.layer_names)
        if (stage_of.at(n) == w / tp) p.layer_names.push_back(n);
      if (!g.uniform_type_layers.empty() && !p.layer_names.empty()) {
        p.uniform_type_layers.clear();
        for (const NamedLayerSpec& l : g.uniform_type_layers)
          if (stage_of.at(l.name) == w / tp) p.uniform_type_layers.push_back(l);
        p.spec = p.uniform_type_layers.front().spec;
      }
      projected[w].push_back(std::move(p));
    }
  }
  if (in.num_gpu_blocks_override) {
    for (std::size_t w = 0; w < num_workers; ++w) {
      if (projected[w].empty()) continue;
      const std::int64_t per_block = pool_bytes_per_block(projected[w]);
      log.info(strprintf("Overriding num_gpu_blocks=%lld with num_gpu_blocks_override=%lld",
                         static_cast<long long>(memory[w] / per_block),
                         static_cast<long long>(*in.num_gpu_blocks_override)));
      memory[w] = sat_mul(*in.num_gpu_blocks_override, per_block);
    }
  }
  RequestLimits limits{in.max_model_len, in.max_num_batched_tokens, in.mamba_cache_mode};
  const auto need_at = [&](const std::vector<KVCacheGroup>& groups) {
    return [&groups, limits](std::int64_t len) {
      RequestLimits r = limits;
      r.max_model_len = len;
      return need_bytes(groups, r);
    };
  };
  if (in.auto_fit_max_model_len && !global.empty()) {  // _auto_fit_max_model_len (:1814)
    std::int64_t fit = in.max_model_len, limiting = memory.front();
    for (std::size_t w = 0; w < num_workers; ++w) {
      const std::int64_t m =
          estimate_max_model_len(in.max_model_len, memory[w], need_at(projected[w]));
      if (m < fit) fit = m, limiting = memory[w];
    }
    if (fit <= 0) {
      result.error = {"ValueError",
                      "Cannot auto-fit max_model_len: not enough GPU memory available to serve "
                      "even a single token. Try increasing `gpu_memory_utilization`.",
                      kUtils + "1854 _auto_fit_max_model_len"};
      return result;
    }
    if (fit >= in.max_model_len) {
      log.info_once(
          strprintf("Auto-fit max_model_len: full model context length %lld fits in "
                    "available GPU memory",
                    static_cast<long long>(in.max_model_len)));
    } else {
      log.info_once(
          strprintf("Auto-fit max_model_len: reduced from %lld to %lld to fit in "
                    "available GPU memory (%s GiB available for KV cache)",
                    static_cast<long long>(in.max_model_len), static_cast<long long>(fit),
                    format_gib(limiting).c_str()));
      limits.max_model_len = fit;
    }
  } else if (in.auto_fit_max_model_len) {
    log.info_once(
        strprintf("Auto-fit max_model_len: attention-free model, using derived "
                  "max_model_len=%lld",
                  static_cast<long long>(in.max_model_len)));
  }
  for (std::size_t w = 0; w < num_workers; ++w) {  // _check_enough_kv_cache_memory (:689)
    if (projected[w].empty()) continue;
    if (memory[w] <= 0) {
      result.error = {"ValueError",
                      "No available memory for the cache blocks. Try increasing "
                      "`gpu_memory_utilization` when initializing the engine. See "
                      "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more "
                      "details.",
                      kUtils + "696 _check_enough_kv_cache_memory"};
      return result;
    }
    const std::int64_t need = need_bytes(projected[w], limits);
    if (need > memory[w]) {
      const std::int64_t est =
          estimate_max_model_len(limits.max_model_len, memory[w], need_at(projected[w]));
      std::string message = check_message(limits.max_model_len, need, memory[w], est);
      if (in.num_gpu_blocks_override && in.override_check_warns) {
        log.warning("kvsim: vLLM v0.20.1 would refuse to start with this pool: ValueError: " +
                    message);
        continue;
      }
      result.error = {"ValueError", std::move(message),
                      kUtils + "714 _check_enough_kv_cache_memory"};
      return result;
    }
  }
  std::vector<WorkerKVConfig> configs;
  for (std::size_t w = 0; w < num_workers; ++w)
    configs.push_back(worker_config(projected[w], memory[w], in.num_gpu_blocks_override));
  std::int64_t min_blocks = INT64_MAX;
  for (const WorkerKVConfig& c : configs) min_blocks = std::min(min_blocks, c.num_blocks);
  for (std::size_t w = 0; w < num_workers; ++w) {
    WorkerKVConfig& c = configs[w];
    c.rank = static_cast<std::int64_t>(w);
    for (KVCacheTensor& t : c.tensors)
      if (c.num_blocks > 0) t.size_bytes = t.size_bytes / c.num_blocks * min_blocks;
    c.num_blocks = min_blocks;
    for (KVCacheGroup& g : c.groups) annotate_group(g, limits);
    if (c.groups.empty()) continue;
    const double conc = max_concurrency(c, limits);  // _report_kv_cache_config (:1684)
    log.info_once(strprintf(
        "GPU KV cache size: %s tokens",
        with_thousands(static_cast<std::int64_t>(conc * static_cast<double>(limits.max_model_len)))
            .c_str()));
    log.info_once(strprintf("Maximum concurrency for %s tokens per request: %.2fx",
                            with_thousands(limits.max_model_len).c_str(), conc));
  }

  KVPoolLayout L;
  const WorkerKVConfig& w0 = configs.front();
  L.num_blocks = min_blocks;
  L.max_model_len = limits.max_model_len;
  L.limits = limits;
  L.groups = w0.groups;
  L.tensors = w0.tensors;
  L.group_size = max_group_len(w0.groups);
  for (std::size_t s = 0; s < pp; ++s) L.stages.push_back(configs[s * tp]);
  L.max_memory_usage_bytes_per_request = need_bytes(w0.groups, limits);
  if (!w0.groups.empty()) {
    L.max_concurrency = max_concurrency(w0, limits);
    L.gpu_kv_cache_tokens =
        static_cast<std::int64_t>(L.max_concurrency * static_cast<double>(L.max_model_len));
    // resolve_kv_cache_block_sizes (:569) after core.py:272 sets the smallest group block size.
    L.engine_block_size = INT64_MAX;
    std::int64_t lcm = 1, gcd = 0;
    bool mamba_off_grid = false;
    for (const KVCacheGroup& g : w0.groups)
      L.engine_block_size = std::min(L.engine_block_size, g.spec.block_size);
    for (const KVCacheGroup& g : w0.groups) {
      lcm = std::lcm(lcm, g.spec.block_size);
      gcd = std::gcd(gcd, g.spec.block_size);
      mamba_off_grid |=
          g.spec.kind == KVSpecKind::kMamba && g.spec.block_size != L.engine_block_size;
    }
    if (w0.groups.size() == 1) {
      L.scheduler_block_size = L.hash_block_size = L.engine_block_size;
    } else {
      L.scheduler_block_size = lcm;
      L.hash_block_size = in.enable_prefix_caching && !mamba_off_grid ? gcd : lcm;
    }
  }
  result.layout = std::move(L);
  return result;
}

std::string strprintf(const char* fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string s(static_cast<std::size_t>(std::max(n, 0)), '\0');
  std::vsnprintf(s.data(), s.size() + 1, fmt, ap2);
  va_end(ap2);
  return s;
}

}  // namespace detail

std::optional<KVSizingRules> kv_sizing_rules_for_profile(std::string_view profile) {
  if (profile == "vllm-0.7.2") return KVSizingRules::kV072Uniform;
  if (profile == "vllm-0.8.5") return KVSizingRules::kV085Uniform;
  if (profile == "vllm-0.20") return KVSizingRules::kV020Hybrid;
  return std::nullopt;
}

const char* kv_sizing_profile_names() { return "vllm-0.7.2, vllm-0.8.5, vllm-0.20"; }

const char* kv_sizing_release(KVSizingRules rules) {
  switch (rules) {
    case KVSizingRules::kV072Uniform:
      return "v0.7.2";
    case KVSizingRules::kV085Uniform:
      return "v0.8.5";
    case KVSizingRules::kV020Hybrid:
      return "v0.20.1";
  }
  return "?";
}

KVSizingResult size_kv_pool(const KVSizingInput& in, KVSizingRules rules) {
  KVSIM_ASSERT(in.tensor_parallel_size >= 1 && in.pipeline_parallel_size >= 1);
  KVSIM_ASSERT(in.max_model_len >= 1 && in.max_num_batched_tokens >= 1);
  KVSIM_ASSERT(!in.available_memory_bytes.empty());
  for (const NamedLayerSpec& l : in.layers) {
    KVSIM_ASSERT(l.spec.block_size >= 1 && page_size_bytes(l.spec) >= 1);
    if (is_attention(l.spec.kind)) KVSIM_ASSERT(l.spec.num_kv_heads >= 1 && l.spec.head_size >= 1);
  }
  if (rules == KVSizingRules::kV020Hybrid) return detail::size_kv_pool_v020(in);
  return detail::size_kv_pool_v1(in, rules);
}

std::string format_gib(std::int64_t bytes) {
  std::string s = detail::strprintf("%.2f", static_cast<double>(bytes) / 1073741824.0);
  while (s.size() > 1 && s.back() == '0' && s[s.size() - 2] != '.') s.pop_back();
  return s;
}

std::string with_thousands(std::int64_t v) {
  const std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out = v < 0 ? "-" : "";
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace kvsim
