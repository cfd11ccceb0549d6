#pragma once
// Small helpers shared by the core tests.

#include <cstdint>
#include <numeric>
#include <vector>

#include "core/common/request.h"
#include "core/v1/kv_cache_manager.h"

namespace kvsim::test {

/// Tokens start, start+1, ..., start+n-1.
inline std::vector<Token> iota_tokens(std::int32_t n, Token start = 0) {
  std::vector<Token> t(static_cast<std::size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

inline Request make_request(std::int64_t index, std::vector<Token> prompt,
                            std::int64_t max_tokens = 16) {
  SamplingLimits lim;
  lim.max_tokens = max_tokens;
  return Request(index, std::move(prompt), lim);
}

inline std::vector<std::int32_t> ids(const std::vector<BlockId>& blocks) {
  std::vector<std::int32_t> out;
  for (BlockId b : blocks) out.push_back(to_int(b));
  return out;
}

/// The newly allocated blocks of the last allocate_slots call.
inline std::vector<std::int32_t> new_ids(const Request& r, const AllocResult& res) {
  std::vector<std::int32_t> out;
  for (std::size_t i = r.blocks.size() - static_cast<std::size_t>(res.num_new_blocks);
       i < r.blocks.size(); ++i)
    out.push_back(to_int(r.blocks[i]));
  return out;
}

/// Block ids of the free queue, head (next to evict) first.
inline std::vector<std::int32_t> free_queue_ids(const BlockPool& pool) {
  std::vector<std::int32_t> out;
  for (const KVCacheBlock& b : pool.free_queue()) out.push_back(to_int(pool.id_of(b)));
  return out;
}
inline std::vector<std::int32_t> free_queue_ids(const KVCacheManager& kv) {
  return free_queue_ids(kv.pool());
}

/// Plays the scheduler for a request in kvm mode: lookup, allocate, mark computed.
inline AllocResult prefill(KVCacheManager& kv, Request& r, std::vector<BlockId>& hits) {
  const std::int64_t hit_tokens = kv.get_computed_blocks(r, hits);
  const std::int64_t n = r.num_tokens() - hit_tokens;
  AllocResult res = kv.allocate_slots(r, n, hits);
  if (res.ok()) r.num_computed_tokens = hit_tokens + n;
  return res;
}

}  // namespace kvsim::test
