// bench_kernels: paged-attention benchmarks (kernels.md §9).
//   --mode gpu   ceilings (copy, read-only) + decode on the worked example and a shape grid,
//                randperm vs sequential pages, cold L2, CUDA events, median of >= 30 reps.
//   --mode cpu   the CPU backend on small shapes (runs anywhere; wall clock, median).
// Options: --csv PATH (default bench_kernels_<mode>.csv), --reps N, --warmup N, --quick,
//          --path auto|cuda_core|tensor_core (GPU kernel of the grid rows; default auto).

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_common.h"
#include "kernels/backend.h"
#include "kernels/paged_kv.h"

namespace kvsim::bench {
namespace {

using kernels::DType;

/// Times the CPU backend on case `c` (random K/V written through write_kv, randperm pages).
result_row run_cpu_case(const decode_case& c, int reps) {
  auto backend = kernels::make_attention_backend(kernels::BackendKind::kCpu);
  const int blocks_per_seq = (c.context_tokens + c.block_size - 1) / c.block_size;
  const int num_blocks = c.batch * blocks_per_seq;
  backend->init_pool({c.dtype, num_blocks, c.block_size, c.num_kv_heads, c.head_size});
  std::mt19937_64 gen(42);
  std::vector<std::int32_t> perm(static_cast<std::size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  if (!c.contiguous_pages)
    for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[gen() % i]);
  const std::int64_t tokens = std::int64_t{c.batch} * c.context_tokens;
  const std::int64_t kv_elems = tokens * c.num_kv_heads * c.head_size;
  const std::size_t elt = kernels::dtype_size_bytes(c.dtype);
  std::vector<std::byte> key(static_cast<std::size_t>(kv_elems) * elt);
  std::vector<std::byte> value(key.size());
  for (std::int64_t i = 0; i < kv_elems; ++i) {
    kernels::store_from_float(key.data(), c.dtype, i, static_cast<float>(gen() % 2001) / 1000.0f - 1.0f);
    kernels::store_from_float(value.data(), c.dtype, i, static_cast<float>(gen() % 2001) / 1000.0f - 1.0f);
  }
  std::vector<std::int64_t> slots;
  std::vector<std::int32_t> tables(static_cast<std::size_t>(c.batch) * blocks_per_seq);
  for (int s = 0; s < c.batch; ++s) {
    for (int b = 0; b < blocks_per_seq; ++b) tables[static_cast<std::size_t>(s * blocks_per_seq + b)] = perm[static_cast<std::size_t>(s * blocks_per_seq + b)];
    for (int t = 0; t < c.context_tokens; ++t)
      slots.push_back(std::int64_t{tables[static_cast<std::size_t>(s * blocks_per_seq + t / c.block_size)]} * c.block_size + t % c.block_size);
  }
  backend->write_kv(key.data(), value.data(), slots.data(), tokens);
  std::vector<std::int32_t> lens(static_cast<std::size_t>(c.batch), c.context_tokens);
  std::vector<std::int32_t> indptr(static_cast<std::size_t>(c.batch) + 1);
  for (int s = 0; s <= c.batch; ++s) indptr[static_cast<std::size_t>(s)] = s * c.q_len;
  const std::int64_t rows = std::int64_t{c.batch} * c.q_len;
  std::vector<std::byte> q(static_cast<std::size_t>(rows * c.num_q_heads * c.head_size) * elt);
  for (std::int64_t i = 0; i < rows * c.num_q_heads * c.head_size; ++i)
    kernels::store_from_float(q.data(), c.dtype, i, static_cast<float>(gen() % 2001) / 1000.0f - 1.0f);
  std::vector<std::byte> out(q.size());
  const kernels::attention_batch batch{tables.data(), blocks_per_seq, lens.data(), c.batch,
                                       c.q_len > 1 ? indptr.data() : nullptr, c.num_q_heads,
                                       1.0f / std::sqrt(static_cast<float>(c.head_size))};
  backend->attention(batch, q.data(), out.data());  // warm-up
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    backend->attention(batch, q.data(), out.data());
    const auto t1 = std::chrono::steady_clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  result_row row;
  row.c = c;
  row.backend = "cpu";
  row.path = "cpu";
  row.splits = 1;
  row.median_us = percentile(us, 50);
  row.p10_us = percentile(us, 10);
  row.p90_us = percentile(us, 90);
  row.bytes = compulsory_bytes(c);
  row.gbps = row.bytes / (row.median_us * 1e3);
  row.tflops = attention_flops(c) / (row.median_us * 1e6);
  return row;
}

int run_cpu_benchmarks(const std::string& csv_path, int reps, bool quick) {
  std::vector<decode_case> cases;
  const DType dtypes[] = {DType::kF16, DType::kBF16, DType::kF32};
  for (const DType dt : dtypes) {
    cases.push_back({"cpu_decode_small", dt, 4, 1024, 32, 8, 128, 16, false, 1});
    if (quick) break;
  }
  if (!quick) {
    cases.push_back({"cpu_decode_small_seq", DType::kF16, 4, 1024, 32, 8, 128, 16, true, 1});
    cases.push_back({"cpu_decode_bs8", DType::kF16, 4, 1024, 32, 8, 128, 8, false, 1});
    cases.push_back({"cpu_decode_mha", DType::kF16, 2, 1024, 16, 16, 128, 16, false, 1});
    cases.push_back({"cpu_append_q8", DType::kBF16, 2, 1024, 32, 8, 128, 16, false, 8});
  }
  std::printf("bench_kernels --mode cpu: CPU backend, wall clock, median of %d reps\n", reps);
  print_header();
  std::vector<result_row> rows;
  for (const auto& c : cases) {
    rows.push_back(run_cpu_case(c, reps));
    print_row(rows.back());
  }
  write_csv(csv_path, rows);
  return 0;
}

}  // namespace
}  // namespace kvsim::bench

