#include "validate/cuda_timer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#if defined(KVSIM_KERNELS_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include "kernels/attention_cuda.h"
#include "kernels/cuda_utils.h"
#include "kernels/device_work_plan.h"
#include "kernels/work_plan.h"
#endif

namespace kvsim::validate {

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

#if defined(KVSIM_KERNELS_HAVE_CUDA)

using kernels::DeviceBuffer;

struct CudaAttentionTimer::Impl {
  kernels::kv_pool_shape shape;
  DeviceBuffer<std::byte> pool;        // [2, num_blocks, block_size, Hkv, D]
  DeviceBuffer<std::byte> key, value;  // [num_tokens, Hkv, D]
  DeviceBuffer<std::int64_t> slots;    // [num_tokens]
  DeviceBuffer<std::int32_t> tables;   // [num_seqs, max_blocks_per_seq]
  DeviceBuffer<std::int32_t> lens;     // [num_seqs]
  DeviceBuffer<std::byte> q, out;      // [rows, Hq, D]
  kernels::DeviceWorkPlan work;
  cudaEvent_t start = nullptr, stop = nullptr;
  kernels::kv_pool_shape swap_shape;      // shape, with the swap pool's block count
  kernels::PinnedBuffer<std::byte> swap;  // [2, swap blocks, block_size, Hkv, D], host
  DeviceBuffer<std::int64_t> mapping;     // [num_pairs, 2] copy_blocks

