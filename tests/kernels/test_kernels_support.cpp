// dtype conversions, metrics, the split-KV work plan and the backend factory.

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernel_test_data.h"
#include "kernels/backend.h"
#include "kernels/metrics.h"
#include "kernels/work_plan.h"

namespace kvsim::kernels::testing {

TEST_CASE("fp16 conversion matches the compiler's _Float16 on every half and on random floats", "[kernels]") {
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    const half_bits h{static_cast<std::uint16_t>(b)};
    const float f = half_to_float(h);
    const float expect = static_cast<float>(std::bit_cast<_Float16>(static_cast<std::uint16_t>(b)));
    if (std::isnan(expect)) {
      REQUIRE(std::isnan(f));
      continue;
    }
    REQUIRE(std::bit_cast<std::uint32_t>(f) == std::bit_cast<std::uint32_t>(expect));
    REQUIRE(float_to_half(f).bits == h.bits);  // round trip
  }
  Rng rng(5);
  for (int i = 0; i < 200000; ++i) {
    // Random bit patterns over the whole float range, plus values near half's range.
    const float f = i % 2 ? std::bit_cast<float>(static_cast<std::uint32_t>(rng.uniform() * 4294967295.0))
                          : static_cast<float>(std::ldexp(rng.normal(), rng.uniform_int(-26, 17)));
    if (std::isnan(f)) continue;
    const auto expect = std::bit_cast<std::uint16_t>(static_cast<_Float16>(f));
    INFO("f=" << f);
    REQUIRE(float_to_half(f).bits == expect);
  }
}

TEST_CASE("bf16 conversion rounds to nearest even and keeps NaN", "[kernels]") {
  CHECK(float_to_bf16(1.0f).bits == 0x3f80);
  CHECK(float_to_bf16(std::bit_cast<float>(0x3f808000u)).bits == 0x3f80);  // tie -> even
  CHECK(float_to_bf16(std::bit_cast<float>(0x3f818000u)).bits == 0x3f82);  // tie -> even (up)
  CHECK(float_to_bf16(std::bit_cast<float>(0x3f808001u)).bits == 0x3f81);
  CHECK(float_to_bf16(-2.0f).bits == 0xc000);
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::max()))));
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    const float f = bf16_to_float({static_cast<std::uint16_t>(b)});
    if (!std::isnan(f)) REQUIRE(float_to_bf16(f).bits == b);
  }
}

TEST_CASE("metrics compute max abs, relative Frobenius error and NMSE", "[kernels]") {
  const std::vector<float> ref{3.0f, 4.0f};
  const std::vector<float> out{3.0f, 4.5f};
  const error_stats st = compare_outputs(out.data(), ref.data(), 2, {1e-3, 1e-3, 1e-3});
  CHECK(st.max_abs == Approx(0.5));
  CHECK(st.mean_abs == Approx(0.25));
  CHECK(st.rel_fro == Approx(0.1));
  CHECK(st.nmse == Approx(0.01));
  CHECK(st.num_violations == 1);
  CHECK(st.worst_index == 1);
  CHECK_FALSE(passes(st, {1e-3, 1e-3, 1e-3}));
  const tolerance loose{0.6, 0.0, 0.2};  // violations are counted against the tolerance given
  CHECK(passes(compare_outputs(out.data(), ref.data(), 2, loose), loose));
  CHECK(default_tolerance(DType::kBF16).atol == Approx(1.5e-2));
  CHECK(default_tolerance(DType::kF16).rtol == Approx(1e-3));
}

TEST_CASE("the baseline rule accepts errors near the baseline and rejects worse ones", "[kernels]") {
  error_stats baseline;
  baseline.max_abs = 1e-3;
  baseline.mean_abs = 1e-4;
  error_stats kernel = baseline;
  CHECK(passes_against_baseline(kernel, baseline));
  kernel.max_abs = 2.5e-3;
  CHECK_FALSE(passes_against_baseline(kernel, baseline));
  kernel.max_abs = 1e-3;
  kernel.mean_abs = 2e-4;
  CHECK_FALSE(passes_against_baseline(kernel, baseline));
  kernel.mean_abs = 1e-4;
  kernel.num_nonfinite = 1;
  CHECK_FALSE(passes_against_baseline(kernel, baseline));
}

TEST_CASE("the work plan covers every visible key exactly once", "[kernels]") {
  const std::vector<std::int32_t> lens{1328, 18, 463, 0, 1};
  const std::vector<std::int32_t> indptr{0, 1, 6, 135, 136, 137};
  for (const std::int32_t forced : {0, 1, 2, 3, 7}) {
    for (const std::int64_t max_ctas : {16, 1000, 100000}) {
      const attention_work_plan plan =
          plan_attention_work(lens.data(), indptr.data(), 5, 2, 16, max_ctas, forced);
      REQUIRE(plan.num_rows() == 137);
      for (int r = 0; r < plan.num_rows(); ++r) {
        const int begin = plan.row_item_indptr[r];
        const int end = plan.row_item_indptr[r + 1];
        REQUIRE(end > begin);
        std::int32_t expect_begin = 0;
        for (int i = begin; i < end; ++i) {
          REQUIRE(plan.item_row[i] == r);
          REQUIRE(plan.item_kv_begin[i] == expect_begin);
          REQUIRE(plan.item_kv_end[i] >= plan.item_kv_begin[i]);
          expect_begin = plan.item_kv_end[i];
        }
        // Visible keys of row r.
        int s = 0;
        while (indptr[s + 1] <= r) ++s;
        const int q_len = indptr[s + 1] - indptr[s];
        REQUIRE(plan.item_seq[begin] == s);
        REQUIRE(expect_begin == std::max(0, lens[s] - q_len + (r - indptr[s]) + 1));
      }
    }
  }
}

