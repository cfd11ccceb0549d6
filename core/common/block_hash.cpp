#include "core/common/block_hash.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "core/common/assert.h"
#include "core/common/hot.h"

namespace kvsim {

std::uint64_t block_content_hash(std::uint64_t parent_hash, std::span<const Token> tokens,
                                 std::int32_t extra) {
  const std::uint64_t seed =
      parent_hash * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(extra);
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), seed);
}

BlockHashTable::BlockHashTable(std::int32_t block_size, BucketHashFn hash_fn)
    : block_(block_size), hash_fn_(hash_fn ? hash_fn : &block_content_hash) {
  KVSIM_ASSERT(block_size > 0);
  buckets_.assign(1024, Bucket{});
  bucket_mask_ = buckets_.size() - 1;
  extra_tuples_.resize(2);  // kExtraNone, kExtraEmpty
  extra_ids_.emplace(std::vector<std::string>{}, kExtraEmpty);
}

std::span<const Token> BlockHashTable::tokens(HashId h) const {
  return {tokens_.data() + slot(h) * block_len(), block_len()};
}

KVSIM_HOT std::uint64_t BlockHashTable::hash_of(HashId parent, std::span<const Token> tokens,
                                                ExtraKeysId extra) const {
  const std::uint64_t ph = parent == kNoHash ? kRootContentHash : nodes_[slot(parent)].hash;
  return hash_fn_(ph, tokens, static_cast<std::int32_t>(extra));
}

bool BlockHashTable::node_equals(std::int32_t n, HashId parent, std::span<const Token> tokens,
                                 ExtraKeysId extra) const {
  const Node& node = nodes_[static_cast<std::size_t>(n)];
  if (node.parent != parent || node.extra != extra) return false;
  return std::memcmp(tokens_.data() + static_cast<std::size_t>(n) * block_len(), tokens.data(),
                     tokens.size_bytes()) == 0;
}

KVSIM_HOT HashId BlockHashTable::intern(HashId parent, std::span<const Token> tokens,
                                        ExtraKeysId extra) {
  KVSIM_ASSERT(static_cast<std::int64_t>(tokens.size()) == block_.value());
  return intern_hashed(parent, tokens, extra, hash_of(parent, tokens, extra));
}

KVSIM_HOT void BlockHashTable::intern_chain(HashId parent, std::span<const Token> tokens,
                                            ExtraKeysId extra, std::vector<HashId>& out) {
  const auto bs = block_len();
  const auto n = static_cast<std::size_t>(block_.div(static_cast<std::int64_t>(tokens.size())));
  KVSIM_ASSERT(n * bs == tokens.size());
  chain_hashes_.resize(n);
  // A node's hash is a function of its parent's hash and its own key, so the whole chain's
  // hashes are known before any node is looked up.
  std::uint64_t ph = parent == kNoHash ? kRootContentHash : nodes_[slot(parent)].hash;
  for (std::size_t i = 0; i < n; ++i) {
    ph = hash_fn_(ph, tokens.subspan(i * bs, bs), static_cast<std::int32_t>(extra));
    chain_hashes_[i] = ph;
    __builtin_prefetch(&buckets_[ph & bucket_mask_]);
  }
  for (std::size_t i = 0; i < n; ++i) {
    parent = intern_hashed(parent, tokens.subspan(i * bs, bs), extra, chain_hashes_[i]);
    out.push_back(parent);
  }
}

KVSIM_HOT HashId BlockHashTable::intern_hashed(HashId parent, std::span<const Token> tokens,
                                               ExtraKeysId extra, std::uint64_t h) {
  const auto h_lo = static_cast<std::uint32_t>(h);
  std::uint64_t empty = h & bucket_mask_;
  for (;; empty = (empty + 1) & bucket_mask_) {
    const std::int32_t n = buckets_[empty].node;
    if (n < 0) break;
    if (buckets_[empty].hash_lo == h_lo && nodes_[static_cast<std::size_t>(n)].hash == h &&
        node_equals(n, parent, tokens, extra)) {
      ++nodes_[static_cast<std::size_t>(n)].refs;
      return HashId{n};
    }
  }
  std::int32_t n;
  if (!free_slots_.empty()) {
    n = free_slots_.back();
    free_slots_.pop_back();
  } else {
    n = static_cast<std::int32_t>(nodes_.size());
    if (nodes_.size() == nodes_.capacity()) [[unlikely]]
      grow_nodes();
    nodes_.emplace_back();
    tokens_.resize(tokens_.size() + block_len());
  }
  Node& node = nodes_[static_cast<std::size_t>(n)];
  node.hash = h;
  node.parent = parent;
  node.extra = extra;
  node.refs = 1;
  std::copy(tokens.begin(), tokens.end(),
            tokens_.begin() + static_cast<std::ptrdiff_t>(n) * block_.value());
  if (parent != kNoHash) retain(parent);
  ++live_;
  // Linear probing degrades with load (each probe and each backward shift is a branch on a
  // cluster's length): keep the table at most half full, a quarter to a half after it grows. (At
  // most a quarter would double the bucket array for a few percent more nodes: a full H100 pool's
  // ~135k cached blocks would take 2^20 buckets, 8 MiB, instead of 2^19.) A miss ends at the first
  // empty bucket, which is where the new node goes unless the table grew.
  if (static_cast<std::uint64_t>(live_) * 2 > buckets_.size()) {
    grow_buckets();
    bucket_insert(n, h);
  } else {
    buckets_[empty] = Bucket{n, h_lo};
  }
  return HashId{n};
}

