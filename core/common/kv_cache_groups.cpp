// vLLM v0.20.1's KV cache groups (vllm/v1/core/kv_cache_utils.py get_kv_cache_groups, :1611, and
// the merge rules of vllm/v1/kv_cache_interface.py).
#include <algorithm>
#include <set>

#include "core/common/kv_pool_detail.h"

namespace kvsim {

namespace {

using detail::KVLog;
using detail::strprintf;

const std::string kUtils = "vllm/v1/core/kv_cache_utils.py:";

// ---- merging specs (KVCacheSpec.merge, is_kv_cache_spec_uniform, UniformTypeKVCacheSpecs) -----

enum class MergeStatus : std::uint8_t { kOk, kNotMergeable, kError };
struct Merged {
  MergeStatus status = MergeStatus::kNotMergeable;
  LayerKVSpec spec;
  KVSizingError error;
};

using SpecRefs = std::vector<const LayerKVSpec*>;

// specs[0].merge(specs): FullAttentionSpec.merge (windows merged, AttentionSpec fields equal),
// MLAAttentionSpec.merge (one cache_dtype_str), else every spec equal. An AssertionError inside
// is "not mergeable"; two window sizes raise ValueError, which vLLM does not catch.
Merged merge_specs(const SpecRefs& specs) {
  const LayerKVSpec& first = *specs.front();
  Merged out;
  if (first.kind == KVSpecKind::kFull) {
    std::set<std::int64_t> windows, chunks;
    for (const LayerKVSpec* s : specs) {
      if (s->kind != KVSpecKind::kFull) return out;  // not FullAttentionSpec, or an MLA spec
      if (s->sliding_window > 0) windows.insert(s->sliding_window);
      if (s->attention_chunk_size > 0) chunks.insert(s->attention_chunk_size);
    }
    if (windows.size() > 1 || chunks.size() > 1) {
      out.status = MergeStatus::kError;
      out.error = {"ValueError",
                   "All attention layers in the same KV cache group must have the same window "
                   "size.",
                   "vllm/v1/kv_cache_interface.py:203 merge_window_sizes"};
      return out;
    }
    LayerKVSpec m = first;
    m.sliding_window = windows.empty() ? 0 : *windows.begin();
    m.attention_chunk_size = chunks.empty() ? 0 : *chunks.begin();
    for (const LayerKVSpec* s : specs) {
      if (s->block_size != m.block_size || s->num_kv_heads != m.num_kv_heads ||
          s->head_size != m.head_size || s->dtype != m.dtype ||
          s->kv_quant_mode != m.kv_quant_mode || s->page_size_padded != m.page_size_padded)
        return out;
    }
    if (m.sliding_window > 0 && m.attention_chunk_size > 0) return out;
    out.status = MergeStatus::kOk;
    out.spec = m;
    return out;
  }
  if (first.kind == KVSpecKind::kMLA) {
    for (const LayerKVSpec* s : specs)
      if (s->kind != KVSpecKind::kMLA || s->cache_dtype_str != first.cache_dtype_str) return out;
  } else {
    for (const LayerKVSpec* s : specs)
      if (!(*s == first)) return out;
  }
  out.status = MergeStatus::kOk;
  out.spec = first;
  return out;
}

// UniformTypeKVCacheSpecs.is_uniform_type: one block size, and every layer needs the same token
// slots (all full/MLA, all one sliding window, all one chunk size, or all mamba).
bool is_uniform_type(const SpecRefs& specs) {
  const LayerKVSpec& one = *specs.front();
  for (const LayerKVSpec* s : specs) {
    if (s->block_size != one.block_size) return false;
    switch (one.kind) {
      case KVSpecKind::kFull:
      case KVSpecKind::kMLA:
        if (s->kind != KVSpecKind::kFull && s->kind != KVSpecKind::kMLA) return false;
        break;
      case KVSpecKind::kSlidingWindow:
        if (s->kind != one.kind || s->sliding_window != one.sliding_window) return false;
        break;
      case KVSpecKind::kChunkedLocal:
        if (s->kind != one.kind || s->attention_chunk_size != one.attention_chunk_size)
          return false;
        break;
      case KVSpecKind::kMamba:
        if (s->kind != one.kind || s->num_speculative_blocks != one.num_speculative_blocks)
          return false;
        break;
    }
  }
  return true;
}

SpecRefs refs_of(const std::vector<NamedLayerSpec>& layers) {
  SpecRefs r;
  r.reserve(layers.size());
  for (const NamedLayerSpec& l : layers) r.push_back(&l.spec);
  return r;
}

// unify_hybrid_kv_cache_specs (:1319): with the hybrid manager off, sliding-window and
// chunked-local layers become full attention that remembers its window.
std::optional<KVSizingError> unify_hybrid(std::vector<NamedLayerSpec>& layers, KVLog& log) {
  if (layers.empty()) return std::nullopt;
  const Merged u = merge_specs(refs_of(layers));
  if (u.status == MergeStatus::kError) return u.error;
  if (u.status == MergeStatus::kOk || is_uniform_type(refs_of(layers))) return std::nullopt;
  log.warning(
      "Hybrid KV cache manager is disabled for this hybrid model, This means we do not enable any "
      "optimizations for saving KV cache memory (e.g., dropping the KV cache outside the sliding "
      "window). The compute of layers like sliding window is still saved.");
  bool full = false, sliding = false, chunked = false;
  for (const NamedLayerSpec& l : layers) {
    full |= l.spec.kind == KVSpecKind::kFull || l.spec.kind == KVSpecKind::kMLA;
    sliding |= l.spec.kind == KVSpecKind::kSlidingWindow;
    chunked |= l.spec.kind == KVSpecKind::kChunkedLocal;
  }
  if (full && (sliding || chunked)) {
    for (NamedLayerSpec& l : layers) {
      LayerKVSpec& s = l.spec;
      if (s.kind != KVSpecKind::kSlidingWindow && s.kind != KVSpecKind::kChunkedLocal) continue;
      // FullAttentionSpec(block_size, num_kv_heads, head_size, dtype, window or chunk,
      // page_size_padded): head_size_v defaults to head_size, kv_quant_mode to NONE.
      LayerKVSpec f;
      f.kind = KVSpecKind::kFull;
      f.block_size = s.block_size;
      f.num_kv_heads = s.num_kv_heads;
      f.head_size = f.head_size_v = s.head_size;
      f.dtype = s.dtype;
      f.dtype_bytes = s.dtype_bytes;
      f.page_size_padded = s.page_size_padded;
      (s.kind == KVSpecKind::kSlidingWindow ? f.sliding_window : f.attention_chunk_size) =
          s.kind == KVSpecKind::kSlidingWindow ? s.sliding_window : s.attention_chunk_size;
      s = f;
    }
  }
  const Merged u2 = merge_specs(refs_of(layers));
  if (u2.status == MergeStatus::kError) return u2.error;
  if (u2.status == MergeStatus::kOk || is_uniform_type(refs_of(layers))) return std::nullopt;
  return KVSizingError{"ValueError",
                       "Hybrid KV cache manager is disabled but failed to convert the KV cache "
                       "specs to one unified type.",
                       kUtils + "1407 unify_hybrid_kv_cache_specs"};
}

// The hybrid allocator (:1007-1171): unify page sizes by raising block sizes, then split the
// buckets of identical specs into groups of group_size layers, strided.
std::optional<KVSizingError> group_hybrid(std::vector<NamedLayerSpec>& layers, KVLog& log,
                                          std::vector<KVCacheGroup>& groups) {
  std::int64_t max_page = 0;
  for (const NamedLayerSpec& l : layers) max_page = std::max(max_page, page_size_bytes(l.spec));
  for (NamedLayerSpec& l : layers) {
    const std::int64_t page = page_size_bytes(l.spec);
    if (page == max_page) continue;
    if (max_page % page != 0)
      return KVSizingError{"NotImplementedError",
                           "The page size of the layer is not divisible by the maximum page size. "
                           "Cannot unify by adjusting block_size.",
                           kUtils + "1035 unify_kv_cache_spec_page_size"};
    l.spec.block_size *= max_page / page;
    if (page_size_bytes(l.spec) != max_page)  // a mamba or padded page does not grow
      return KVSizingError{"AssertionError", "", kUtils + "1042 unify_kv_cache_spec_page_size"};
  }
  std::vector<std::pair<LayerKVSpec, std::vector<std::string>>> buckets;  // first-seen order
  for (const NamedLayerSpec& l : layers) {
    auto it = std::find_if(buckets.begin(), buckets.end(),
                           [&](const auto& b) { return b.first == l.spec; });
    if (it == buckets.end()) it = buckets.insert(buckets.end(), {l.spec, {}});
    it->second.push_back(l.name);
  }
  std::int64_t min_n = INT64_MAX, max_n = 0;
  for (const auto& b : buckets) {
    min_n = std::min<std::int64_t>(min_n, static_cast<std::int64_t>(b.second.size()));
    max_n = std::max<std::int64_t>(max_n, static_cast<std::int64_t>(b.second.size()));
  }
  // Pad the smaller kinds up to the larger when they differ by less than 1.5x.
  const std::int64_t group_size = 2 * max_n < 3 * min_n ? max_n : min_n;
  for (const auto& [spec, names] : buckets) {
    const auto n = static_cast<std::int64_t>(names.size());
    const std::int64_t padding = group_size - n % group_size;
    if (padding != group_size)
      log.warning(strprintf("Add %lld padding layers, may waste at most %.2f%% KV cache memory",
                            static_cast<long long>(padding),
                            static_cast<double>(padding) / static_cast<double>(n) * 100.0));
    const std::int64_t num_groups = cdiv(n, group_size);
    for (std::int64_t i = 0; i < num_groups; ++i) {
      KVCacheGroup g;
      g.spec = spec;
      for (std::int64_t j = i; j < n; j += num_groups)
        g.layer_names.push_back(names[static_cast<std::size_t>(j)]);
      groups.push_back(std::move(g));
    }
  }
  return std::nullopt;
}

}  // namespace

namespace detail {

std::optional<KVSizingError> kv_cache_groups(std::vector<NamedLayerSpec> layers, bool disable_hma,
                                             KVLog& log, std::vector<KVCacheGroup>& groups) {
  if (disable_hma)
    if (auto e = unify_hybrid(layers, log)) return e;
  if (layers.empty()) return std::nullopt;  // attention-free: no groups
  const Merged u = merge_specs(refs_of(layers));
  if (u.status == MergeStatus::kError) return u.error;
  if (u.status == MergeStatus::kOk || is_uniform_type(refs_of(layers))) {
    KVCacheGroup g;
    for (const NamedLayerSpec& l : layers) g.layer_names.push_back(l.name);
    if (u.status == MergeStatus::kOk) {
      g.spec = u.spec;
    } else {
      g.spec = layers.front().spec;
      g.uniform_type_layers = layers;
    }
    groups.push_back(std::move(g));
    return std::nullopt;
  }
  return group_hybrid(layers, log, groups);
}

std::int64_t group_page_bytes(const KVCacheGroup& g) {
  if (g.uniform_type_layers.empty()) return page_size_bytes(g.spec);
  std::int64_t sum = 0;
  for (const NamedLayerSpec& l : g.uniform_type_layers) sum += page_size_bytes(l.spec);
  return sum;
}

std::int64_t group_need_bytes(const KVCacheGroup& g, const RequestLimits& r) {
  if (g.uniform_type_layers.empty()) return max_memory_usage_bytes(g.spec, r);
  std::int64_t pages = 0;
  for (const NamedLayerSpec& l : g.uniform_type_layers)
    pages = std::max(pages, sat_cdiv(max_memory_usage_bytes(l.spec, r), page_size_bytes(l.spec)));
  return sat_mul(pages, group_page_bytes(g));
}

void annotate_group(KVCacheGroup& g, const RequestLimits& r) {
  g.page_size_bytes = group_page_bytes(g);
  g.max_memory_usage_bytes = group_need_bytes(g, r);
  g.max_blocks_per_request = g.max_memory_usage_bytes / g.page_size_bytes;
}

}  // namespace detail

}  // namespace kvsim