TEST_CASE("the split policy splits only below one wave and respects the forced count", "[kernels]") {
  // Worked example: B=64, Hkv=8 -> 512 CTAs >= a wave of 264: no split.
  const std::vector<std::int32_t> lens64(64, 4096);
  const auto full = plan_attention_work(lens64.data(), nullptr, 64, 8, 16, 264, 0);
  CHECK(full.max_items_per_row == 1);
  CHECK(full.num_items() == 64);
  // B=1, ctx 131072, Hkv=8: split into chunks (multiple of bs, >= 128) fitting the wave.
  const std::vector<std::int32_t> lens1{131072};
  const auto split = plan_attention_work(lens1.data(), nullptr, 1, 8, 16, 264, 0);
  CHECK(split.max_items_per_row > 1);
  CHECK(split.chunk_tokens % 16 == 0);
  CHECK(split.chunk_tokens >= kMinSplitChunkTokens);
  CHECK(split.num_items() * 8 <= 264);
  const auto again = plan_attention_work(lens1.data(), nullptr, 1, 8, 16, 264, 0);
  CHECK(again.chunk_tokens == split.chunk_tokens);  // deterministic
  // Half the wave: fewer, larger chunks that still fit it.
  const auto smaller = plan_attention_work(lens1.data(), nullptr, 1, 8, 16, 132, 0);
  CHECK(smaller.chunk_tokens > split.chunk_tokens);
  CHECK(smaller.num_items() * 8 <= 132);
  // Short sequences never split automatically.
  const std::vector<std::int32_t> short_lens{100, 128};
  CHECK(plan_attention_work(short_lens.data(), nullptr, 2, 1, 16, 264, 0).max_items_per_row == 1);
  // Forced: the longest row gets exactly that many items.
  const std::vector<std::int32_t> lens3{1000, 10};
  for (const int n : {1, 2, 3}) {
    const auto forced = plan_attention_work(lens3.data(), nullptr, 2, 1, 16, 264, n);
    CHECK(forced.row_item_indptr[1] - forced.row_item_indptr[0] == n);
    CHECK(forced.max_items_per_row == n);
  }
}

TEST_CASE("the automatic attention path takes tensor cores exactly for 4 <= G <= 16", "[kernels]") {
  for (int g = 1; g <= 64; ++g) {
    const AttentionPath expect =
        g >= 4 && g <= 16 ? AttentionPath::kTensorCore : AttentionPath::kCudaCore;
    INFO("G=" << g);
    CHECK(resolve_attention_path(AttentionPath::kAuto, g) == expect);
    CHECK(resolve_attention_path(AttentionPath::kCudaCore, g) == AttentionPath::kCudaCore);
    CHECK(resolve_attention_path(AttentionPath::kTensorCore, g) == AttentionPath::kTensorCore);
  }
  for (const AttentionPath p :
       {AttentionPath::kAuto, AttentionPath::kCudaCore, AttentionPath::kTensorCore})
    CHECK(parse_attention_path(attention_path_name(p)) == p);
  CHECK(std::string(attention_path_name(AttentionPath::kTensorCore)) == "tensor_core");
  CHECK_THROWS_AS(parse_attention_path("tensor-core"), std::invalid_argument);
}

TEST_CASE("the backend factory parses names and refuses cuda without a device", "[kernels]") {
  CHECK(parse_backend_kind("cpu") == BackendKind::kCpu);
  CHECK(parse_backend_kind("cuda") == BackendKind::kCuda);
  CHECK_THROWS_AS(parse_backend_kind("gpu"), std::invalid_argument);
  CHECK(make_attention_backend(BackendKind::kCpu)->kind() == BackendKind::kCpu);
  if (!cuda_device_available()) {
    CHECK_THROWS_AS(make_attention_backend(BackendKind::kCuda), std::runtime_error);
  }
}

