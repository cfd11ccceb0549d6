// Dense fp32 attention reference on the GPU (kernels.md §7.5): deliberately simple scalar code,
// no paging, no vector loads, no online softmax, and no code shared with the fast path.

#include <cmath>
#include <cstdint>

#include "kernels/attention_cuda.h"

namespace kvsim::kernels {

namespace {
constexpr int kDenseThreads = 128;

/// Block-wide reduction of one float (max or sum) through shared memory; all threads get it.
template <bool kMax>
__device__ float BlockReduce(float value, float* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int stride = kDenseThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) {
      const float other = shared[threadIdx.x + stride];
      shared[threadIdx.x] = kMax ? fmaxf(shared[threadIdx.x], other) : shared[threadIdx.x] + other;
    }
    __syncthreads();
  }
  const float result = shared[0];
  __syncthreads();
  return result;
}
}  // namespace

/// One CTA per (query row, query head). Pass 1: scores by scalar loops; pass 2: expf and sum;
/// pass 3: out[d] = sum_t p_t V[t][d] / sum. Bottom-right causal mask; GQA kv_head = head / G.
__global__ void __launch_bounds__(kDenseThreads) DenseAttentionReferenceKernel(const dense_attention_args args) {
  __shared__ float reduce[kDenseThreads];
  const int row = blockIdx.x;
  const int head = blockIdx.y;
  int seq = 0;
  while (args.q_indptr[seq + 1] <= row) ++seq;
  const int q_len = args.q_indptr[seq + 1] - args.q_indptr[seq];
  const int kv_len = args.kv_indptr[seq + 1] - args.kv_indptr[seq];
  const int visible = kv_len - q_len + (row - args.q_indptr[seq]) + 1;
  const int d = args.head_size;
  const int kv_head = head / (args.num_q_heads / args.num_kv_heads);
  const float* q = args.q + (static_cast<std::int64_t>(row) * args.num_q_heads + head) * d;
  float* scores = args.scores + (static_cast<std::int64_t>(row) * args.num_q_heads + head) * args.max_kv_len;
  float* out = args.out + (static_cast<std::int64_t>(row) * args.num_q_heads + head) * d;
  if (visible <= 0) {
    for (int i = threadIdx.x; i < d; i += blockDim.x) out[i] = 0.0f;
    return;
  }
  auto kv_row = [&](const float* base, int t) {
    return base + ((static_cast<std::int64_t>(args.kv_indptr[seq]) + t) * args.num_kv_heads + kv_head) * d;
  };
  float local_max = -INFINITY;
  for (int t = threadIdx.x; t < visible; t += blockDim.x) {
    const float* k = kv_row(args.k, t);
    float s = 0.0f;
    for (int i = 0; i < d; ++i) s += q[i] * k[i];
    s *= args.scale;
    scores[t] = s;
    local_max = fmaxf(local_max, s);
  }
  const float row_max = BlockReduce<true>(local_max, reduce);
  float local_sum = 0.0f;
  for (int t = threadIdx.x; t < visible; t += blockDim.x) {
    const float p = expf(scores[t] - row_max);
    scores[t] = p;
    local_sum += p;
  }
  const float sum = BlockReduce<false>(local_sum, reduce);  // also orders the score writes
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    float o = 0.0f;
    for (int t = 0; t < visible; ++t) o += scores[t] * kv_row(args.v, t)[i];
    out[i] = o / sum;
  }
}

cudaError_t DenseAttentionReference(const dense_attention_args& args, cudaStream_t stream) {
  if (args.num_rows == 0) return cudaSuccess;
  if (args.num_kv_heads <= 0 || args.num_q_heads % args.num_kv_heads != 0 || args.head_size <= 0)
    return cudaErrorInvalidValue;
  DenseAttentionReferenceKernel<<<dim3(static_cast<unsigned>(args.num_rows),
                                       static_cast<unsigned>(args.num_q_heads)),
                                  kDenseThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace kvsim::kernels
