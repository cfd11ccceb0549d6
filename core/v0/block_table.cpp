#include "core/v0/block_table.h"

#include <algorithm>

#include "core/common/assert.h"

namespace kvsim::v0 {

namespace {
// math.ceil(a / b) for b > 0 and any sign of a.
std::int64_t ceil_div_signed(std::int64_t a, std::int64_t b) {
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}
}  // namespace

// allocate_mutable_block: the block id, then the object.
void BlockTable::push_mutable(CpuGpuBlockAllocator& a, BlockId id, Device creator) {
  const std::int64_t pool_id = a.object_pool(creator).init_block();
  ids_.push_back(id);
  made_on_cpu_.push_back(creator == Device::kCpu ? 1 : 0);
  pool_ids_.push_back(pool_id);
  if (a.caching()) hashes_.push_back(kNoHash);
}

void BlockTable::allocate(CpuGpuBlockAllocator& a, std::span<const Token> tokens, Device d) {
  vllm_assert(!allocated(), "assert not self._is_allocated");
  vllm_assert(!tokens.empty(), "assert token_ids");
  const std::int32_t bs = a.block_size();
  const auto n = static_cast<std::int64_t>(tokens.size());
  const std::int64_t num_full = n / bs;
  const std::uint8_t cpu = d == Device::kCpu ? 1 : 0;
  BlockObjectPool& pool = a.object_pool(d);
  if (a.caching()) {
    hashes_.clear();
    a.hashes().intern_chain(kNoHash, tokens.first(static_cast<std::size_t>(num_full * bs)),
                            kExtraNone, hashes_);
    // allocate_immutable_block: the object first (its content hash is looked up), then the id.
    for (std::int64_t i = 0; i < num_full; ++i) {
      const std::int64_t pool_id = pool.init_block();
      ids_.push_back(a.allocate_immutable(d, hashes_[static_cast<std::size_t>(i)]));
      made_on_cpu_.push_back(cpu);
      pool_ids_.push_back(pool_id);
    }
  } else {
    // The naive allocate_immutable_blocks: every id, then every object.
    a.allocate_naive_ids(d, num_full, ids_);
    made_on_cpu_.resize(ids_.size(), cpu);
    while (pool_ids_.size() < ids_.size()) pool_ids_.push_back(pool.init_block());
  }
  if (n % bs != 0) {
    const BlockId id = a.allocate_mutable(d);
    push_mutable(a, id, d);
    if (a.caching()) tail_.assign(tokens.begin() + num_full * bs, tokens.end());
  }
  num_full_slots_ = n;
}

void BlockTable::append_to_block(CpuGpuBlockAllocator& a, std::size_t i,
                                 std::span<const Token> chunk, std::vector<BlockIdPair>& cows) {
  const Device creator = made_on_cpu_[i] ? Device::kCpu : Device::kGpu;
  if (!a.caching()) {
    ids_[i] = a.cow_if_not_appendable(creator, ids_[i], cows);
    return;
  }
  vllm_assert(hash(i) == kNoHash, "assert self.content_hash is None");
  ids_[i] = a.cow_if_not_appendable(creator, ids_[i], cows);
  tail_.insert(tail_.end(), chunk.begin(), chunk.end());
  if (static_cast<std::int32_t>(tail_.size()) == a.block_size()) {
    const HashId prev = i == 0 ? kNoHash : hashes_[i - 1];
    const HashId h = a.hashes().intern(prev, tail_, kExtraNone);
    hashes_[i] = h;
    tail_.clear();
    ids_[i] = a.promote(creator, ids_[i], h);
  }
}

void BlockTable::append_token_ids(CpuGpuBlockAllocator& a, std::span<const Token> tokens,
                                  std::int64_t num_lookahead_slots,
                                  std::vector<BlockIdPair>& cows) {
  vllm_assert(allocated(), "no blocks have been allocated");
  const std::int32_t bs = a.block_size();
  const auto n = static_cast<std::int64_t>(tokens.size());
  // ensure_num_empty_slots(len + lookahead): mutable GPU blocks at the end.
  const std::int64_t empty = static_cast<std::int64_t>(ids_.size()) * bs - num_full_slots_;
  const std::int64_t need = n + num_lookahead_slots;
  if (empty < need) {
    const std::int64_t more = cdiv(need - empty, bs);
    for (std::int64_t k = 0; k < more; ++k)
      push_mutable(a, a.allocate_mutable(Device::kGpu), Device::kGpu);
  }
  std::size_t i = static_cast<std::size_t>(num_full_slots_ / bs);
  std::int64_t pos = 0;
  std::int64_t chunk = bs - num_full_slots_ % bs;
  while (pos < n) {
    const std::int64_t len = std::min(chunk, n - pos);
    append_to_block(
        a, i, tokens.subspan(static_cast<std::size_t>(pos), static_cast<std::size_t>(len)), cows);
    pos += len;
    ++i;
    chunk = bs;
  }
  num_full_slots_ += n;
}

void BlockTable::fork(CpuGpuBlockAllocator& a, BlockTable& child) const {
  vllm_assert(allocated(), "assert self._is_allocated");
  const Device d = a.device_of(ids_.back());
  BlockObjectPool& pool = a.object_pool(d);
  child.pool_ids_.clear();
  for (BlockId id : ids_) {
    a.fork_block(d, id);
    child.pool_ids_.push_back(pool.init_block());
  }
  child.ids_ = ids_;
  child.hashes_ = hashes_;
  for (HashId h : child.hashes_)
    if (h != kNoHash) a.hashes().retain(h);
  child.made_on_cpu_.assign(ids_.size(), d == Device::kCpu ? 1 : 0);
  child.tail_ = tail_;
  child.num_full_slots_ = num_full_slots_;
}

void BlockTable::free(CpuGpuBlockAllocator& a) {
  const std::int32_t bs = a.block_size();
  for (std::size_t i = 0; i < ids_.size(); ++i) {
    const Device owner = a.device_of(ids_[i]);
    a.free(ids_[i], hash(i), static_cast<std::int64_t>(i + 1) * bs);
    a.object_pool(owner).free_block(pool_ids_[i]);  // whichever pool the object came from
  }
  forget(a);
}

void BlockTable::forget(CpuGpuBlockAllocator& a) {
  for (HashId h : hashes_)
    if (h != kNoHash) a.hashes().release(h);
  ids_.clear();
  hashes_.clear();
  made_on_cpu_.clear();
  pool_ids_.clear();
  tail_.clear();
  num_full_slots_ = 0;
}

void BlockTable::count_hash_refs(std::vector<std::int32_t>& refs) const {
  for (HashId h : hashes_)
    if (h != kNoHash) ++refs[static_cast<std::size_t>(to_int(h))];
}

void BlockTable::swap(CpuGpuBlockAllocator& a, Device src, Device dst,
                      std::vector<BlockIdPair>& mapping) {
  const std::int32_t bs = a.block_size();
  const std::size_t first = mapping.size();
  for (std::size_t i = 0; i < ids_.size(); ++i) {
    mapping.emplace_back(to_int(ids_[i]), -1);
    a.free_on(src, ids_[i], hash(i), static_cast<std::int64_t>(i + 1) * bs);
  }
  // dst's swap_in: each block's new id comes with a temporary object from dst's pool, taken
  // before the id for a prefix-caching full block (allocate_immutable_block looks its hash up on
  // a pool object) and after it otherwise; the table's objects keep their pool ids.
  const auto num_full = static_cast<std::size_t>(num_full_slots_ / bs);
  BlockObjectPool& pool = a.object_pool(dst);
  for (std::size_t i = 0; i < ids_.size(); ++i) {
    if (i < num_full && a.caching()) {
      pool.init_and_free();
      ids_[i] = a.allocate_immutable(dst, hash(i));
    } else {
      ids_[i] = a.allocate_mutable(dst);
      pool.init_and_free();
    }
    mapping[first + i].second = to_int(ids_[i]);
  }
}

std::int64_t BlockTable::num_blocks_touched_by_append(std::int64_t num_tokens,
                                                      std::int64_t lookahead,
                                                      std::int32_t block_size) const {
  const std::int64_t first_chunk = block_size - num_full_slots_ % block_size;
  return 1 + ceil_div_signed(num_tokens + lookahead - first_chunk, block_size);
}

std::int64_t BlockTable::num_full_blocks_touched(const CpuGpuBlockAllocator& a, Device d) const {
  const auto num_full =
      std::min(ids_.size(), static_cast<std::size_t>(num_full_slots_ / a.block_size()));
  if (!a.caching()) return static_cast<std::int64_t>(num_full);
  std::int64_t n = 0;
  for (std::size_t i = 0; i < num_full; ++i) n += a.full_block_touched(d, hashes_[i]) ? 1 : 0;
  return n;
}

std::string BlockTable::find_violation(const CpuGpuBlockAllocator& a) const {
  const std::int32_t bs = a.block_size();
  KVSIM_CHECK(made_on_cpu_.size() == ids_.size(), "block table: creator flags out of step");
  KVSIM_CHECK(pool_ids_.size() == ids_.size(), "block table: pool ids out of step");
  KVSIM_CHECK(num_full_slots_ <= static_cast<std::int64_t>(ids_.size()) * bs,
              "block table: more tokens than slots");
  KVSIM_CHECK(!ids_.empty() || num_full_slots_ == 0, "block table: tokens without blocks");
  const auto num_full = static_cast<std::size_t>(num_full_slots_ / bs);
  for (std::size_t i = 0; i < ids_.size(); ++i) {
    const BlockId id = ids_[i];
    const Device d = a.device_of(id);
    KVSIM_CHECK(to_int(id) >= 0 && a.free_lists(d).owns(id),
                "block table: id " + std::to_string(to_int(id)) + " out of range");
    KVSIM_CHECK(a.ref_count(id) > 0,
                "block table: block " + std::to_string(to_int(id)) + " is held with refcount 0");
    if (!a.caching()) continue;
    const HashId h = hash(i);
    KVSIM_CHECK((h != kNoHash) == (i < num_full),
                "block table: a content hash on a partial block or none on a full one");
    if (h != kNoHash)
      KVSIM_CHECK(a.prefix(d)->cached_block(h) == id,
                  "block table: full block " + std::to_string(to_int(id)) +
                      " is not the block cached under its hash");
  }
  if (a.caching()) {
    const std::size_t want =
        num_full < ids_.size() ? static_cast<std::size_t>(num_full_slots_ % bs) : 0;
    KVSIM_CHECK(tail_.size() == want, "block table: partial-block tokens out of step");
  }
  return {};
}

}  // namespace kvsim::v0
