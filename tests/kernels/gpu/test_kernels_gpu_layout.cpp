// CUDA kernels: the KV write kernel, the GPU dense reference, bitwise repeatability, the paging
// oracle, 64-bit pool offsets, strided pool layouts and argument checks. Needs a GPU; main()
// skips with 77 without one.

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>

#include "gpu_test_util.h"
#include "kernels/attention_cuda.h"
#include "kernels/cpu_attention.h"
#include "kernels/cuda_utils.h"
#include "kernels/device_work_plan.h"

namespace kvsim::kernels::testing {
namespace {

/// Writes the new tokens' K/V of `p` (new_tokens) into the device pool of `kv` with
/// ReshapeAndCache through p's slot mapping.
void device_write_kv(const paged_kv_view& kv, const paged_problem& p) {
  const auto keys = new_tokens(p, 0);
  const auto values = new_tokens(p, 1);
  DeviceBuffer<std::byte> d_keys(keys.size()), d_values(values.size());
  DeviceBuffer<std::int64_t> d_slots(p.slot_mapping.size());
  d_keys.upload(keys.data(), keys.size());
  d_values.upload(values.data(), values.size());
  d_slots.upload(p.slot_mapping.data(), p.slot_mapping.size());
  KVSIM_CUDA_CHECK(ReshapeAndCache(kv, d_keys.get(), d_values.get(), d_slots.get(),
                                   static_cast<std::int64_t>(p.slot_mapping.size()), nullptr));
  KVSIM_CUDA_CHECK(cudaDeviceSynchronize());  // the buffers go out of scope
}

/// The pool of `backend` as raw bytes.
std::vector<std::byte> read_pool(const AttentionBackend& backend) {
  const kv_pool_shape& shape = backend.pool_shape();
  std::vector<std::byte> pool(static_cast<std::size_t>(shape.num_elements()) *
                              dtype_size_bytes(shape.dtype));
  backend.read_pool(pool.data());
  return pool;
}

/// Requires two pools of `n` elements of `dtype` to be NaN at the same places and bitwise equal
/// elsewhere (NaN bit patterns may differ); returns the number of non-NaN elements.
std::int64_t require_same_pool(const std::vector<std::byte>& a, const std::vector<std::byte>& b,
                               DType dtype, std::int64_t n) {
  const std::size_t elt = dtype_size_bytes(dtype);
  std::int64_t written = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const bool nan_a = std::isnan(load_as_float(a.data(), dtype, i));
    REQUIRE(nan_a == std::isnan(load_as_float(b.data(), dtype, i)));
    if (!nan_a) {
      REQUIRE(std::memcmp(&a[static_cast<std::size_t>(i) * elt],
                          &b[static_cast<std::size_t>(i) * elt], elt) == 0);
      ++written;
    }
  }
  return written;
}

}  // namespace

TEST_CASE("the cuda write kernel stores exactly what the cpu write stores", "[kernels][gpu]") {
  std::uint64_t seed = 31;
  for (const DType dtype : {DType::kF16, DType::kBF16}) {
    for (const int d : {64, 128, 256}) {
      for (const int bs : {8, 16, 32}) {
        const paged_problem p =
            make_problem({dtype, 8, 2, d, bs}, {{1, 100}, {3, 37}, {1, 16}, {1, bs + 1}}, seed++);
        std::vector<std::int64_t> slots = p.slot_mapping;
        slots[5] = -1;  // padding token: skipped by both
        const auto keys = new_tokens(p, 0);
        const auto values = new_tokens(p, 1);
        std::vector<std::vector<std::byte>> pools;
        for (const BackendKind kind : {BackendKind::kCpu, BackendKind::kCuda}) {
          auto backend = make_attention_backend(kind);
          backend->init_pool(p.pool_shape());
          backend->write_kv(keys.data(), values.data(), slots.data(),
                            static_cast<std::int64_t>(slots.size()));
          pools.push_back(read_pool(*backend));
        }
        INFO(dtype_name(dtype) << " D=" << d << " bs=" << bs);
        const std::int64_t written =
            require_same_pool(pools[0], pools[1], dtype, p.pool_shape().num_elements());
        CHECK(written == 2 * (static_cast<std::int64_t>(slots.size()) - 1) * 2 * d);
      }
    }
  }
}

