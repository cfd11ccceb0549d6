#pragma once
// Device helpers shared by the fast-path kernels: 16-byte vectors of 8 x 16-bit values,
// cp.async, and the dispatch macros. (The dense reference kernel does not use this file.)

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace kvsim::kernels::detail {

/// Conversions between 8 packed 16-bit values (one uint4) and 8 floats.
template <typename T>
struct Vec8;

template <>
struct Vec8<__half> {
  static __device__ __forceinline__ void to_float(const uint4& raw, float (&f)[8]) {
    const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 p = __half22float2(h[i]);
      f[2 * i] = p.x;
      f[2 * i + 1] = p.y;
    }
  }
  static __device__ __forceinline__ uint4 from_float(const float (&f)[8]) {
    uint4 raw;
    __half2* h = reinterpret_cast<__half2*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2half2_rn(f[2 * i], f[2 * i + 1]);
    return raw;
  }
  static __device__ __forceinline__ __half from_float1(float f) { return __float2half_rn(f); }
};

template <>
struct Vec8<__nv_bfloat16> {
  static __device__ __forceinline__ void to_float(const uint4& raw, float (&f)[8]) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 p = __bfloat1622float2(h[i]);
      f[2 * i] = p.x;
      f[2 * i + 1] = p.y;
    }
  }
  static __device__ __forceinline__ uint4 from_float(const float (&f)[8]) {
    uint4 raw;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    return raw;
  }
  static __device__ __forceinline__ __nv_bfloat16 from_float1(float f) { return __float2bfloat16_rn(f); }
};

/// 16-byte asynchronous global -> shared copy; `valid == false` zero-fills the destination
/// without reading `src` (src must still be a valid address).
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* src, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_size)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/// Waits until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace kvsim::kernels::detail

/// Turns a run-time head size into the compile-time constant HEAD_DIM for the statement block
/// `...`; unsupported sizes return cudaErrorInvalidValue from the enclosing launcher.
#define DISPATCH_HEAD_DIM(head_dim, HEAD_DIM, ...)  \
  switch (head_dim) {                               \
    case 64: {                                      \
      constexpr int HEAD_DIM = 64;                  \
      __VA_ARGS__                                   \
    } break;                                        \
    case 128: {                                     \
      constexpr int HEAD_DIM = 128;                 \
      __VA_ARGS__                                   \
    } break;                                        \
    case 256: {                                     \
      constexpr int HEAD_DIM = 256;                 \
      __VA_ARGS__                                   \
    } break;                                        \
    default:                                        \
      return cudaErrorInvalidValue;                 \
  }

/// Same for the page size (tokens per block): 8, 16 or 32.
#define DISPATCH_BLOCK_SIZE(block_size, BLOCK_SIZE, ...) \
  switch (block_size) {                                  \
    case 8: {                                            \
      constexpr int BLOCK_SIZE = 8;                      \
      __VA_ARGS__                                        \
    } break;                                             \
    case 16: {                                           \
      constexpr int BLOCK_SIZE = 16;                     \
      __VA_ARGS__                                        \
    } break;                                             \
    case 32: {                                           \
      constexpr int BLOCK_SIZE = 32;                     \
      __VA_ARGS__                                        \
    } break;                                             \
    default:                                             \
      return cudaErrorInvalidValue;                      \
  }
