// vLLM V0's block moves on the CPU backend (swap_blocks, copy_blocks, the swap pool) against a
// naive element-by-element model, over random sequences of moves and writes; and the mapping
// checks.

#include <catch2/catch.hpp>
#include <stdexcept>

#include "block_moves_test_util.h"

namespace kvsim::kernels::testing {

TEST_CASE("cpu swap_blocks and copy_blocks move whole blocks as a naive model does", "[kernels]") {
  for (const DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      INFO("dtype " << dtype_name(dtype) << " seed " << seed);
      Rng rng(seed);
      kv_pool_shape shape;
      shape.dtype = dtype;
      shape.num_blocks = rng.uniform_int(4, 12);
      shape.block_size = rng.uniform_int(1, 3) * 4;
      shape.num_kv_heads = rng.uniform_int(1, 3);
      shape.head_size = 8 * rng.uniform_int(1, 2);
      const std::int64_t swap_blocks = rng.uniform_int(2, 8);
      const std::unique_ptr<AttentionBackend> backend = make_attention_backend(BackendKind::kCpu);
      backend->init_pool(shape);
      backend->init_swap_pool(swap_blocks);
      REQUIRE(backend->swap_pool_blocks() == swap_blocks);
      naive_pools model;
      model.shape = shape;
      model.swap_blocks = swap_blocks;
      model.gpu.resize(static_cast<std::size_t>(shape.num_elements()) * dtype_size_bytes(dtype));
      model.cpu.resize(static_cast<std::size_t>(2 * swap_blocks * model.run()) *
                       dtype_size_bytes(dtype));
      backend->read_pool(model.gpu.data());  // all NaN
      backend->read_swap_pool(model.cpu.data());
      model.nan_block_part.assign(
          model.cpu.begin(),
          model.cpu.begin() + static_cast<std::ptrdiff_t>(model.run() * dtype_size_bytes(dtype)));
      CHECK(backend->pool_resident_bytes() == 0);  // nothing held before the first write
      std::vector<std::byte> gpu(model.gpu.size()), cpu(model.cpu.size());
      int kinds_seen[5] = {};
      for (int i = 0; i < 300; ++i) {
        const move_op op = random_op(rng, shape, swap_blocks);
        INFO("op " << i << " kind " << static_cast<int>(op.kind));
        ++kinds_seen[static_cast<int>(op.kind)];
        apply(*backend, op);
        model.apply(op);
        backend->read_pool(gpu.data());
        backend->read_swap_pool(cpu.data());
        REQUIRE(gpu == model.gpu);
        REQUIRE(cpu == model.cpu);
      }
      for (const int n : kinds_seen) CHECK(n > 20);
      // Held bytes count both pools; a released swap block is freed.
      CHECK(backend->pool_resident_bytes() > 0);
      CHECK(backend->pool_resident_bytes() <=
            (shape.num_blocks + swap_blocks) * block_elements(shape) *
                static_cast<std::int64_t>(dtype_size_bytes(dtype)));
    }
  }
}

TEST_CASE("block mappings out of range or with dependent copy pairs are refused", "[kernels]") {
  kv_pool_shape shape;
  shape.dtype = DType::kBF16;
  shape.num_blocks = 8;
  shape.block_size = 4;
  shape.num_kv_heads = 1;
  shape.head_size = 8;
  const std::unique_ptr<AttentionBackend> backend = make_attention_backend(BackendKind::kCpu);
  backend->init_pool(shape);
  backend->init_swap_pool(3);
  const std::vector<std::int64_t> out_ok = {7, 2}, out_bad = {8, 0}, in_bad = {3, 0};
  CHECK_NOTHROW(backend->swap_blocks(SwapDirection::kOut, out_ok.data(), 1));
  CHECK_THROWS_AS(backend->swap_blocks(SwapDirection::kOut, out_bad.data(), 1),
                  std::invalid_argument);
  CHECK_THROWS_AS(backend->swap_blocks(SwapDirection::kIn, in_bad.data(), 1),
                  std::invalid_argument);
  CHECK_THROWS_AS(backend->release_swap_block(3), std::invalid_argument);
  const std::vector<std::int64_t> fan = {1, 2, 1, 3};    // one source, two destinations: fine
  const std::vector<std::int64_t> chain = {1, 2, 2, 3};  // 2 is a source and a destination
  const std::vector<std::int64_t> twice = {1, 2, 4, 2};  // 2 written twice
  const std::vector<std::int64_t> self = {5, 5};
  CHECK_NOTHROW(backend->copy_blocks(fan.data(), 2));
  CHECK_THROWS_AS(backend->copy_blocks(chain.data(), 2), std::invalid_argument);
  CHECK_THROWS_AS(backend->copy_blocks(twice.data(), 2), std::invalid_argument);
  CHECK_THROWS_AS(backend->copy_blocks(self.data(), 1), std::invalid_argument);
  // Swaps may name a destination twice (vLLM V0 lists a shared block once per sequence).
  const std::vector<std::int64_t> repeat = {0, 1, 0, 1};
  CHECK_NOTHROW(backend->swap_blocks(SwapDirection::kOut, repeat.data(), 2));
}

}  // namespace kvsim::kernels::testing