TEST_CASE("the raw cuda write kernel matches cpu_write_kv on a strided fp32 pool",
          "[kernels][gpu]") {
  // (num_blocks, 2, bs, Hkv, D) layout, fp32: the dtype and layout the backends do not use.
  const paged_problem p = make_problem({DType::kF32, 4, 2, 64, 16}, {{1, 70}, {2, 33}}, 35);
  const kv_pool_shape shape = p.pool_shape();
  const std::int64_t n = shape.num_elements();
  paged_kv_view host = make_nb2_view(nullptr, shape);
  std::vector<float> expect(static_cast<std::size_t>(n), std::numeric_limits<float>::quiet_NaN());
  host.pool = expect.data();
  const auto keys = new_tokens(p, 0);
  const auto values = new_tokens(p, 1);
  cpu_write_kv(host, keys.data(), values.data(), p.slot_mapping.data(),
               static_cast<std::int64_t>(p.slot_mapping.size()));

  DeviceBuffer<float> pool(static_cast<std::size_t>(n));
  KVSIM_CUDA_CHECK(cudaMemset(pool.get(), 0xff, pool.size_bytes()));
  paged_kv_view dev = host;
  dev.pool = pool.get();
  device_write_kv(dev, p);
  KVSIM_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> got(static_cast<std::size_t>(n));
  pool.download(got.data(), got.size());
  std::vector<std::byte> a(got.size() * 4), b(got.size() * 4);
  std::memcpy(a.data(), expect.data(), a.size());
  std::memcpy(b.data(), got.data(), b.size());
  CHECK(require_same_pool(a, b, DType::kF32, n) == (70 + 33) * 2 * 2 * 64);
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
  const error_stats st =
      compare_outputs(got.data(), ref.data(), static_cast<std::int64_t>(ref.size()), tol);
  INFO(to_string(st));
  CHECK(passes(st, tol));
}

TEST_CASE("cuda attention is bitwise repeatable", "[kernels][gpu]") {
  auto backend = make_attention_backend(BackendKind::kCuda);
  for (const DType dtype : {DType::kF16, DType::kBF16}) {
    const paged_problem p =
        make_problem({dtype, 32, 8, 128, 16}, {{1, 3000}, {1, 17}, {4, 900}, {1, 1}}, 51);
    for (const AttentionPath path : kBothPaths) {
      for (const int splits : {1, 3, 0}) {
        const auto a = run_backend(*backend, p, splits, path);
        const auto b = run_backend(*backend, p, splits, path);
        INFO(dtype_name(dtype) << " splits=" << splits << " path=" << attention_path_name(path));
        CHECK(std::memcmp(a.data(), b.data(), a.size()) == 0);
      }
    }
  }
}

TEST_CASE("paged and contiguous identity block tables give bitwise identical outputs",
          "[kernels][gpu]") {
  auto backend = make_attention_backend(BackendKind::kCuda);
  for (const int bs : {8, 16, 32}) {
    const paged_problem paged =
        make_problem({DType::kF16, 16, 2, 128, bs}, {{1, 2049}, {1, 31}, {1, 700}, {6, 300}}, 61);
    const paged_problem contiguous = with_identity_tables(paged);
    for (const AttentionPath path : kBothPaths) {
      for (const int splits : {1, 2, 0}) {
        const auto a = run_backend(*backend, paged, splits, path);
        const auto b = run_backend(*backend, contiguous, splits, path);
        INFO("bs=" << bs << " splits=" << splits << " path=" << attention_path_name(path));
        CHECK(std::memcmp(a.data(), b.data(), a.size()) == 0);
      }
    }
  }
}

TEST_CASE("a pool beyond 2^31 elements is addressed with 64-bit offsets", "[kernels][gpu][slow]") {
  auto backend = make_attention_backend(BackendKind::kCuda);
  // 140000 blocks x 16 x 8 x 128 x 2 (K, V) = 4.6e9 elements (9.2 GB in 16 bits). Every block id
  // used is above 131072, so K offsets (block * 16384 elements) pass 2^31 too, not only V's.
  for (const DType dtype : {DType::kF16, DType::kBF16}) {
    const paged_problem small =
        make_problem({dtype, 32, 8, 128, 16}, {{1, 1000}, {2, 300}, {1, 17}}, 71);
    const paged_problem p = shift_blocks(small, 140000 - small.num_blocks);
    REQUIRE(p.pool_shape().num_elements() > (std::int64_t{1} << 32));
    REQUIRE(*std::min_element(p.block_tables.begin(), p.block_tables.end()) > 131072);
    const std::vector<float> ref = reference_output(p);
    for (const AttentionPath path : kBothPaths)
      for (const int splits : {1, 2})
        check_output(p, run_backend(*backend, p, splits, path), ref, splits, path);
  }
}

