// CUDA kernels against the CPU references. Needs a GPU; main() skips with 77 without one.

#include <catch2/catch.hpp>

#include <cstring>
#include <limits>

#include "../kernel_test_data.h"
#include "kernels/attention_cuda.h"
#include "kernels/backend.h"
#include "kernels/cuda_utils.h"
#include "kernels/device_work_plan.h"
#include "kernels/metrics.h"

namespace kvsim::kernels::testing {
namespace {

/// Writes p's K/V through the backend's write path (the CUDA write kernel for kCuda) into a NaN pool, then runs attention with
/// `forced_splits` (0 = auto); returns the raw output bytes (dtype storage).
std::vector<std::byte> run_backend(AttentionBackend& backend, const paged_problem& p, int forced_splits) {
  backend.init_pool(p.pool_shape());
  const auto keys = new_tokens(p, 0);
  const auto values = new_tokens(p, 1);
  backend.write_kv(keys.data(), values.data(), p.slot_mapping.data(),
                   static_cast<std::int64_t>(p.slot_mapping.size()));
  backend.set_forced_splits(forced_splits);
  const attention_batch batch{p.block_tables.data(), p.max_blocks, p.seq_lens.data(), p.num_seqs(),
                              p.q_indptr_or_null(), p.shape.num_q_heads, p.scale};
  const auto q = encode(p.q, p.shape.dtype);
  std::vector<std::byte> out(q.size());
  backend.attention(batch, q.data(), out.data());
  return out;
}

void check_output(const paged_problem& p, const std::vector<std::byte>& out,
                  const std::vector<float>& ref, int splits) {
  const auto outf = decode_floats(out.data(), p.shape.dtype, static_cast<std::int64_t>(p.q.size()));
  const tolerance tol = default_tolerance(p.shape.dtype);
  const error_stats st = compare_outputs(outf.data(), ref.data(), static_cast<std::int64_t>(ref.size()), tol);
  INFO("dtype=" << dtype_name(p.shape.dtype) << " Hq=" << p.shape.num_q_heads
                << " Hkv=" << p.shape.num_kv_heads << " D=" << p.shape.head_size
                << " bs=" << p.shape.block_size << " splits=" << splits << " " << to_string(st));
  CHECK(passes(st, tol));
}

/// The same problem with block table row s = s*max_blocks + b: contiguous pages, same data.
paged_problem with_identity_tables(paged_problem p) {
  p.num_blocks = p.num_seqs() * p.max_blocks + 1;
  p.poison_block = p.num_blocks - 1;
  p.slot_mapping.clear();
  for (int s = 0; s < p.num_seqs(); ++s) {
    for (int b = 0; b < p.max_blocks; ++b) p.block_tables[s * p.max_blocks + b] = s * p.max_blocks + b;
    for (int t = 0; t < p.seqs[s].kv_len; ++t)
      p.slot_mapping.push_back(std::int64_t{p.block_tables[s * p.max_blocks + t / p.shape.block_size]} *
                                   p.shape.block_size + t % p.shape.block_size);
  }
  return p;
}

/// Moves every block id up by `shift` (pool grows accordingly), to exercise 64-bit offsets.
paged_problem shift_blocks(paged_problem p, std::int32_t shift) {
  for (auto& b : p.block_tables) b += shift;
  for (auto& s : p.slot_mapping) s += std::int64_t{shift} * p.shape.block_size;
  p.num_blocks += shift;
  p.poison_block += shift;
  return p;
}

}  // namespace

TEST_CASE("cuda decode matches the dense reference with splits forced to 1, 2, 3 and auto", "[kernels][gpu]") {
  auto backend = make_attention_backend(BackendKind::kCuda);
  std::uint64_t seed = 1;
  for (const DType dtype : {DType::kF16, DType::kBF16}) {
    for (const auto& heads : {std::pair{4, 4}, std::pair{4, 2}, std::pair{8, 2}, std::pair{16, 2},
                              std::pair{8, 1}, std::pair{12, 4}}) {
      for (const int d : {64, 128, 256}) {
        for (const int bs : {8, 16, 32}) {
          if (d == 256 && bs != 16) continue;
          Rng lens(seed);
          const std::vector<seq_spec> seqs{{1, 1},   {1, bs - 1}, {1, bs},   {1, bs + 1}, {1, 0},
                                           {1, 511}, {1, 512},    {1, 513},  {1, lens.uniform_int(2, 2000)}};
          const paged_problem p = make_problem({dtype, heads.first, heads.second, d, bs}, seqs, seed++);
          const std::vector<float> ref = reference_output(p);
          // Same-dtype baseline: the CPU backend (fp32 math, output rounded to dtype).
          auto cpu = make_attention_backend(BackendKind::kCpu);
          const auto cpu_out = decode_floats(run_backend(*cpu, p, 0).data(), dtype, static_cast<std::int64_t>(p.q.size()));
          const tolerance tol = default_tolerance(dtype);
          const error_stats baseline = compare_outputs(cpu_out.data(), ref.data(), static_cast<std::int64_t>(ref.size()), tol);
          for (const int splits : {1, 2, 3, 0}) {
            const auto out = run_backend(*backend, p, splits);
            check_output(p, out, ref, splits);
            const auto outf = decode_floats(out.data(), dtype, static_cast<std::int64_t>(p.q.size()));
            const error_stats st = compare_outputs(outf.data(), ref.data(), static_cast<std::int64_t>(ref.size()), tol);
            INFO("baseline " << to_string(baseline) << " kernel " << to_string(st));
            CHECK(passes_against_baseline(st, baseline));
          }
        }
      }
    }
  }
}

TEST_CASE("cuda prefill matches the dense reference on mixed chunked-prefill batches", "[kernels][gpu]") {
  auto backend = make_attention_backend(BackendKind::kCuda);
  std::uint64_t seed = 500;
  for (const DType dtype : {DType::kF16, DType::kBF16}) {
    for (const int bs : {8, 16, 32}) {
      for (const auto& heads : {std::pair{8, 2}, std::pair{8, 8}, std::pair{8, 1}}) {
        const std::vector<seq_spec> seqs{{1, 1328}, {5, 18}, {129, 463}, {4, 37}, {2, 2},
                                         {7, bs + 1 + 7}, {16, 16}, {8, 600}, {1, 0}};
        const paged_problem p = make_problem({dtype, heads.first, heads.second, 128, bs}, seqs, seed++);
        const std::vector<float> ref = reference_output(p);
        for (const int splits : {1, 2, 3, 0}) check_output(p, run_backend(*backend, p, splits), ref, splits);
      }
    }
  }
}

TEST_CASE("cuda attention handles uniform inputs and large logits", "[kernels][gpu]") {
  auto backend = make_attention_backend(BackendKind::kCuda);
  const problem_shape shape{DType::kF16, 32, 8, 128, 16};
  const std::vector<seq_spec> seqs{{1, 4096}, {1, 700}, {3, 300}};
  const paged_problem uniform = make_problem(shape, seqs, 7, Init::kUniform);
  check_output(uniform, run_backend(*backend, uniform, 0), reference_output(uniform), 0);
  paged_problem big = make_problem(shape, seqs, 8);
  for (float& x : big.q) x = round_to_dtype(x * 20.0f, shape.dtype);
  for (const int splits : {1, 3}) check_output(big, run_backend(*backend, big, splits), reference_output(big), splits);
}

TEST_CASE("cuda spikes at page and split-chunk boundaries return that token's value", "[kernels][gpu]") {
  auto backend = make_attention_backend(BackendKind::kCuda);
  const int len = 1000;  // forced 3 splits: chunks [0,334) [334,668) [668,1000)
  for (const int bs : {8, 16, 32}) {
    for (const int t_star : {0, bs - 1, bs, 333, 334, 667, 668, len - 1}) {
      const problem_shape shape{DType::kF16, 8, 2, 128, bs};
      paged_problem p = make_problem(shape, {{1, len}, {1, 77}}, 2000 + static_cast<std::uint64_t>(t_star));
      const int h = 6;  // KV head 1
      make_spike(p, 0, t_star, 0, h);
      const std::vector<float> ref = reference_output(p);
      for (const int splits : {1, 3}) {
        const auto out = run_backend(*backend, p, splits);
        const auto outf = decode_floats(out.data(), shape.dtype, static_cast<std::int64_t>(p.q.size()));
        for (int i = 0; i < shape.head_size; ++i) {
          const float expect = p.v[0][static_cast<std::size_t>((t_star * shape.num_kv_heads + 1) * shape.head_size + i)];
          INFO("bs=" << bs << " t*=" << t_star << " splits=" << splits << " i=" << i);
          REQUIRE(outf[static_cast<std::size_t>(h * shape.head_size + i)] == Approx(expect).margin(2e-3));
        }
        check_output(p, out, ref, splits);
      }
    }
  }
}

TEST_CASE("the cuda write kernel stores exactly what the cpu write stores", "[kernels][gpu]") {
  for (const DType dtype : {DType::kF16, DType::kBF16}) {
    const paged_problem p = make_problem({dtype, 8, 2, 128, 16}, {{1, 100}, {3, 37}, {1, 16}}, 31);
    std::vector<std::int64_t> slots = p.slot_mapping;
    slots[5] = -1;  // padding token: skipped by both
    const auto keys = new_tokens(p, 0);
    const auto values = new_tokens(p, 1);
    std::vector<std::vector<std::byte>> pools;
    for (const BackendKind kind : {BackendKind::kCpu, BackendKind::kCuda}) {
      auto backend = make_attention_backend(kind);
      backend->init_pool(p.pool_shape());
      backend->write_kv(keys.data(), values.data(), slots.data(), static_cast<std::int64_t>(slots.size()));
      pools.emplace_back(static_cast<std::size_t>(p.pool_shape().num_elements()) * 2);
      backend->read_pool(pools.back().data());
    }
    const auto a = decode_floats(pools[0].data(), dtype, p.pool_shape().num_elements());
    const auto b = decode_floats(pools[1].data(), dtype, p.pool_shape().num_elements());
    std::int64_t written = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      REQUIRE(std::isnan(a[i]) == std::isnan(b[i]));  // NaN bit patterns may differ
      if (!std::isnan(a[i])) {
        REQUIRE(std::memcmp(&pools[0][2 * i], &pools[1][2 * i], 2) == 0);
        ++written;
      }
    }
    CHECK(written == 2 * (static_cast<std::int64_t>(slots.size()) - 1) * 2 * 128);
  }
}

