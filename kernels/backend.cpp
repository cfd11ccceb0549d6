#include "kernels/backend.h"

#include <cstring>
#include <limits>
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

/// Fills `n` elements of `dtype` at `data` with a quiet NaN.
void fill_nan(void* data, DType dtype, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    store_from_float(data, dtype, i, std::numeric_limits<float>::quiet_NaN());
}

/// The pool as one allocation per block, made at the block's first write. Every block starts
/// pointing at one shared NaN block (read-only by construction: writes go through held() first),
/// so a read of a never-written block is a NaN read, as with a NaN-filled dense pool.
class CpuBackend final : public AttentionBackend {
 public:
  BackendKind kind() const override { return BackendKind::kCpu; }

  void init_pool(const kv_pool_shape& shape) override {
    shape_ = shape;
    block_elems_ = block_elements(shape);
    block_bytes_ = static_cast<std::size_t>(block_elems_) * dtype_size_bytes(shape.dtype);
    nan_block_ = std::make_unique_for_overwrite<std::byte[]>(block_bytes_);
    fill_nan(nan_block_.get(), shape.dtype, block_elems_);
    clear_pool();
  }
  const kv_pool_shape& pool_shape() const override { return shape_; }
  std::int64_t pool_resident_bytes() const override {
    return held_blocks_ * static_cast<std::int64_t>(block_bytes_);
  }
  void clear_pool() override {
    const auto n = static_cast<std::size_t>(shape_.num_blocks);
    storage_.clear();
    storage_.resize(n);
    base_.assign(n, nan_block_.get());
    held_blocks_ = 0;
  }

  void release_block(std::int64_t block) override {
    KVSIM_KERNELS_CHECK(block >= 0 && block < shape_.num_blocks,
                        "block " + std::to_string(block) + " out of range");
    auto& mine = storage_[static_cast<std::size_t>(block)];
    if (!mine) return;
    mine.reset();
    base_[static_cast<std::size_t>(block)] = nan_block_.get();
    --held_blocks_;
  }

  void write_kv(const void* key, const void* value, const std::int64_t* slot_mapping,
                std::int64_t num_tokens) override {
    const std::int64_t num_slots = std::int64_t{shape_.num_blocks} * shape_.block_size;
    for (std::int64_t i = 0; i < num_tokens; ++i) {
      const std::int64_t slot = slot_mapping[i];
      if (slot < 0) continue;
      KVSIM_KERNELS_CHECK(slot < num_slots, "slot " + std::to_string(slot) + " out of range");
      hold(slot / shape_.block_size);
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

  // Per block, K then V: each a run of block_size * Hkv * D elements in both layouts.
  void read_pool(void* dst) const override {
    const std::size_t half = block_bytes_ / 2;
    const std::size_t part_stride = half * static_cast<std::size_t>(shape_.num_blocks);
    for (std::size_t b = 0; b < base_.size(); ++b)
      for (std::size_t part = 0; part < 2; ++part)
        std::memcpy(static_cast<std::byte*>(dst) + part * part_stride + b * half,
                    static_cast<const std::byte*>(base_[b]) + part * half, half);
  }
  void load_pool(const void* src) override {
    const std::size_t half = block_bytes_ / 2;
    const std::size_t part_stride = half * static_cast<std::size_t>(shape_.num_blocks);
    for (std::size_t b = 0; b < base_.size(); ++b) {
      hold(static_cast<std::int64_t>(b));
      for (std::size_t part = 0; part < 2; ++part)
        std::memcpy(static_cast<std::byte*>(base_[b]) + part * half,
                    static_cast<const std::byte*>(src) + part * part_stride + b * half, half);
    }
  }

 private:
  paged_kv_view view() { return make_per_block_view(base_.data(), shape_); }
  /// Gives block `b` its own storage (a NaN-filled copy of the shared NaN block) if it has none.
  void hold(std::int64_t b) {
    auto& mine = storage_[static_cast<std::size_t>(b)];
    if (mine) return;
    mine = std::make_unique_for_overwrite<std::byte[]>(block_bytes_);
    std::memcpy(mine.get(), nan_block_.get(), block_bytes_);
    base_[static_cast<std::size_t>(b)] = mine.get();
    ++held_blocks_;
  }

  kv_pool_shape shape_;
  std::int64_t block_elems_ = 0;
  std::size_t block_bytes_ = 0;
  std::unique_ptr<std::byte[]> nan_block_;             // one block, every element NaN
  std::vector<std::unique_ptr<std::byte[]>> storage_;  // [num_blocks] held blocks, else null
  std::vector<void*> base_;                            // [num_blocks] storage or nan_block_
  std::int64_t held_blocks_ = 0;
};

}  // namespace

BackendKind parse_backend_kind(std::string_view name) {
  if (name == "cpu") return BackendKind::kCpu;
  if (name == "cuda") return BackendKind::kCuda;
  throw std::invalid_argument("unknown kernel backend '" + std::string(name) +
                              "' (allowed: cpu, cuda)");
}

const char* backend_name(BackendKind kind) { return kind == BackendKind::kCpu ? "cpu" : "cuda"; }

#if !defined(KVSIM_KERNELS_HAVE_CUDA)
bool cuda_device_available() { return false; }
#endif

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