KVSIM_HOT void BlockHashTable::retain(HashId h) {
  Node& node = nodes_[slot(h)];
  KVSIM_ASSERT(node.refs > 0, "retain of a dead hash node");
  ++node.refs;
}

KVSIM_HOT void BlockHashTable::release(HashId h) {
  while (h != kNoHash) {
    Node& node = nodes_[slot(h)];
    KVSIM_ASSERT(node.refs > 0, "release of a dead hash node");
    if (--node.refs > 0) return;
    bucket_erase(to_int(h));
    free_slots_.push_back(to_int(h));
    --live_;
    const HashId parent = node.parent;
    node.parent = kNoHash;
    h = parent;
  }
}

void BlockHashTable::bucket_insert(std::int32_t n, std::uint64_t hash) {
  std::uint64_t i = hash & bucket_mask_;
  while (buckets_[i].node >= 0) i = (i + 1) & bucket_mask_;
  buckets_[i] = Bucket{n, static_cast<std::uint32_t>(hash)};
}

// Linear-probing deletion by backward shift (no tombstones).
KVSIM_HOT void BlockHashTable::bucket_erase(std::int32_t n) {
  std::uint64_t i = nodes_[static_cast<std::size_t>(n)].hash & bucket_mask_;
  while (buckets_[i].node != n) {
    KVSIM_ASSERT(buckets_[i].node >= 0, "hash node missing from its bucket chain");
    i = (i + 1) & bucket_mask_;
  }
  std::uint64_t hole = i;
  for (std::uint64_t j = (i + 1) & bucket_mask_; buckets_[j].node >= 0;
       j = (j + 1) & bucket_mask_) {
    const std::uint64_t ideal = buckets_[j].hash_lo & bucket_mask_;
    // Move j into the hole unless its ideal slot lies cyclically in (hole, j].
    const bool in_range = hole <= j ? (ideal > hole && ideal <= j) : (ideal > hole || ideal <= j);
    if (!in_range) {
      buckets_[hole] = buckets_[j];
      hole = j;
    }
  }
  buckets_[hole] = Bucket{};
}

void BlockHashTable::grow_buckets() {
  std::vector<Bucket> old;
  old.swap(buckets_);
  buckets_.assign(old.size() * 2, Bucket{});
  bucket_mask_ = buckets_.size() - 1;
  for (const Bucket& b : old)
    if (b.node >= 0) bucket_insert(b.node, nodes_[static_cast<std::size_t>(b.node)].hash);
}

void BlockHashTable::reserve(std::int64_t nodes) {
  KVSIM_ASSERT(nodes >= 0);
  const auto n = static_cast<std::size_t>(nodes);
  if (n <= nodes_.capacity()) return;
  nodes_.reserve(n);
  tokens_.reserve(n * block_len());
}

// Grows by half: a table one node past a power of two does not hold twice the memory it needs,
// and the old and new arrays together (while the nodes move) are 2.5x the old, not 3x.
void BlockHashTable::grow_nodes() {
  reserve(std::max<std::int64_t>(64, static_cast<std::int64_t>(nodes_.size() + nodes_.size() / 2)));
}

ExtraKeysId BlockHashTable::intern_extra(const std::vector<std::string>& mm_hashes) {
  auto [it, inserted] =
      extra_ids_.emplace(mm_hashes, ExtraKeysId{static_cast<std::int32_t>(extra_tuples_.size())});
  if (inserted) extra_tuples_.push_back(mm_hashes);
  return it->second;
}

const std::vector<std::string>& BlockHashTable::extra_strings(ExtraKeysId e) const {
  return extra_tuples_[static_cast<std::size_t>(e)];
}

std::string BlockHashTable::find_violation() const {
  std::int64_t live = 0;
  for (std::size_t n = 0; n < nodes_.size(); ++n) {
    const Node& node = nodes_[n];
    if (node.refs == 0) continue;
    ++live;
    KVSIM_CHECK(node.parent == kNoHash || nodes_[slot(node.parent)].refs > 0,
                "live node with a dead parent");
    bool found = false;
    for (std::uint64_t i = node.hash & bucket_mask_; buckets_[i].node >= 0;
         i = (i + 1) & bucket_mask_)
      if (buckets_[i].node == static_cast<std::int32_t>(n)) {
        found = true;
        KVSIM_CHECK(buckets_[i].hash_lo == static_cast<std::uint32_t>(node.hash),
                    "bucket hash tag differs from its node's hash");
      }
    KVSIM_CHECK(found, "live hash node not reachable from its bucket");
  }
  KVSIM_CHECK(live == live_, "live hash node count mismatch");
  std::int64_t in_buckets = 0;
  for (const Bucket& b : buckets_) in_buckets += b.node >= 0;
  KVSIM_CHECK(in_buckets == live_, "bucket count mismatch");
  return {};
}

std::string BlockHashTable::find_ref_count_violation(std::span<const std::int32_t> external) const {
  KVSIM_CHECK(external.size() == nodes_.size(), "external ref vector has the wrong size");
  std::vector<std::int32_t> expected(external.begin(), external.end());
  for (const Node& node : nodes_)
    if (node.refs > 0 && node.parent != kNoHash) ++expected[slot(node.parent)];
  for (std::size_t n = 0; n < nodes_.size(); ++n)
    KVSIM_CHECK(nodes_[n].refs == expected[n], "hash node reference count mismatch");
  return {};
}

}  // namespace kvsim
