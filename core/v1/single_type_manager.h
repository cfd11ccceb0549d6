#pragma once
// SingleTypeManager: vLLM v0.20.1's vllm/v1/core/single_type_kv_cache_manager.py, the rules of one
// KV cache group (one attention type) over the pool every group shares: the group's part of the
// prefix-cache lookup, how many blocks an allocation needs (with the per-request admission cap of
// sliding-window and chunked-local groups), the group's table of each request
// (Request::kv_groups[group]), caching, freeing (last block first), the blocks that left the
// attention window (nulled and freed), the common prefix.
//   full attention   the longest prefix of hits; never skips a block
//   sliding window   the rightmost run of cdiv(window - 1, block_size) hits, nulls before it;
//                    tokens before num_computed - window + 1 are skipped
//   chunked local    nulls before the current chunk, then hits from its start; whole chunks
//                    before the current one are skipped
//   mamba            the single last hit, nulls before it; all but the last token skipped;
//                    a hit cached by another request in this step cannot be used yet. In
//                    'align' mode a running request holds one state block (plus the
//                    speculative ones) at the end of its table, nulls before it, and the
//                    previous step's state block until the next allocation has passed it
// Errors are vLLM's assertion and ValueError paths (AllocStatus); kvsim never throws from here.

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "core/common/engine_config.h"
#include "core/common/request.h"
#include "core/common/types.h"
#include "core/v1/block_pool.h"

namespace kvsim {

/// Outcome of allocate_slots (and of the steps it is made of). kOk and kNoFreeBlocks are the
/// expected results; the others mirror the assertion/ValueError/IndexError paths of vLLM (state
/// may be partly changed, exactly as in vLLM).
enum class AllocStatus : std::uint8_t {
  kOk,
  kNoFreeBlocks,        // vLLM returns None; nothing changed (v0.20: skipped blocks were freed)
  kZeroTokens,          // ValueError: num_tokens must be greater than 0; nothing changed
  kHitsWithoutCache,    // assertion: computed blocks given while caching is disabled
  kBeyondMaxBlocks,     // assertion num_new_blocks > 0 (request beyond max_model_len); hits touched
  kMissingTokens,       // assertion: a block to cache has fewer than block_size tokens
  kBadPrevBlock,        // assertion in _cache_full_blocks: the previous block has no hash, or a
                        // block after the first unhashed candidate already has one
  kBadCachedCount,      // v0.8.5: num_cached_block beyond the hash list or the table (assertion /
                        // IndexError in cache_full_blocks)
  kSkippedBeyondTable,  // v0.8.5 sliding window: remove_skipped_blocks indexes past the table
                        // (IndexError); nothing changed
  // vLLM v0.20 (policy kv_cache_coordinator):
  kPoolExhausted,        // ValueError: Cannot get n free blocks from the pool (the admission-cap
                         // defect); earlier groups may hold their new blocks
  kHitsForKnownRequest,  // assertion: new computed blocks for a request the group already tracks
  kTableNotEmpty,        // assertion: new computed blocks for a request that holds blocks
  kBlockAlreadyCached,   // assertion in cache_full_blocks: a block to cache already has a hash
  kHashesMissing,        // assertion/IndexError: fewer block hashes than blocks to cache
  kLookupUnsupported,    // assertion in a lookup (eagle or mixed block sizes with chunked local)
  kMambaAlignBlocks,     // assertion in mamba 'align' allocate_new_blocks: the table would shrink,
                         // or grow by more than its state and speculative blocks
};

/// vLLM's exception for a failed AllocStatus ("ValueError: ...", "AssertionError: ..."); "" for
/// kOk and kNoFreeBlocks.
const char* alloc_status_message(AllocStatus s);

/// A request's block hashes read at one group's granularity (vLLM's BlockHashListWithBlockSize):
/// the group's block i is keyed by hash (i + 1) * k - 1 of the request's list, the hash of the
/// last of its k hash blocks (hashes are chained, so that one fixes all k).
struct GroupHashView {
  const HashId* hashes = nullptr;
  std::size_t num_hashes = 0;
  Divisor k;  // group block size / hash block size (a shift for the usual 1)
  std::size_t size() const {
    return static_cast<std::size_t>(k.div(static_cast<std::int64_t>(num_hashes)));
  }
  HashId operator[](std::size_t i) const {
    return hashes[(i + 1) * static_cast<std::size_t>(k.value()) - 1];
  }
};

/// vLLM's hit lists / new blocks per group (KVCacheBlocks.blocks): one list per KV cache group.
using GroupBlockLists = std::vector<std::vector<BlockId>>;

class SingleTypeManager {
 public:
  /// The manager of group `group_id` with spec `spec`; `admission_cap_blocks` > 0 caps the blocks
  /// one request is counted for (sliding window, chunked local). `pool` must outlive it.
  SingleTypeManager(const KVGroupSpec& spec, std::int32_t group_id,
                    std::int64_t admission_cap_blocks, BlockPool& pool);

