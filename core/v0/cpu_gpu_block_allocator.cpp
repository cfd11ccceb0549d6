#include "core/v0/cpu_gpu_block_allocator.h"

#include "core/common/assert.h"

namespace kvsim::v0 {

CpuGpuBlockAllocator::CpuGpuBlockAllocator(bool enable_caching, std::int32_t block_size,
                                           std::int32_t num_gpu_blocks, std::int32_t num_cpu_blocks)
    : caching_(enable_caching),
      block_size_(block_size),
      num_gpu_(num_gpu_blocks),
      num_cpu_(num_cpu_blocks),
      hashes_(block_size),
      pools_{BlockObjectPool(std::int64_t{4} * num_gpu_blocks),
             BlockObjectPool(std::int64_t{4} * num_cpu_blocks)} {
  KVSIM_ASSERT(block_size > 0 && num_gpu_blocks >= 0 && num_cpu_blocks >= 0);
  const BlockId gpu_first{0}, cpu_first{num_gpu_blocks};
  if (caching_) {
    prefix_[idx(Device::kGpu)] =
        std::make_unique<PrefixCachingBlockAllocator>(gpu_first, num_gpu_blocks, hashes_);
    prefix_[idx(Device::kCpu)] =
        std::make_unique<PrefixCachingBlockAllocator>(cpu_first, num_cpu_blocks, hashes_);
  } else {
    naive_[idx(Device::kGpu)] = std::make_unique<NaiveBlockAllocator>(gpu_first, num_gpu_blocks);
    naive_[idx(Device::kCpu)] = std::make_unique<NaiveBlockAllocator>(cpu_first, num_cpu_blocks);
  }
}

// The allocators release their hash references before the table goes.
CpuGpuBlockAllocator::~CpuGpuBlockAllocator() {
  prefix_[0].reset();
  prefix_[1].reset();
}

const NaiveBlockAllocator& CpuGpuBlockAllocator::free_lists(Device d) const {
  return caching_ ? prefix_[idx(d)]->hashless() : *naive_[idx(d)];
}

void CpuGpuBlockAllocator::require_owner(Device d, BlockId id) const {
  if (!free_lists(d).owns(id)) raise("AssertionError", "assert block_id in self._refcounts");
}

BlockId CpuGpuBlockAllocator::allocate_mutable(Device d) {
  if (caching_) return prefix_[idx(d)]->allocate_block_id();
  const BlockId id = naive_[idx(d)]->allocate_block_id();
  if (id == kNoBlock) raise("NoFreeBlocksError", "");
  return id;
}

BlockId CpuGpuBlockAllocator::allocate_immutable(Device d, HashId hash) {
  if (caching_) return prefix_[idx(d)]->allocate_immutable(hash);
  return allocate_mutable(d);
}

void CpuGpuBlockAllocator::allocate_naive_ids(Device d, std::int64_t n, std::vector<BlockId>& out) {
  for (std::int64_t i = 0; i < n; ++i) out.push_back(allocate_mutable(d));
}

BlockId CpuGpuBlockAllocator::cow_if_not_appendable(Device creator, BlockId id,
                                                    std::vector<BlockIdPair>& cows) {
  require_owner(creator, id);
  // Each allocator records its own copy-on-writes; clear_copy_on_writes reports the GPU's only.
  std::vector<BlockIdPair>& sink = creator == Device::kGpu ? cows : cpu_cows_;
  cpu_cows_.clear();
  if (caching_) return prefix_[idx(creator)]->cow_if_not_appendable(id, sink);
  return naive_[idx(creator)]->cow_if_not_appendable(id, sink);
}

BlockId CpuGpuBlockAllocator::promote(Device creator, BlockId id, HashId hash) {
  KVSIM_ASSERT(caching_);
  require_owner(creator, id);
  return prefix_[idx(creator)]->promote(id, hash);
}

void CpuGpuBlockAllocator::free(BlockId id, HashId hash, std::int64_t num_hashed_tokens) {
  free_on(device_of(id), id, hash, num_hashed_tokens);
}

void CpuGpuBlockAllocator::free_on(Device d, BlockId id, HashId hash,
                                   std::int64_t num_hashed_tokens) {
  require_owner(d, id);
  if (caching_)
    prefix_[idx(d)]->free(id, hash, num_hashed_tokens);
  else
    naive_[idx(d)]->free_block_id(id);
}

void CpuGpuBlockAllocator::fork_block(Device d, BlockId id) {
  require_owner(d, id);
  if (caching_) {
    prefix_[idx(d)]->fork_block(id);
  } else {
    vllm_assert(naive_[idx(d)]->incr_ref(id) != 1, "can't fork free'd block");
  }
}

std::int32_t CpuGpuBlockAllocator::num_free_blocks(Device d) const {
  return caching_ ? prefix_[idx(d)]->num_free_blocks() : naive_[idx(d)]->num_free_blocks();
}

std::int32_t CpuGpuBlockAllocator::physical_id(Device d, BlockId id) const {
  const NaiveBlockAllocator& a = free_lists(d);
  if (!a.owns(id)) raise("ValueError", std::to_string(to_int(id)) + " is not in list");
  return a.physical_id(id);
}

std::int32_t CpuGpuBlockAllocator::ref_count(BlockId id) const {
  return free_lists(device_of(id)).ref_count(id);
}

bool CpuGpuBlockAllocator::full_block_touched(Device d, HashId hash) const {
  const PrefixCachingBlockAllocator& a = *prefix_[idx(d)];
  const BlockId cached = a.cached_block(hash);
  return cached == kNoBlock || a.in_evictor(cached);
}

void CpuGpuBlockAllocator::mark_accessed(std::span<const BlockId> ids, double now) {
  if (caching_) prefix_[idx(Device::kGpu)]->mark_accessed(ids, now);
}

void CpuGpuBlockAllocator::mark_computed() {
  if (caching_) prefix_[idx(Device::kGpu)]->mark_computed();
}

std::int64_t CpuGpuBlockAllocator::find_cached_prefix(std::span<const HashId> hashes) const {
  return caching_ ? prefix_[idx(Device::kGpu)]->find_cached_prefix(hashes) : 0;
}

double CpuGpuBlockAllocator::hit_rate(Device d) const {
  return caching_ ? prefix_[idx(d)]->hit_rate() : -1.0;
}

bool CpuGpuBlockAllocator::reset_prefix_cache() {
  if (!caching_) return true;
  return prefix_[idx(Device::kCpu)]->reset_prefix_cache() &&
         prefix_[idx(Device::kGpu)]->reset_prefix_cache();
}

std::string CpuGpuBlockAllocator::find_violation() const {
  for (Device d : {Device::kGpu, Device::kCpu}) {
    const std::string v =
        caching_ ? prefix_[idx(d)]->find_violation() : naive_[idx(d)]->find_violation();
    if (!v.empty()) return (d == Device::kGpu ? "gpu: " : "cpu: ") + v;
  }
  return hashes_.find_violation();
}

}  // namespace kvsim::v0
