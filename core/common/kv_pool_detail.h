#pragma once
// Helpers shared by the sizing rules of core/common/kv_pool_sizing.h (not a public interface).

#include <cstdarg>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/common/kv_pool_sizing.h"

namespace kvsim::detail {

/// printf-style formatting into a std::string.
[[nodiscard]] std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

/// vLLM's logger as lines of text, with info_once's de-duplication.
struct KVLog {
  std::vector<std::string>& lines;
  std::set<std::string> once;
  void info(const std::string& s) { lines.push_back("info: " + s); }
  void info_once(const std::string& s) {
    if (once.insert(s).second) info(s);
  }
  void warning(const std::string& s) { lines.push_back("warning: " + s); }
};

/// get_kv_cache_groups (kv_cache_utils.py:1611): the KV cache groups of the whole model, or
/// vLLM's error. Logs the hybrid-manager and padding warnings.
[[nodiscard]] std::optional<KVSizingError> kv_cache_groups(std::vector<NamedLayerSpec> layers,
                                                           bool disable_hma, KVLog& log,
                                                           std::vector<KVCacheGroup>& groups);

/// The pages of a group: the sum over its layers for a uniform-type group, else its spec's.
[[nodiscard]] std::int64_t group_page_bytes(const KVCacheGroup& g);
/// vLLM's group.kv_cache_spec.max_memory_usage_bytes (uniform type: the most pages any layer
/// needs times the summed page).
[[nodiscard]] std::int64_t group_need_bytes(const KVCacheGroup& g, const RequestLimits& r);
/// Fills page_size_bytes, max_memory_usage_bytes and max_blocks_per_request of `g`.
void annotate_group(KVCacheGroup& g, const RequestLimits& r);

/// Binary search of vLLM's estimate_max_model_len: the largest length in [1, upper] with
/// need(len) <= available, 0 when length 1 does not fit. `need` is monotone in the length.
template <class Need>
[[nodiscard]] std::int64_t estimate_max_model_len(std::int64_t upper, std::int64_t available,
                                                  const Need& need) {
  if (need(1) > available) return 0;
  std::int64_t left = 1, right = upper, result = 1;
  while (left <= right) {
    const std::int64_t mid = (left + right) / 2;
    if (need(mid) <= available) {
      result = mid;
      left = mid + 1;
    } else {
      right = mid - 1;
    }
  }
  return result;
}

/// The v0.7.2 and v0.8.5 rules (kv_sizing_v1.cpp).
[[nodiscard]] KVSizingResult size_kv_pool_v1(const KVSizingInput& in, KVSizingRules rules);
/// The v0.20.1 rules (kv_pool_sizing.cpp).
[[nodiscard]] KVSizingResult size_kv_pool_v020(const KVSizingInput& in);

}  // namespace kvsim::detail
