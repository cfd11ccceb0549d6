#pragma once
// BlockManager: vLLM V0's SelfAttnBlockSpaceManager (vllm/core/block_manager.py) with its
// ComputedBlocksTracker and LastAccessBlocksTracker (prefix_caching_block.py): block tables per
// sequence id over a CpuGpuBlockAllocator, the watermark, allocation and append checks, fork,
// swap in/out with physical-id mappings, free, and the prefix-cache queries.
//
// vLLM keys every per-sequence structure by seq_id, and their entries outlive the Sequence
// objects in places (a table leaked by an infeasible swap-in, the cached-token count of a
// sequence that was evaluated but never allocated). kvsim keeps them in one record per seq_id,
// reached through a dense slot that the owner of the Sequence gets from acquire_slot(); a slot
// returns to the pool once neither a Sequence nor any of those structures refers to it.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/v0/block_table.h"
#include "core/v0/cpu_gpu_block_allocator.h"
#include "core/v0/sequence.h"

namespace kvsim::v0 {

class BlockManager {
 public:
  /// `watermark` is a fraction of the GPU blocks (watermark_blocks = int(watermark * G)).
  BlockManager(std::int32_t block_size, std::int32_t num_gpu_blocks, std::int32_t num_cpu_blocks,
               double watermark, bool enable_caching);
  ~BlockManager();
  BlockManager(const BlockManager&) = delete;
  BlockManager& operator=(const BlockManager&) = delete;

  /// The slot of seq_id `id` for a new live Sequence (existing per-id state is kept, as vLLM's
  /// dicts keep it). Amortized O(1).
  SeqSlot acquire_slot(SeqId id);
  /// The Sequence of `slot` is gone; the slot is recycled once nothing else refers to it.
  void release_slot(SeqSlot slot);

  /// can_allocate: the group's first WAITING sequence needs cdiv(len + lookahead, bs) blocks;
  /// NEVER past the pool minus the watermark, OK if they fit above the watermark, else LATER.
  AllocStatus can_allocate(const SequenceGroup& g, std::int64_t num_lookahead_slots = 0) const;
  /// allocate: a table for the first WAITING sequence, forks of it for the other WAITING ones.
  void allocate(const SequenceGroup& g);
  /// can_append_slots: blocks touched by the RUNNING sequences' unseen tokens <= free GPU blocks.
  bool can_append_slots(const SequenceGroup& g, std::int64_t num_lookahead_slots) const;
  /// append_slots: the sequence's unseen tokens into its table; this call's copy-on-write pairs
  /// are appended to `cows`.
  void append_slots(const Sequence& seq, std::int64_t num_lookahead_slots,
                    std::vector<BlockIdPair>& cows);
  /// free: no-op without a table; else writes the last-access time to the blocks, untracks the
  /// sequence and frees its blocks in table order.
  void free(const Sequence& seq);
  /// fork: the child's table shares the parent's blocks (no-op if the parent has no table).
  void fork(const Sequence& parent, const Sequence& child);
  /// access_all_blocks_in_seq: records `now` for the sequence (caching only).
  void access_all_blocks_in_seq(const Sequence& seq, double now);
  /// mark_blocks_as_computed: the GPU allocator's touched blocks become computed.
  void mark_blocks_as_computed() { allocator_.mark_computed(); }
  /// get_common_computed_block_ids over `seqs` into `out` (replaced).
  void get_common_computed_block_ids(std::span<const Sequence* const> seqs,
                                     std::vector<BlockId>& out);
  /// get_num_cached_tokens (ComputedBlocksTracker): frozen while a stored count's sequence is in
  /// PREFILL; else the bisected cached prefix, stored. 0 without caching.
  std::int64_t get_num_cached_tokens(const Sequence& seq);

  /// The count get_num_cached_tokens would return for `seq` without changing anything, when it
  /// is the stored one (a PREFILL sequence whose count is recorded and whose full blocks are all
  /// hashed); nullopt when the call would compute it. 0 without caching.
  std::optional<std::int64_t> recorded_cached_tokens(const Sequence& seq) const;

  AllocStatus can_swap_in(const SequenceGroup& g, std::int64_t num_lookahead_slots) const;
  bool can_swap_out(const SequenceGroup& g) const;
  /// swap_in / swap_out of the group's SWAPPED / RUNNING sequences; the physical-id pairs
  /// ([cpu, gpu] / [gpu, cpu]) are appended to `mapping`. Statuses are the caller's.
  void swap_in(const SequenceGroup& g, std::vector<BlockIdPair>& mapping);
  void swap_out(const SequenceGroup& g, std::vector<BlockIdPair>& mapping);

