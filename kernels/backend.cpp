#include "kernels/backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "kernels/cpu_attention.h"

namespace kvsim::kernels {

namespace detail {
#if defined(KVSIM_KERNELS_HAVE_CUDA)
std::unique_ptr<AttentionBackend> make_cuda_backend();  // cuda_backend.cu
#endif
}  // namespace detail

namespace {

/// Blocks of one pool (the attention pool or the swap pool) as one allocation per block, made at
/// the block's first write. Every block starts pointing at one shared NaN block (read-only by
/// construction: writes go through hold() first), so a read of a never-written block is a NaN
/// read, as with a NaN-filled dense pool.
class BlockStore {
 public:
  /// `num_blocks` blocks of `nan_block`'s `block_bytes` (which must outlive this), all NaN.
  void reset(std::int64_t num_blocks, std::byte* nan_block, std::size_t block_bytes) {
    nan_block_ = nan_block;
    block_bytes_ = block_bytes;
    const auto n = static_cast<std::size_t>(num_blocks);
    storage_.clear();
    storage_.resize(n);
    base_.assign(n, nan_block);  // never written through: see hold()
    held_blocks_ = 0;
  }
  std::int64_t size() const { return static_cast<std::int64_t>(base_.size()); }
  std::int64_t held_bytes() const { return held_blocks_ * static_cast<std::int64_t>(block_bytes_); }
  /// Gives block `b` its own storage (a NaN-filled copy of the shared NaN block) if it has none.
  std::byte* hold(std::int64_t b) {
    auto& mine = storage_[static_cast<std::size_t>(b)];
    if (!mine) {
      mine = std::make_unique_for_overwrite<std::byte[]>(block_bytes_);
      std::memcpy(mine.get(), nan_block_, block_bytes_);
      base_[static_cast<std::size_t>(b)] = mine.get();
      ++held_blocks_;
    }
    return mine.get();
  }
  void release(std::int64_t b) {
    auto& mine = storage_[static_cast<std::size_t>(b)];
    if (!mine) return;
    mine.reset();
    base_[static_cast<std::size_t>(b)] = nan_block_;
    --held_blocks_;
  }
  const std::byte* block(std::int64_t b) const {
    return static_cast<const std::byte*>(base_[static_cast<std::size_t>(b)]);
  }
  /// Block b's storage (or the NaN block) for views; per block `[2, block_size, Hkv, D]`.
  void* const* bases() const { return base_.data(); }
  /// Copies block `src` of `from` into block `dst` of this store (held afterwards).
  void copy_from(const BlockStore& from, std::int64_t src, std::int64_t dst) {
    const std::byte* data = from.block(src);
    std::memcpy(hold(dst), data, block_bytes_);
  }
  /// Per block, K then V: each a run of block_bytes / 2 in both layouts.
  void read_dense(void* dst) const {
    const std::size_t half = block_bytes_ / 2;
    const std::size_t part_stride = half * base_.size();
    for (std::size_t b = 0; b < base_.size(); ++b)
      for (std::size_t part = 0; part < 2; ++part)
        std::memcpy(static_cast<std::byte*>(dst) + part * part_stride + b * half,
                    static_cast<const std::byte*>(base_[b]) + part * half, half);
  }

 private:
  std::byte* nan_block_ = nullptr;
  std::size_t block_bytes_ = 0;
  std::vector<std::unique_ptr<std::byte[]>> storage_;  // [num_blocks] held blocks, else null
  std::vector<void*> base_;                            // [num_blocks] storage or the NaN block
  std::int64_t held_blocks_ = 0;
};

/// The CPU backend: the pool and the swap pool as BlockStores.
class CpuBackend final : public AttentionBackend {
 public:
  BackendKind kind() const override { return BackendKind::kCpu; }

  void init_pool(const kv_pool_shape& shape) override {
    shape_ = shape;
    block_elems_ = block_elements(shape);
    block_bytes_ = static_cast<std::size_t>(block_elems_) * dtype_size_bytes(shape.dtype);
    nan_block_ = std::make_unique_for_overwrite<std::byte[]>(block_bytes_);
    std::memset(nan_block_.get(), kPoisonByte, block_bytes_);
    clear_pool();
    swap_.reset(0, nan_block_.get(), block_bytes_);
  }
  const kv_pool_shape& pool_shape() const override { return shape_; }
  std::int64_t pool_resident_bytes() const override {
    return pool_.held_bytes() + swap_.held_bytes();
  }
  void clear_pool() override { pool_.reset(shape_.num_blocks, nan_block_.get(), block_bytes_); }

