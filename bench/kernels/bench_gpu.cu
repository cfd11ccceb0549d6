// GPU mode of bench_kernels (kernels.md §9): measured ceilings first, then paged decode.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "bench_common.h"
#include "kernels/attention_cuda.h"
#include "kernels/cuda_utils.h"
#include "kernels/device_work_plan.h"
#include "kernels/work_plan.h"

namespace kvsim::bench {
namespace {

using kernels::DeviceBuffer;
using kernels::DType;

/// Streams `n` 16-byte vectors with 4 independent loads in flight per thread; the XOR sink keeps
/// the loads alive. Bytes moved = 16 * n (reads only).
__global__ void ReadOnlyBandwidthKernel(const uint4* __restrict__ src,  // [n]
                                        std::size_t n, unsigned* __restrict__ sink) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  unsigned acc = 0;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = i + u * stride < n ? src[i + u * stride] : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

/// Fills `n` elements with hash-derived values in [-1, 1] (no NaN, no zeros pattern).
template <typename T>
__global__ void FillRandomKernel(T* __restrict__ data, std::size_t n, unsigned seed) {
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed ^ static_cast<unsigned>(i >> 32);
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float f = static_cast<float>(h & 0xffffu) / 32767.5f - 1.0f;
    if constexpr (std::is_same_v<T, __half>) data[i] = __float2half_rn(f);
    else data[i] = __float2bfloat16_rn(f);
  }
}

void fill_random(void* data, DType dtype, std::size_t n, unsigned seed) {
  if (dtype == DType::kF16)
    FillRandomKernel<__half><<<1024, 256>>>(static_cast<__half*>(data), n, seed);
  else
    FillRandomKernel<__nv_bfloat16><<<1024, 256>>>(static_cast<__nv_bfloat16*>(data), n, seed);
  KVSIM_CUDA_CHECK(cudaGetLastError());
}

/// Times `launch` with CUDA events: `warmup` untimed runs, then `reps` timed runs, each preceded
/// by a write of the L2 flush buffer (cold L2) outside the timed region. Returns microseconds.
template <typename Launch>
std::vector<double> time_us(Launch&& launch, int reps, int warmup, void* flush, std::size_t flush_bytes) {
  cudaEvent_t start;
  cudaEvent_t stop;
  KVSIM_CUDA_CHECK(cudaEventCreate(&start));
  KVSIM_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < warmup; ++i) launch();
  KVSIM_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> us;
  for (int i = 0; i < reps; ++i) {
    if (flush != nullptr) KVSIM_CUDA_CHECK(cudaMemsetAsync(flush, i & 0xff, flush_bytes));
    KVSIM_CUDA_CHECK(cudaEventRecord(start));
    launch();
    KVSIM_CUDA_CHECK(cudaEventRecord(stop));
    KVSIM_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    KVSIM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(static_cast<double>(ms) * 1e3);
  }
  KVSIM_CUDA_CHECK(cudaEventDestroy(start));
  KVSIM_CUDA_CHECK(cudaEventDestroy(stop));
  return us;
}

struct ceilings {
  double copy_gbps = 0;  // device-to-device copy, read + write bytes counted
  double read_gbps = 0;  // read-only streaming kernel
  double spec_gbps = 0;  // vendor spec by device name (0 = unknown)
};

ceilings measure_ceilings(int reps, int warmup) {
  ceilings c;
  const std::size_t bytes = std::size_t{2} << 30;  // 2 GiB
  DeviceBuffer<unsigned char> buf(bytes);
  DeviceBuffer<unsigned> sink(1);
  KVSIM_CUDA_CHECK(cudaMemset(buf.get(), 1, bytes));
  const std::size_t half = bytes / 2;
  const auto copy_us = time_us([&] { cudaMemcpyAsync(buf.get() + half, buf.get(), half, cudaMemcpyDeviceToDevice); },
                               reps, warmup, nullptr, 0);
  c.copy_gbps = 2.0 * static_cast<double>(half) / (percentile(copy_us, 50) * 1e3);
  int device = 0;
  int sms = 0;
  KVSIM_CUDA_CHECK(cudaGetDevice(&device));
  KVSIM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const std::size_t n = bytes / 16;
  const auto read_us = time_us(
      [&] { ReadOnlyBandwidthKernel<<<sms * 8, 512>>>(reinterpret_cast<const uint4*>(buf.get()), n, sink.get()); },
      reps, warmup, nullptr, 0);
  KVSIM_CUDA_CHECK(cudaGetLastError());
  c.read_gbps = static_cast<double>(bytes) / (percentile(read_us, 50) * 1e3);
  cudaDeviceProp prop{};
  KVSIM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  const std::string name = prop.name;
  if (name.find("H200") != std::string::npos) c.spec_gbps = 4800;
  else if (name.find("H100") != std::string::npos)
    c.spec_gbps = name.find("PCIe") != std::string::npos ? 2000 : 3350;
  int clock_khz = 0;
  int mem_clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device);
  cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, device);
  std::printf("device: %s, %d SMs, L2 %d MB, sm clock %d MHz, mem clock %d MHz\n", prop.name, sms,
              prop.l2CacheSize >> 20, clock_khz / 1000, mem_clock_khz / 1000);
  std::printf("ceilings: copy %.1f GB/s (read+write), read-only %.1f GB/s, spec %.0f GB/s\n",
              c.copy_gbps, c.read_gbps, c.spec_gbps);
  return c;
}

