#include "kernels/backend.h"

#include <cstring>
#include <limits>
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

class CpuBackend final : public AttentionBackend {
 public:
  BackendKind kind() const override { return BackendKind::kCpu; }

  void init_pool(const kv_pool_shape& shape) override {
    shape_ = shape;
    pool_.assign(static_cast<std::size_t>(shape.num_elements()) * dtype_size_bytes(shape.dtype),
                 std::byte{0});
    fill_nan(pool_.data(), shape.dtype, shape.num_elements());
  }
  const kv_pool_shape& pool_shape() const override { return shape_; }

  void write_kv(const void* key, const void* value, const std::int64_t* slot_mapping,
                std::int64_t num_tokens) override {
    cpu_write_kv(make_vllm_v1_view(pool_.data(), shape_), key, value, slot_mapping, num_tokens);
  }

  void attention(const attention_batch& batch, const void* q, void* out) override {
    paged_kv_view view = make_vllm_v1_view(pool_.data(), shape_);
    view.block_tables = batch.block_tables;
    view.max_blocks_per_seq = batch.max_blocks_per_seq;
    view.seq_lens = batch.seq_lens;
    view.num_seqs = batch.num_seqs;
    attention_queries queries{batch.q_indptr, batch.num_q_heads, batch.scale};
    cpu_paged_attention(view, queries, q, out);
  }

  void read_pool(void* dst) const override { std::memcpy(dst, pool_.data(), pool_.size()); }
  void load_pool(const void* src) override { std::memcpy(pool_.data(), src, pool_.size()); }

 private:
  kv_pool_shape shape_;
  std::vector<std::byte> pool_;  // [2, num_blocks, block_size, num_kv_heads, head_size]
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
