#include "core/v0/naive_block_allocator.h"

#include "core/common/assert.h"

namespace kvsim::v0 {

NaiveBlockAllocator::NaiveBlockAllocator(BlockId first_id, std::int32_t num_blocks)
    : first_id_(first_id), nodes_(static_cast<std::size_t>(num_blocks)) {
  KVSIM_ASSERT(num_blocks >= 0 && to_int(first_id) >= 0);
  // deque(block_ids) is ascending and popleft takes the lowest first: push in reverse order.
  for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it) free_.push_front(*it);
}

NaiveBlockAllocator::~NaiveBlockAllocator() { free_.clear(); }

BlockId NaiveBlockAllocator::allocate_block_id() {
  if (free_.empty()) return kNoBlock;
  Node& n = free_.front();
  free_.pop_front();
  ++n.refcount;
  ++num_allocations_;
  return id_of(n);
}

void NaiveBlockAllocator::free_block_id(BlockId id) {
  Node& n = node(id);
  vllm_assert(n.refcount > 0, "refcount > 0");
  if (--n.refcount == 0) free_.push_front(n);
}

BlockId NaiveBlockAllocator::cow_if_not_appendable(BlockId id, std::vector<BlockIdPair>& cows) {
  if (node(id).refcount <= 1) return id;
  free_block_id(id);
  const BlockId target = allocate_block_id();
  if (target == kNoBlock) raise("NoFreeBlocksError", "");
  cows.emplace_back(to_int(id), to_int(target));
  return target;
}

void NaiveBlockAllocator::free_list(std::vector<BlockId>& out) const {
  out.clear();
  for (const Node& n : free_) out.push_back(id_of(n));
}

std::string NaiveBlockAllocator::find_violation(const std::vector<bool>* extra_free) const {
  std::vector<char> seen(nodes_.size(), 0);
  std::int64_t listed = 0;
  for (const Node& n : free_) {
    const auto i = static_cast<std::size_t>(&n - nodes_.data());
    KVSIM_CHECK(i < nodes_.size(), "a free-list node is not one of this allocator's blocks");
    KVSIM_CHECK(!seen[i],
                "block " + std::to_string(to_int(id_of(n))) + " is on the free list twice");
    seen[i] = 1;
    KVSIM_CHECK(n.refcount == 0,
                "block " + std::to_string(to_int(id_of(n))) + " is free with a refcount > 0");
    ++listed;
  }
  KVSIM_CHECK(listed == static_cast<std::int64_t>(free_.size()), "free-list length disagrees");
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    const std::string id = std::to_string(to_int(first_id_) + static_cast<std::int32_t>(i));
    KVSIM_CHECK(n.refcount >= 0, "block " + id + " has a negative refcount");
    const bool elsewhere = extra_free && (*extra_free)[i];
    if (n.refcount == 0 && !elsewhere)
      KVSIM_CHECK(seen[i], "block " + id + " has refcount 0 but is not free (leaked)");
    if (elsewhere) KVSIM_CHECK(!seen[i] && n.refcount == 0, "block " + id + " is free twice");
  }
  return {};
}

}  // namespace kvsim::v0
