// AttentionBackend over the CUDA kernels: the pool lives on the device, arguments are host arrays.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/attention_cuda.h"
#include "kernels/backend.h"
#include "kernels/check.h"
#include "kernels/cuda_utils.h"
#include "kernels/device_work_plan.h"
#include "kernels/work_plan.h"

namespace kvsim::kernels {
namespace {

class CudaBackend final : public AttentionBackend {
 public:
  CudaBackend() = default;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;
  ~CudaBackend() override {
    if (start_) cudaEventDestroy(start_);
    if (stop_) cudaEventDestroy(stop_);
  }

  BackendKind kind() const override { return BackendKind::kCuda; }

  void init_pool(const kv_pool_shape& shape) override {
    KVSIM_KERNELS_CHECK(shape.dtype != DType::kF32, "the cuda backend stores fp16 or bf16 only");
    shape_ = shape;
    pool_.resize(pool_bytes());
    KVSIM_CUDA_CHECK(cudaMemset(pool_.get(), kPoisonByte, pool_bytes()));
    swap_.reset();
    swap_shape_ = shape;
    swap_shape_.num_blocks = 0;
  }
  const kv_pool_shape& pool_shape() const override { return shape_; }
  std::int64_t pool_resident_bytes() const override {
    return static_cast<std::int64_t>(pool_bytes() + swap_.size_bytes());
  }
  void clear_pool() override {
    KVSIM_CUDA_CHECK(cudaMemset(pool_.get(), kPoisonByte, pool_bytes()));
  }
  void release_block(std::int64_t block) override {
    KVSIM_KERNELS_CHECK(block >= 0 && block < shape_.num_blocks, "block out of range");
    const paged_kv_view v = view();
    const std::size_t elt = dtype_size_bytes(shape_.dtype);
    const std::size_t bytes = static_cast<std::size_t>(v.stride_block) * elt;
    for (std::int64_t part = 0; part < 2; ++part) {  // K and V of the block: one run each
      const std::int64_t first = part * v.stride_kv + block * v.stride_block;  // elements
      KVSIM_CUDA_CHECK(
          cudaMemset(pool_.get() + static_cast<std::size_t>(first) * elt, kPoisonByte, bytes));
    }
  }

  void write_kv(const void* key, const void* value, const std::int64_t* slot_mapping,
                std::int64_t num_tokens) override {
    if (num_tokens <= 0) return;
    const std::size_t bytes = static_cast<std::size_t>(num_tokens) * shape_.num_kv_heads *
                              shape_.head_size * dtype_size_bytes(shape_.dtype);
    key_.upload(static_cast<const std::byte*>(key), bytes);
    value_.upload(static_cast<const std::byte*>(value), bytes);
    slots_.upload(slot_mapping, static_cast<std::size_t>(num_tokens));
    const std::int64_t num_slots = std::int64_t{shape_.num_blocks} * shape_.block_size;
    for (std::int64_t i = 0; i < num_tokens; ++i)
      KVSIM_KERNELS_CHECK(slot_mapping[i] < num_slots, "slot out of range");
    KVSIM_CUDA_CHECK(
        ReshapeAndCache(view(), key_.get(), value_.get(), slots_.get(), num_tokens, nullptr));
    KVSIM_CUDA_CHECK(cudaDeviceSynchronize());
  }

  void attention(const attention_batch& batch, const void* q, void* out) override {
    const paged_kv_view kv = prepare(batch, q);
    KVSIM_CUDA_CHECK(launch(kv, batch));
    KVSIM_CUDA_CHECK(cudaDeviceSynchronize());
    out_.download(static_cast<std::byte*>(out), out_.size_bytes());
  }

