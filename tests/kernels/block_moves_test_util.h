#pragma once
// vLLM V0's block moves against a naive model: random sequences of swap-outs, swap-ins,
// copy-on-write copies, swap-block releases and KV writes, applied to a backend and, element by
// element, to two dense byte arrays laid out as read_pool / read_swap_pool give them.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernel_test_data.h"
#include "kernels/backend.h"

namespace kvsim::kernels::testing {

/// One move (or write) of a random sequence.
struct move_op {
  enum class Kind { kSwapOut, kSwapIn, kCopy, kRelease, kWrite } kind = Kind::kWrite;
  std::vector<std::int64_t> mapping;  // [pairs, 2]; kRelease: the swap block; kWrite: slots
  std::vector<std::byte> key, value;  // kWrite: [slots, Hkv, D]
};

/// The pools as dense bytes `[2, blocks, block_size, Hkv, D]`, moved element by element.
struct naive_pools {
  kv_pool_shape shape;
  std::int64_t swap_blocks = 0;
  std::vector<std::byte> gpu, cpu, nan_block_part;  // nan: one K (or V) run of NaN

  std::size_t elt() const { return dtype_size_bytes(shape.dtype); }
  std::int64_t run() const {  // elements of one block's K (or V)
    return std::int64_t{shape.block_size} * shape.num_kv_heads * shape.head_size;
  }
  /// Byte offset of element e of part `part` of block b in a pool of `blocks` blocks.
  std::size_t at(std::int64_t blocks, int part, std::int64_t b, std::int64_t e) const {
    return static_cast<std::size_t>((part * blocks + b) * run() + e) * elt();
  }
  void copy_block(const std::vector<std::byte>& from, std::int64_t from_blocks, std::int64_t src,
                  std::vector<std::byte>& to, std::int64_t to_blocks, std::int64_t dst) const {
    for (int part = 0; part < 2; ++part)
      for (std::int64_t e = 0; e < run(); ++e)
        for (std::size_t k = 0; k < elt(); ++k)
          to[at(to_blocks, part, dst, e) + k] = from[at(from_blocks, part, src, e) + k];
  }
  void apply(const move_op& op) {
    const std::int64_t nb = shape.num_blocks;
    const auto pairs = static_cast<std::int64_t>(op.mapping.size() / 2);
    switch (op.kind) {
      case move_op::Kind::kSwapOut:
        for (std::int64_t i = 0; i < pairs; ++i)
          copy_block(gpu, nb, op.mapping[2 * i], cpu, swap_blocks, op.mapping[2 * i + 1]);
        break;
      case move_op::Kind::kSwapIn:
        for (std::int64_t i = 0; i < pairs; ++i)
          copy_block(cpu, swap_blocks, op.mapping[2 * i], gpu, nb, op.mapping[2 * i + 1]);
        break;
      case move_op::Kind::kCopy: {
        const std::vector<std::byte> before = gpu;  // the pairs are independent
        for (std::int64_t i = 0; i < pairs; ++i)
          copy_block(before, nb, op.mapping[2 * i], gpu, nb, op.mapping[2 * i + 1]);
        break;
      }
      case move_op::Kind::kRelease:
        for (int part = 0; part < 2; ++part)
          std::memcpy(cpu.data() + at(swap_blocks, part, op.mapping[0], 0), nan_block_part.data(),
                      nan_block_part.size());
        break;
      case move_op::Kind::kWrite: {
        const std::int64_t row = std::int64_t{shape.num_kv_heads} * shape.head_size;
        for (std::size_t t = 0; t < op.mapping.size(); ++t) {
          const std::int64_t b = op.mapping[t] / shape.block_size;
          const std::int64_t first = (op.mapping[t] % shape.block_size) * row;
          for (int part = 0; part < 2; ++part)
            std::memcpy(gpu.data() + at(nb, part, b, first),
                        (part == 0 ? op.key : op.value).data() + t * row * elt(),
                        static_cast<std::size_t>(row) * elt());
        }
        break;
      }
    }
  }
};

/// Applies `op` to `backend`.
inline void apply(AttentionBackend& backend, const move_op& op) {
  const auto pairs = static_cast<std::int64_t>(op.mapping.size() / 2);
  switch (op.kind) {
    case move_op::Kind::kSwapOut:
      backend.swap_blocks(SwapDirection::kOut, op.mapping.data(), pairs);
      break;
    case move_op::Kind::kSwapIn:
      backend.swap_blocks(SwapDirection::kIn, op.mapping.data(), pairs);
      break;
    case move_op::Kind::kCopy:
      backend.copy_blocks(op.mapping.data(), pairs);
      break;
    case move_op::Kind::kRelease:
      backend.release_swap_block(op.mapping[0]);
      break;
    case move_op::Kind::kWrite:
      backend.write_kv(op.key.data(), op.value.data(), op.mapping.data(),
                       static_cast<std::int64_t>(op.mapping.size()));
      break;
  }
}

/// A random op over a pool of `shape` and `swap_blocks` swap blocks: swaps of up to 4 pairs
/// (destinations may repeat: the later pair wins), copies of up to 4 independent pairs, releases,
/// writes of up to 6 distinct random slots with random finite values.
inline move_op random_op(Rng& rng, const kv_pool_shape& shape, std::int64_t swap_blocks) {
  move_op op;
  const int nb = shape.num_blocks;
  const int ns = static_cast<int>(swap_blocks);
  switch (rng.uniform_int(0, 4)) {
    case 0:
      op.kind = move_op::Kind::kSwapOut;
      for (int i = rng.uniform_int(1, 4); i > 0; --i)
        op.mapping.insert(op.mapping.end(),
                          {rng.uniform_int(0, nb - 1), rng.uniform_int(0, ns - 1)});
      break;
    case 1:
      op.kind = move_op::Kind::kSwapIn;
      for (int i = rng.uniform_int(1, 4); i > 0; --i)
        op.mapping.insert(op.mapping.end(),
                          {rng.uniform_int(0, ns - 1), rng.uniform_int(0, nb - 1)});
      break;
    case 2: {
      op.kind = move_op::Kind::kCopy;
      std::vector<std::int64_t> ids(static_cast<std::size_t>(nb));
      for (int b = 0; b < nb; ++b) ids[static_cast<std::size_t>(b)] = b;
      rng.shuffle(ids);
      const int pairs = rng.uniform_int(1, std::min(4, nb / 2));
      // Destinations ids[0, pairs), sources drawn from the rest (a source may serve two pairs).
      for (int i = 0; i < pairs; ++i)
        op.mapping.insert(op.mapping.end(),
                          {ids[static_cast<std::size_t>(rng.uniform_int(pairs, nb - 1))],
                           ids[static_cast<std::size_t>(i)]});
      break;
    }
    case 3:
      op.kind = move_op::Kind::kRelease;
      op.mapping = {rng.uniform_int(0, ns - 1)};
      break;
    default: {
      op.kind = move_op::Kind::kWrite;
      const int slots = rng.uniform_int(1, 6);
      const std::size_t row = static_cast<std::size_t>(shape.num_kv_heads) * shape.head_size *
                              dtype_size_bytes(shape.dtype);
      std::vector<std::int64_t> all(static_cast<std::size_t>(nb) * shape.block_size);
      for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::int64_t>(i);
      rng.shuffle(all);  // distinct slots: the CUDA write kernel stores tokens at once
      for (int i = 0; i < slots; ++i) {
        op.mapping.push_back(all[static_cast<std::size_t>(i)]);
        for (std::size_t k = 0; k < row; ++k) {
          // Random finite bits in either dtype: a sign/exponent byte below 0x7f never makes NaN.
          const bool high = k % 2 == 1;
          op.key.push_back(static_cast<std::byte>(rng.uniform_int(0, high ? 0x7e : 0xff)));
          op.value.push_back(static_cast<std::byte>(rng.uniform_int(0, high ? 0x7e : 0xff)));
        }
      }
      break;
    }
  }
  return op;
}

}  // namespace kvsim::kernels::testing
