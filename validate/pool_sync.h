#pragma once
// Internal to validate/: the backend's pool follows the harness's shadow lazily.
//
// A K/V write of the run only records, in StepBatch::shadow, the content key of the token whose
// K/V the slot now holds, and marks the slot's block stale. Before a checked step reads the pool,
// each stale block among those it reads is rewritten from the shadow: every slot holding a key
// gets that key's K/V (kv_content.h) through the backend's write_kv (reshape_and_cache), and the
// timing mirror's. K/V being a function of the key alone, every slot the step can read then holds
// exactly what writing at every step would have left there (validate/README.md, "Lazy writes").

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/backend.h"
#include "validate/harness.h"
#include "validate/kv_content.h"
#include "validate/step_batch.h"

namespace kvsim::validate::detail {

class PoolSync {
 public:
  /// Bookkeeping bytes per block beside the shadow (state, epoch and a held-list entry here, two
  /// pointers in the CPU backend).
  static constexpr std::int64_t kBytesPerBlock = 1 + 4 + 4 + 16;
  /// Bookkeeping bytes per slot when block moves are tracked (the key the pool holds, a flag).
  static constexpr std::int64_t kBytesPerMovedSlot = 8 + 1;

  /// `batch` (its shadow), `backend` and `content` must outlive this.
  /// `limit_bytes` caps held pool bytes + `bookkeeping_bytes` (CPU backend; the CUDA pool is
  /// dense and checked up front). `keep_all`: never let go of a block (the write-every-step
  /// mode, whose pool must hold every write). `moves`: blocks are moved whole (vLLM V0); the key
  /// each slot of the pool holds is then tracked, so that a refresh rewrites only the slots
  /// written since and leaves the rest of a moved block as the move left it.
  PoolSync(const StepBatch& batch, kernels::AttentionBackend& backend,
           const KvContentModel& content, std::int64_t block_bytes, std::int64_t bookkeeping_bytes,
           std::int64_t limit_bytes, bool keep_all, bool moves);

  /// The shadow entry of `slot` changed: its block must be rewritten before its next read. O(1).
  void mark_stale(std::int64_t slot) {
    state_[static_cast<std::size_t>(slot / block_size_)] |= kStale;
  }

  // ---- block moves (vLLM V0): the backend moves whole blocks; the harness moves the shadow ----
  /// Brings block `b` up to date before the backend copies it (a move's source). Buffered as
  /// refresh(): flush() before the move. O(block) when stale, else O(1).
  void prepare_move_source(std::int64_t b);
  /// The backend has just overwritten block `b` with a whole moved block, and the shadow of `b`
  /// says what that block held: `b` is up to date and held; its slots are marked moved until they
  /// are rewritten. O(block).
  void moved_into(std::int64_t b);
  /// Counts, into usage().moved_slots_read, the written slots of the blocks the last reserve()
  /// saw that still hold what a move put there (call after the step's refresh). O(blocks x bs).
  void count_moved_reads();
  /// After a step's moves: when the pool held plus bookkeeping passes the limit, lets go of every
  /// held block (they are rewritten from the shadow when read; counted in clears). O(held).
  void trim_to_limit();

  /// Makes room for the blocks the batch's (possibly faulted) tables read. Held blocks this step
  /// does not read are let go when stale (they are rewritten in full when read again, so holding
  /// them saves nothing) or not read by the previous checked step either; and all of them when
  /// holding the step's blocks beside them would pass the limit. So the pool holds about the
  /// blocks of the last two checked steps. Throws ConfigError naming `step` when the step's blocks
  /// alone pass the limit. O(blocks read + blocks held).
  void reserve(std::int64_t step);

  /// Rewrites the stale blocks of `s`'s table, each written slot's K/V generated from the key the
  /// shadow says it holds. Rows are buffered: flush() before reading.
  void refresh(const SeqWork& s);
  /// Rewrites the stale ones among `blocks` (the write-every-step mode). Buffered as refresh().
  void refresh_blocks(std::span<const std::int64_t> blocks);
  /// Hands the buffered rows to the backend.
  void flush();

  const PoolUsage& usage() const { return usage_; }

 private:
  static constexpr std::uint8_t kStale = 1;  // the pool's copy may differ from the shadow
  static constexpr std::uint8_t kHeld = 2;   // the backend holds storage for the block

  /// Rewrites block `b` if stale.
  void refresh_block(std::int64_t b);
  void push_row(std::int64_t slot, const float* k, const float* v);
  /// Lets go of the held blocks `drop` says to (after sending the buffered rows).
  template <typename Drop>
  void release_held(Drop drop);

  const StepBatch& batch_;
  kernels::AttentionBackend& backend_;
  const KvContentModel& content_;
  std::int64_t block_size_, block_bytes_, bookkeeping_bytes_, limit_bytes_;
  bool keep_all_;
  bool moves_;
  std::vector<std::uint8_t> state_;  // [num_blocks] kStale | kHeld
  // With moves: [num_slots] the key the pool's slot holds (0: NaN), and whether a move put it.
  std::vector<std::uint64_t> pool_keys_;
  std::vector<std::uint8_t> moved_;
  std::vector<std::int32_t> read_;   // the distinct blocks the last reserve() saw
  std::vector<std::uint32_t> seen_;  // [num_blocks] epoch of the last reserve() that counted it
  std::uint32_t epoch_ = 0;          // reserve() calls so far (checked steps)
  std::vector<std::int32_t> held_;   // the blocks with kHeld, in no order
  PoolUsage usage_;
  // Buffered rows (pool dtype) and their slots; scratch for generated K/V.
  std::vector<std::byte> kbuf_, vbuf_;
  std::vector<std::int64_t> slots_;
  std::vector<float> kgen_, vgen_;
};

}  // namespace kvsim::validate::detail