  void release_block(std::int64_t block) override {
    KVSIM_KERNELS_CHECK(block >= 0 && block < shape_.num_blocks,
                        "block " + std::to_string(block) + " out of range");
    pool_.release(block);
  }

  void write_kv(const void* key, const void* value, const std::int64_t* slot_mapping,
                std::int64_t num_tokens) override {
    const std::int64_t num_slots = std::int64_t{shape_.num_blocks} * shape_.block_size;
    for (std::int64_t i = 0; i < num_tokens; ++i) {
      const std::int64_t slot = slot_mapping[i];
      if (slot < 0) continue;
      KVSIM_KERNELS_CHECK(slot < num_slots, "slot " + std::to_string(slot) + " out of range");
      pool_.hold(slot / shape_.block_size);
    }
    cpu_write_kv(view(), key, value, slot_mapping, num_tokens);
  }

  void attention(const attention_batch& batch, const void* q, void* out) override {
    paged_kv_view kv = view();
    kv.block_tables = batch.block_tables;
    kv.max_blocks_per_seq = batch.max_blocks_per_seq;
    kv.seq_lens = batch.seq_lens;
    kv.num_seqs = batch.num_seqs;
    attention_queries queries{batch.q_indptr, batch.num_q_heads, batch.scale};
    cpu_paged_attention(kv, queries, q, out);
  }

  void read_pool(void* dst) const override { pool_.read_dense(dst); }
  void load_pool(const void* src) override {
    const std::size_t half = block_bytes_ / 2;
    const std::size_t part_stride = half * static_cast<std::size_t>(shape_.num_blocks);
    for (std::int64_t b = 0; b < shape_.num_blocks; ++b) {
      std::byte* mine = pool_.hold(b);
      for (std::size_t part = 0; part < 2; ++part)
        std::memcpy(mine + part * half,
                    static_cast<const std::byte*>(src) + part * part_stride +
                        static_cast<std::size_t>(b) * half,
                    half);
    }
  }

  void init_swap_pool(std::int64_t num_blocks) override {
    KVSIM_KERNELS_CHECK(num_blocks >= 0, "negative swap pool");
    swap_.reset(num_blocks, nan_block_.get(), block_bytes_);
  }
  std::int64_t swap_pool_blocks() const override { return swap_.size(); }
  // Blocks are whole allocations in both stores: a move is one memcpy per pair, in order.
  void swap_blocks(SwapDirection direction, const std::int64_t* block_mapping,
                   std::int64_t num_pairs) override {
    const bool out = direction == SwapDirection::kOut;
    BlockStore& from = out ? pool_ : swap_;
    BlockStore& to = out ? swap_ : pool_;
    check_block_mapping(block_mapping, num_pairs, from.size(), to.size(), false);
    for (std::int64_t i = 0; i < num_pairs; ++i)
      to.copy_from(from, block_mapping[2 * i], block_mapping[2 * i + 1]);
  }
  void copy_blocks(const std::int64_t* block_mapping, std::int64_t num_pairs) override {
    check_block_mapping(block_mapping, num_pairs, pool_.size(), pool_.size(), true);
    for (std::int64_t i = 0; i < num_pairs; ++i)
      pool_.copy_from(pool_, block_mapping[2 * i], block_mapping[2 * i + 1]);
  }
  void release_swap_block(std::int64_t block) override {
    KVSIM_KERNELS_CHECK(block >= 0 && block < swap_.size(),
                        "swap block " + std::to_string(block) + " out of range");
    swap_.release(block);
  }
  void read_swap_pool(void* dst) const override { swap_.read_dense(dst); }

 private:
  paged_kv_view view() { return make_per_block_view(pool_.bases(), shape_); }

