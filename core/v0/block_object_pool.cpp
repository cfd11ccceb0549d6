#include "core/v0/block_object_pool.h"

#include "core/common/assert.h"
#include "core/v0/v0_types.h"

namespace kvsim::v0 {

BlockObjectPool::BlockObjectPool(std::int64_t pool_size) : size_(pool_size) {
  KVSIM_ASSERT(pool_size >= 0);
}

std::int64_t BlockObjectPool::init_block() {
  std::int64_t id;
  if (!given_back_.empty()) {
    id = given_back_.back();
    given_back_.pop_back();
  } else {
    if (next_fresh_ == size_) {  // increase_pool: the deque is empty
      size_ *= 2;
      vllm_assert(next_fresh_ < size_, "assert len(self._free_ids) > 0");
    }
    id = next_fresh_++;
  }
  // block = self._pool[pool_id]: ids come from this pool's deque, possibly another pool's.
  if (id >= size_) [[unlikely]]
    raise("IndexError", "list index out of range");
  return id;
}

void BlockObjectPool::free_ids(std::vector<std::int64_t>& out) const {
  out.clear();
  for (auto it = given_back_.rbegin(); it != given_back_.rend(); ++it) out.push_back(*it);
  for (std::int64_t i = next_fresh_; i < size_; ++i) out.push_back(i);
}

}  // namespace kvsim::v0
