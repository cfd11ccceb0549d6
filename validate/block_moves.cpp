// vLLM V0's block moves in the harness (ValidationHarness, harness.h "Block moves"): each step's
// blocks_to_swap_in, blocks_to_swap_out and blocks_to_copy are applied to the backend's pool and
// swap pool (and the timing mirror) and to the shadows, before the step's writes.

#include <algorithm>

#include "core/common/assert.h"
#include "validate/harness_impl.h"

namespace kvsim::validate {

namespace {

void flatten(const std::vector<std::pair<std::int32_t, std::int32_t>>& pairs,
             std::vector<std::int64_t>& out) {
  out.clear();
  for (const auto& [src, dst] : pairs) {
    out.push_back(src);
    out.push_back(dst);
  }
}

/// Copies block `src` of shadow `from` into block `dst` of shadow `to`.
void copy_shadow(const std::vector<std::uint64_t>& from, std::int64_t src,
                 std::vector<std::uint64_t>& to, std::int64_t dst, std::int64_t block_size) {
  std::copy_n(from.begin() + src * block_size, block_size, to.begin() + dst * block_size);
}

}  // namespace

void ValidationHarness::Impl::load_moves(const StepView& view) {
  const SchedulerOutput& so = *view.out;
  flatten(so.blocks_to_swap_in, swap_in);
  flatten(so.blocks_to_swap_out, swap_out);
  flatten(so.blocks_to_copy, copies);
}

bool ValidationHarness::Impl::apply_moves() {
  const std::int64_t bs = block_size;
  const auto pairs = [](const std::vector<std::int64_t>& m) {
    return static_cast<std::int64_t>(m.size() / 2);
  };
  if (swap_in.empty() && swap_out.empty() && copies.empty()) return false;
  KVSIM_ASSERT(!swap_shadow.empty() || (swap_in.empty() && swap_out.empty()),
               "a step swaps blocks but the engine has no swap space");
  ++moves.steps;
  // 1. Swap in: the swap pool is always up to date (only swap-outs write it). A swapped-in swap
  //    block is let go afterwards (the engine frees it; only a swap-out fills it again).
  if (!swap_in.empty()) {
    backend->swap_blocks(kernels::SwapDirection::kIn, swap_in.data(), pairs(swap_in));
    for (std::size_t i = 0; i < swap_in.size(); i += 2) {
      copy_shadow(swap_shadow, swap_in[i], shadow, swap_in[i + 1], bs);
      pool->moved_into(swap_in[i + 1]);
    }
    for (std::size_t i = 0; i < swap_in.size(); i += 2) {
      std::fill_n(swap_shadow.begin() + swap_in[i] * bs, bs, 0);
      backend->release_swap_block(swap_in[i]);
    }
    moves.swapped_in += pairs(swap_in);
  }
  // 2. Swap out: the pool blocks are brought up to date first.
  if (!swap_out.empty()) {
    for (std::size_t i = 0; i < swap_out.size(); i += 2) pool->prepare_move_source(swap_out[i]);
    pool->flush();
    backend->swap_blocks(kernels::SwapDirection::kOut, swap_out.data(), pairs(swap_out));
    for (std::size_t i = 0; i < swap_out.size(); i += 2)
      copy_shadow(shadow, swap_out[i], swap_shadow, swap_out[i + 1], bs);
    moves.swapped_out += pairs(swap_out);
  }
  // 3. Copy-on-write copies (independent pairs).
  if (!copies.empty()) {
    for (std::size_t i = 0; i < copies.size(); i += 2) pool->prepare_move_source(copies[i]);
    pool->flush();
    backend->copy_blocks(copies.data(), pairs(copies));
    for (std::size_t i = 0; i < copies.size(); i += 2) {
      copy_shadow(shadow, copies[i], shadow, copies[i + 1], bs);
      pool->moved_into(copies[i + 1]);
    }
    moves.copied += pairs(copies);
  }
  pool->trim_to_limit();
  return true;
}

}  // namespace kvsim::validate