TEST_CASE("the gpu dense reference matches the eigen double reference", "[kernels][gpu]") {
  const paged_problem p = make_problem({DType::kF32, 8, 2, 128, 16},
                                       {{1, 1328}, {5, 18}, {129, 463}, {1, 0}, {3, 3}}, 41);
  std::vector<float> k_all;
  std::vector<float> v_all;
  std::vector<std::int32_t> kv_indptr{0};
  for (int s = 0; s < p.num_seqs(); ++s) {
    k_all.insert(k_all.end(), p.k[s].begin(), p.k[s].end());
    v_all.insert(v_all.end(), p.v[s].begin(), p.v[s].end());
    kv_indptr.push_back(kv_indptr.back() + p.seqs[s].kv_len);
  }
  const std::int32_t max_kv = 1328;
  DeviceBuffer<float> q(p.q.size()), k(k_all.size()), v(v_all.size());
  DeviceBuffer<float> scores(static_cast<std::size_t>(p.num_rows()) * 8 * max_kv), out(p.q.size());
  DeviceBuffer<std::int32_t> q_indptr(p.q_indptr.size()), kv_ptr(kv_indptr.size());
  q.upload(p.q.data(), p.q.size());
  k.upload(k_all.data(), k_all.size());
  v.upload(v_all.data(), v_all.size());
  q_indptr.upload(p.q_indptr.data(), p.q_indptr.size());
  kv_ptr.upload(kv_indptr.data(), kv_indptr.size());
  dense_attention_args args;
  args.q = q.get();
  args.k = k.get();
  args.v = v.get();
  args.q_indptr = q_indptr.get();
  args.kv_indptr = kv_ptr.get();
  args.scores = scores.get();
  args.out = out.get();
  args.num_seqs = p.num_seqs();
  args.num_rows = static_cast<std::int32_t>(p.num_rows());
  args.num_q_heads = 8;
  args.num_kv_heads = 2;
  args.head_size = 128;
  args.max_kv_len = max_kv;
  args.scale = p.scale;
  KVSIM_CUDA_CHECK(cudaMemset(out.get(), 0xff, out.size_bytes()));
  KVSIM_CUDA_CHECK(DenseAttentionReference(args, nullptr));
  KVSIM_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> got(p.q.size());
  out.download(got.data(), got.size());
  const std::vector<float> ref = reference_output(p);
  const tolerance tol{1e-4, 1e-4, 1e-5};
  const error_stats st = compare_outputs(got.data(), ref.data(), static_cast<std::int64_t>(ref.size()), tol);
  INFO(to_string(st));
  CHECK(passes(st, tol));
}

