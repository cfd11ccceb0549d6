#pragma once
// Shared pieces of bench_kernels: the case description, the compulsory-byte formula of
// kernels.md §4, percentiles, and the table/CSV writer.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/work_plan.h"

namespace kvsim::bench {

/// One decode configuration (uniform context length).
struct decode_case {
  std::string label;
  kernels::DType dtype = kernels::DType::kBF16;
  int batch = 64;
  int context_tokens = 4096;
  int num_q_heads = 32;
  int num_kv_heads = 8;
  int head_size = 128;
  int block_size = 16;
  bool contiguous_pages = false;  // identity block tables instead of randperm over the pool
  int q_len = 1;                  // > 1: append/prefill rows (reported in TFLOP/s as well)
  kernels::AttentionPath path = kernels::AttentionPath::kAuto;  // GPU kernel; kAuto = by G
};

/// Compulsory bytes (kernels.md §4): K+V of every context token, Q and O, block tables, lengths.
inline double compulsory_bytes(const decode_case& c) {
  const double elt = static_cast<double>(kernels::dtype_size_bytes(c.dtype));
  const double kv = 2.0 * c.batch * c.context_tokens * c.num_kv_heads * c.head_size * elt;
  const double qo = 2.0 * c.batch * c.q_len * c.num_q_heads * c.head_size * elt;
  const double tables = c.batch * ((c.context_tokens + c.block_size - 1) / c.block_size) * 4.0 + c.batch * 4.0;
  return kv + qo + tables;
}

/// FLOPs of QK^T and PV (decode: 4 * ctx * Hq * D per sequence; causal rows counted exactly).
inline double attention_flops(const decode_case& c) {
  double keys = 0;
  for (int i = 0; i < c.q_len; ++i) keys += c.context_tokens - c.q_len + i + 1;
  return 4.0 * c.batch * keys * c.num_q_heads * c.head_size;
}

/// p-th percentile (0..100) by nearest rank of a copy of `v`.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const auto idx = static_cast<std::size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(idx, v.size() - 1)];
}

/// One measured row.
struct result_row {
  decode_case c;
  std::string backend;
  std::string path;  // the kernel that ran: cuda_core / tensor_core (GPU), cpu
  bool path_forced = false;  // the case forced `path` (false: chosen by resolve_attention_path)
  int splits = 0;  // work items per row chosen by the plan (max)
  double median_us = 0, p10_us = 0, p90_us = 0;
  double bytes = 0;
  double gbps = 0;           // bytes / median
  double pct_read_roof = 0;  // % of the measured read-only ceiling (0 when not measured)
  double pct_copy = 0;       // % of the measured copy ceiling
  double pct_spec = 0;       // % of the vendor spec (0 when unknown)
  double tflops = 0;
  std::int64_t nonfinite = 0;  // NaN/inf outputs after the timed runs (the output starts NaN)
};

inline void print_header() {
  std::printf("%-22s %-5s %5s %6s %4s %7s %5s %3s %4s %-12s %6s %10s %10s %10s %9s %7s %7s %7s %8s\n",
              "case", "dtype", "B", "ctx", "q", "Hq/Hkv", "D", "bs", "page", "path", "split",
              "median_us", "p10_us", "p90_us", "GB/s", "%read", "%copy", "%spec", "TFLOP/s");
}

inline void print_row(const result_row& r) {
  const auto& c = r.c;
  char heads[16];
  std::snprintf(heads, sizeof heads, "%d/%d", c.num_q_heads, c.num_kv_heads);
  std::printf("%-22s %-5s %5d %6d %4d %7s %5d %3d %4s %-12s %6d %10.1f %10.1f %10.1f %9.1f %7.1f %7.1f %7.1f %8.2f\n",
              c.label.c_str(), kernels::dtype_name(c.dtype), c.batch, c.context_tokens, c.q_len, heads,
              c.head_size, c.block_size, c.contiguous_pages ? "seq" : "rand",
              (r.path + (r.path_forced ? "!" : "")).c_str(), r.splits, r.median_us, r.p10_us,
              r.p90_us, r.gbps, r.pct_read_roof, r.pct_copy, r.pct_spec, r.tflops);
}

/// Writes every row to `path` (rewritten whole); `announce` prints "wrote PATH".
inline void write_csv(const std::string& path, const std::vector<result_row>& rows,
                      bool announce = true) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "bench_kernels: cannot write %s\n", path.c_str());
    return;
  }
  // NOTE: bench/kernels/sdpa_compare.py reads this header (shape keys dtype, batch,
  // context_tokens, q_len, num_q_heads, num_kv_heads, head_size) and writes the same columns.
  std::fprintf(f, "backend,case,dtype,batch,context_tokens,q_len,num_q_heads,num_kv_heads,head_size,"
                  "block_size,pages,path,path_forced,splits,median_us,p10_us,p90_us,bytes,gbps,"
                  "pct_read_roof,pct_copy,pct_spec,tflops,out_nonfinite\n");
  for (const auto& r : rows) {
    const auto& c = r.c;
    std::fprintf(f, "%s,%s,%s,%d,%d,%d,%d,%d,%d,%d,%s,%s,%d,%d,%.3f,%.3f,%.3f,%.0f,%.3f,%.2f,%.2f,%.2f,%.4f,%lld\n",
                 r.backend.c_str(), c.label.c_str(), kernels::dtype_name(c.dtype), c.batch,
                 c.context_tokens, c.q_len, c.num_q_heads, c.num_kv_heads, c.head_size, c.block_size,
                 c.contiguous_pages ? "sequential" : "randperm", r.path.c_str(), r.path_forced ? 1 : 0,
                 r.splits, r.median_us, r.p10_us, r.p90_us, r.bytes, r.gbps, r.pct_read_roof,
                 r.pct_copy, r.pct_spec, r.tflops, static_cast<long long>(r.nonfinite));
  }
  std::fclose(f);
  if (announce) std::printf("wrote %s\n", path.c_str());
}

/// GPU mode (bench_gpu.cu; only in CUDA builds). `grid_path` is the kernel of the shape-grid,
/// long-context and append rows (kAuto: chosen by G); the worked example and the G sweep run
/// both kernels forced. Returns the process exit code.
int run_gpu_benchmarks(const std::string& csv_path, int reps, int warmup, bool quick,
                       kernels::AttentionPath grid_path);

}  // namespace kvsim::bench
