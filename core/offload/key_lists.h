#pragma once
// KeyLists: several ordered lists of offload keys over one node arena, each key in at most one
// list at a time, found by key in O(1) (open addressing). The building block of vLLM v0.20.1's
// OrderedDicts in the CPU offloading tier: LRU's one list, ARC's T1, T2 and ghosts B1, B2, the
// reuse filter's LRU of lookup counts.
//
// A key's identity may need keeping alive while a list holds it (the connector's keys are
// interned block hashes, reference counted): an optional KeyHolder is told when a key enters the
// lists (retain) and when it leaves them (release); moves between lists keep it.

#include <cstdint>
#include <string>
#include <vector>

namespace kvsim {

/// An offload key (vLLM's OffloadKey: a block hash plus the KV cache group index). The connector
/// uses interned block hashes of group 0; the offm replay interns the trace's own key values.
enum class OffloadKey : std::int64_t {};
constexpr std::int64_t to_int(OffloadKey k) { return static_cast<std::int64_t>(k); }

/// Keeps a key's identity alive while a KeyLists holds it.
class KeyHolder {
 public:
  virtual void retain(OffloadKey key) = 0;
  virtual void release(OffloadKey key) = 0;

 protected:
  ~KeyHolder() = default;
};

class KeyLists {
 public:
  static constexpr std::int32_t kNoNode = -1;
  struct Node {
    OffloadKey key{};
    std::int32_t prev = kNoNode;
    std::int32_t next = kNoNode;
    std::int32_t list = -1;  // -1: the node is free
    std::int32_t ref_cnt = 0;       // the owner's field (a CPU block's ref_cnt)
    std::int64_t value = 0;         // the owner's field (a CPU block id, a lookup count)
    std::uint32_t stamp = 0;        // the owner's scratch mark (eviction: protected / picked)
  };

  /// `num_lists` lists, all empty. `holder` (may be null) is told of keys entering and leaving.
  explicit KeyLists(std::int32_t num_lists, KeyHolder* holder = nullptr);
  /// Releases every key still held (the holder must outlive the lists).
  ~KeyLists() {
    if (holder_) clear();
  }
  KeyLists(const KeyLists&) = delete;
  KeyLists& operator=(const KeyLists&) = delete;

  /// The node holding `key`, or kNoNode. O(1) expected.
  std::int32_t find(OffloadKey key) const;
  /// Appends `key` (not held yet) to the back of `list`; returns its node. Amortized O(1);
  /// allocates only when the arena or the index grows past its high-water mark.
  std::int32_t push_back(std::int32_t list, OffloadKey key);
  /// Unlinks `node` and links it at the back of `list` (the same list or another). O(1).
  void move_to_back(std::int32_t node, std::int32_t list);
  /// Removes `node` and its key (released). O(1) expected.
  void erase(std::int32_t node);
  /// Removes every key (each released).
  void clear();

  std::int32_t front(std::int32_t list) const { return heads_[static_cast<std::size_t>(list)]; }
  std::int32_t next(std::int32_t node) const { return at(node).next; }
  std::int64_t size(std::int32_t list) const { return sizes_[static_cast<std::size_t>(list)]; }
  Node& at(std::int32_t node) { return nodes_[static_cast<std::size_t>(node)]; }
  const Node& at(std::int32_t node) const { return nodes_[static_cast<std::size_t>(node)]; }

  /// The first broken invariant ("" if none): every list's links and size, every live node
  /// indexed under its key exactly once, no free node indexed. O(nodes + index).
  std::string find_violation() const;

  /// Test hook: a planted fault (`list`'s size no longer matches its nodes).
  void corrupt_size_for_test(std::int32_t list) { ++sizes_[static_cast<std::size_t>(list)]; }

 private:
  static std::uint64_t mix(OffloadKey key);
  void unlink(std::int32_t node);
  void index_insert(std::int32_t node);
  void index_erase(OffloadKey key);
  void grow_index();

  KeyHolder* holder_;
  std::vector<Node> nodes_;
  std::vector<std::int32_t> free_nodes_;
  std::vector<std::int32_t> heads_, tails_;
  std::vector<std::int64_t> sizes_;
  std::vector<std::int32_t> index_;  // open addressing, linear probing: node or kNoNode
  std::uint64_t mask_ = 0;
  std::int64_t live_ = 0;
};

}  // namespace kvsim
