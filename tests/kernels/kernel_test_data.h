#pragma once
// Shared test fixtures for the kernel tests (CPU and GPU executables): random paged problems with
// contiguous per-sequence K/V (the reference's input) and a scattered, NaN-poisoned pool layout.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/dense_reference.h"
#include "kernels/dtype.h"
#include "kernels/paged_kv.h"

namespace kvsim::kernels::testing {

/// Deterministic generator with our own samplers (std::*_distribution is implementation-defined).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : gen_(seed) {}
  double uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }
  float normal() {  // Box-Muller
    const double u1 = std::max(uniform(), 1e-300);
    const double u2 = uniform();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  int uniform_int(int lo, int hi) {  // inclusive
    return lo + static_cast<int>(gen_() % static_cast<std::uint64_t>(hi - lo + 1));
  }
  template <typename T>
  void shuffle(std::vector<T>& v) {
    for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[gen_() % i]);
  }

 private:
  std::mt19937_64 gen_;
};

struct seq_spec {
  int q_len = 1;
  int kv_len = 0;
};

struct problem_shape {
  DType dtype = DType::kF16;
  int num_q_heads = 8;
  int num_kv_heads = 2;
  int head_size = 128;
  int block_size = 16;
};

enum class Init { kRandn, kUniform };

/// A batch with its contiguous operands and a paged placement of its K/V.
struct paged_problem {
  problem_shape shape;
  std::vector<seq_spec> seqs;
  bool decode = true;                     // every q_len == 1: pass q_indptr = nullptr
  std::vector<std::vector<float>> k, v;   // per seq [kv_len, Hkv, D], values exact in dtype
  std::vector<float> q;                   // [num_rows, Hq, D], exact in dtype
  std::vector<std::int32_t> q_indptr;     // [num_seqs + 1]
  std::vector<std::int32_t> seq_lens;     // [num_seqs]
  std::int32_t num_blocks = 0;
  std::int32_t max_blocks = 0;
  std::int32_t poison_block = 0;          // never written (NaN); fills unused table entries
  std::vector<std::int32_t> block_tables; // [num_seqs, max_blocks]
  std::vector<std::int64_t> slot_mapping; // [total_kv] slot of each token, seqs concatenated
  float scale = 1.0f;

  int num_seqs() const { return static_cast<int>(seqs.size()); }
  std::int64_t num_rows() const { return q_indptr.back(); }
  std::int64_t row_elems() const { return std::int64_t{shape.num_q_heads} * shape.head_size; }
  kv_pool_shape pool_shape() const {
    return {shape.dtype, num_blocks, shape.block_size, shape.num_kv_heads, shape.head_size};
  }
  const std::int32_t* q_indptr_or_null() const { return decode ? nullptr : q_indptr.data(); }
};

/// Encodes floats into `dtype` storage (round to nearest even).
inline std::vector<std::byte> encode(const std::vector<float>& values, DType dtype) {
  std::vector<std::byte> out(values.size() * dtype_size_bytes(dtype));
  for (std::size_t i = 0; i < values.size(); ++i)
    store_from_float(out.data(), dtype, static_cast<std::int64_t>(i), values[i]);
  return out;
}

/// Decodes `n` elements of `dtype` storage into floats.
inline std::vector<float> decode_floats(const void* data, DType dtype, std::int64_t n) {
  std::vector<float> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = load_as_float(data, dtype, i);
  return out;
}

/// Sets p.slot_mapping from p.block_tables: the pool slot of every token, sequences concatenated.
inline void fill_slot_mapping(paged_problem& p) {
  const int bs = p.shape.block_size;
  p.slot_mapping.clear();
  for (int s = 0; s < p.num_seqs(); ++s)
    for (int t = 0; t < p.seqs[s].kv_len; ++t)
      p.slot_mapping.push_back(std::int64_t{p.block_tables[s * p.max_blocks + t / bs]} * bs +
                               t % bs);
}