  KernelTiming time_attention(const attention_batch& batch, const void* q, std::int32_t warmup,
                              std::int32_t repeats, void* out) override {
    const paged_kv_view kv = prepare(batch, q);
    if (!start_) {
      KVSIM_CUDA_CHECK(cudaEventCreate(&start_));
      KVSIM_CUDA_CHECK(cudaEventCreate(&stop_));
    }
    for (std::int32_t i = 0; i < warmup; ++i) KVSIM_CUDA_CHECK(launch(kv, batch));
    KVSIM_CUDA_CHECK(cudaDeviceSynchronize());
    repeats = std::max(repeats, 1);
    std::vector<double> samples(static_cast<std::size_t>(repeats));
    for (std::int32_t i = 0; i < repeats; ++i) {
      KVSIM_CUDA_CHECK(cudaEventRecord(start_, nullptr));
      KVSIM_CUDA_CHECK(launch(kv, batch));
      KVSIM_CUDA_CHECK(cudaEventRecord(stop_, nullptr));
      KVSIM_CUDA_CHECK(cudaEventSynchronize(stop_));
      float ms = 0;
      KVSIM_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
      samples[static_cast<std::size_t>(i)] = 1e3 * static_cast<double>(ms);
    }
    out_.download(static_cast<std::byte*>(out), out_.size_bytes());
    return timing_from_samples(samples.data(), repeats);
  }

  void read_pool(void* dst) const override {
    pool_.download(static_cast<std::byte*>(dst), pool_bytes());
  }
  void load_pool(const void* src) override {
    pool_.upload(static_cast<const std::byte*>(src), pool_bytes());
  }
  void init_swap_pool(std::int64_t num_blocks) override {
    KVSIM_KERNELS_CHECK(num_blocks >= 0 && num_blocks <= INT32_MAX, "swap pool size");
    swap_shape_ = shape_;
    swap_shape_.num_blocks = static_cast<std::int32_t>(num_blocks);
    const std::size_t bytes =
        static_cast<std::size_t>(swap_shape_.num_elements()) * dtype_size_bytes(shape_.dtype);
    swap_.resize(bytes);
    if (bytes > 0) std::memset(swap_.get(), kPoisonByte, bytes);  // NaN, as the pool
  }
  std::int64_t swap_pool_blocks() const override { return swap_shape_.num_blocks; }
  void swap_blocks(SwapDirection direction, const std::int64_t* block_mapping,
                   std::int64_t num_pairs) override {
    const bool out = direction == SwapDirection::kOut;
    const paged_kv_view gpu = view();
    const paged_kv_view cpu = swap_view();
    check_block_mapping(block_mapping, num_pairs, out ? gpu.num_blocks : cpu.num_blocks,
                        out ? cpu.num_blocks : gpu.num_blocks, false);
    KVSIM_CUDA_CHECK(
        SwapBlocks(out ? gpu : cpu, out ? cpu : gpu, block_mapping, num_pairs, nullptr));
    KVSIM_CUDA_CHECK(cudaDeviceSynchronize());
  }
  void copy_blocks(const std::int64_t* block_mapping, std::int64_t num_pairs) override {
    check_block_mapping(block_mapping, num_pairs, shape_.num_blocks, shape_.num_blocks, true);
    if (num_pairs == 0) return;
    mapping_.upload(block_mapping, static_cast<std::size_t>(2 * num_pairs));
    KVSIM_CUDA_CHECK(CopyBlocks(view(), mapping_.get(), num_pairs, nullptr));
    KVSIM_CUDA_CHECK(cudaDeviceSynchronize());
  }
  void release_swap_block(std::int64_t block) override {
    KVSIM_KERNELS_CHECK(block >= 0 && block < swap_shape_.num_blocks, "swap block out of range");
    const paged_kv_view v = swap_view();
    const std::size_t elt = dtype_size_bytes(shape_.dtype);
    for (std::int64_t part = 0; part < 2; ++part)
      std::memset(
          swap_.get() + static_cast<std::size_t>(part * v.stride_kv + block * v.stride_block) * elt,
          kPoisonByte, static_cast<std::size_t>(v.stride_block) * elt);
  }
  void read_swap_pool(void* dst) const override {
    if (swap_.size_bytes() > 0) std::memcpy(dst, swap_.get(), swap_.size_bytes());
  }

  void set_forced_splits(std::int32_t splits) override { forced_splits_ = splits; }
  void set_attention_path(AttentionPath path) override { path_ = path; }