int main(int argc, char** argv) {
  std::string mode = "gpu";
  std::string csv;
  int reps = -1;
  [[maybe_unused]] int warmup = 5;  // read only by the GPU mode
  bool quick = false;
  [[maybe_unused]] kvsim::kernels::AttentionPath path = kvsim::kernels::AttentionPath::kAuto;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_kernels: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--mode") mode = next();
    else if (a == "--csv") csv = next();
    else if (a == "--reps") reps = std::atoi(next().c_str());
    else if (a == "--warmup") warmup = std::atoi(next().c_str());
    else if (a == "--quick") quick = true;
    else if (a == "--path") {
      try {
        path = kvsim::kernels::parse_attention_path(next());
      } catch (const std::invalid_argument& e) {
        std::fprintf(stderr, "bench_kernels: %s\n", e.what());
        return 2;
      }
    }
    else if (a == "--help" || a == "-h") {
      std::puts("usage: bench_kernels [--mode gpu|cpu] [--csv PATH] [--reps N] [--warmup N] [--quick]\n"
                "                     [--path auto|cuda_core|tensor_core]");
      return 0;
    } else {
      std::fprintf(stderr, "bench_kernels: unknown argument '%s' (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (csv.empty()) csv = "bench_kernels_" + mode + ".csv";
  if (mode == "cpu") return kvsim::bench::run_cpu_benchmarks(csv, reps > 0 ? reps : 5, quick);
  if (mode == "gpu") {
#if defined(KVSIM_KERNELS_HAVE_CUDA)
    if (!kvsim::kernels::cuda_device_available()) {
      std::fprintf(stderr, "bench_kernels: no CUDA device available (try --mode cpu)\n");
      return 1;
    }
    return kvsim::bench::run_gpu_benchmarks(csv, reps > 0 ? std::max(reps, 30) : 30, warmup, quick,
                                            path);
#else
    std::fprintf(stderr, "bench_kernels: built without CUDA (try --mode cpu)\n");
    return 1;
#endif
  }
  std::fprintf(stderr, "bench_kernels: --mode must be gpu or cpu\n");
  return 2;
}