  std::size_t pool_bytes() const {
    return static_cast<std::size_t>(shape.num_elements()) * kernels::dtype_size_bytes(shape.dtype);
  }
  kernels::paged_kv_view view() const { return kernels::make_vllm_v1_view(pool.get(), shape); }
  kernels::paged_kv_view swap_view() const {
    return kernels::make_vllm_v1_view(swap.get(), swap_shape);
  }
};

CudaAttentionTimer::CudaAttentionTimer(const kernels::kv_pool_shape& shape)
    : impl_(std::make_unique<Impl>()) {
  impl_->shape = shape;
  impl_->pool.resize(impl_->pool_bytes());
  KVSIM_CUDA_CHECK(
      cudaMemset(impl_->pool.get(), 0xff, impl_->pool_bytes()));  // NaN, as the backend
  KVSIM_CUDA_CHECK(cudaEventCreate(&impl_->start));
  KVSIM_CUDA_CHECK(cudaEventCreate(&impl_->stop));
}

CudaAttentionTimer::~CudaAttentionTimer() {
  if (impl_->start) cudaEventDestroy(impl_->start);
  if (impl_->stop) cudaEventDestroy(impl_->stop);
}

void CudaAttentionTimer::write_kv(const void* key, const void* value,
                                  const std::int64_t* slot_mapping, std::int64_t num_tokens) {
  if (num_tokens <= 0) return;
  Impl& m = *impl_;
  const std::size_t bytes = static_cast<std::size_t>(num_tokens) * m.shape.num_kv_heads *
                            m.shape.head_size * kernels::dtype_size_bytes(m.shape.dtype);
  m.key.upload(static_cast<const std::byte*>(key), bytes);
  m.value.upload(static_cast<const std::byte*>(value), bytes);
  m.slots.upload(slot_mapping, static_cast<std::size_t>(num_tokens));
  KVSIM_CUDA_CHECK(kernels::ReshapeAndCache(m.view(), m.key.get(), m.value.get(), m.slots.get(),
                                            num_tokens, nullptr));
  KVSIM_CUDA_CHECK(cudaDeviceSynchronize());
}

void CudaAttentionTimer::init_swap_pool(std::int64_t num_blocks) {
  Impl& m = *impl_;
  m.swap_shape = m.shape;
  m.swap_shape.num_blocks = static_cast<std::int32_t>(num_blocks);
  const std::size_t bytes = static_cast<std::size_t>(m.swap_shape.num_elements()) *
                            kernels::dtype_size_bytes(m.shape.dtype);
  m.swap.resize(bytes);
  if (bytes > 0) std::memset(m.swap.get(), 0xff, bytes);  // NaN, as the backend's
}

void CudaAttentionTimer::swap_blocks(kernels::SwapDirection direction,
                                     const std::int64_t* block_mapping, std::int64_t num_pairs) {
  Impl& m = *impl_;
  const bool out = direction == kernels::SwapDirection::kOut;
  KVSIM_CUDA_CHECK(kernels::SwapBlocks(out ? m.view() : m.swap_view(),
                                       out ? m.swap_view() : m.view(), block_mapping, num_pairs,
                                       nullptr));
  KVSIM_CUDA_CHECK(cudaDeviceSynchronize());
}

void CudaAttentionTimer::copy_blocks(const std::int64_t* block_mapping, std::int64_t num_pairs) {
  if (num_pairs <= 0) return;
  Impl& m = *impl_;
  m.mapping.upload(block_mapping, static_cast<std::size_t>(2 * num_pairs));
  KVSIM_CUDA_CHECK(kernels::CopyBlocks(m.view(), m.mapping.get(), num_pairs, nullptr));
  KVSIM_CUDA_CHECK(cudaDeviceSynchronize());
}

void CudaAttentionTimer::release_swap_block(std::int64_t block) {
  Impl& m = *impl_;
  const kernels::paged_kv_view v = m.swap_view();
  const std::size_t elt = kernels::dtype_size_bytes(m.shape.dtype);
  for (std::int64_t part = 0; part < 2; ++part)
    std::memset(
        m.swap.get() + static_cast<std::size_t>(part * v.stride_kv + block * v.stride_block) * elt,
        0xff, static_cast<std::size_t>(v.stride_block) * elt);
}

KernelTiming CudaAttentionTimer::time(const kernels::attention_batch& batch, const void* q,
                                      std::int32_t warmup, std::int32_t repeats, void* out) {
  Impl& m = *impl_;
  const std::int64_t rows = batch.num_q_rows();
  const std::size_t qo_bytes = static_cast<std::size_t>(rows) * batch.num_q_heads *
                               m.shape.head_size * kernels::dtype_size_bytes(m.shape.dtype);
  m.tables.upload(batch.block_tables,
                  static_cast<std::size_t>(batch.num_seqs) * batch.max_blocks_per_seq);
  m.lens.upload(batch.seq_lens, static_cast<std::size_t>(batch.num_seqs));
  m.q.upload(static_cast<const std::byte*>(q), qo_bytes);
  m.out.resize(qo_bytes);
  // The same automatic plan as the backend (forced_splits 0, the automatic path), so the
  // launches are identical.
  m.work.plan(m.shape, batch.seq_lens, batch.q_indptr, batch.num_seqs, batch.num_q_heads, 0,
              kernels::AttentionPath::kAuto);
  kernels::paged_kv_view kv = m.view();
  kv.block_tables = m.tables.get();
  kv.max_blocks_per_seq = batch.max_blocks_per_seq;
  kv.seq_lens = m.lens.get();
  kv.num_seqs = batch.num_seqs;
  auto launch = [&]() {
    return m.work.launch(kv, m.q.get(), m.out.get(), batch.num_q_heads, batch.scale, nullptr,
                         kernels::AttentionPath::kAuto);
  };
  for (std::int32_t i = 0; i < warmup; ++i) KVSIM_CUDA_CHECK(launch());
  KVSIM_CUDA_CHECK(cudaDeviceSynchronize());
  repeats = std::max(repeats, 1);
  std::vector<double> samples(static_cast<std::size_t>(repeats));
  for (std::int32_t i = 0; i < repeats; ++i) {
    KVSIM_CUDA_CHECK(cudaEventRecord(m.start, nullptr));
    KVSIM_CUDA_CHECK(launch());
    KVSIM_CUDA_CHECK(cudaEventRecord(m.stop, nullptr));
    KVSIM_CUDA_CHECK(cudaEventSynchronize(m.stop));
    float ms = 0;
    KVSIM_CUDA_CHECK(cudaEventElapsedTime(&ms, m.start, m.stop));
    samples[static_cast<std::size_t>(i)] = 1e3 * static_cast<double>(ms);
  }
  if (out != nullptr) m.out.download(static_cast<std::byte*>(out), qo_bytes);
  return timing_from_samples(samples.data(), repeats);
}

std::string CudaAttentionTimer::device_name() const {
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
    return "cuda device";
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
         std::to_string(prop.minor) + ")";
}

#else  // no CUDA in this build

struct CudaAttentionTimer::Impl {};

CudaAttentionTimer::CudaAttentionTimer(const kernels::kv_pool_shape&) {
  throw std::runtime_error("this kvsim was built without CUDA: no CUDA kernel timer");
}
CudaAttentionTimer::~CudaAttentionTimer() = default;
void CudaAttentionTimer::write_kv(const void*, const void*, const std::int64_t*, std::int64_t) {}
void CudaAttentionTimer::init_swap_pool(std::int64_t) {}
void CudaAttentionTimer::swap_blocks(kernels::SwapDirection, const std::int64_t*, std::int64_t) {}
void CudaAttentionTimer::copy_blocks(const std::int64_t*, std::int64_t) {}
void CudaAttentionTimer::release_swap_block(std::int64_t) {}
KernelTiming CudaAttentionTimer::time(const kernels::attention_batch&, const void*, std::int32_t,
                                      std::int32_t, void*) {
  return {};
}
std::string CudaAttentionTimer::device_name() const { return "none"; }

#endif

}  // namespace kvsim::validate