 private:
  /// Checks the batch, uploads its arguments, NaN-fills the output (unwritten rows show up) and
  /// plans the launch; returns the pool view over the uploaded tables.
  paged_kv_view prepare(const attention_batch& batch, const void* q) {
    KVSIM_KERNELS_CHECK(batch.num_q_heads % shape_.num_kv_heads == 0, "Hq % Hkv != 0");
    const std::int64_t rows = batch.num_q_rows();
    for (std::int32_t s = 0; s < batch.num_seqs; ++s) {
      const std::int32_t q_len = batch.q_indptr ? batch.q_indptr[s + 1] - batch.q_indptr[s] : 1;
      KVSIM_KERNELS_CHECK(q_len <= batch.seq_lens[s] || (batch.seq_lens[s] == 0 && q_len <= 1),
                          "q_len > seq_len");
    }
    const std::size_t row_bytes = static_cast<std::size_t>(batch.num_q_heads) * shape_.head_size *
                                  dtype_size_bytes(shape_.dtype);
    const std::size_t qo_bytes = static_cast<std::size_t>(rows) * row_bytes;
    tables_.upload(batch.block_tables,
                   static_cast<std::size_t>(batch.num_seqs) * batch.max_blocks_per_seq);
    lens_.upload(batch.seq_lens, static_cast<std::size_t>(batch.num_seqs));
    q_.upload(static_cast<const std::byte*>(q), qo_bytes);
    out_.resize(qo_bytes);
    KVSIM_CUDA_CHECK(cudaMemset(out_.get(), kPoisonByte, qo_bytes));

    work_.plan(shape_, batch.seq_lens, batch.q_indptr, batch.num_seqs, batch.num_q_heads,
               forced_splits_, path_);
    paged_kv_view kv = view();
    kv.block_tables = tables_.get();
    kv.max_blocks_per_seq = batch.max_blocks_per_seq;
    kv.seq_lens = lens_.get();
    kv.num_seqs = batch.num_seqs;
    return kv;
  }
  cudaError_t launch(const paged_kv_view& kv, const attention_batch& batch) {
    return work_.launch(kv, q_.get(), out_.get(), batch.num_q_heads, batch.scale, nullptr, path_);
  }

  std::size_t pool_bytes() const {
    return static_cast<std::size_t>(shape_.num_elements()) * dtype_size_bytes(shape_.dtype);
  }
  paged_kv_view view() const { return make_vllm_v1_view(pool_.get(), shape_); }
  paged_kv_view swap_view() const { return make_vllm_v1_view(swap_.get(), swap_shape_); }

  kv_pool_shape shape_;
  std::int32_t forced_splits_ = 0;
  AttentionPath path_ = AttentionPath::kAuto;
  DeviceBuffer<std::byte> pool_;       // [2, num_blocks, block_size, num_kv_heads, head_size]
  DeviceBuffer<std::byte> key_;        // [num_tokens, num_kv_heads, head_size]
  DeviceBuffer<std::byte> value_;      // [num_tokens, num_kv_heads, head_size]
  DeviceBuffer<std::int64_t> slots_;   // [num_tokens]
  DeviceBuffer<std::int32_t> tables_;  // [num_seqs, max_blocks_per_seq]
  DeviceBuffer<std::int32_t> lens_;    // [num_seqs]
  DeviceBuffer<std::byte> q_;          // [num_rows, num_q_heads, head_size]
  DeviceBuffer<std::byte> out_;        // [num_rows, num_q_heads, head_size]
  DeviceWorkPlan work_;
  kv_pool_shape swap_shape_;                      // the pool's, with the swap pool's block count
  PinnedBuffer<std::byte> swap_;                  // [2, swap blocks, block_size, Hkv, D], host
  DeviceBuffer<std::int64_t> mapping_;            // [num_pairs, 2] copy_blocks
  cudaEvent_t start_ = nullptr, stop_ = nullptr;  // time_attention, made at its first call
};

}  // namespace

namespace detail {
std::unique_ptr<AttentionBackend> make_cuda_backend() { return std::make_unique<CudaBackend>(); }
}  // namespace detail

}  // namespace kvsim::kernels
