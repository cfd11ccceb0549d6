#include "validate/pool_sync.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/common/assert.h"
#include "sim/common/errors.h"

namespace kvsim::validate::detail {
namespace {
constexpr std::int64_t kFlushRows = 1024;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
}  // namespace

PoolSync::PoolSync(const StepBatch& batch, kernels::AttentionBackend& backend,
                   const KvContentModel& content, std::int64_t block_bytes,
                   std::int64_t bookkeeping_bytes, std::int64_t limit_bytes, bool keep_all,
                   bool moves)
    : batch_(batch),
      backend_(backend),
      content_(content),
      block_size_(batch.block_size),
      block_bytes_(block_bytes),
      bookkeeping_bytes_(bookkeeping_bytes),
      limit_bytes_(limit_bytes),
      keep_all_(keep_all),
      moves_(moves),
      state_(static_cast<std::size_t>(batch.num_slots() / batch.block_size), 0),
      pool_keys_(moves ? batch.shadow.size() : 0, 0),
      moved_(pool_keys_.size(), 0),
      seen_(state_.size(), 0),
      kgen_(static_cast<std::size_t>(content.kv_elems())),
      vgen_(kgen_.size()) {
  usage_.peak_bytes = bookkeeping_bytes_ + backend_.pool_resident_bytes();
}

template <typename Drop>
void PoolSync::release_held(Drop drop) {
  flush();
  std::size_t kept = 0;
  for (const std::int32_t b : held_) {
    std::uint8_t& state = state_[static_cast<std::size_t>(b)];
    if (!drop(b, state)) {
      held_[kept++] = b;
      continue;
    }
    backend_.release_block(b);
    // The pool reads NaN there now: stale if the shadow holds any key in it.
    state = kStale;
    if (moves_) {
      std::fill_n(pool_keys_.begin() + b * block_size_, block_size_, 0);
      std::fill_n(moved_.begin() + b * block_size_, block_size_, 0);
    }
    ++usage_.blocks_released;
  }
  held_.resize(kept);
}

void PoolSync::reserve(std::int64_t step) {
  if (++epoch_ == 0) {  // wrapped: forget every stamp
    std::fill(seen_.begin(), seen_.end(), 0);
    epoch_ = 2;
  }
  std::int64_t distinct = 0, not_held = 0;
  read_.clear();
  for (std::size_t i = 0; i < batch_.num_seqs; ++i)
    for (const std::int32_t b : batch_.seqs[i].table) {
      const auto bi = static_cast<std::size_t>(b);
      if (seen_[bi] == epoch_) continue;
      seen_[bi] = epoch_;
      ++distinct;
      not_held += (state_[bi] & kHeld) ? 0 : 1;
      if (moves_) read_.push_back(b);
    }
  // The CUDA pool is dense, checked up front.
  if (keep_all_ || backend_.kind() != kernels::BackendKind::kCpu) return;
  // Not read now: let go when stale, or when the previous checked step did not read it either.
  release_held([&](std::int32_t b, std::uint8_t state) {
    const std::uint32_t seen = seen_[static_cast<std::size_t>(b)];
    return seen != epoch_ && ((state & kStale) || seen + 1 < epoch_);
  });
  const std::int64_t held = backend_.pool_resident_bytes();
  if (bookkeeping_bytes_ + held + not_held * block_bytes_ > limit_bytes_ && held > 0) {
    release_held(
        [&](std::int32_t b, std::uint8_t) { return seen_[static_cast<std::size_t>(b)] != epoch_; });
    ++usage_.clears;
  }
  // What else is held now: the swap pool's blocks (vLLM V0), never let go while swapped out.
  const std::int64_t others =
      backend_.pool_resident_bytes() - static_cast<std::int64_t>(held_.size()) * block_bytes_;
  if (bookkeeping_bytes_ + others + distinct * block_bytes_ > limit_bytes_)
    throw ConfigError(fmt::format(
        "step {} reads {} blocks of the validation KV pool ({:.2f} GiB, one layer), which with "
        "{:.2f} GiB of bookkeeping is over the {:.2f} GiB limit; validate a smaller model or fewer "
        "concurrent requests (scheduler.max_num_seqs)",
        step, distinct, static_cast<double>(distinct * block_bytes_) / kGiB,
        static_cast<double>(bookkeeping_bytes_ + others) / kGiB,
        static_cast<double>(limit_bytes_) / kGiB));
}

void PoolSync::prepare_move_source(std::int64_t b) { refresh_block(b); }

void PoolSync::moved_into(std::int64_t b) {
  KVSIM_ASSERT(moves_, "a block move without move tracking");
  std::uint8_t& state = state_[static_cast<std::size_t>(b)];
  if (!(state & kHeld)) held_.push_back(static_cast<std::int32_t>(b));
  state = kHeld;
  const auto first = static_cast<std::ptrdiff_t>(b * block_size_);
  std::copy_n(batch_.shadow.begin() + first, block_size_, pool_keys_.begin() + first);
  std::fill_n(moved_.begin() + first, block_size_, 1);
  usage_.peak_bytes =
      std::max(usage_.peak_bytes, bookkeeping_bytes_ + backend_.pool_resident_bytes());
}

void PoolSync::count_moved_reads() {
  for (const std::int32_t b : read_)
    for (std::int64_t slot = b * block_size_; slot < (b + 1) * block_size_; ++slot) {
      const auto si = static_cast<std::size_t>(slot);
      usage_.moved_slots_read += moved_[si] != 0 && pool_keys_[si] != 0;
    }
}

void PoolSync::trim_to_limit() {
  if (keep_all_ || backend_.kind() != kernels::BackendKind::kCpu ||
      bookkeeping_bytes_ + backend_.pool_resident_bytes() <= limit_bytes_)
    return;
  release_held([](std::int32_t, std::uint8_t) { return true; });
  ++usage_.clears;
}

void PoolSync::push_row(std::int64_t slot, const float* k, const float* v) {
  const std::int64_t elems = content_.kv_elems();
  const auto row = static_cast<std::int64_t>(slots_.size());
  const std::size_t row_bytes =
      static_cast<std::size_t>(elems) * kernels::dtype_size_bytes(content_.dtype());
  kbuf_.resize(kbuf_.size() + row_bytes);
  vbuf_.resize(vbuf_.size() + row_bytes);
  std::byte* kdst = kbuf_.data() + static_cast<std::size_t>(row) * row_bytes;
  std::byte* vdst = vbuf_.data() + static_cast<std::size_t>(row) * row_bytes;
  switch (content_.dtype()) {  // the values are exact in the dtype: the stores only narrow
    case kernels::DType::kF32:
      std::memcpy(kdst, k, row_bytes);
      std::memcpy(vdst, v, row_bytes);
      break;
    case kernels::DType::kBF16:
      for (std::int64_t e = 0; e < elems; ++e) {
        reinterpret_cast<kernels::bf16_bits*>(kdst)[e] = kernels::float_to_bf16(k[e]);
        reinterpret_cast<kernels::bf16_bits*>(vdst)[e] = kernels::float_to_bf16(v[e]);
      }
      break;
    case kernels::DType::kF16:
      for (std::int64_t e = 0; e < elems; ++e) {
        reinterpret_cast<kernels::half_bits*>(kdst)[e] = kernels::float_to_half(k[e]);
        reinterpret_cast<kernels::half_bits*>(vdst)[e] = kernels::float_to_half(v[e]);
      }
      break;
  }
  slots_.push_back(slot);
  ++usage_.rows_written;
  if (static_cast<std::int64_t>(slots_.size()) >= kFlushRows) flush();
}

void PoolSync::flush() {
  if (slots_.empty()) return;
  const auto n = static_cast<std::int64_t>(slots_.size());
  backend_.write_kv(kbuf_.data(), vbuf_.data(), slots_.data(), n);
  kbuf_.clear();
  vbuf_.clear();
  slots_.clear();
  usage_.peak_bytes =
      std::max(usage_.peak_bytes, bookkeeping_bytes_ + backend_.pool_resident_bytes());
}

void PoolSync::refresh_block(std::int64_t b) {
  std::uint8_t& state = state_[static_cast<std::size_t>(b)];
  if (!(state & kStale)) return;
  state = static_cast<std::uint8_t>(state & ~kStale);
  ++usage_.blocks_refreshed;
  for (std::int64_t o = 0; o < block_size_; ++o) {
    const std::int64_t slot = b * block_size_ + o;
    const std::uint64_t key = batch_.shadow[static_cast<std::size_t>(slot)];
    if (key == 0) continue;  // never written: the pool's NaN stays
    if (moves_) {            // only the slots written since the pool's copy was made
      const auto si = static_cast<std::size_t>(slot);
      if (pool_keys_[si] == key) continue;
      pool_keys_[si] = key;
      moved_[si] = 0;
    }
    content_.values(key, KvPart::kKey, kgen_.data());
    content_.values(key, KvPart::kValue, vgen_.data());
    push_row(slot, kgen_.data(), vgen_.data());
    if (!(state & kHeld)) held_.push_back(static_cast<std::int32_t>(b));
    state |= kHeld;
  }
}

void PoolSync::refresh(const SeqWork& s) {
  for (const std::int32_t b : s.table) refresh_block(b);
}

void PoolSync::refresh_blocks(std::span<const std::int64_t> blocks) {
  for (const std::int64_t b : blocks) refresh_block(b);
}

}  // namespace kvsim::validate::detail
