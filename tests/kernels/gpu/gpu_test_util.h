#pragma once
// Helpers of the GPU kernel tests: run a problem through a backend, compare with the dense
// reference and the CPU baseline, and rearrange a problem's pages.

#include <catch2/catch.hpp>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "../kernel_test_data.h"
#include "kernels/backend.h"
#include "kernels/metrics.h"
#include "kernels/work_plan.h"

namespace kvsim::kernels::testing {

/// Both kernels, forced: every accuracy test runs each of them (G <= 16).
inline constexpr AttentionPath kBothPaths[] = {AttentionPath::kCudaCore,
                                               AttentionPath::kTensorCore};

/// Writes p's K/V through the backend's write path (the CUDA write kernel for kCuda) into a NaN
/// pool, then runs attention with `forced_splits` (0 = auto) on kernel `path`; returns the raw
/// output bytes (dtype storage). The CUDA backend NaN-fills its output buffer before each launch.
inline std::vector<std::byte> run_backend(AttentionBackend& backend, const paged_problem& p,
                                          int forced_splits,
                                          AttentionPath path = AttentionPath::kAuto) {
  backend.init_pool(p.pool_shape());
  const auto keys = new_tokens(p, 0);
  const auto values = new_tokens(p, 1);
  backend.write_kv(keys.data(), values.data(), p.slot_mapping.data(),
                   static_cast<std::int64_t>(p.slot_mapping.size()));
  backend.set_forced_splits(forced_splits);
  backend.set_attention_path(path);
  const attention_batch batch{
      p.block_tables.data(), p.max_blocks, p.seq_lens.data(), p.num_seqs(), p.q_indptr_or_null(),
      p.shape.num_q_heads,   p.scale};
  const auto q = encode(p.q, p.shape.dtype);
  std::vector<std::byte> out(q.size());
  backend.attention(batch, q.data(), out.data());
  return out;
}

inline std::vector<float> output_floats(const paged_problem& p, const std::vector<std::byte>& out) {
  return decode_floats(out.data(), p.shape.dtype, static_cast<std::int64_t>(p.q.size()));
}

/// The kernels.md §8 guard rails: every element within the dtype's atol + rtol |ref|, relative
/// Frobenius error within bounds, nothing non-finite (an unwritten NaN output fails).
inline error_stats check_output(const paged_problem& p, const std::vector<std::byte>& out,
                                const std::vector<float>& ref, int splits,
                                AttentionPath path = AttentionPath::kAuto) {
  const auto outf = output_floats(p, out);
  const tolerance tol = default_tolerance(p.shape.dtype);
  const error_stats st =
      compare_outputs(outf.data(), ref.data(), static_cast<std::int64_t>(ref.size()), tol);
  INFO("dtype=" << dtype_name(p.shape.dtype) << " Hq=" << p.shape.num_q_heads
                << " Hkv=" << p.shape.num_kv_heads << " D=" << p.shape.head_size
                << " bs=" << p.shape.block_size << " splits=" << splits
                << " path=" << attention_path_name(path) << " " << to_string(st));
  CHECK(passes(st, tol));
  return st;
}

/// The same-dtype baseline of the FA3-style rule: the CPU backend (fp32 math, output rounded to
/// the dtype), measured against `ref`.
inline error_stats cpu_baseline(const paged_problem& p, const std::vector<float>& ref) {
  auto cpu = make_attention_backend(BackendKind::kCpu);
  const auto out = output_floats(p, run_backend(*cpu, p, 0));
  return compare_outputs(out.data(), ref.data(), static_cast<std::int64_t>(ref.size()),
                         default_tolerance(p.shape.dtype));
}

/// check_output plus the primary rule of kernels.md §8 against `baseline` (cpu_baseline).
inline void check_against_baseline(const paged_problem& p, const std::vector<std::byte>& out,
                                   const std::vector<float>& ref, const error_stats& baseline,
                                   int splits, AttentionPath path) {
  const error_stats st = check_output(p, out, ref, splits, path);
  INFO("path=" << attention_path_name(path) << " splits=" << splits << " baseline "
               << to_string(baseline) << " kernel " << to_string(st));
  CHECK(passes_against_baseline(st, baseline));
}

/// check_against_baseline for `p` on both kernels with each split count of `splits` (0 = auto),
/// the baseline being the CPU backend's error against the dense reference.
inline void check_both_paths(AttentionBackend& backend, const paged_problem& p,
                             std::initializer_list<int> splits) {
  const std::vector<float> ref = reference_output(p);
  const error_stats baseline = cpu_baseline(p, ref);
  for (const AttentionPath path : kBothPaths)
    for (const int n : splits)
      check_against_baseline(p, run_backend(backend, p, n, path), ref, baseline, n, path);
}

/// The same problem with block table row s = s*max_blocks + b: contiguous pages, same data.
inline paged_problem with_identity_tables(paged_problem p) {
  p.num_blocks = p.num_seqs() * p.max_blocks + 1;
  p.poison_block = p.num_blocks - 1;
  for (int s = 0; s < p.num_seqs(); ++s)
    for (int b = 0; b < p.max_blocks; ++b)
      p.block_tables[s * p.max_blocks + b] = s * p.max_blocks + b;
  fill_slot_mapping(p);
  return p;
}

/// Moves every block id up by `shift` (pool grows accordingly), to exercise 64-bit offsets.
inline paged_problem shift_blocks(paged_problem p, std::int32_t shift) {
  for (auto& b : p.block_tables) b += shift;
  for (auto& s : p.slot_mapping) s += std::int64_t{shift} * p.shape.block_size;
  p.num_blocks += shift;
  p.poison_block += shift;
  return p;
}

/// Makes every sequence share sequence 0's first `blocks` full blocks (vLLM prefix caching):
/// their K/V become sequence 0's and their block tables point at sequence 0's blocks, so pages
/// are aliased. The blocks they owned before stay in the pool, never written again.
/// Precondition: every sequence has at least `blocks` full blocks.
inline paged_problem share_prefix(paged_problem p, int blocks) {
  const int bs = p.shape.block_size;
  const std::size_t prefix_elems =
      static_cast<std::size_t>(blocks) * bs * p.shape.num_kv_heads * p.shape.head_size;
  for (int s = 1; s < p.num_seqs(); ++s) {
    REQUIRE(p.seqs[s].kv_len >= blocks * bs);
    for (int b = 0; b < blocks; ++b) p.block_tables[s * p.max_blocks + b] = p.block_tables[b];
    std::copy(p.k[0].begin(), p.k[0].begin() + static_cast<std::ptrdiff_t>(prefix_elems),
              p.k[s].begin());
    std::copy(p.v[0].begin(), p.v[0].begin() + static_cast<std::ptrdiff_t>(prefix_elems),
              p.v[s].begin());
  }
  fill_slot_mapping(p);  // shared slots are written once per sharer, with the same values
  return p;
}

}  // namespace kvsim::kernels::testing
