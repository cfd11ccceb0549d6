// CPU paged attention (decode and prefill/append) against the Eigen dense reference.

#include <catch2/catch.hpp>

#include <cstring>
#include <limits>

#include "kernel_test_data.h"
#include "kernels/cpu_attention.h"
#include "kernels/metrics.h"

namespace kvsim::kernels::testing {
namespace {

/// Output of the CPU paged path for `p` after writing its K/V through cpu_write_kv into a
/// NaN-filled pool laid out by the strides of `layout` (default: vLLM V1). Returns the output as
/// floats.
std::vector<float> run_cpu_paged(const paged_problem& p, paged_kv_view layout) {
  const kv_pool_shape ps = p.pool_shape();
  std::vector<float> nan_fill(static_cast<std::size_t>(ps.num_elements()),
                              std::numeric_limits<float>::quiet_NaN());
  std::vector<std::byte> pool = encode(nan_fill, ps.dtype);
  paged_kv_view view = layout;
  view.pool = pool.data();
  view.block_tables = p.block_tables.data();
  view.max_blocks_per_seq = p.max_blocks;
  view.seq_lens = p.seq_lens.data();
  view.num_seqs = p.num_seqs();
  const auto keys = new_tokens(p, 0);
  const auto values = new_tokens(p, 1);
  cpu_write_kv(view, keys.data(), values.data(), p.slot_mapping.data(),
               static_cast<std::int64_t>(p.slot_mapping.size()));
  const auto q = encode(p.q, ps.dtype);
  std::vector<float> out_nan(p.q.size(), std::numeric_limits<float>::quiet_NaN());
  std::vector<std::byte> out = encode(out_nan, ps.dtype);  // poisoned output
  cpu_paged_attention(view, {p.q_indptr_or_null(), p.shape.num_q_heads, p.scale}, q.data(),
                      out.data());
  return decode_floats(out.data(), ps.dtype, static_cast<std::int64_t>(p.q.size()));
}
std::vector<float> run_cpu_paged(const paged_problem& p) {
  return run_cpu_paged(p, make_vllm_v1_view(nullptr, p.pool_shape()));
}

void check_against_reference(const paged_problem& p, const paged_kv_view& layout) {
  const std::vector<float> out = run_cpu_paged(p, layout);
  const std::vector<float> ref = reference_output(p);
  REQUIRE(out.size() == ref.size());
  const tolerance tol = default_tolerance(p.shape.dtype);
  const error_stats st = compare_outputs(out.data(), ref.data(), static_cast<std::int64_t>(out.size()), tol);
  INFO("dtype=" << dtype_name(p.shape.dtype) << " Hq=" << p.shape.num_q_heads
                << " Hkv=" << p.shape.num_kv_heads << " D=" << p.shape.head_size
                << " bs=" << p.shape.block_size << " " << to_string(st));
  CHECK(passes(st, tol));
}
void check_against_reference(const paged_problem& p) {
  check_against_reference(p, make_vllm_v1_view(nullptr, p.pool_shape()));
}

}  // namespace

TEST_CASE("cpu paged decode matches the dense reference over GQA, head and block sizes", "[kernels]") {
  std::uint64_t seed = 1;
  for (const DType dtype : {DType::kF16, DType::kBF16, DType::kF32}) {
    for (const auto& heads : {std::pair{2, 2}, std::pair{4, 2}, std::pair{8, 2}, std::pair{16, 2},
                              std::pair{8, 1}}) {
      for (const int d : {64, 128}) {
        for (const int bs : {8, 16, 32}) {
          const problem_shape shape{dtype, heads.first, heads.second, d, bs};
          Rng lens(seed);
          const std::vector<seq_spec> seqs{
              {1, 1}, {1, bs - 1}, {1, bs}, {1, bs + 1}, {1, lens.uniform_int(2, 200)}};
          check_against_reference(make_problem(shape, seqs, seed++));
        }
      }
    }
  }
}

TEST_CASE("cpu paged prefill matches the dense reference on mixed chunked-prefill batches", "[kernels]") {
  std::uint64_t seed = 100;
  for (const DType dtype : {DType::kF16, DType::kBF16}) {
    for (const int bs : {8, 16, 32}) {
      // vLLM's mixed set (decode + chunked prefill), spec-decode lengths, a chunk starting one
      // token into a block (context = bs + 1), q_len = kv_len (no prefix).
      const problem_shape shape{dtype, 8, 2, 128, bs};
      const std::vector<seq_spec> seqs{{1, 1328}, {5, 18}, {129, 463}, {4, 37},
                                        {7, bs + 1 + 7}, {16, 16}, {2, 2}};
      check_against_reference(make_problem(shape, seqs, seed++));
    }
  }
  // MQA and D=64 with prefill rows.
  const std::vector<seq_spec> small{{3, 40}, {8, 8}, {1, 77}, {33, 50}};
  check_against_reference(make_problem({DType::kF16, 4, 1, 64, 16}, small, seed++));
  check_against_reference(make_problem({DType::kF32, 16, 2, 64, 8}, small, seed++));
}

TEST_CASE("cpu paged attention handles uniform inputs and large logits", "[kernels]") {
  const problem_shape shape{DType::kF16, 8, 2, 128, 16};
  const std::vector<seq_spec> seqs{{1, 700}, {9, 300}, {1, 33}};
  check_against_reference(make_problem(shape, seqs, 7, Init::kUniform));
  paged_problem big = make_problem(shape, seqs, 8);
  for (float& x : big.q) x = round_to_dtype(x * 20.0f, shape.dtype);  // logits ~ N(0, 400)
  check_against_reference(big);
}

TEST_CASE("a sequence with context 0 produces zeros and no NaN", "[kernels]") {
  paged_problem p = make_problem({DType::kF16, 4, 2, 64, 16}, {{1, 0}, {1, 5}, {1, 0}}, 11);
  const std::vector<float> out = run_cpu_paged(p);
  for (std::int64_t i = 0; i < p.row_elems(); ++i) {
    CHECK(out[static_cast<std::size_t>(i)] == 0.0f);
    CHECK(out[static_cast<std::size_t>(2 * p.row_elems() + i)] == 0.0f);
  }
  check_against_reference(p);
}

TEST_CASE("spike keys at page boundaries make the output equal that token's value", "[kernels]") {
  for (const int bs : {8, 16, 32}) {
    const int len = 3 * bs + 5;
    for (const int t_star : {0, bs - 1, bs, 2 * bs - 1, 2 * bs, len - 1}) {
      const problem_shape shape{DType::kF32, 8, 2, 64, bs};
      paged_problem p = make_problem(shape, {{1, len}, {1, bs + 1}}, 1000 + static_cast<std::uint64_t>(t_star));
      const int h = 5;  // KV head 1
      make_spike(p, 0, t_star, 0, h);
      const std::vector<float> out = run_cpu_paged(p);
      const int d = shape.head_size;
      for (int i = 0; i < d; ++i) {
        const float expect = p.v[0][static_cast<std::size_t>((t_star * shape.num_kv_heads + 1) * d + i)];
        REQUIRE(out[static_cast<std::size_t>(h * d + i)] == Approx(expect).margin(1e-4));
      }
      check_against_reference(p);
    }
  }
}

TEST_CASE("non-default pool layouts work through the strides", "[kernels]") {
  const problem_shape shape{DType::kBF16, 8, 2, 64, 16};
  const paged_problem p = make_problem(shape, {{1, 50}, {6, 40}, {1, 16}}, 21);
  const std::int64_t hd = shape.head_size;
  const std::int64_t bs = shape.block_size;
  for (const bool hnd : {false, true}) {
    // Layout A: vLLM's newer (num_blocks, 2, bs, Hkv, D). Layout B: HND (2, nb, Hkv, bs, D).
    paged_kv_view layout = hnd ? make_vllm_v1_view(nullptr, p.pool_shape())
                               : make_nb2_view(nullptr, p.pool_shape());
    if (hnd) {
      layout.stride_head = bs * hd;
      layout.stride_token = hd;
    }
    INFO((hnd ? "HND" : "(nb, 2, ...)"));
    check_against_reference(p, layout);
  }
}

TEST_CASE("the float and double dense references agree", "[kernels]") {
  const paged_problem p = make_problem({DType::kF32, 8, 2, 128, 16}, {{1, 500}, {17, 90}}, 31);
  const auto ref_d = reference_output<double>(p);
  const auto ref_f = reference_output<float>(p);
  const error_stats st = compare_outputs(ref_f.data(), ref_d.data(), static_cast<std::int64_t>(ref_d.size()),
                                         default_tolerance(DType::kF32));
  INFO(to_string(st));
  CHECK(st.rel_fro < 1e-5);
}

TEST_CASE("q_len larger than seq_len is rejected", "[kernels]") {
  paged_problem p = make_problem({DType::kF16, 4, 2, 64, 16}, {{3, 5}}, 41);
  p.seq_lens[0] = 2;
  CHECK_THROWS_AS(run_cpu_paged(p), std::invalid_argument);
}

}  // namespace kvsim::kernels::testing