TEST_CASE("cuda attention is bitwise repeatable", "[kernels][gpu]") {
  auto backend = make_attention_backend(BackendKind::kCuda);
  const paged_problem p = make_problem({DType::kBF16, 32, 8, 128, 16},
                                       {{1, 3000}, {1, 17}, {4, 900}, {1, 1}}, 51);
  for (const int splits : {1, 3, 0}) {
    const auto a = run_backend(*backend, p, splits);
    const auto b = run_backend(*backend, p, splits);
    INFO("splits=" << splits);
    CHECK(std::memcmp(a.data(), b.data(), a.size()) == 0);
  }
}

TEST_CASE("paged and contiguous identity block tables give bitwise identical outputs", "[kernels][gpu]") {
  auto backend = make_attention_backend(BackendKind::kCuda);
  for (const int bs : {8, 16, 32}) {
    const paged_problem paged = make_problem({DType::kF16, 16, 2, 128, bs},
                                             {{1, 2049}, {1, 31}, {1, 700}, {6, 300}}, 61);
    const paged_problem contiguous = with_identity_tables(paged);
    for (const int splits : {1, 2, 0}) {
      const auto a = run_backend(*backend, paged, splits);
      const auto b = run_backend(*backend, contiguous, splits);
      INFO("bs=" << bs << " splits=" << splits);
      CHECK(std::memcmp(a.data(), b.data(), a.size()) == 0);
    }
  }
}

