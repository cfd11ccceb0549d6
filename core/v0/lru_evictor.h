#pragma once
// LruEvictor: vLLM V0's LRUEvictor (vllm/core/evictor.py) for one device's prefix-caching
// allocator, reproduced with its lazy deletion:
//   * free_table: block -> (content hash, num_hashed_tokens, last_accessed), one per free cached
//     block;
//   * a priority queue of entries (last_accessed, -num_hashed_tokens, block id, ...) that is only
//     pushed to (add) and popped from (evict): remove() and update() leave stale entries behind,
//     and evict() discards popped entries whose block is gone or whose last_accessed no longer
//     matches. An updated block with no matching entry is unreachable until a cleanup;
//   * cleanup: when the queue grows past 50x the free table, it is rebuilt from the free table.
// Entries live in a pool and are ordered by a Boost.Intrusive multiset (minimum = next popped).
// Python breaks a tie between entries of one block with equal time and depth by the content
// hash's integer value, which is not reproducible; kvsim breaks it by insertion order (only a
// stale entry of an evicted block can tie, and vLLM asserts when it pops one).

#include <boost/intrusive/set.hpp>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "core/common/block_hash.h"
#include "core/common/types.h"
#include "core/v0/naive_block_allocator.h"

namespace kvsim::v0 {

class LruEvictor {
 public:
  /// Block indices are device-local (physical) ids 0 .. num_blocks-1. `hashes` outlives this.
  LruEvictor(std::int32_t num_blocks, BlockHashTable& hashes);
  ~LruEvictor();
  LruEvictor(const LruEvictor&) = delete;
  LruEvictor& operator=(const LruEvictor&) = delete;

  /// `block in evictor` (the free table). O(1).
  bool contains(std::int32_t block) const { return meta_[idx(block)].in_table; }
  /// Number of blocks in the free table (vLLM's num_blocks).
  std::int32_t num_blocks() const { return num_in_table_; }
  /// Size of the priority queue, stale entries included.
  std::size_t queue_size() const { return queue_.size(); }

  /// add: records the block in the free table and pushes an entry; then the cleanup rule.
  /// Retains `hash`. O(log queue), O(free table) on a cleanup.
  void add(std::int32_t block, HashId hash, std::int64_t num_hashed_tokens, double last_accessed);
  /// update: the free table's last_accessed only (no entry is pushed). Precondition: contains.
  void update(std::int32_t block, double last_accessed);
  /// remove: drops the block from the free table (its entries go stale). ValueError if absent.
  void remove(std::int32_t block);

  struct Evicted {
    std::int32_t block;
    HashId hash;  // the popped entry's hash; the caller owns one reference to it
  };
  /// evict: pops entries until one is valid, drops its block from the free table and returns it.
  /// ValueError("No usable cache memory left") if the table is empty or no entry is valid.
  Evicted evict();

  /// The free table's values of a block in it.
  double last_accessed(std::int32_t block) const { return meta_[idx(block)].last_accessed; }
  std::int64_t num_hashed_tokens(std::int32_t block) const { return meta_[idx(block)].nh; }
  HashId hash(std::int32_t block) const { return meta_[idx(block)].hash; }

  /// The blocks evict() would return, in that order, if called until empty (no side effect);
  /// blocks in the free table that no entry reaches go to `unreachable` (ascending). O(queue).
  void eviction_order(std::vector<std::int32_t>& order,
                      std::vector<std::int32_t>& unreachable) const;

  /// Adds one to `refs[hash]` per hash reference held (free table and queue entries).
  void count_hash_refs(std::vector<std::int32_t>& refs) const;

  /// Empties the evictor (vLLM's reset_prefix_cache replaces it by a new one).
  void clear();

  /// Table and queue agree: counts, every entry's block in range, held hashes live. O(queue).
  std::string find_violation() const;

 private:
  struct Entry {
    boost::intrusive::set_member_hook<V0LinkMode> hook;
    double last_accessed = 0;
    std::int64_t nh = 0;
    std::int32_t block = 0;
    HashId hash = kNoHash;
    std::uint64_t seq = 0;  // insertion order (tie-break)
  };
  struct EntryLess {
    bool operator()(const Entry& a, const Entry& b) const {
      if (a.last_accessed != b.last_accessed) return a.last_accessed < b.last_accessed;
      if (a.nh != b.nh) return a.nh > b.nh;  // deeper first (-num_hashed_tokens ascending)
      if (a.block != b.block) return a.block < b.block;
      return a.seq < b.seq;
    }
  };
  using Queue = boost::intrusive::multiset<
      Entry,
      boost::intrusive::member_hook<Entry, boost::intrusive::set_member_hook<V0LinkMode>,
                                    &Entry::hook>,
      boost::intrusive::compare<EntryLess>, boost::intrusive::constant_time_size<true>>;
  struct Meta {
    bool in_table = false;
    double last_accessed = 0;
    std::int64_t nh = 0;
    HashId hash = kNoHash;
  };
  static std::size_t idx(std::int32_t b) { return static_cast<std::size_t>(b); }
  void push_entry(std::int32_t block, HashId hash, std::int64_t nh, double last_accessed);
  void drop_entry(Entry& e);  // unlinked already: releases its hash and recycles it
  void cleanup();

  BlockHashTable& hashes_;
  std::vector<Meta> meta_;  // the free table, by block
  std::int32_t num_in_table_ = 0;
  std::deque<Entry> pool_;  // stable addresses
  std::vector<Entry*> spare_;
  Queue queue_;
  std::uint64_t next_seq_ = 0;
};

}  // namespace kvsim::v0
