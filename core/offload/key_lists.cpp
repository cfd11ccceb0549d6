#include "core/offload/key_lists.h"

#include "core/common/assert.h"

namespace kvsim {

KeyLists::KeyLists(std::int32_t num_lists, KeyHolder* holder)
    : holder_(holder),
      heads_(static_cast<std::size_t>(num_lists), kNoNode),
      tails_(static_cast<std::size_t>(num_lists), kNoNode),
      sizes_(static_cast<std::size_t>(num_lists), 0),
      index_(16, kNoNode),
      mask_(15) {}

std::uint64_t KeyLists::mix(OffloadKey key) {  // splitmix64's finalizer
  auto z = static_cast<std::uint64_t>(to_int(key)) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::int32_t KeyLists::find(OffloadKey key) const {
  for (std::uint64_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
    const std::int32_t n = index_[i];
    if (n == kNoNode) return kNoNode;
    if (nodes_[static_cast<std::size_t>(n)].key == key) return n;
  }
}

void KeyLists::index_insert(std::int32_t node) {
  if (static_cast<std::uint64_t>(live_ + 1) * 2 > mask_ + 1) grow_index();
  std::uint64_t i = mix(at(node).key) & mask_;
  while (index_[i] != kNoNode) i = (i + 1) & mask_;
  index_[i] = node;
}

void KeyLists::index_erase(OffloadKey key) {
  std::uint64_t i = mix(key) & mask_;
  while (nodes_[static_cast<std::size_t>(index_[i])].key != key) i = (i + 1) & mask_;
  // Backward-shift deletion: move later entries of the probe run into the hole.
  std::uint64_t hole = i;
  for (std::uint64_t j = (i + 1) & mask_; index_[j] != kNoNode; j = (j + 1) & mask_) {
    const std::uint64_t home = mix(at(index_[j]).key) & mask_;
    // j's entry may fill the hole iff its home is not in (hole, j] (cyclically).
    const bool between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!between) {
      index_[hole] = index_[j];
      hole = j;
    }
  }
  index_[hole] = kNoNode;
}

void KeyLists::grow_index() {
  std::vector<std::int32_t> old;
  old.swap(index_);
  index_.assign(old.size() * 2, kNoNode);
  mask_ = index_.size() - 1;
  for (const std::int32_t n : old) {
    if (n == kNoNode) continue;
    std::uint64_t i = mix(at(n).key) & mask_;
    while (index_[i] != kNoNode) i = (i + 1) & mask_;
    index_[i] = n;
  }
}

std::int32_t KeyLists::push_back(std::int32_t list, OffloadKey key) {
  KVSIM_ASSERT(find(key) == kNoNode, "the key is held already");
  std::int32_t n;
  if (!free_nodes_.empty()) {
    n = free_nodes_.back();
    free_nodes_.pop_back();
  } else {
    n = static_cast<std::int32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  Node& node = at(n);
  node = Node{};
  node.key = key;
  node.list = -2;  // linked below
  index_insert(n);
  ++live_;
  move_to_back(n, list);
  if (holder_) holder_->retain(key);
  return n;
}

void KeyLists::unlink(std::int32_t n) {
  Node& node = at(n);
  const auto l = static_cast<std::size_t>(node.list);
  (node.prev == kNoNode ? heads_[l] : at(node.prev).next) = node.next;
  (node.next == kNoNode ? tails_[l] : at(node.next).prev) = node.prev;
  --sizes_[l];
  node.prev = node.next = kNoNode;
}

void KeyLists::move_to_back(std::int32_t n, std::int32_t list) {
  if (at(n).list >= 0) unlink(n);
  Node& node = at(n);
  const auto l = static_cast<std::size_t>(list);
  node.list = list;
  node.prev = tails_[l];
  node.next = kNoNode;
  (tails_[l] == kNoNode ? heads_[l] : at(tails_[l]).next) = n;
  tails_[l] = n;
  ++sizes_[l];
}

void KeyLists::erase(std::int32_t n) {
  const OffloadKey key = at(n).key;
  unlink(n);
  index_erase(key);
  at(n).list = -1;
  free_nodes_.push_back(n);
  --live_;
  if (holder_) holder_->release(key);
}

void KeyLists::clear() {
  for (std::size_t l = 0; l < heads_.size(); ++l)
    while (heads_[l] != kNoNode) erase(heads_[l]);
}

std::string KeyLists::find_violation() const {
  std::int64_t linked = 0;
  for (std::size_t l = 0; l < heads_.size(); ++l) {
    std::int64_t count = 0;
    std::int32_t prev = kNoNode;
    for (std::int32_t n = heads_[l]; n != kNoNode; n = at(n).next) {
      KVSIM_CHECK(count <= static_cast<std::int64_t>(nodes_.size()), "a list has a cycle");
      const Node& node = at(n);
      KVSIM_CHECK(node.list == static_cast<std::int32_t>(l), "a node is linked in another list");
      KVSIM_CHECK(node.prev == prev, "a node's prev link is wrong");
      KVSIM_CHECK(find(node.key) == n, "a linked key is not indexed at its node");
      prev = n;
      ++count;
    }
    KVSIM_CHECK(tails_[l] == prev, "a list's tail is not its last node");
    KVSIM_CHECK(sizes_[l] == count, "a list's size differs from its linked nodes");
    linked += count;
  }
  KVSIM_CHECK(linked == live_, "the live count differs from the linked nodes");
  std::int64_t indexed = 0;
  for (const std::int32_t n : index_) {
    if (n == kNoNode) continue;
    KVSIM_CHECK(at(n).list >= 0, "a free node is indexed");
    ++indexed;
  }
  KVSIM_CHECK(indexed == live_, "the index holds a different number of keys");
  KVSIM_CHECK(static_cast<std::int64_t>(free_nodes_.size()) + live_ ==
                  static_cast<std::int64_t>(nodes_.size()),
              "free and live nodes do not add up to the arena");
  return {};
}

}  // namespace kvsim