  const KVGroupSpec& spec() const { return spec_; }
  std::int32_t group_id() const { return group_id_; }
  std::int32_t block_size() const { return spec_.block_size; }
  std::int64_t admission_cap_blocks() const { return admission_cap_; }
  /// num_tokens / block_size (C++ division), a shift for a power-of-two block size.
  std::int64_t full_blocks(std::int64_t tokens) const {
    return tokens >= 0 ? block_.div(tokens) : tokens / spec_.block_size;
  }
  /// cdiv(tokens, block_size), a shift for a power-of-two block size.
  std::int64_t blocks_for(std::int64_t tokens) const { return block_.ceil(tokens); }
  /// True for a type whose lookup and tables may hold null blocks (all but full attention).
  bool skips_blocks() const { return spec_.kind != KVGroupKind::kFullAttention; }

  /// find_longest_cache_hit for the groups `group_ids` (identical specs, looked up together: a
  /// position hits only when every one of them has a block cached under its key) over `hashes`,
  /// at most `max_length` tokens, the hit length a multiple of `alignment_tokens`; `use_eagle`
  /// drops the last hit block. Writes hits[g] for every g of group_ids. O(blocks looked up).
  AllocStatus find_longest_cache_hit(const GroupHashView& hashes, std::int64_t max_length,
                                     std::span<const std::int32_t> group_ids, bool use_eagle,
                                     std::int64_t alignment_tokens, GroupBlockLists& hits) const;

  /// get_num_skipped_tokens: tokens no longer attended once `num_computed_tokens` are computed.
  std::int64_t num_skipped_tokens(std::int64_t num_computed_tokens) const;

  /// get_num_blocks_to_allocate: the free blocks an allocation giving the request `num_tokens`
  /// slots needs in this group (new blocks plus evictable hits), capped by the admission cap.
  /// `main_tokens` leaves out the lookahead slots (num_tokens_main_model; only mamba 'align'
  /// reads it). Sets `status` to kHitsForKnownRequest on vLLM's assertion.
  std::int64_t num_blocks_to_allocate(const Request& request, std::int64_t num_tokens,
                                      std::span<const BlockId> new_computed_blocks,
                                      std::int64_t total_computed_tokens, std::int64_t main_tokens,
                                      AllocStatus& status) const {
    if (spec_.kind != KVGroupKind::kFullAttention)
      return num_blocks_to_allocate_skipping(request, num_tokens, new_computed_blocks,
                                             total_computed_tokens, main_tokens, status);
    // Full attention skips nothing and has no cap.
    const KVGroupTable& t = request.kv_groups[static_cast<std::size_t>(group_id_)];
    const auto held = static_cast<std::int64_t>(t.blocks.size());
    const std::int64_t required = blocks_for(num_tokens);
    if (t.num_cached_block >= 0) {  // a request the group tracks gets no new hits
      if (!new_computed_blocks.empty()) status = AllocStatus::kHitsForKnownRequest;
      return std::max<std::int64_t>(required - held, 0);
    }
    return std::max<std::int64_t>(
               required - static_cast<std::int64_t>(new_computed_blocks.size()) - held, 0) +
           num_evictable(new_computed_blocks);
  }