  /// kvsim only: drops the prefix-cache tracking of a sequence without a table whose seq_id will
  /// never be seen again (the engine's counter ids). vLLM keeps such entries forever; with fresh
  /// ids nothing can read them, so dropping them changes no answer and bounds memory.
  void forget_tracking(const Sequence& seq);

  bool has_table(const Sequence& seq) const { return state(seq).has_table; }
  /// Token slots filled in the sequence's table (KeyError without a table).
  std::int64_t num_full_slots(const Sequence& seq) const { return table_of(seq).num_full_slots(); }
  /// get_block_table: absolute ids. KeyError without a table.
  std::span<const BlockId> block_table(const Sequence& seq) const;
  std::int32_t num_free_gpu_blocks() const { return allocator_.num_free_blocks(Device::kGpu); }
  std::int32_t num_free_cpu_blocks() const { return allocator_.num_free_blocks(Device::kCpu); }
  double hit_rate(Device d) const { return allocator_.hit_rate(d); }
  bool reset_prefix_cache() { return allocator_.reset_prefix_cache(); }

  std::int32_t block_size() const { return allocator_.block_size(); }
  std::int32_t num_gpu_blocks() const { return allocator_.num_total_blocks(Device::kGpu); }
  std::int32_t num_cpu_blocks() const { return allocator_.num_total_blocks(Device::kCpu); }
  std::int64_t watermark_blocks() const { return watermark_blocks_; }
  bool caching() const { return allocator_.caching(); }
  const CpuGpuBlockAllocator& allocator() const { return allocator_; }
  /// Tests only: the allocator, mutable, to plant faults that find_violation() must catch.
  CpuGpuBlockAllocator& allocator_for_tests() { return allocator_; }

  /// Every (seq_id, table) the manager holds, sorted by seq_id, into `out` (replaced).
  void tables(std::vector<std::pair<SeqId, std::span<const BlockId>>>& out) const;
  /// Slots in use (for tests: the registry does not leak).
  std::int64_t num_slots_in_use() const { return static_cast<std::int64_t>(slot_of_.size()); }

  /// Tests only: every per-sequence record (tables with their hashes, access times, tracked
  /// hashes and cached counts) and the GPU allocator's state (free list, evictor order,
  /// registered, computed and touched blocks, counters), one line each, sorted by seq_id: two
  /// managers in the same state give the same string.
  std::string state_string() const;

  /// Allocator invariants, every table's shape, and refcount == number of table entries per
  /// block; content-hash references == their holders. O(blocks + tables + hashes).
  std::string find_violation() const;

 private:
  struct SeqState {
    SeqId seq_id = -1;
    bool live = false;               // a Sequence object uses this slot
    bool has_table = false;          // block_tables[seq_id]
    bool access_tracked = false;     // LastAccessBlocksTracker._seq_last_access has seq_id
    bool has_access_time = false;    // ... with a time (not None)
    bool has_hashes = false;         // ComputedBlocksTracker._seq_id_to_blocks_hashes
    bool has_cached_tokens = false;  // ... _seq_id_to_num_tokens_computed
    double access_time = 0;
    std::int64_t cached_tokens = 0;
    std::vector<HashId> hashes;  // full-block hashes of the sequence's tokens (references held)
    BlockTable table;
  };
  SeqState& state(const Sequence& seq) { return slots_[static_cast<std::size_t>(seq.slot)]; }
  const SeqState& state(const Sequence& seq) const {
    return slots_[static_cast<std::size_t>(seq.slot)];
  }
  /// block_tables[seq_id]: KeyError without a table.
  BlockTable& table_of(const Sequence& seq);
  const BlockTable& table_of(const Sequence& seq) const;
  void maybe_recycle(SeqSlot slot);
  void add_access_tracking(SeqState& st);
  AllocStatus can_swap(const SequenceGroup& g, Device d, SeqStatus status,
                       std::int64_t num_lookahead_slots) const;
  void swap(const SequenceGroup& g, SeqStatus status, Device src, Device dst,
            std::vector<BlockIdPair>& mapping);
  void drop_hashes(SeqState& st);

  CpuGpuBlockAllocator allocator_;
  std::int64_t watermark_blocks_;
  std::vector<SeqState> slots_;
  std::vector<SeqSlot> free_slots_;
  std::unordered_map<SeqId, SeqSlot> slot_of_;
  std::vector<BlockIdPair> swap_scratch_;
  std::vector<std::span<const BlockId>> prefix_scratch_;
};

}  // namespace kvsim::v0
