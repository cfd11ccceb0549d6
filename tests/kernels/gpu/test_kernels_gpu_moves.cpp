// vLLM V0's block moves on the CUDA backend (SwapBlocks between the device pool and the pinned
// host swap pool, the CopyBlocks kernel) against the CPU backend, byte for byte, over random
// sequences of moves and writes. Needs a GPU; main() skips with 77 without one.

#include <catch2/catch.hpp>
#include <memory>

#include "../block_moves_test_util.h"

namespace kvsim::kernels::testing {

TEST_CASE("cuda swap_blocks and copy_blocks leave the pools as the cpu backend does",
          "[kernels][gpu]") {
  struct Case {
    DType dtype;
    std::int32_t block_size, num_kv_heads, head_size;
  };
  // 16-byte words (the first three) and 2-byte words (a block's K run of 8 bytes).
  for (const Case c : {Case{DType::kBF16, 16, 2, 64}, Case{DType::kF16, 8, 1, 128},
                       Case{DType::kBF16, 32, 3, 64}, Case{DType::kF16, 1, 1, 4}}) {
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      INFO(dtype_name(c.dtype) << " bs " << c.block_size << " Hkv " << c.num_kv_heads << " D "
                               << c.head_size << " seed " << seed);
      Rng rng(seed);
      kv_pool_shape shape;
      shape.dtype = c.dtype;
      shape.num_blocks = rng.uniform_int(6, 20);
      shape.block_size = c.block_size;
      shape.num_kv_heads = c.num_kv_heads;
      shape.head_size = c.head_size;
      const std::int64_t swap_blocks = rng.uniform_int(3, 10);
      std::unique_ptr<AttentionBackend> cpu = make_attention_backend(BackendKind::kCpu);
      std::unique_ptr<AttentionBackend> gpu = make_attention_backend(BackendKind::kCuda);
      for (AttentionBackend* b : {cpu.get(), gpu.get()}) {
        b->init_pool(shape);
        b->init_swap_pool(swap_blocks);
      }
      const std::size_t pool_bytes =
          static_cast<std::size_t>(shape.num_elements()) * dtype_size_bytes(c.dtype);
      const std::size_t swap_bytes = static_cast<std::size_t>(swap_blocks) *
                                     static_cast<std::size_t>(block_elements(shape)) *
                                     dtype_size_bytes(c.dtype);
      std::vector<std::byte> a(pool_bytes), b(pool_bytes), sa(swap_bytes), sb(swap_bytes);
      for (int i = 0; i < 200; ++i) {
        const move_op op = random_op(rng, shape, swap_blocks);
        INFO("op " << i << " kind " << static_cast<int>(op.kind));
        apply(*cpu, op);
        apply(*gpu, op);
        cpu->read_pool(a.data());
        gpu->read_pool(b.data());
        cpu->read_swap_pool(sa.data());
        gpu->read_swap_pool(sb.data());
        REQUIRE(a == b);
        REQUIRE(sa == sb);
      }
    }
  }
}

}  // namespace kvsim::kernels::testing