/// Runs one paged decode/append case and fills a result row.
result_row run_case(const decode_case& c, const ceilings& ceil, int reps, int warmup, void* flush,
                    std::size_t flush_bytes) {
  const int bps = (c.context_tokens + c.block_size - 1) / c.block_size;
  const std::int64_t needed = std::int64_t{c.batch} * bps;
  const std::int32_t num_blocks = static_cast<std::int32_t>(c.contiguous_pages ? needed : needed + needed / 4 + 1);
  const kernels::kv_pool_shape shape{c.dtype, num_blocks, c.block_size, c.num_kv_heads, c.head_size};
  const std::size_t elt = kernels::dtype_size_bytes(c.dtype);
  DeviceBuffer<std::byte> pool(static_cast<std::size_t>(shape.num_elements()) * elt);
  fill_random(pool.get(), c.dtype, static_cast<std::size_t>(shape.num_elements()), 1);

  std::vector<std::int32_t> perm(static_cast<std::size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  if (!c.contiguous_pages) {
    std::mt19937_64 gen(7);
    for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[gen() % i]);
  }
  std::vector<std::int32_t> tables(perm.begin(), perm.begin() + needed);  // [B, bps]
  std::vector<std::int32_t> lens(static_cast<std::size_t>(c.batch), c.context_tokens);
  std::vector<std::int32_t> indptr(static_cast<std::size_t>(c.batch) + 1);
  for (int s = 0; s <= c.batch; ++s) indptr[static_cast<std::size_t>(s)] = s * c.q_len;
  const bool decode = c.q_len == 1;
  DeviceBuffer<std::int32_t> d_tables(tables.size());
  DeviceBuffer<std::int32_t> d_lens(lens.size());
  d_tables.upload(tables.data(), tables.size());
  d_lens.upload(lens.data(), lens.size());
  const std::size_t qo_elems = static_cast<std::size_t>(c.batch) * c.q_len * c.num_q_heads * c.head_size;
  DeviceBuffer<std::byte> q(qo_elems * elt);
  DeviceBuffer<std::byte> out(qo_elems * elt);
  fill_random(q.get(), c.dtype, qo_elems, 2);
  KVSIM_CUDA_CHECK(cudaMemset(out.get(), 0xff, qo_elems * elt));  // NaN: unwritten outputs show

  const int group = c.num_q_heads / c.num_kv_heads;
  kernels::DeviceWorkPlan work;
  const kernels::attention_work_plan plan = work.plan(
      shape, lens.data(), decode ? nullptr : indptr.data(), c.batch, c.num_q_heads, 0, c.path);

  kernels::paged_kv_view kv = kernels::make_vllm_v1_view(pool.get(), shape);
  kv.block_tables = d_tables.get();
  kv.max_blocks_per_seq = bps;
  kv.seq_lens = d_lens.get();
  kv.num_seqs = c.batch;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_size));
  auto launch = [&] {
    KVSIM_CUDA_CHECK(work.launch(kv, q.get(), out.get(), c.num_q_heads, scale, nullptr, c.path));
  };
  const std::vector<double> us = time_us(launch, reps, warmup, flush, flush_bytes);
  std::vector<std::byte> host_out(qo_elems * elt);
  out.download(host_out.data(), host_out.size());
  result_row r;
  for (std::size_t i = 0; i < qo_elems; ++i)
    r.nonfinite += std::isfinite(kernels::load_as_float(host_out.data(), c.dtype, static_cast<std::int64_t>(i))) ? 0 : 1;
  r.c = c;
  r.backend = "cuda";
  r.path = kernels::attention_path_name(kernels::resolve_attention_path(c.path, group));
  r.path_forced = c.path != kernels::AttentionPath::kAuto;
  r.splits = plan.max_items_per_row;
  r.median_us = percentile(us, 50);
  r.p10_us = percentile(us, 10);
  r.p90_us = percentile(us, 90);
  r.bytes = compulsory_bytes(c);
  r.gbps = r.bytes / (r.median_us * 1e3);
  r.pct_read_roof = 100.0 * r.gbps / ceil.read_gbps;
  r.pct_copy = 100.0 * r.gbps / ceil.copy_gbps;
  r.pct_spec = ceil.spec_gbps > 0 ? 100.0 * r.gbps / ceil.spec_gbps : 0.0;
  r.tflops = attention_flops(c) / (r.median_us * 1e6);
  return r;
}

}  // namespace

