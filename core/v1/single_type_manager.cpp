#include "core/v1/single_type_manager.h"

#include <algorithm>

#include "core/common/assert.h"
#include "core/common/hot.h"

namespace kvsim {
namespace {

void pop_all(GroupBlockLists& hits, std::span<const std::int32_t> group_ids) {
  for (std::int32_t g : group_ids) hits[static_cast<std::size_t>(g)].pop_back();
}

}  // namespace

const char* alloc_status_message(AllocStatus s) {
  switch (s) {
    case AllocStatus::kOk:
    case AllocStatus::kNoFreeBlocks:
      return "";
    case AllocStatus::kZeroTokens:
      return "ValueError: num_tokens must be greater than 0";
    case AllocStatus::kHitsWithoutCache:
      return "AssertionError: Computed blocks should be empty when prefix caching is disabled";
    case AllocStatus::kBeyondMaxBlocks:
      return "AssertionError: num_new_blocks > 0 (request beyond max_model_len)";
    case AllocStatus::kMissingTokens:
      return "AssertionError: a block to cache has fewer than block_size tokens";
    case AllocStatus::kBadPrevBlock:
      return "AssertionError: inconsistent block hashes in _cache_full_blocks";
    case AllocStatus::kBadCachedCount:
      return "AssertionError: num_cached_block beyond the request's hashes or blocks";
    case AllocStatus::kSkippedBeyondTable:
      return "IndexError: list index out of range (remove_skipped_blocks)";
    case AllocStatus::kPoolExhausted:
      return "ValueError: Cannot get the free blocks from the pool";
    case AllocStatus::kHitsForKnownRequest:
      return "AssertionError: len(new_computed_blocks) == 0 for a running request";
    case AllocStatus::kTableNotEmpty:
      return "AssertionError: len(req_blocks) == 0 for new computed blocks";
    case AllocStatus::kBlockAlreadyCached:
      return "AssertionError: blk.block_hash is None (cache_full_blocks)";
    case AllocStatus::kHashesMissing:
      return "AssertionError: len(request.block_hashes) >= num_full_blocks";
    case AllocStatus::kLookupUnsupported:
      return "AssertionError: unsupported lookup (eagle or mixed block sizes with chunked "
             "local attention)";
    case AllocStatus::kMambaAlignBlocks:
      return "AssertionError: mamba 'align' allocate_new_blocks (num_required_blocks)";
  }
  return "RuntimeError: allocation failed";
}

SingleTypeManager::SingleTypeManager(const KVGroupSpec& spec, std::int32_t group_id,
                                     std::int64_t admission_cap_blocks, BlockPool& pool)
    : spec_(spec),
      block_(spec.block_size),
      group_id_(group_id),
      admission_cap_(admission_cap_blocks),
      pool_(pool) {
  KVSIM_ASSERT(spec.block_size > 0 && admission_cap_blocks >= 0);
  KVSIM_ASSERT(spec.kind == KVGroupKind::kFullAttention || pool.null_block() != kNoBlock,
               "a group that skips blocks needs a pool with a null block");
}

bool SingleTypeManager::lookup(HashId hash, std::span<const std::int32_t> group_ids,
                               BlockId* found) const {
  for (std::size_t i = 0; i < group_ids.size(); ++i) {
    found[i] = pool_.get_cached_block(pool_.key_of(hash, group_ids[i]));
    if (found[i] == kNoBlock) return false;
  }
  return true;
}

KVSIM_HOT AllocStatus SingleTypeManager::find_longest_cache_hit(
    const GroupHashView& hashes, std::int64_t max_length, std::span<const std::int32_t> group_ids,
    bool use_eagle, std::int64_t alignment_tokens, GroupBlockLists& hits) const {
  const std::int64_t bs = spec_.block_size;
  const BlockId null = pool_.null_block();
  BlockId found[256];
  KVSIM_ASSERT(group_ids.size() <= 256);
  std::vector<BlockId>& first = hits[static_cast<std::size_t>(group_ids[0])];
  const auto len = [&] { return static_cast<std::int64_t>(first.size()); };
  // Drops hits until their length is a multiple of alignment_tokens. (The test of bs apart:
  // within the loop's test GCC computed the remainder even when bs is the alignment, a division
  // per lookup.)
  const bool aligning = bs != alignment_tokens;
  const auto align_down = [&] {
    if (aligning)
      while (len() * bs % alignment_tokens != 0) pop_all(hits, group_ids);
  };
  for (std::int32_t g : group_ids) hits[static_cast<std::size_t>(g)].clear();
  const std::int64_t max_blocks = full_blocks(max_length);

  switch (spec_.kind) {
    case KVGroupKind::kFullAttention: {
      const auto n = std::min<std::int64_t>(max_blocks, static_cast<std::int64_t>(hashes.size()));
      if (group_ids.size() == 1) {  // one group: its keys directly
        const std::int32_t g = group_ids[0];
        for (std::int64_t i = 0; i < n; ++i) {
          const BlockId b =
              pool_.get_cached_block(pool_.key_of(hashes[static_cast<std::size_t>(i)], g));
          if (b == kNoBlock) break;
          first.push_back(b);
        }
        if (use_eagle && !first.empty()) first.pop_back();
        align_down();
        return AllocStatus::kOk;
      }
      for (std::int64_t i = 0; i < n; ++i) {  // a chain: after the first miss nothing can hit
        if (!lookup(hashes[static_cast<std::size_t>(i)], group_ids, found)) break;
        for (std::size_t j = 0; j < group_ids.size(); ++j)
          hits[static_cast<std::size_t>(group_ids[j])].push_back(found[j]);
      }
      if (use_eagle && !first.empty()) pop_all(hits, group_ids);
      align_down();
      return AllocStatus::kOk;
    }
    case KVGroupKind::kSlidingWindow: {
      // From the right, stop at the first run of enough hits; nulls before it.
      std::int64_t need = cdiv(spec_.sliding_window - 1, bs);
      if (use_eagle) ++need;
      for (std::int32_t g : group_ids)
        hits[static_cast<std::size_t>(g)].assign(static_cast<std::size_t>(max_blocks), null);
      std::int64_t run = 0;
      bool found_run = false;
      for (std::int64_t i = max_blocks - 1; i >= 0; --i) {
        if (!lookup(hashes[static_cast<std::size_t>(i)], group_ids, found)) {
          run = 0;
          continue;
        }
        if (run == 0 && bs != alignment_tokens) {
          const std::int64_t post_pop = use_eagle ? i : i + 1;
          if (post_pop * bs % alignment_tokens != 0) continue;
        }
        for (std::size_t j = 0; j < group_ids.size(); ++j)
          hits[static_cast<std::size_t>(group_ids[j])][static_cast<std::size_t>(i)] = found[j];
        if (++run >= need) {
          for (std::int32_t g : group_ids)
            hits[static_cast<std::size_t>(g)].resize(static_cast<std::size_t>(i + run));
          found_run = true;
          break;
        }
      }
      if (!found_run) {  // the hits from block 0 on count anyway
        for (std::int32_t g : group_ids)
          hits[static_cast<std::size_t>(g)].resize(static_cast<std::size_t>(run));
        align_down();
      }
      if (use_eagle && !first.empty()) {
        pop_all(hits, group_ids);
        align_down();
      }
      return AllocStatus::kOk;
    }
    case KVGroupKind::kChunkedLocal: {
      if (use_eagle || bs != alignment_tokens) return AllocStatus::kLookupUnsupported;
      const std::int64_t chunk = spec_.attention_chunk_size;
      const std::int64_t start = max_length > 0 ? max_length / chunk * chunk : 0;
      const std::int64_t start_block = start / bs;
      for (std::int32_t g : group_ids)
        hits[static_cast<std::size_t>(g)].assign(static_cast<std::size_t>(start_block), null);
      for (std::int64_t i = start_block; i < max_blocks; ++i) {
        if (!lookup(hashes[static_cast<std::size_t>(i)], group_ids, found)) break;
        for (std::size_t j = 0; j < group_ids.size(); ++j)
          hits[static_cast<std::size_t>(group_ids[j])].push_back(found[j]);
      }
      return AllocStatus::kOk;
    }
    case KVGroupKind::kMamba: {
      // From the right: the single last hit (aligned), nulls before it.
      for (std::int64_t i = max_blocks - 1; i >= 0; --i) {
        if (!lookup(hashes[static_cast<std::size_t>(i)], group_ids, found)) continue;
        if (bs != alignment_tokens && (i + 1) * bs % alignment_tokens != 0) continue;
        for (std::size_t j = 0; j < group_ids.size(); ++j) {
          auto& h = hits[static_cast<std::size_t>(group_ids[j])];
          h.assign(static_cast<std::size_t>(i), null);
          h.push_back(found[j]);
        }
        break;
      }
      return AllocStatus::kOk;
    }
  }
  return AllocStatus::kOk;
}

std::int64_t SingleTypeManager::num_skipped_tokens(std::int64_t num_computed_tokens) const {
  switch (spec_.kind) {
    case KVGroupKind::kFullAttention:
      return 0;
    case KVGroupKind::kSlidingWindow:
      return std::max<std::int64_t>(0, num_computed_tokens - spec_.sliding_window + 1);
    case KVGroupKind::kChunkedLocal:
      return num_computed_tokens / spec_.attention_chunk_size * spec_.attention_chunk_size;
    case KVGroupKind::kMamba:
      return num_computed_tokens - 1;  // only the last token's state is needed
  }
  return 0;
}

std::int64_t SingleTypeManager::num_blocks_to_allocate_skipping(
    const Request& request, std::int64_t num_tokens, std::span<const BlockId> new_computed_blocks,
    std::int64_t total_computed_tokens, std::int64_t main_tokens, AllocStatus& status) const {
  const std::int64_t bs = spec_.block_size;
  const KVGroupTable& t = request.kv_groups[static_cast<std::size_t>(group_id_)];
  const auto num_req = static_cast<std::int64_t>(t.blocks.size());
  if (spec_.kind == KVGroupKind::kMamba) {
    // A hit cached by another request in this step is not usable before the next one: ask for
    // more blocks than the pool has.
    if (!new_computed_blocks.empty()) {
      const HashId key = pool_.block(new_computed_blocks.back()).block_hash;
      if (key != kNoHash && std::find(cached_this_step_.begin(), cached_this_step_.end(), key) !=
                                cached_this_step_.end())
        return std::int64_t{pool_.num_blocks()} + 1;
    }
    if (spec_.mamba_align()) {
      // No lookahead slots; a request that has to grow needs one block (its state; the
      // speculative ones are reused), or one plus the speculative ones at its first allocation.
      const std::int64_t spec = spec_.num_speculative_blocks;
      std::int64_t num_new = blocks_for(main_tokens) + spec -
                             static_cast<std::int64_t>(new_computed_blocks.size()) - num_req;
      if (num_new > 0) num_new = t.mamba_allocated ? 1 : 1 + spec;
      return num_new + num_evictable(new_computed_blocks);
    }
    num_tokens += bs * spec_.num_speculative_blocks;
  }
  std::int64_t required = blocks_for(num_tokens);
  if (admission_cap_ > 0) required = std::min(required, admission_cap_);
  if (t.num_cached_block >= 0) {  // a request the group tracks gets no new hits
    if (!new_computed_blocks.empty()) status = AllocStatus::kHitsForKnownRequest;
    return std::max<std::int64_t>(required - num_req, 0);
  }
  // (Python's floor division: mamba's skipped-token count is -1 before the first token.)
  const std::int64_t skipped_blocks = block_.floor(num_skipped_tokens(total_computed_tokens));
  const std::int64_t local_blocks = static_cast<std::int64_t>(new_computed_blocks.size()) + num_req;
  const std::int64_t num_new =
      std::max<std::int64_t>(required - std::max(skipped_blocks, local_blocks), 0);
  // Hits in the free queue leave it when touched: they cannot count as free blocks. The first
  // skipped ones (beyond what the table holds) are not touched.
  const std::int64_t skip_hits = std::max<std::int64_t>(0, skipped_blocks - num_req);
  return num_new + num_evictable(new_computed_blocks.subspan(
                       std::min(new_computed_blocks.size(), static_cast<std::size_t>(skip_hits))));
}

// MambaManager.allocate_new_blocks in 'align' mode (single_type_kv_cache_manager.py:947-1020).
AllocStatus SingleTypeManager::allocate_new_blocks_align(KVGroupTable& t,
                                                         std::int64_t main_tokens,
                                                         std::int32_t& num_new) {
  const std::int64_t spec = spec_.num_speculative_blocks;
  const std::int64_t required = blocks_for(main_tokens) + spec;  // no lookahead slots
  const auto prev = static_cast<std::int64_t>(t.blocks.size());
  if (required == prev) return AllocStatus::kOk;
  if (required < prev) return AllocStatus::kMambaAlignBlocks;
  const bool allocated = t.mamba_allocated;
  // The state block of the previous step (or a new request's last hit), freed once passed.
  if (allocated)
    t.mamba_last_state_block = prev - 1 - spec;
  else if (prev > 0)
    t.mamba_last_state_block = prev - 1;
  const std::int64_t skipped = required - spec - 1;
  const BlockId null = pool_.null_block();
  if (prev < skipped) t.blocks.resize(static_cast<std::size_t>(skipped), null);
  if (allocated)  // the speculative blocks of the previous step move to the end, reused
    for (std::int64_t i = prev - spec; i < prev && i < skipped; ++i) {
      const BlockId b = t.blocks[static_cast<std::size_t>(i)];
      t.blocks.push_back(b);
      t.blocks[static_cast<std::size_t>(i)] = null;
    }
  const std::int64_t n = required - static_cast<std::int64_t>(t.blocks.size());
  if (n > (allocated ? 1 : spec + 1)) return AllocStatus::kMambaAlignBlocks;
  if (n > pool_.num_free_blocks()) return AllocStatus::kPoolExhausted;
  if (n > 0) pool_.get_new_blocks(static_cast<std::int32_t>(n), t.blocks);
  t.mamba_allocated = true;
  num_new = static_cast<std::int32_t>(static_cast<std::int64_t>(t.blocks.size()) - prev);
  return AllocStatus::kOk;
}

KVSIM_HOT AllocStatus SingleTypeManager::allocate_new_computed_blocks(
    Request& request, std::span<const BlockId> new_computed_blocks,
    std::int64_t num_local_computed_tokens, std::int64_t num_external_computed_tokens) {
  KVGroupTable& t = table_of(request);
  if (t.num_cached_block >= 0)
    return new_computed_blocks.empty() ? AllocStatus::kOk : AllocStatus::kHitsForKnownRequest;
  add_entry(t);
  if (!t.blocks.empty()) return AllocStatus::kTableNotEmpty;
  const std::int64_t total = num_local_computed_tokens + num_external_computed_tokens;
  const std::int64_t skipped_tokens = num_skipped_tokens(total);
  const std::int64_t skipped = block_.floor(skipped_tokens);
  std::span<const BlockId> kept = new_computed_blocks;
  if (skipped > 0) {
    kept = kept.subspan(std::min(kept.size(), static_cast<std::size_t>(skipped)));
    // Some external tokens may be out of the window too.
    num_external_computed_tokens =
        std::min(total - skipped_tokens, num_external_computed_tokens);
  }
  if (pool_.enable_caching())
    pool_.touch(kept);
  else if (!kept.empty())
    return AllocStatus::kHitsWithoutCache;
  if (skipped > 0)
    t.blocks.insert(t.blocks.end(), static_cast<std::size_t>(skipped), pool_.null_block());
  t.blocks.insert(t.blocks.end(), kept.begin(), kept.end());
  t.num_cached_block = static_cast<std::int64_t>(t.blocks.size());
  if (num_external_computed_tokens > 0) {  // new blocks for the connector's tokens
    const std::int64_t n = blocks_for(total) - static_cast<std::int64_t>(t.blocks.size());
    if (n > 0) pool_.get_new_blocks(static_cast<std::int32_t>(n), t.blocks);
  }
  return AllocStatus::kOk;
}

KVSIM_HOT AllocStatus SingleTypeManager::cache_blocks(Request& request, std::int64_t num_tokens,
                                                      const GroupHashView& hashes) {
  KVGroupTable& t = table_of(request);
  const std::int64_t num_cached = std::max<std::int64_t>(t.num_cached_block, 0);
  const std::int64_t num_full = full_blocks(num_tokens);
  if (num_cached >= num_full) return AllocStatus::kOk;
  add_entry(t);
  if (static_cast<std::int64_t>(hashes.num_hashes) < num_full) return AllocStatus::kHashesMissing;
  const std::int64_t end = std::min(num_full, static_cast<std::int64_t>(t.blocks.size()));
  const BlockId null = pool_.null_block();
  // Locals: the compiler cannot tell that cache_block() leaves the table, the view and the
  // key layout alone.
  BlockPool& pool = pool_;
  const BlockId* const table = t.blocks.data();
  const GroupHashView hash_of = hashes;
  const std::size_t num_keys = hash_of.size();
  const BlockPool::GroupKeys key_of = pool.group_keys(group_id_);
  const bool mamba = spec_.kind == KVGroupKind::kMamba;
  // The blocks that have a key, then (a request short of hashes) the first one that has none.
  const std::int64_t keyed_end = std::min(end, static_cast<std::int64_t>(num_keys));
  std::int64_t i = num_cached;
  for (; i < keyed_end; ++i) {
    const BlockId b = table[i];
    if (b == null) continue;
    if (pool.block(b).block_hash != kNoHash) return AllocStatus::kBlockAlreadyCached;
    const HashId key = key_of(hash_of[static_cast<std::size_t>(i)]);
    pool.cache_block(b, key);
    if (mamba) cached_this_step_.push_back(key);
  }
  for (; i < end; ++i) {
    const BlockId b = table[i];
    if (b == null) continue;
    return pool.block(b).block_hash != kNoHash ? AllocStatus::kBlockAlreadyCached
                                               : AllocStatus::kHashesMissing;
  }
  t.num_cached_block = num_full;
  return AllocStatus::kOk;
}

KVSIM_HOT void SingleTypeManager::free(Request& request) {
  KVGroupTable& t = table_of(request);
  for (std::size_t i = t.blocks.size(); i-- > 0;) pool_.free_block(t.blocks[i]);
  t.blocks.clear();
  t.num_cached_block = -1;
  t.mamba_allocated = false;
  t.mamba_last_state_block = -1;
  if (t.has_entry) {
    t.has_entry = false;
    --num_entries_;
  }
}

KVSIM_HOT void SingleTypeManager::remove_skipped_blocks(Request& request,
                                                        std::int64_t total_computed_tokens) {
  if (spec_.kind == KVGroupKind::kMamba)  // drafts may still be rejected: assume they all are
    total_computed_tokens =
        std::max<std::int64_t>(0, total_computed_tokens - spec_.num_speculative_blocks);
  const BlockId null = pool_.null_block();
  const std::int64_t skipped_tokens = num_skipped_tokens(total_computed_tokens);
  if (skipped_tokens > 0) {
    KVGroupTable& t = table_of(request);
    add_entry(t);
    const std::int64_t skipped =
        std::min(block_.div(skipped_tokens), static_cast<std::int64_t>(t.blocks.size()));
    // The block that left the window last is freed first (vLLM frees the list in this order).
    for (std::int64_t i = skipped - 1; i >= 0; --i) {
      BlockId& b = t.blocks[static_cast<std::size_t>(i)];
      if (b == null) break;  // earlier calls nulled everything before it
      pool_.free_block(b);
      b = null;
    }
  }
  // Mamba 'align': the previous step's state block, once the computed tokens have passed it
  // (it was the source of the state copied into the current one).
  if (!spec_.mamba_align()) return;
  KVGroupTable& t = table_of(request);
  const std::int64_t last = t.mamba_last_state_block;
  if (last < 0 || last >= blocks_for(total_computed_tokens) - 1) return;
  add_entry(t);
  BlockId& b = t.blocks[static_cast<std::size_t>(last)];
  if (b == null) return;
  pool_.free_block(b);
  b = null;
}

KVSIM_HOT std::int32_t SingleTypeManager::num_common_prefix_blocks(Request& request) {
  if (spec_.kind != KVGroupKind::kFullAttention) return 0;
  KVGroupTable& t = table_of(request);
  add_entry(t);  // vLLM indexes a defaultdict
  std::int32_t n = 0;
  for (BlockId b : t.blocks) {
    if (pool_.block(b).ref_cnt != num_entries_) break;
    ++n;
  }
  return n;
}

}  // namespace kvsim