  kv_pool_shape shape_;
  std::int64_t block_elems_ = 0;
  std::size_t block_bytes_ = 0;
  std::unique_ptr<std::byte[]> nan_block_;  // one block, every element NaN
  BlockStore pool_;                         // [num_blocks]
  BlockStore swap_;                         // [swap blocks] vLLM V0's CPU cache
};

}  // namespace

void check_block_mapping(const std::int64_t* block_mapping, std::int64_t num_pairs,
                         std::int64_t src_blocks, std::int64_t dst_blocks, bool independent) {
  KVSIM_KERNELS_CHECK(num_pairs >= 0 && (num_pairs == 0 || block_mapping != nullptr), "no mapping");
  for (std::int64_t i = 0; i < num_pairs; ++i) {
    const std::int64_t src = block_mapping[2 * i], dst = block_mapping[2 * i + 1];
    KVSIM_KERNELS_CHECK(src >= 0 && src < src_blocks && dst >= 0 && dst < dst_blocks,
                        "pair " + std::to_string(i) + " (" + std::to_string(src) + ", " +
                            std::to_string(dst) + ") out of range");
  }
  if (!independent) return;
  std::vector<std::int64_t> src(static_cast<std::size_t>(num_pairs));
  std::vector<std::int64_t> dst(src.size());
  for (std::size_t i = 0; i < src.size(); ++i) {
    src[i] = block_mapping[2 * i];
    dst[i] = block_mapping[2 * i + 1];
  }
  std::sort(src.begin(), src.end());
  std::sort(dst.begin(), dst.end());
  KVSIM_KERNELS_CHECK(std::adjacent_find(dst.begin(), dst.end()) == dst.end(),
                      "a block is the destination of two pairs");
  for (const std::int64_t d : dst)
    KVSIM_KERNELS_CHECK(!std::binary_search(src.begin(), src.end(), d),
                        "block " + std::to_string(d) + " is both a source and a destination");
}

BackendKind parse_backend_kind(std::string_view name) {
  if (name == "cpu") return BackendKind::kCpu;
  if (name == "cuda") return BackendKind::kCuda;
  throw std::invalid_argument("unknown kernel backend '" + std::string(name) +
                              "' (allowed: cpu, cuda)");
}

const char* backend_name(BackendKind kind) { return kind == BackendKind::kCpu ? "cpu" : "cuda"; }

#if !defined(KVSIM_KERNELS_HAVE_CUDA)
bool cuda_device_available() { return false; }
std::string cuda_device_name() { return "none"; }
#endif

KernelTiming timing_from_samples(double* samples_us, std::int32_t n) {
  std::sort(samples_us, samples_us + n);
  auto at = [&](double q) {
    const auto i = static_cast<std::int32_t>(std::lround(q * (n - 1)));
    return samples_us[std::clamp(i, 0, n - 1)];
  };
  KernelTiming t;
  t.repeats = n;
  t.min_us = samples_us[0];
  t.p10_us = at(0.1);
  t.p90_us = at(0.9);
  t.median_us = n % 2 ? samples_us[n / 2] : 0.5 * (samples_us[n / 2 - 1] + samples_us[n / 2]);
  return t;
}

KernelTiming AttentionBackend::time_attention(const attention_batch& batch, const void* q,
                                              std::int32_t warmup, std::int32_t repeats,
                                              void* out) {
  for (std::int32_t i = 0; i < warmup; ++i) attention(batch, q, out);
  repeats = std::max(repeats, 1);
  std::vector<double> samples(static_cast<std::size_t>(repeats));
  for (std::int32_t i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    attention(batch, q, out);
    samples[static_cast<std::size_t>(i)] =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  }
  return timing_from_samples(samples.data(), repeats);
}

std::unique_ptr<AttentionBackend> make_attention_backend(BackendKind kind) {
  if (kind == BackendKind::kCpu) return std::make_unique<CpuBackend>();
#if defined(KVSIM_KERNELS_HAVE_CUDA)
  if (cuda_device_available()) return detail::make_cuda_backend();
  throw std::runtime_error("the cuda kernel backend needs a CUDA device; none is available");
#else
  throw std::runtime_error("the cuda kernel backend is not built (configure with nvcc present)");
#endif
}

}  // namespace kvsim::kernels
