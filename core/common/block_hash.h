#pragma once
// Block hashes with exact equality.
//
// vLLM v0.7.2 keys a full block by BlockHashType(hash((parent_hash_value, tokens, extra_keys)),
// tokens, extra_keys): two blocks are equal iff their whole token prefix (and the extra keys along
// the chain) is equal, up to collisions of the 64-bit builtin hash. kvsim interns every block hash
// as a node (parent node, block tokens, extra keys): a node is created once per distinct content
// and looked up by exact comparison, so equal HashIds <=> equal prefixes, with no collision ever
// producing a false hit (the 64-bit hash only picks the bucket).
//
// Nodes are reference counted: a request's hash list, a cached block and a child node each hold
// one reference. A node whose count drops to zero is removed and its slot reused.

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/common/types.h"

namespace kvsim {

/// The parent hash of a sequence's first block in BlockHashTable::content_hash.
inline constexpr std::uint64_t kRootContentHash = 0x6a09e667f3bcc908ull;
/// The default hash function of BlockHashTable: xxh3-64 of the block's tokens, seeded with the
/// parent's hash and the extra keys' id. A prompt's content hashes are the chain
/// h_j = block_content_hash(h_{j-1}, block j, extra), h_{-1} = kRootContentHash.
std::uint64_t block_content_hash(std::uint64_t parent_hash, std::span<const Token> tokens,
                                 std::int32_t extra);

class BlockHashTable {
 public:
  /// Hash function of the bucket index. Injectable so tests can force every key to collide.
  using BucketHashFn = std::uint64_t (*)(std::uint64_t parent_hash, std::span<const Token> tokens,
                                         std::int32_t extra);

  /// `block_size` tokens per node. `hash_fn` defaults to xxh3-64.
  explicit BlockHashTable(std::int32_t block_size, BucketHashFn hash_fn = nullptr);

  /// Returns the node for (parent, tokens, extra) with one new reference, creating it if needed.
  /// `parent` is kNoHash for the first block of a sequence. tokens.size() == block_size.
  /// Amortized O(block_size); allocates only when the table grows past its high-water mark.
  HashId intern(HashId parent, std::span<const Token> tokens, ExtraKeysId extra);

  /// Interns the chain of consecutive blocks tokens[0, bs), [bs, 2 bs), ... under `parent` (all
  /// with `extra`), appending each node (one new reference each) to `out`: the same nodes as
  /// repeated intern() calls. The chain's hashes are computed first and their buckets prefetched,
  /// so the probes of a long prompt overlap their cache misses. tokens.size() % block_size == 0.
  void intern_chain(HashId parent, std::span<const Token> tokens, ExtraKeysId extra,
                    std::vector<HashId>& out);

  /// Room for `nodes` nodes without moving the node and token arrays (the owner of a pool of N
  /// blocks reserves N: a cached block holds one node). Past its reservation the table grows by
  /// half its size at a time rather than doubling. Allocates; call it before the hot path.
  void reserve(std::int64_t nodes);

  /// Starts loading what release(h) reads (the node, then its bucket): call it a few blocks
  /// ahead of releasing a run of nodes.
  void prefetch_node(HashId h) const { __builtin_prefetch(&nodes_[slot(h)]); }
  void prefetch_bucket(HashId h) const {
    __builtin_prefetch(&buckets_[nodes_[slot(h)].hash & bucket_mask_]);
  }

  /// Adds a reference to `h`. O(1).
  void retain(HashId h);
  /// Drops a reference; a node reaching zero is removed and releases its parent. O(depth freed).
  void release(HashId h);

  HashId parent(HashId h) const { return nodes_[slot(h)].parent; }
  /// The node's 64-bit chained content hash: block_content_hash(parent's, tokens, extra), the
  /// first block's parent being kRootContentHash. With the default hash function it depends on
  /// the content only (and the extra keys' interned id), so two tables give equal content equal
  /// values: the identity KV events carry across engines.
  std::uint64_t content_hash(HashId h) const { return nodes_[slot(h)].hash; }
  ExtraKeysId extra(HashId h) const { return nodes_[slot(h)].extra; }
  std::span<const Token> tokens(HashId h) const;
  std::int32_t ref_count(HashId h) const { return nodes_[slot(h)].refs; }

  /// Interns a tuple of multimodal hashes (strings) as extra keys. Not on the text-only hot path.
  ExtraKeysId intern_extra(const std::vector<std::string>& mm_hashes);
  /// The strings of an interned extra-keys tuple (empty for None and for ()).
  const std::vector<std::string>& extra_strings(ExtraKeysId e) const;

  /// Number of live nodes.
  std::int64_t size() const { return live_; }
  std::int32_t block_size() const { return static_cast<std::int32_t>(block_.value()); }

  /// The first broken invariant ("" if none): every live node findable by its key, live parents,
  /// counts consistent. O(nodes + buckets).
  std::string find_violation() const;
  /// Checks every live node's count == external[node] + its number of live children, where
  /// `external` (indexed by HashId, size capacity()) counts the holders outside the table.
  std::string find_ref_count_violation(std::span<const std::int32_t> external) const;
  /// One past the largest HashId ever handed out.
  std::size_t capacity() const { return nodes_.size(); }

 private:
  struct Node {
    std::uint64_t hash = 0;
    HashId parent = kNoHash;
    ExtraKeysId extra = kExtraNone;
    std::int32_t refs = 0;  // 0 = slot is free
  };
  static std::size_t slot(HashId h) { return static_cast<std::size_t>(to_int(h)); }
  std::uint64_t hash_of(HashId parent, std::span<const Token> tokens, ExtraKeysId extra) const;
  /// intern() once the bucket hash `h` of (parent, tokens, extra) is known.
  HashId intern_hashed(HashId parent, std::span<const Token> tokens, ExtraKeysId extra,
                       std::uint64_t h);
  bool node_equals(std::int32_t n, HashId parent, std::span<const Token> tokens,
                   ExtraKeysId extra) const;
  void bucket_insert(std::int32_t n, std::uint64_t hash);
  void bucket_erase(std::int32_t n);
  void grow_buckets();
  void grow_nodes();

  std::size_t block_len() const { return static_cast<std::size_t>(block_.value()); }

  Divisor block_;  // the block size
  BucketHashFn hash_fn_;
  std::vector<Node> nodes_;
  std::vector<Token> tokens_;                // [nodes_.size(), block_size]
  std::vector<std::int32_t> free_slots_;     // node slots to reuse
  std::vector<std::uint64_t> chain_hashes_;  // intern_chain's scratch
  // Open addressing with linear probing. Each bucket keeps the low 32 bits of its node's hash, so
  // probing and backward-shift deletion rarely touch the node array.
  struct Bucket {
    std::int32_t node = -1;  // -1: empty
    std::uint32_t hash_lo = 0;
  };
  std::vector<Bucket> buckets_;
  std::uint64_t bucket_mask_ = 0;
  std::int64_t live_ = 0;

  std::map<std::vector<std::string>, ExtraKeysId> extra_ids_;
  std::vector<std::vector<std::string>> extra_tuples_;  // by ExtraKeysId
};

}  // namespace kvsim
