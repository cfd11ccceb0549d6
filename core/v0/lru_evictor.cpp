#include "core/v0/lru_evictor.h"

#include <algorithm>

#include "core/common/assert.h"

namespace kvsim::v0 {

namespace {
// LRUEvictor.CLEANUP_THRESHOLD: the queue is rebuilt when it exceeds this many entries per block.
constexpr std::size_t kCleanupThreshold = 50;
}  // namespace

LruEvictor::LruEvictor(std::int32_t num_blocks, BlockHashTable& hashes)
    : hashes_(hashes), meta_(static_cast<std::size_t>(num_blocks)) {}

LruEvictor::~LruEvictor() { clear(); }

void LruEvictor::push_entry(std::int32_t block, HashId hash, std::int64_t nh,
                            double last_accessed) {
  Entry* e;
  if (spare_.empty()) {
    e = &pool_.emplace_back();
  } else {
    e = spare_.back();
    spare_.pop_back();
  }
  e->last_accessed = last_accessed;
  e->nh = nh;
  e->block = block;
  e->hash = hash;
  e->seq = next_seq_++;
  hashes_.retain(hash);
  queue_.insert(*e);
}

void LruEvictor::drop_entry(Entry& e) {
  hashes_.release(e.hash);
  e.hash = kNoHash;
  spare_.push_back(&e);
}

void LruEvictor::add(std::int32_t block, HashId hash, std::int64_t num_hashed_tokens,
                     double last_accessed) {
  Meta& m = meta_[idx(block)];
  // free_table[block_id] = BlockMetaData(...) replaces any previous record of the block.
  if (m.in_table) {
    hashes_.release(m.hash);
  } else {
    m.in_table = true;
    ++num_in_table_;
  }
  m.hash = hash;
  hashes_.retain(hash);
  m.nh = num_hashed_tokens;
  m.last_accessed = last_accessed;
  push_entry(block, hash, num_hashed_tokens, last_accessed);
  if (queue_.size() > kCleanupThreshold * static_cast<std::size_t>(num_in_table_)) cleanup();
}

void LruEvictor::update(std::int32_t block, double last_accessed) {
  Meta& m = meta_[idx(block)];
  KVSIM_ASSERT(m.in_table, "update of a block that is not in the evictor");
  m.last_accessed = last_accessed;
}

void LruEvictor::remove(std::int32_t block) {
  Meta& m = meta_[idx(block)];
  if (!m.in_table) raise("ValueError", "Attempting to remove block that's not in the evictor");
  m.in_table = false;
  --num_in_table_;
  hashes_.release(m.hash);
  m.hash = kNoHash;
}

LruEvictor::Evicted LruEvictor::evict() {
  if (num_in_table_ == 0) raise("ValueError", "No usable cache memory left");
  while (!queue_.empty()) {
    Entry& e = *queue_.begin();
    queue_.erase(queue_.begin());
    Meta& m = meta_[idx(e.block)];
    if (m.in_table && m.last_accessed == e.last_accessed) {
      const Evicted out{e.block, e.hash};
      hashes_.retain(e.hash);  // the caller's reference
      m.in_table = false;
      --num_in_table_;
      hashes_.release(m.hash);
      m.hash = kNoHash;
      drop_entry(e);
      return out;
    }
    drop_entry(e);
  }
  raise("ValueError", "No usable cache memory left");
}

void LruEvictor::cleanup() {
  while (!queue_.empty()) {
    Entry& e = *queue_.begin();
    queue_.erase(queue_.begin());
    drop_entry(e);
  }
  for (std::size_t b = 0; b < meta_.size(); ++b) {
    const Meta& m = meta_[b];
    if (m.in_table) push_entry(static_cast<std::int32_t>(b), m.hash, m.nh, m.last_accessed);
  }
}

void LruEvictor::clear() {
  while (!queue_.empty()) {
    Entry& e = *queue_.begin();
    queue_.erase(queue_.begin());
    drop_entry(e);
  }
  for (Meta& m : meta_) {
    if (m.in_table) hashes_.release(m.hash);
    m = Meta{};
  }
  num_in_table_ = 0;
}

void LruEvictor::eviction_order(std::vector<std::int32_t>& order,
                                std::vector<std::int32_t>& unreachable) const {
  order.clear();
  unreachable.clear();
  std::vector<char> emitted(meta_.size(), 0);
  for (const Entry& e : queue_) {
    const Meta& m = meta_[idx(e.block)];
    if (!m.in_table || m.last_accessed != e.last_accessed || emitted[idx(e.block)]) continue;
    emitted[idx(e.block)] = 1;
    order.push_back(e.block);
  }
  for (std::size_t b = 0; b < meta_.size(); ++b)
    if (meta_[b].in_table && !emitted[b]) unreachable.push_back(static_cast<std::int32_t>(b));
}

void LruEvictor::count_hash_refs(std::vector<std::int32_t>& refs) const {
  for (const Meta& m : meta_)
    if (m.in_table) ++refs[static_cast<std::size_t>(to_int(m.hash))];
  for (const Entry& e : queue_) ++refs[static_cast<std::size_t>(to_int(e.hash))];
}

std::string LruEvictor::find_violation() const {
  std::int32_t n = 0;
  for (const Meta& m : meta_) {
    if (!m.in_table) {
      KVSIM_CHECK(m.hash == kNoHash, "a block out of the evictor keeps a hash reference");
      continue;
    }
    ++n;
    KVSIM_CHECK(m.hash != kNoHash && hashes_.ref_count(m.hash) > 0,
                "an evictor block's hash is not live");
  }
  KVSIM_CHECK(n == num_in_table_, "the evictor's block count disagrees with its table");
  for (const Entry& e : queue_) {
    KVSIM_CHECK(e.block >= 0 && idx(e.block) < meta_.size(),
                "an evictor entry's block is out of range");
    KVSIM_CHECK(e.hash != kNoHash && hashes_.ref_count(e.hash) > 0,
                "an evictor entry's hash is not live");
  }
  KVSIM_CHECK(pool_.size() == queue_.size() + spare_.size(), "evictor entries leaked");
  return {};
}

}  // namespace kvsim::v0
