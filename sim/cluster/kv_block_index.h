#pragma once
// KvBlockIndex: which replicas hold which blocks, kept from the replicas' KV events
// (core/common/kv_event.h; shared/spec/cluster-routing.md §1.3, §5.4, §8). A block is named by
// its content hash, so a prompt's blocks are looked up by the same chain of hashes
// (prompt_content_hashes). A lookup walks the prompt's blocks once with a set of replicas (a bit
// each): O(prompt blocks), not O(N x prompt blocks).
//
// Two readings of vLLM's events, one per use:
//   kCount -- a replica holds a block while any of its copies is cached (a pool may cache two
//             blocks of equal content); the index then agrees with the engine's own lookup (the
//             reference routers prefix_ideal and prefix_bounded, §8).
//   kDrop  -- a BlockRemoved drops the replica from the block whatever copies remain, as the
//             routers that consume vLLM's event stream do (Dynamo's radix indexer, llm-d's
//             kvblock index: a set of pods per block).
// Only KV cache group 0's blocks are indexed (a model of one group: all of them).

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/common/kv_event.h"
#include "core/common/types.h"

namespace kvsim {

class KvBlockIndex {
 public:
  enum class Removal : std::uint8_t { kCount, kDrop };
  /// Precondition: 1 <= num_replicas <= 64.
  KvBlockIndex(std::int32_t num_replicas, Removal removal);

  /// Applies replica r's events in order.
  void apply(std::int32_t r, std::span<const KvEvent> events);
  /// matched[r] = how many leading blocks of `hashes` replica r holds (it stops at its first
  /// miss). O(hashes until no replica holds the next block, + N). matched.size() = N.
  void longest_prefix(std::span<const std::uint64_t> hashes, std::span<std::int64_t> matched) const;
  /// Whether replica r holds block `hash`.
  bool holds(std::int32_t r, std::uint64_t hash) const;
  /// The blocks indexed for replica r (Dynamo's tree size).
  std::int64_t num_blocks(std::int32_t r) const { return num_blocks_[static_cast<std::size_t>(r)]; }
  std::int32_t num_replicas() const { return static_cast<std::int32_t>(num_blocks_.size()); }

 private:
  void add(std::int32_t r, std::uint64_t hash);
  void remove(std::int32_t r, std::uint64_t hash);
  void clear(std::int32_t r);

  Removal removal_;
  std::unordered_map<std::uint64_t, std::uint64_t> holders_;  // block -> replica bits
  /// kCount, by replica: copies of a block beyond the first (rare: equal content cached twice by
  /// one pool).
  std::vector<std::unordered_map<std::uint64_t, std::int32_t>> extra_copies_;
  std::vector<std::int64_t> num_blocks_;
};

/// The content hashes of the first `max_blocks` full blocks of `prompt` (block_size tokens
/// each), as the engines' pools name them (BlockHashTable::content_hash, no extra keys): the
/// chain h_j = block_content_hash(h_{j-1}, block j, 0). Replaces `out`.
void prompt_content_hashes(std::span<const Token> prompt, std::int64_t block_size,
                           std::int64_t max_blocks, std::vector<std::uint64_t>& out);

}  // namespace kvsim