int run_gpu_benchmarks(const std::string& csv_path, int reps, int warmup, bool quick,
                       kernels::AttentionPath grid_path) {
  const ceilings ceil = measure_ceilings(reps, warmup);
  int device = 0;
  int l2_bytes = 0;
  KVSIM_CUDA_CHECK(cudaGetDevice(&device));
  KVSIM_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
  const std::size_t flush_bytes = 2 * static_cast<std::size_t>(l2_bytes);  // cold L2 before each rep
  DeviceBuffer<unsigned char> flush(flush_bytes);

  using kernels::AttentionPath;
  constexpr AttentionPath kForced[] = {AttentionPath::kCudaCore, AttentionPath::kTensorCore};
  std::vector<decode_case> cases;
  // Worked example (kernels.md §4): B=64, ctx 4096, 32/8 heads, D=128, bs 16; both dtypes,
  // randperm vs sequential pages, and the other block sizes; each on both kernels.
  for (const DType dt : {DType::kF16, DType::kBF16}) {
    for (const AttentionPath path : kForced) {
      for (const bool seq : {false, true})
        cases.push_back({"worked_example", dt, 64, 4096, 32, 8, 128, 16, seq, 1, path});
      if (!quick)
        for (const int bs : {8, 32})
          cases.push_back({"worked_example", dt, 64, 4096, 32, 8, 128, bs, false, 1, path});
    }
  }
  // Both kernels over the group size G = 1..16 (8 KV heads, D=128; B=64 is one full wave, B=8
  // is not and splits).
  for (const int b : quick ? std::vector<int>{64} : std::vector<int>{8, 64})
    for (const int hq : {8, 16, 32, 64, 128})
      for (const AttentionPath path : kForced)
        cases.push_back({"gqa_paths", DType::kBF16, b, 4096, hq, 8, 128, 16, false, 1, path});
  struct heads { int hq, hkv, d; const char* name; };
  const heads shapes[] = {{32, 8, 128, "llama3_8b"}, {64, 8, 128, "llama3_70b"}, {8, 1, 128, "70b_tp8"},
                          {32, 32, 128, "mha"},      {32, 8, 64, "d64"},         {16, 8, 256, "d256"}};
  const std::vector<int> batches = quick ? std::vector<int>{1, 64} : std::vector<int>{1, 8, 32, 64, 128, 256};
  const std::vector<int> contexts = quick ? std::vector<int>{512, 4096} : std::vector<int>{128, 512, 1024, 4096, 16384, 32768};
  for (const heads& h : shapes) {
    for (const int b : batches) {
      for (const int ctx : contexts) {
        const decode_case c{std::string("grid_") + h.name, DType::kBF16, b, ctx, h.hq, h.hkv, h.d, 16, false, 1,
                            grid_path};
        if (compulsory_bytes(c) > 4.5e9) continue;  // keep the pool within a few GB
        cases.push_back(c);
      }
    }
    if (quick) break;
  }
  for (const int ctx : {65536, 131072})
    cases.push_back({"long_single", DType::kBF16, 1, ctx, 32, 8, 128, 16, false, 1, grid_path});
  // Speculative-decode / append rows through the prefill path (report TFLOP/s too).
  for (const int q_len : {4, 8})
    cases.push_back({"append", DType::kBF16, 64, 4096, 32, 8, 128, 16, false, q_len, grid_path});

  std::printf("paged decode: CUDA events, %d warm-up, median of %d reps, cold L2 (%zu MB flush)\n",
              warmup, reps, flush_bytes >> 20);
  print_header();
  result_row copy_row;
  copy_row.backend = "ceiling_copy";
  copy_row.path = "-";
  copy_row.c.label = "copy";
  copy_row.gbps = ceil.copy_gbps;
  result_row read_row;
  read_row.backend = "ceiling_read";
  read_row.path = "-";
  read_row.c.label = "read_only";
  read_row.gbps = ceil.read_gbps;
  std::vector<result_row> rows{copy_row, read_row};
  int failed = 0;
  for (const auto& c : cases) {
    try {
      rows.push_back(run_case(c, ceil, reps, warmup, flush.get(), flush_bytes));
    } catch (const std::exception& e) {  // report and go on: one session measures everything
      std::fprintf(stderr, "bench_kernels: case %s B=%d ctx=%d Hq=%d failed: %s\n", c.label.c_str(),
                   c.batch, c.context_tokens, c.num_q_heads, e.what());
      ++failed;
      continue;
    }
    print_row(rows.back());
    if (rows.back().nonfinite > 0) {
      std::fprintf(stderr, "bench_kernels: %lld non-finite outputs in the row above\n",
                   static_cast<long long>(rows.back().nonfinite));
      ++failed;
    }
    write_csv(csv_path, rows, false);  // partial results survive a time limit
  }
  write_csv(csv_path, rows, true);
  return failed == 0 ? 0 : 1;
}

}  // namespace kvsim::bench