TEST_CASE("the raw cuda launchers work on a (num_blocks, 2, bs, Hkv, D) pool through the strides",
          "[kernels][gpu]") {
  for (const AttentionPath path : kBothPaths) {
    for (const int splits : {1, 3}) {
      const paged_problem p =
          make_problem({DType::kBF16, 8, 2, 128, 16}, {{1, 700}, {1, 15}, {5, 200}, {1, 0}}, 81);
      const kv_pool_shape shape = p.pool_shape();
      DeviceBuffer<std::byte> pool(static_cast<std::size_t>(shape.num_elements()) * 2);
      KVSIM_CUDA_CHECK(cudaMemset(pool.get(), 0xff, pool.size_bytes()));
      paged_kv_view kv = make_nb2_view(pool.get(), shape);
      device_write_kv(kv, p);
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
      const attention_work_plan plan =
          plan_attention_work(p.seq_lens.data(), p.q_indptr.data(), p.num_seqs(),
                              shape.num_kv_heads, shape.block_size, 1000, splits);
      DeviceWorkPlan work;
      work.upload(plan, p.shape.num_q_heads, shape.head_size);
      if (splits > 1) {  // NaN partials: the merge may read only what the kernel wrote
        const std::size_t items = static_cast<std::size_t>(plan.num_items());
        KVSIM_CUDA_CHECK(cudaMemset(work.workspace().o_part, 0xff,
                                    items * p.shape.num_q_heads * shape.head_size * sizeof(float)));
        KVSIM_CUDA_CHECK(cudaMemset(work.workspace().lse_part, 0xff,
                                    items * p.shape.num_q_heads * sizeof(float)));
      }
      KVSIM_CUDA_CHECK(PagedAttentionPrefill(kv, d_q.get(), d_out.get(), p.shape.num_q_heads,
                                             p.scale, work.view(), work.workspace(), nullptr,
                                             path));
      KVSIM_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<std::byte> out(q.size());
      d_out.download(out.data(), out.size());
      check_output(p, out, reference_output(p), splits, path);
    }
  }
}

TEST_CASE("cuda launchers reject unsupported shapes and the occupancy query works for both paths",
          "[kernels][gpu]") {
  for (const AttentionPath path :
       {AttentionPath::kAuto, AttentionPath::kCudaCore, AttentionPath::kTensorCore}) {
    std::int64_t max_ctas = 0;
    REQUIRE(PagedAttentionMaxResidentCtas(DType::kF16, 128, 16, 4, &max_ctas, path) == cudaSuccess);
    CHECK(max_ctas >= 132);
  }
  DeviceBuffer<std::byte> pool(1 << 16), qo(1 << 14);
  kv_pool_shape shape{DType::kF16, 4, 16, 1, 96};
  paged_kv_view kv = make_vllm_v1_view(pool.get(), shape);
  attention_work_view work;
  work.num_items = 1;
  work.num_rows = 1;
  work.max_items_per_row = 1;
  kv.num_seqs = 1;
  for (const AttentionPath path : kBothPaths)
    CHECK(PagedAttentionDecode(kv, qo.get(), qo.get(), 1, 1.0f, work, {}, nullptr, path) ==
          cudaErrorInvalidValue);  // head size 96
  kv.head_size = 64;  // a supported head size, so only the dtype can refuse the next launch
  kv.dtype = DType::kF32;
  CHECK(PagedAttentionDecode(kv, qo.get(), qo.get(), 1, 1.0f, work, {}, nullptr) ==
        cudaErrorInvalidValue);  // fp32: CPU only
  kv.dtype = DType::kF16;
  // G = 32 does not fit the 16 MMA rows: refused when forced (auto takes the cuda-core kernel).
  CHECK(PagedAttentionDecode(kv, qo.get(), qo.get(), 32, 1.0f, work, {}, nullptr,
                             AttentionPath::kTensorCore) == cudaErrorInvalidValue);
}

}  // namespace kvsim::kernels::testing
