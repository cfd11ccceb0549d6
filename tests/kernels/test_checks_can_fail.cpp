// The comparison must catch real cache bugs: each test injects one and requires a large error.

#include <catch2/catch.hpp>

#include <limits>

#include "kernel_test_data.h"
#include "kernels/backend.h"
#include "kernels/metrics.h"

namespace kvsim::kernels::testing {
namespace {

/// Writes `keys/values` through `slots` into a fresh CPU backend, runs attention with `tables`,
/// and compares with the dense reference of `p`.
error_stats run_with(const paged_problem& p, const std::vector<std::int64_t>& slots,
                     const std::vector<std::int32_t>& tables) {
  auto backend = make_attention_backend(BackendKind::kCpu);
  backend->init_pool(p.pool_shape());
  // A finite random background instead of NaN, so the failures show as large finite errors.
  Rng rng(99);
  std::vector<float> background(static_cast<std::size_t>(p.pool_shape().num_elements()));
  for (float& x : background) x = rng.normal();
  backend->load_pool(encode(background, p.shape.dtype).data());
  const auto keys = new_tokens(p, 0);
  const auto values = new_tokens(p, 1);
  backend->write_kv(keys.data(), values.data(), slots.data(), static_cast<std::int64_t>(slots.size()));
  attention_batch batch{tables.data(), p.max_blocks, p.seq_lens.data(), p.num_seqs(),
                        p.q_indptr_or_null(), p.shape.num_q_heads, p.scale};
  const auto q = encode(p.q, p.shape.dtype);
  std::vector<std::byte> out(q.size());
  backend->attention(batch, q.data(), out.data());
  const auto outf = decode_floats(out.data(), p.shape.dtype, static_cast<std::int64_t>(p.q.size()));
  const auto ref = reference_output(p);
  return compare_outputs(outf.data(), ref.data(), static_cast<std::int64_t>(ref.size()),
                         default_tolerance(p.shape.dtype));
}

paged_problem bug_problem() {
  return make_problem({DType::kF16, 8, 2, 64, 16}, {{1, 100}, {1, 70}, {4, 60}}, 555);
}

}  // namespace

TEST_CASE("the unmodified problem passes (control for the injected bugs)", "[kernels]") {
  const paged_problem p = bug_problem();
  const error_stats st = run_with(p, p.slot_mapping, p.block_tables);
  INFO(to_string(st));
  CHECK(passes(st, default_tolerance(p.shape.dtype)));
}

TEST_CASE("a corrupted block table entry is reported as a large error", "[kernels]") {
  const paged_problem p = bug_problem();
  std::vector<std::int32_t> tables = p.block_tables;
  tables[2] = tables[p.max_blocks + 1];  // seq 0, block 2 -> another sequence's block
  const error_stats st = run_with(p, p.slot_mapping, tables);
  INFO(to_string(st));
  CHECK_FALSE(passes(st, default_tolerance(p.shape.dtype)));
  CHECK(st.max_abs > 0.1);
}

TEST_CASE("an off-by-one slot in the write mapping is reported as a large error", "[kernels]") {
  const paged_problem p = bug_problem();
  std::vector<std::int64_t> slots = p.slot_mapping;
  slots[37] += 1;  // token 37 of seq 0 lands on token 38's slot; token 37's slot keeps garbage
  const error_stats st = run_with(p, slots, p.block_tables);
  INFO(to_string(st));
  CHECK_FALSE(passes(st, default_tolerance(p.shape.dtype)));
  CHECK(st.max_abs > 0.01);
}

TEST_CASE("a block shared by two sequences that should not share is reported", "[kernels]") {
  const paged_problem p = bug_problem();
  // Sequence 1's first block aliases sequence 0's first block: the later writer (seq 1) wins.
  std::vector<std::int32_t> tables = p.block_tables;
  const std::int32_t shared = tables[0];
  tables[p.max_blocks] = shared;
  std::vector<std::int64_t> slots = p.slot_mapping;
  for (int t = 0; t < 16; ++t) slots[100 + t] = std::int64_t{shared} * 16 + t;
  const error_stats st = run_with(p, slots, tables);
  INFO(to_string(st));
  CHECK_FALSE(passes(st, default_tolerance(p.shape.dtype)));
  CHECK(st.max_abs > 0.1);
}

TEST_CASE("NaN in an output is a failure even when the norms look fine", "[kernels]") {
  std::vector<float> ref(100, 1.0f);
  std::vector<float> out = ref;
  out[3] = std::numeric_limits<float>::quiet_NaN();
  const error_stats st = compare_outputs(out.data(), ref.data(), 100, default_tolerance(DType::kF16));
  CHECK(st.num_nonfinite == 1);
  CHECK(st.worst_index == 3);
  CHECK_FALSE(passes(st, default_tolerance(DType::kF16)));
}

}  // namespace kvsim::kernels::testing