  /// allocate_new_computed_blocks: a new request's hits enter its table (touched), the skipped
  /// ones as null blocks, then new blocks for the tokens a KV connector provides
  /// (`num_external_computed_tokens`, the part in the window); a request the group already
  /// tracks takes none.
  AllocStatus allocate_new_computed_blocks(Request& request,
                                           std::span<const BlockId> new_computed_blocks,
                                           std::int64_t num_local_computed_tokens,
                                           std::int64_t num_external_computed_tokens = 0);

  /// allocate_new_blocks: grows the table to cdiv(num_tokens, block_size) blocks (popped from the
  /// free queue); `num_new` gets the count of entries appended (mamba 'align' also appends nulls
  /// and moves its speculative blocks: allocate_new_blocks_align). kPoolExhausted when the pool
  /// is short. (Inline: the running loop's allocations grow a table by one block at a time.)
  AllocStatus allocate_new_blocks(Request& request, std::int64_t num_tokens,
                                  std::int64_t main_tokens, std::int32_t& num_new) {
    KVGroupTable& t = table_of(request);
    add_entry(t);
    num_new = 0;
    if (spec_.kind == KVGroupKind::kMamba) {
      if (spec_.mamba_align()) return allocate_new_blocks_align(t, main_tokens, num_new);
      num_tokens += spec_.block_size * spec_.num_speculative_blocks;
    }
    const std::int64_t n = blocks_for(num_tokens) - static_cast<std::int64_t>(t.blocks.size());
    if (n <= 0) return AllocStatus::kOk;
    if (n > pool_.num_free_blocks()) return AllocStatus::kPoolExhausted;
    num_new = static_cast<std::int32_t>(n);
    pool_.get_new_blocks(num_new, t.blocks);
    return AllocStatus::kOk;
  }

  /// cache_blocks: caches the table's full blocks up to num_tokens / block_size under the keys of
  /// `hashes` (null blocks skipped).
  AllocStatus cache_blocks(Request& request, std::int64_t num_tokens, const GroupHashView& hashes);

  /// free: the table, last block first; forgets the request.
  void free(Request& request);

  /// remove_skipped_blocks: the blocks before the window become the null block and are freed,
  /// walking back from the last skipped one to the first null block.
  void remove_skipped_blocks(Request& request, std::int64_t total_computed_tokens);

  /// get_num_common_prefix_blocks: full attention, the leading blocks held by every request the
  /// group tracks (the request becomes tracked); 0 for the other types.
  std::int32_t num_common_prefix_blocks(Request& request);

  /// new_step_starts: a mamba group forgets what was cached in the previous step.
  void new_step_starts() { cached_this_step_.clear(); }

  /// Requests with an entry in the group's req_to_blocks (what the common prefix compares with).
  std::int64_t num_entries() const { return num_entries_; }

 private:
  std::int64_t num_blocks_to_allocate_skipping(const Request& request, std::int64_t num_tokens,
                                               std::span<const BlockId> new_computed_blocks,
                                               std::int64_t total_computed_tokens,
                                               std::int64_t main_tokens,
                                               AllocStatus& status) const;
  AllocStatus allocate_new_blocks_align(KVGroupTable& t, std::int64_t main_tokens,
                                        std::int32_t& num_new);
  /// The hits that sit in the free queue: they leave it when touched, so they cannot count as
  /// free blocks.
  std::int64_t num_evictable(std::span<const BlockId> blocks) const {
    std::int64_t n = 0;
    for (const BlockId b : blocks) n += b != pool_.null_block() && pool_.block(b).ref_cnt == 0;
    return n;
  }
  KVGroupTable& table_of(Request& r) const {
    return r.kv_groups[static_cast<std::size_t>(group_id_)];
  }
  void add_entry(KVGroupTable& t) {
    if (!t.has_entry) {
      t.has_entry = true;
      ++num_entries_;
    }
  }
  /// The block cached under `key` for every group of `group_ids` into found[], or false.
  bool lookup(HashId hash, std::span<const std::int32_t> group_ids, BlockId* found) const;

  KVGroupSpec spec_;
  Divisor block_;  // spec_.block_size
  std::int32_t group_id_;
  std::int64_t admission_cap_;  // 0: none
  BlockPool& pool_;
  std::int64_t num_entries_ = 0;
  std::vector<HashId> cached_this_step_;  // mamba: cache keys cached since new_step_starts
};

}  // namespace kvsim
