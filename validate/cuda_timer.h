#pragma once
// CudaAttentionTimer: the kernel-only latency of a paged-attention call on the GPU (CUDA events
// around the launcher, after warm-up; median of the repeats). The CUDA AttentionBackend's
// attention() also uploads its arguments, plans and downloads, so it cannot be timed from the
// host; the timer launches the same launchers with the same automatic split plan on a device
// mirror of the backend's pool (kept in sync by replaying every write_kv and block move), then
// downloads the last repeat's output so the harness can check it is bitwise equal to the backend's.
// Without CUDA in the build, the constructor throws std::runtime_error.

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/backend.h"
#include "kernels/paged_kv.h"

namespace kvsim::validate {

/// Latency of one timed call, microseconds.
struct KernelTiming {
  double median_us = 0;
  double p10_us = 0;
  double p90_us = 0;
  double min_us = 0;
  std::int32_t repeats = 0;
};

/// Sorted-sample statistics of `samples_us` (reordered in place). Precondition: not empty.
KernelTiming timing_from_samples(double* samples_us, std::int32_t n);

class CudaAttentionTimer {
 public:
  /// Allocates the mirror pool `shape` (NaN-filled like the backend's). Throws std::runtime_error
  /// without CUDA or on a CUDA error.
  explicit CudaAttentionTimer(const kernels::kv_pool_shape& shape);
  ~CudaAttentionTimer();
  CudaAttentionTimer(const CudaAttentionTimer&) = delete;
  CudaAttentionTimer& operator=(const CudaAttentionTimer&) = delete;

  /// Replays a backend write_kv on the mirror (same arguments, host memory).
  void write_kv(const void* key, const void* value, const std::int64_t* slot_mapping,
                std::int64_t num_tokens);

  /// Replays the backend's vLLM V0 block moves on the mirror (and its own swap pool).
  void init_swap_pool(std::int64_t num_blocks);
  void swap_blocks(kernels::SwapDirection direction, const std::int64_t* block_mapping,
                   std::int64_t num_pairs);
  void copy_blocks(const std::int64_t* block_mapping, std::int64_t num_pairs);
  void release_swap_block(std::int64_t block);

  /// Runs `warmup` untimed then `repeats` timed launches of the batch (decode when
  /// batch.q_indptr is null, else prefill/append); copies the last output into `out`
  /// ([rows, Hq, D], pool dtype) when not null.
  KernelTiming time(const kernels::attention_batch& batch, const void* q, std::int32_t warmup,
                    std::int32_t repeats, void* out);

  /// The device's name (cudaDeviceProp::name) and compute capability, e.g. "NVIDIA H100 (sm_90)".
  std::string device_name() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvsim::validate