/// Builds a problem: fresh random Q/K/V (rounded to dtype), a pool of ~pool_factor x the needed
/// blocks, block tables drawn from a random permutation (no aliasing).
inline paged_problem make_problem(const problem_shape& shape, const std::vector<seq_spec>& seqs,
                                  std::uint64_t seed, Init init = Init::kRandn,
                                  int pool_factor = 2) {
  Rng rng(seed);
  paged_problem p;
  p.shape = shape;
  p.seqs = seqs;
  p.scale = 1.0f / std::sqrt(static_cast<float>(shape.head_size));
  const int d = shape.head_size;
  const float amp = 1.0f / std::sqrt(static_cast<float>(d));
  auto draw = [&]() {
    const float x = init == Init::kRandn ? rng.normal()
                                         : static_cast<float>((2.0 * rng.uniform() - 1.0) * amp);
    return round_to_dtype(x, shape.dtype);
  };
  p.q_indptr.push_back(0);
  int needed_blocks = 0;
  for (const seq_spec& s : seqs) {
    p.decode = p.decode && s.q_len == 1;
    p.q_indptr.push_back(p.q_indptr.back() + s.q_len);
    p.seq_lens.push_back(s.kv_len);
    const int blocks = (s.kv_len + shape.block_size - 1) / shape.block_size;
    needed_blocks += blocks;
    p.max_blocks = std::max(p.max_blocks, blocks);
    std::vector<float> k(static_cast<std::size_t>(s.kv_len) * shape.num_kv_heads * d);
    std::vector<float> v(k.size());
    for (float& x : k) x = draw();
    for (float& x : v) x = draw();
    p.k.push_back(std::move(k));
    p.v.push_back(std::move(v));
  }
  p.max_blocks = std::max(p.max_blocks, 1) + 1;  // one spare column: always poison
  p.q.resize(static_cast<std::size_t>(p.num_rows() * p.row_elems()));
  for (float& x : p.q) x = draw();
  p.num_blocks = pool_factor * needed_blocks + 2;
  std::vector<std::int32_t> perm(static_cast<std::size_t>(p.num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  rng.shuffle(perm);
  p.poison_block = perm.back();
  p.block_tables.assign(static_cast<std::size_t>(p.num_seqs()) * p.max_blocks, p.poison_block);
  std::size_t next = 0;
  for (int s = 0; s < p.num_seqs(); ++s) {
    const int blocks = (seqs[s].kv_len + shape.block_size - 1) / shape.block_size;
    for (int b = 0; b < blocks; ++b) p.block_tables[s * p.max_blocks + b] = perm[next++];
  }
  fill_slot_mapping(p);
  return p;
}

/// All sequences' K (kv = 0) or V (kv = 1) concatenated, `[total_kv, Hkv, D]`, encoded in dtype:
/// the write_kv input matching slot_mapping.
inline std::vector<std::byte> new_tokens(const paged_problem& p, int kv) {
  std::vector<float> all;
  for (int s = 0; s < p.num_seqs(); ++s) {
    const auto& src = kv == 0 ? p.k[s] : p.v[s];
    all.insert(all.end(), src.begin(), src.end());
  }
  return encode(all, p.shape.dtype);
}

/// Dense reference (Scalar = double by default) of every row, `[num_rows, Hq, D]`.
template <typename Scalar = double>
std::vector<float> reference_output(const paged_problem& p) {
  std::vector<float> out;
  out.reserve(static_cast<std::size_t>(p.num_rows() * p.row_elems()));
  for (int s = 0; s < p.num_seqs(); ++s) {
    dense_sequence ds;
    ds.q = p.q.data() + p.q_indptr[s] * p.row_elems();
    ds.k = p.k[s].data();
    ds.v = p.v[s].data();
    ds.q_len = p.seqs[s].q_len;
    ds.kv_len = p.seqs[s].kv_len;
    const std::vector<float> o = dense_attention_reference<Scalar>(
        ds, p.shape.num_q_heads, p.shape.num_kv_heads, p.shape.head_size, p.scale);
    out.insert(out.end(), o.begin(), o.end());
  }
  return out;
}

/// Makes token `t` of sequence `s` a spike for query row `row`, head `h`: K[t] = c * q so that the
/// attention of (row, h) is ~one-hot on t and its output must be ~V[t].
inline void make_spike(paged_problem& p, int s, int t, std::int64_t row, int h, float c = 4.0f) {
  const int d = p.shape.head_size;
  const int kvh = h / (p.shape.num_q_heads / p.shape.num_kv_heads);
  for (int i = 0; i < d; ++i) {
    const float qv = p.q[static_cast<std::size_t>(row * p.row_elems() + h * d + i)];
    p.k[s][static_cast<std::size_t>((std::int64_t{t} * p.shape.num_kv_heads + kvh) * d + i)] =
        round_to_dtype(c * qv, p.shape.dtype);
  }
}

/// A view of `pool` in vLLM's newer (num_blocks, 2, block_size, Hkv, D) layout: the K and V
/// pages of a block are adjacent (make_vllm_v1_view's layout is (2, num_blocks, ...)).
inline paged_kv_view make_nb2_view(void* pool, const kv_pool_shape& shape) {
  paged_kv_view v = make_vllm_v1_view(pool, shape);
  v.stride_kv = std::int64_t{shape.block_size} * shape.num_kv_heads * shape.head_size;
  v.stride_block = 2 * v.stride_kv;
  return v;
}

}  // namespace kvsim::kernels::testing
