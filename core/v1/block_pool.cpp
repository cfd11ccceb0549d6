#include "core/v1/block_pool.h"

#include <algorithm>
#include <bit>

#include "core/common/assert.h"
#include "core/common/hot.h"

namespace kvsim {

BlockPool::BlockPool(std::int32_t num_blocks, bool enable_caching, bool null_block,
                     BlockHashTable& hashes, std::int32_t num_groups)
    : enable_caching_(enable_caching),
      group_shift_(std::bit_width(static_cast<std::uint32_t>(num_groups - 1))),
      hashes_(hashes),
      blocks_(static_cast<std::size_t>(num_blocks)),
      cached_by_group_(static_cast<std::size_t>(num_groups), 0) {
  KVSIM_ASSERT(num_blocks > 0 && num_groups > 0 && num_groups <= 256);
  for (std::int32_t i = 0; i < num_blocks; ++i) {
    free_queue_.push_back(blocks_[static_cast<std::size_t>(i)]);
  }
  if (null_block) {  // vLLM: self.null_block = self.free_block_queue.popleft()
    null_block_ = id_of(free_queue_.front());
    free_queue_.pop_front();
  }
}

BlockPool::~BlockPool() {
  free_queue_.clear();
  for (KVCacheBlock& b : blocks_)
    if (b.block_hash != kNoHash) hashes_.release(hash_of_key(b.block_hash));
}

BlockId BlockPool::get_cached_block(HashId h) const {
  const std::size_t s = head_slot(h);
  return s < hash_head_.size() ? hash_head_[s] : kNoBlock;
}

KVSIM_HOT void BlockPool::get_new_blocks_batch(std::int32_t n, std::vector<BlockId>& out) {
  KVSIM_ASSERT(n <= num_free_blocks(), "not enough free blocks");
  // Evict in pop order. Releasing a hash node reads the node and then its bucket, two dependent
  // misses: pipeline them, block i being popped (its node prefetched) while block i - kLag / 2's
  // bucket is prefetched and block i - kLag is evicted.
  constexpr std::size_t kLag = 8;
  const std::size_t first = out.size();
  const auto evict_at = [&](std::size_t k) {
    KVCacheBlock& blk = block(out[k]);
    if (blk.block_hash != kNoHash) evict(blk);
  };
  for (std::int32_t i = 0; i < n; ++i) {
    KVCacheBlock& blk = free_queue_.front();
    free_queue_.pop_front();
    KVSIM_ASSERT(blk.ref_cnt == 0);
    blk.ref_cnt = 1;
    out.push_back(id_of(blk));
    if (!enable_caching_) continue;
    if (blk.block_hash != kNoHash) hashes_.prefetch_node(hash_of_key(blk.block_hash));
    const std::size_t k = out.size() - 1;
    if (k >= first + kLag / 2)
      if (const HashId h = block(out[k - kLag / 2]).block_hash; h != kNoHash)
        hashes_.prefetch_bucket(hash_of_key(h));
    if (k >= first + kLag) evict_at(k - kLag);
  }
  if (enable_caching_) {  // the last min(n, kLag) popped blocks
    const std::size_t rest = std::min<std::size_t>(kLag, static_cast<std::size_t>(n));
    for (std::size_t k = out.size() - rest; k < out.size(); ++k) evict_at(k);
  }
  stats_.blocks_allocated += n;
}

KVSIM_HOT void BlockPool::touch(std::span<const BlockId> blocks) {
  for (BlockId b : blocks) {
    KVCacheBlock& blk = block(b);
    if (blk.ref_cnt == 0 && b != null_block_) free_queue_.erase(free_queue_.iterator_to(blk));
    ++blk.ref_cnt;
  }
}

KVSIM_HOT void BlockPool::free_block(BlockId b) {
  KVCacheBlock& blk = block(b);
  if (b == null_block_) {
    --blk.ref_cnt;
    return;
  }
  KVSIM_ASSERT(blk.ref_cnt > 0, "freeing a block that is not in use");
  if (--blk.ref_cnt == 0) free_queue_.push_back(blk);
}

KVSIM_HOT void BlockPool::cache_block(BlockId b, HashId key) {
  KVCacheBlock& blk = block(b);
  KVSIM_ASSERT(blk.block_hash == kNoHash, "block already has a hash");
  hashes_.retain(hash_of_key(key));
  blk.block_hash = key;
  const std::size_t s = head_slot(key);
  if (s >= hash_head_.size()) {
    hash_head_.resize(s + 1 + s / 2, kNoBlock);
    hash_tail_.resize(hash_head_.size(), kNoBlock);
  }
  blk.hash_next = kNoBlock;
  blk.hash_prev = hash_tail_[s];
  if (hash_tail_[s] == kNoBlock) {
    hash_head_[s] = b;
    ++num_cached_hashes_;
  } else {
    block(hash_tail_[s]).hash_next = b;
  }
  hash_tail_[s] = b;
  ++num_cached_blocks_;
  ++cached_by_group_[static_cast<std::size_t>(group_of_key(key))];
  if (events_ != nullptr) [[unlikely]]
    events_->push_back(KvEvent{KvEvent::Kind::kStored, group_of_key(key),
                               hashes_.content_hash(hash_of_key(key))});
}

// vLLM's _maybe_evict_cached_block: the block leaves its hash group; an emptied group is deleted.
KVSIM_HOT void BlockPool::evict(KVCacheBlock& blk) {
  const std::size_t s = head_slot(blk.block_hash);
  if (blk.hash_prev == kNoBlock)
    hash_head_[s] = blk.hash_next;
  else
    block(blk.hash_prev).hash_next = blk.hash_next;
  if (blk.hash_next == kNoBlock)
    hash_tail_[s] = blk.hash_prev;
  else
    block(blk.hash_next).hash_prev = blk.hash_prev;
  if (hash_head_[s] == kNoBlock) --num_cached_hashes_;
  --num_cached_blocks_;
  --cached_by_group_[static_cast<std::size_t>(group_of_key(blk.block_hash))];
  blk.hash_prev = blk.hash_next = kNoBlock;
  const HashId h = hash_of_key(blk.block_hash);
  if (events_ != nullptr) [[unlikely]]
    events_->push_back(
        KvEvent{KvEvent::Kind::kRemoved, group_of_key(blk.block_hash), hashes_.content_hash(h)});
  blk.block_hash = kNoHash;
  hashes_.release(h);
  ++stats_.evictions;
}

bool BlockPool::reset_prefix_cache() {
  if (num_free_blocks() != num_blocks() - (null_block_ == kNoBlock ? 0 : 1)) return false;
  for (KVCacheBlock& blk : blocks_) {
    if (blk.block_hash == kNoHash) continue;
    const std::size_t s = head_slot(blk.block_hash);
    hash_head_[s] = hash_tail_[s] = kNoBlock;
    blk.hash_prev = blk.hash_next = kNoBlock;
    const HashId h = hash_of_key(blk.block_hash);
    blk.block_hash = kNoHash;
    hashes_.release(h);
  }
  num_cached_hashes_ = 0;
  num_cached_blocks_ = 0;
  std::fill(cached_by_group_.begin(), cached_by_group_.end(), 0);
  if (events_ != nullptr) events_->push_back(KvEvent{KvEvent::Kind::kAllCleared, 0, 0});
  return true;
}

void BlockPool::cached_blocks_of(HashId key, std::vector<BlockId>& out) const {
  for (BlockId b = get_cached_block(key); b != kNoBlock; b = block(b).hash_next) out.push_back(b);
}

std::string BlockPool::find_violation() const {
  std::vector<char> queued(blocks_.size(), 0);
  std::int64_t queue_len = 0;
  for (const KVCacheBlock& blk : free_queue_) {
    const std::size_t i = static_cast<std::size_t>(to_int(id_of(blk)));
    KVSIM_CHECK(i < blocks_.size() && &blocks_[i] == &blk, "free queue holds a foreign block");
    KVSIM_CHECK(!queued[i], "block queued twice");
    queued[i] = 1;
    ++queue_len;
  }
  KVSIM_CHECK(queue_len == static_cast<std::int64_t>(free_queue_.size()), "queue size mismatch");
  std::int64_t cached_blocks = 0;
  std::vector<std::int64_t> by_group(cached_by_group_.size(), 0);
  std::int64_t heads = 0;
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const KVCacheBlock& blk = blocks_[i];
    KVSIM_CHECK(to_int(id_of(blk)) == static_cast<std::int32_t>(i), "block id mismatch");
    if (id_of(blk) == null_block_) {
      KVSIM_CHECK(!queued[i], "the null block is in the free queue");
    } else {
      KVSIM_CHECK(blk.ref_cnt >= 0, "negative ref count");
      KVSIM_CHECK((blk.ref_cnt == 0) == static_cast<bool>(queued[i]),
                  "a block must be queued iff its ref count is 0");
    }
    if (blk.block_hash == kNoHash) {
      KVSIM_CHECK(blk.hash_prev == kNoBlock && blk.hash_next == kNoBlock, "stale hash links");
      continue;
    }
    KVSIM_CHECK(enable_caching_, "a block has a hash while caching is disabled");
    KVSIM_CHECK(hashes_.ref_count(hash_of_key(blk.block_hash)) > 0,
                "cached block with a dead hash");
    ++cached_blocks;
    const auto g = static_cast<std::size_t>(group_of_key(blk.block_hash));
    KVSIM_CHECK(g < by_group.size(), "cached block keyed to a group the pool does not have");
    ++by_group[g];
    const std::size_t s = head_slot(blk.block_hash);
    if (blk.hash_prev == kNoBlock) {
      KVSIM_CHECK(hash_head_[s] == id_of(blk), "chain head mismatch");
      ++heads;
    } else {
      KVSIM_CHECK(block(blk.hash_prev).hash_next == id_of(blk), "broken hash chain");
      KVSIM_CHECK(block(blk.hash_prev).block_hash == blk.block_hash, "chain mixes hashes");
    }
    if (blk.hash_next == kNoBlock) KVSIM_CHECK(hash_tail_[s] == id_of(blk), "chain tail mismatch");
  }
  KVSIM_CHECK(cached_blocks == num_cached_blocks_, "cached block count mismatch");
  KVSIM_CHECK(by_group == cached_by_group_, "cached block count of a KV cache group mismatch");
  KVSIM_CHECK(heads == num_cached_hashes_, "cached hash count mismatch");
  for (std::size_t s = 0; s < hash_head_.size(); ++s) {
    if (hash_head_[s] == kNoBlock) {
      KVSIM_CHECK(hash_tail_[s] == kNoBlock, "tail without head");
      continue;
    }
    KVSIM_CHECK(to_int(block(hash_head_[s]).block_hash) == static_cast<std::int32_t>(s),
                "index entry points at a block with another hash");
  }
  return {};
}

void BlockPool::check_invariants() const { KVSIM_ASSERT_NO_VIOLATION(find_violation()); }

}  // namespace kvsim