TEST_CASE("the cpu backend starts from a NaN pool and round-trips writes", "[kernels]") {
  auto backend = make_attention_backend(BackendKind::kCpu);
  const kv_pool_shape shape{DType::kBF16, 4, 8, 2, 64};
  backend->init_pool(shape);
  std::vector<std::byte> pool(static_cast<std::size_t>(shape.num_elements()) * 2);
  backend->read_pool(pool.data());
  const auto before = decode_floats(pool.data(), shape.dtype, shape.num_elements());
  for (const float x : before) REQUIRE(std::isnan(x));
  std::vector<float> key(2 * 64, 1.5f);
  std::vector<float> value(2 * 64, -2.0f);
  const std::int64_t slot = 3 * 8 + 5;
  backend->write_kv(encode(key, shape.dtype).data(), encode(value, shape.dtype).data(), &slot, 1);
  backend->read_pool(pool.data());
  const auto after = decode_floats(pool.data(), shape.dtype, shape.num_elements());
  const paged_kv_view view = make_vllm_v1_view(nullptr, shape);
  for (int h = 0; h < 2; ++h) {
    CHECK(after[static_cast<std::size_t>(view.slot_offset(0, slot, h))] == 1.5f);
    CHECK(after[static_cast<std::size_t>(view.slot_offset(1, slot, h) + 63)] == -2.0f);
  }
  std::int64_t written = 0;
  for (const float x : after) written += std::isnan(x) ? 0 : 1;
  CHECK(written == 2 * 2 * 64);
}

}  // namespace kvsim::kernels::testing

namespace kvsim::kernels::testing {

TEST_CASE("the cpu backend holds only written blocks, reads others as NaN, releases and clears", "[kernels]") {
  auto backend = make_attention_backend(BackendKind::kCpu);
  const kv_pool_shape shape{DType::kBF16, 1000, 8, 2, 64};
  const std::int64_t block_bytes = 2 * 8 * 2 * 64 * 2;
  backend->init_pool(shape);
  CHECK(backend->pool_resident_bytes() == 0);
  // Two tokens in block 7, one in block 900: two blocks held, whatever the pool's size.
  std::vector<float> kv(3 * 2 * 64, 0.25f);
  const auto enc = encode(kv, shape.dtype);
  const std::int64_t slots[] = {7 * 8 + 0, 7 * 8 + 1, 900 * 8 + 5};
  backend->write_kv(enc.data(), enc.data(), slots, 3);
  CHECK(backend->pool_resident_bytes() == 2 * block_bytes);
  backend->write_kv(enc.data(), enc.data(), slots, 2);  // the same block again: nothing new
  CHECK(backend->pool_resident_bytes() == 2 * block_bytes);
  const std::int64_t past_end = 1000 * 8;
  CHECK_THROWS_AS(backend->write_kv(enc.data(), enc.data(), &past_end, 1), std::invalid_argument);

  // Attention over [block 7] sees the 2 written tokens; over [block 7, block 8] its third token
  // (slot 8 * 8, never written) is NaN and poisons the output.
  const auto run = [&](std::vector<std::int32_t> table, std::int32_t len) {
    const std::int32_t lens[] = {len};
    const attention_batch batch{table.data(), static_cast<std::int32_t>(table.size()), lens, 1,
                                nullptr, 4, 0.125f};
    const auto q = encode(std::vector<float>(4 * 64, 1.0f), shape.dtype);
    std::vector<std::byte> out(q.size());
    backend->attention(batch, q.data(), out.data());
    return decode_floats(out.data(), shape.dtype, 4 * 64);
  };
  for (const float x : run({7}, 2)) CHECK(x == 0.25f);
  for (const float x : run({7, 8}, 9)) CHECK(std::isnan(x));
  CHECK(backend->pool_resident_bytes() == 2 * block_bytes);  // reading holds nothing

  std::vector<std::byte> pool(static_cast<std::size_t>(shape.num_elements()) * 2);
  backend->read_pool(pool.data());
  const auto dense = decode_floats(pool.data(), shape.dtype, shape.num_elements());
  std::int64_t written = 0;
  for (const float x : dense) written += std::isnan(x) ? 0 : 1;
  CHECK(written == 3 * 2 * 2 * 64);  // 3 tokens x K and V x 2 heads x 64

  // Releasing block 900 frees it alone: block 7 still reads its tokens, 900 reads NaN again.
  backend->release_block(900);
  CHECK(backend->pool_resident_bytes() == block_bytes);
  backend->release_block(900);  // not held: nothing
  CHECK(backend->pool_resident_bytes() == block_bytes);
  for (const float x : run({7}, 2)) CHECK(x == 0.25f);
  for (const float x : run({900}, 6)) CHECK(std::isnan(x));
  CHECK_THROWS_AS(backend->release_block(1000), std::invalid_argument);
  CHECK_THROWS_AS(backend->release_block(-1), std::invalid_argument);
  const std::int64_t first_of_900 = 900 * 8;
  backend->write_kv(enc.data(), enc.data(), &first_of_900, 1);  // written again: held again
  CHECK(backend->pool_resident_bytes() == 2 * block_bytes);
  for (const float x : run({900}, 1)) CHECK(x == 0.25f);
  for (const float x : run({900}, 6)) CHECK(std::isnan(x));  // slot 5's old token is gone

  backend->clear_pool();
  CHECK(backend->pool_resident_bytes() == 0);
  for (const float x : run({7}, 2)) CHECK(std::isnan(x));
  backend->load_pool(pool.data());  // every block held, the 3 tokens back
  CHECK(backend->pool_resident_bytes() == 1000 * block_bytes);
  for (const float x : run({7}, 2)) CHECK(x == 0.25f);
}

}  // namespace kvsim::kernels::testing