TEST_CASE("a pool beyond 2^31 elements is addressed with 64-bit offsets", "[kernels][gpu][slow]") {
  auto backend = make_attention_backend(BackendKind::kCuda);
  // 70000 blocks x 16 x 8 x 128 x 2 (K, V) = 2.29e9 elements (4.6 GB of fp16).
  const paged_problem small = make_problem({DType::kF16, 32, 8, 128, 16}, {{1, 1000}, {2, 300}}, 71);
  const paged_problem p = shift_blocks(small, 70000 - small.num_blocks);
  REQUIRE(p.pool_shape().num_elements() > (std::int64_t{1} << 31));
  check_output(p, run_backend(*backend, p, 0), reference_output(p), 0);
}

TEST_CASE("the raw cuda launchers work on a (num_blocks, 2, bs, Hkv, D) pool through the strides", "[kernels][gpu]") {
  for (const int splits : {1, 3}) {
    const paged_problem p = make_problem({DType::kBF16, 8, 2, 128, 16},
                                         {{1, 700}, {1, 15}, {5, 200}, {1, 0}}, 81);
    const kv_pool_shape shape = p.pool_shape();
    const std::int64_t hd = shape.head_size;
    const std::int64_t bs = shape.block_size;
    const std::int64_t hkv = shape.num_kv_heads;
    DeviceBuffer<std::byte> pool(static_cast<std::size_t>(shape.num_elements()) * 2);
    KVSIM_CUDA_CHECK(cudaMemset(pool.get(), 0xff, pool.size_bytes()));
    paged_kv_view kv = make_vllm_v1_view(pool.get(), shape);
    kv.stride_kv = bs * hkv * hd;
    kv.stride_block = 2 * bs * hkv * hd;
    const auto keys = new_tokens(p, 0);
    const auto values = new_tokens(p, 1);
    DeviceBuffer<std::byte> d_keys(keys.size()), d_values(values.size());
    DeviceBuffer<std::int64_t> d_slots(p.slot_mapping.size());
    d_keys.upload(keys.data(), keys.size());
    d_values.upload(values.data(), values.size());
    d_slots.upload(p.slot_mapping.data(), p.slot_mapping.size());
    KVSIM_CUDA_CHECK(ReshapeAndCache(kv, d_keys.get(), d_values.get(), d_slots.get(),
                                     static_cast<std::int64_t>(p.slot_mapping.size()), nullptr));
    DeviceBuffer<std::int32_t> tables(p.block_tables.size()), lens(p.seq_lens.size());
    tables.upload(p.block_tables.data(), p.block_tables.size());
    lens.upload(p.seq_lens.data(), p.seq_lens.size());
    kv.block_tables = tables.get();
    kv.max_blocks_per_seq = p.max_blocks;
    kv.seq_lens = lens.get();
    kv.num_seqs = p.num_seqs();
    const auto q = encode(p.q, shape.dtype);
    DeviceBuffer<std::byte> d_q(q.size()), d_out(q.size());
    d_q.upload(q.data(), q.size());
    KVSIM_CUDA_CHECK(cudaMemset(d_out.get(), 0xff, d_out.size_bytes()));
    const attention_work_plan plan = plan_attention_work(p.seq_lens.data(), p.q_indptr.data(), p.num_seqs(),
                                                         shape.num_kv_heads, shape.block_size, 1000, splits);
    DeviceWorkPlan work;
    work.upload(plan, p.shape.num_q_heads, shape.head_size);
    KVSIM_CUDA_CHECK(PagedAttentionPrefill(kv, d_q.get(), d_out.get(), p.shape.num_q_heads, p.scale,
                                           work.view(), work.workspace(), nullptr));
    KVSIM_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<std::byte> out(q.size());
    d_out.download(out.data(), out.size());
    check_output(p, out, reference_output(p), splits);
  }
}

TEST_CASE("cuda launchers reject unsupported head sizes and the occupancy query works", "[kernels][gpu]") {
  std::int64_t max_ctas = 0;
  REQUIRE(PagedAttentionMaxResidentCtas(DType::kF16, 128, 16, 4, &max_ctas) == cudaSuccess);
  CHECK(max_ctas >= 132);
  DeviceBuffer<std::byte> pool(1 << 16), qo(1 << 12);
  kv_pool_shape shape{DType::kF16, 4, 16, 1, 96};
  paged_kv_view kv = make_vllm_v1_view(pool.get(), shape);
  attention_work_view work;
  work.num_items = 1;
  work.num_rows = 1;
  work.max_items_per_row = 1;
  kv.num_seqs = 1;
  CHECK(PagedAttentionDecode(kv, qo.get(), qo.get(), 1, 1.0f, work, {}, nullptr) == cudaErrorInvalidValue);
  kv.dtype = DType::kF32;
  CHECK(PagedAttentionDecode(kv, qo.get(), qo.get(), 1, 1.0f, work, {}, nullptr) == cudaErrorInvalidValue);
}

}  // namespace kvsim::kernels::testing
