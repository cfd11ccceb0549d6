#include "core/common/kv_sizing.h"

#include <algorithm>

#include "core/common/assert.h"

namespace kvsim {

std::int64_t kv_heads_per_rank(std::int64_t total_kv_heads, std::int64_t tp, bool mla) {
  KVSIM_ASSERT(total_kv_heads >= 1 && tp >= 1);
  if (mla) return 1;
  return std::max<std::int64_t>(1, total_kv_heads / tp);
}

std::int64_t num_gpu_blocks(const KVCacheSpec& spec, std::int64_t available_bytes) {
  const std::int64_t page = spec.page_bytes_per_layer();
  KVSIM_ASSERT(page > 0 && spec.num_layers > 0);
  if (available_bytes <= 0) return 0;
  return available_bytes / page / spec.num_layers;
}

KVCacheSizing size_kv_cache_blocks(const KVCacheSpec& spec, std::int64_t num_blocks) {
  KVSIM_ASSERT(num_blocks >= 0);
  KVCacheSizing s;
  s.page_bytes_per_layer = spec.page_bytes_per_layer();
  s.bytes_per_token = spec.bytes_per_token();
  s.num_gpu_blocks = num_blocks;
  s.num_token_slots = num_blocks * spec.block_size;
  s.layer_tensor_bytes = num_blocks * s.page_bytes_per_layer;
  s.total_kv_bytes = s.layer_tensor_bytes * spec.num_layers;
  return s;
}

KVCacheSizing size_kv_cache(const KVCacheSpec& spec, std::int64_t available_bytes) {
  return size_kv_cache_blocks(spec, num_gpu_blocks(spec, available_bytes));
}

}  // namespace kvsim
