#include "core/v0/block_manager.h"

#include <algorithm>

#include "core/common/assert.h"

namespace kvsim::v0 {

BlockManager::BlockManager(std::int32_t block_size, std::int32_t num_gpu_blocks,
                           std::int32_t num_cpu_blocks, double watermark, bool enable_caching)
    : allocator_(enable_caching, block_size, num_gpu_blocks, num_cpu_blocks),
      watermark_blocks_(static_cast<std::int64_t>(watermark * num_gpu_blocks)) {
  vllm_assert(watermark >= 0.0, "assert watermark >= 0.0");
}

BlockManager::~BlockManager() {
  // Hash references go back before the allocator (and its hash table) is destroyed.
  for (SeqState& st : slots_) {
    st.table.forget(allocator_);
    drop_hashes(st);
  }
}

// ---- sequence registry ----------------------------------------------------------------------

SeqSlot BlockManager::acquire_slot(SeqId id) {
  const auto it = slot_of_.find(id);
  if (it != slot_of_.end()) {
    SeqState& st = slots_[static_cast<std::size_t>(it->second)];
    KVSIM_ASSERT(!st.live, "two live sequences share a seq_id");
    st.live = true;
    return it->second;
  }
  SeqSlot s;
  if (free_slots_.empty()) {
    s = static_cast<SeqSlot>(slots_.size());
    slots_.emplace_back();
  } else {
    s = free_slots_.back();
    free_slots_.pop_back();
  }
  SeqState& st = slots_[static_cast<std::size_t>(s)];
  st.seq_id = id;
  st.live = true;
  slot_of_.emplace(id, s);
  return s;
}

void BlockManager::release_slot(SeqSlot slot) {
  slots_[static_cast<std::size_t>(slot)].live = false;
  maybe_recycle(slot);
}

void BlockManager::maybe_recycle(SeqSlot slot) {
  SeqState& st = slots_[static_cast<std::size_t>(slot)];
  if (st.live || st.has_table || st.access_tracked || st.has_hashes || st.has_cached_tokens) return;
  slot_of_.erase(st.seq_id);
  st.seq_id = -1;
  free_slots_.push_back(slot);
}

void BlockManager::drop_hashes(SeqState& st) {
  for (HashId h : st.hashes) allocator_.hashes().release(h);
  st.hashes.clear();
}

BlockTable& BlockManager::table_of(const Sequence& seq) {
  SeqState& st = state(seq);
  if (!st.has_table) raise("KeyError", std::to_string(seq.seq_id));
  return st.table;
}

const BlockTable& BlockManager::table_of(const Sequence& seq) const {
  const SeqState& st = state(seq);
  if (!st.has_table) raise("KeyError", std::to_string(seq.seq_id));
  return st.table;
}

std::span<const BlockId> BlockManager::block_table(const Sequence& seq) const {
  return table_of(seq).ids();
}

// ---- allocation -----------------------------------------------------------------------------

AllocStatus BlockManager::can_allocate(const SequenceGroup& g,
                                       std::int64_t num_lookahead_slots) const {
  const Sequence* seq = g.first_with(SeqStatus::kWaiting);
  if (!seq) raise("IndexError", "list index out of range");
  const std::int64_t required = cdiv(seq->get_len() + num_lookahead_slots, block_size());
  const std::int64_t free = num_free_gpu_blocks();
  if (num_gpu_blocks() - required < watermark_blocks_) return AllocStatus::kNever;
  return free - required >= watermark_blocks_ ? AllocStatus::kOk : AllocStatus::kLater;
}

void BlockManager::add_access_tracking(SeqState& st) {
  vllm_assert(!st.access_tracked, "assert seq_id not in self._seq_last_access");
  st.access_tracked = true;
  st.has_access_time = false;
}

void BlockManager::allocate(const SequenceGroup& g) {
  g.for_each_seq(SeqStatus::kWaiting, [&](const Sequence& q) {
    vllm_assert(!state(q).has_table, "block table already exists");
  });
  const Sequence* first = g.first_with(SeqStatus::kWaiting);
  if (!first) raise("IndexError", "list index out of range");
  SeqState& st = state(*first);
  if (first->get_len() > 0) st.table.allocate(allocator_, first->tokens(), Device::kGpu);
  st.has_table = true;
  add_access_tracking(st);
  g.for_each_seq(SeqStatus::kWaiting, [&](const Sequence& q) {
    if (&q == first) return;
    SeqState& child = state(q);
    st.table.fork(allocator_, child.table);
    child.has_table = true;
    add_access_tracking(child);
  });
}

bool BlockManager::can_append_slots(const SequenceGroup& g,
                                    std::int64_t num_lookahead_slots) const {
  std::int64_t touched = 0;
  g.for_each_seq(SeqStatus::kRunning, [&](const Sequence& q) {
    const BlockTable& t = table_of(q);
    const std::int64_t unseen = std::max<std::int64_t>(0, q.get_len() - t.num_full_slots());
    touched += t.num_blocks_touched_by_append(unseen, num_lookahead_slots, block_size());
  });
  return touched <= num_free_gpu_blocks();
}

void BlockManager::append_slots(const Sequence& seq, std::int64_t num_lookahead_slots,
                                std::vector<BlockIdPair>& cows) {
  BlockTable& t = table_of(seq);
  const std::span<const Token> tokens = seq.tokens();
  const auto from =
      static_cast<std::size_t>(std::min<std::int64_t>(t.num_full_slots(), seq.get_len()));
  t.append_token_ids(allocator_, tokens.subspan(from), num_lookahead_slots, cows);
}

void BlockManager::free(const Sequence& seq) {
  SeqState& st = state(seq);
  if (!st.has_table) return;
  vllm_assert(st.access_tracked, "assert seq_id in self._seq_last_access");
  if (st.has_access_time) allocator_.mark_accessed(st.table.ids(), st.access_time);
  st.access_tracked = false;
  st.has_access_time = false;
  if (caching()) {
    vllm_assert(st.has_hashes, "assert seq_id in self._seq_id_to_blocks_hashes");
    drop_hashes(st);
    st.has_hashes = false;
    vllm_assert(st.has_cached_tokens, "assert seq_id in self._seq_id_to_num_tokens_computed");
    st.has_cached_tokens = false;
  }
  st.table.free(allocator_);
  st.has_table = false;
  maybe_recycle(seq.slot);
}

void BlockManager::fork(const Sequence& parent, const Sequence& child) {
  const SeqState& p = state(parent);
  if (!p.has_table) return;
  SeqState& c = state(child);
  if (c.has_table) c.table.forget(allocator_);  // vLLM replaces the table object
  p.table.fork(allocator_, c.table);
  c.has_table = true;
  add_access_tracking(c);
}

void BlockManager::forget_tracking(const Sequence& seq) {
  SeqState& st = state(seq);
  if (st.has_table) return;
  drop_hashes(st);
  st.has_hashes = false;
  st.has_cached_tokens = false;
  maybe_recycle(seq.slot);
}

void BlockManager::access_all_blocks_in_seq(const Sequence& seq, double now) {
  if (!caching()) return;
  SeqState& st = state(seq);
  vllm_assert(st.access_tracked, "assert seq_id in self._seq_last_access");
  st.has_access_time = true;
  st.access_time = now;
}

// ---- prefix-cache queries ---------------------------------------------------------------------

std::int64_t BlockManager::get_num_cached_tokens(const Sequence& seq) {
  if (!caching()) return 0;
  SeqState& st = state(seq);
  const std::int32_t bs = block_size();
  const std::span<const Token> tokens = seq.tokens();
  const auto recorded = static_cast<std::int64_t>(st.hashes.size());
  vllm_assert(seq.get_len() >= recorded * bs, "blocks are only appended other than recomputation");
  const std::int64_t num_blocks = seq.get_len() / bs;
  if (num_blocks > recorded)
    allocator_.hashes().intern_chain(
        recorded == 0 ? kNoHash : st.hashes.back(),
        tokens.subspan(static_cast<std::size_t>(recorded * bs),
                       static_cast<std::size_t>((num_blocks - recorded) * bs)),
        kExtraNone, st.hashes);
  st.has_hashes = true;
  if (st.has_cached_tokens && seq.is_prefill()) return st.cached_tokens;
  st.cached_tokens = allocator_.find_cached_prefix(st.hashes) * bs;
  st.has_cached_tokens = true;
  return st.cached_tokens;
}

void BlockManager::get_common_computed_block_ids(std::span<const Sequence* const> seqs,
                                                 std::vector<BlockId>& out) {
  out.clear();
  prefix_scratch_.clear();
  for (const Sequence* q : seqs) {
    const std::span<const BlockId> all = table_of(*q).ids();
    const std::int64_t cached = get_num_cached_tokens(*q);
    vllm_assert(cached % block_size() == 0, "assert num_cached_tokens % self.block_size == 0");
    const auto n =
        std::min<std::size_t>(all.size(), static_cast<std::size_t>(cached / block_size()));
    prefix_scratch_.push_back(all.first(n));
  }
  if (!caching() || prefix_scratch_.empty()) return;
  if (prefix_scratch_.size() == 1) {
    out.assign(prefix_scratch_[0].begin(), prefix_scratch_[0].end());
    return;
  }
  // os.path.commonprefix of the non-empty lists ('' -- reported as [] -- when all are empty).
  const std::span<const BlockId>* first = nullptr;
  std::size_t len = 0;
  for (const auto& s : prefix_scratch_) {
    if (s.empty()) continue;
    if (!first) {
      first = &s;
      len = s.size();
      continue;
    }
    std::size_t k = 0;
    while (k < len && k < s.size() && s[k] == (*first)[k]) ++k;
    len = k;
  }
  if (first) out.assign(first->begin(), first->begin() + static_cast<std::ptrdiff_t>(len));
}

std::optional<std::int64_t> BlockManager::recorded_cached_tokens(const Sequence& seq) const {
  if (!caching()) return 0;
  const SeqState& st = state(seq);
  if (!st.has_hashes || !st.has_cached_tokens || !seq.is_prefill() ||
      seq.get_len() / block_size() > static_cast<std::int64_t>(st.hashes.size()))
    return std::nullopt;
  return st.cached_tokens;
}

// ---- swapping -------------------------------------------------------------------------------

AllocStatus BlockManager::can_swap(const SequenceGroup& g, Device d, SeqStatus status,
                                   std::int64_t num_lookahead_slots) const {
  std::int64_t touched = 0;
  g.for_each_seq(status, [&](const Sequence& q) {
    const BlockTable& t = table_of(q);
    const std::int64_t unseen = std::max<std::int64_t>(0, q.get_len() - t.num_full_slots());
    touched += t.num_blocks_touched_by_append(unseen, num_lookahead_slots, block_size());
    touched += t.num_full_blocks_touched(allocator_, d);
  });
  const std::int64_t watermark = d == Device::kGpu ? watermark_blocks_ : 0;
  if (allocator_.num_total_blocks(d) < touched) return AllocStatus::kNever;
  return allocator_.num_free_blocks(d) - touched >= watermark ? AllocStatus::kOk
                                                              : AllocStatus::kLater;
}

AllocStatus BlockManager::can_swap_in(const SequenceGroup& g,
                                      std::int64_t num_lookahead_slots) const {
  return can_swap(g, Device::kGpu, SeqStatus::kSwapped, num_lookahead_slots);
}

bool BlockManager::can_swap_out(const SequenceGroup& g) const {
  return can_swap(g, Device::kCpu, SeqStatus::kRunning, 0) == AllocStatus::kOk;
}

void BlockManager::swap(const SequenceGroup& g, SeqStatus status, Device src, Device dst,
                        std::vector<BlockIdPair>& mapping) {
  g.for_each_seq(status, [&](const Sequence& q) {
    BlockTable& t = table_of(q);
    if (!t.allocated()) return;
    swap_scratch_.clear();
    t.swap(allocator_, src, dst, swap_scratch_);
    for (const BlockIdPair& p : swap_scratch_)
      mapping.emplace_back(allocator_.physical_id(src, BlockId{p.first}),
                           allocator_.physical_id(dst, BlockId{p.second}));
  });
}

void BlockManager::swap_in(const SequenceGroup& g, std::vector<BlockIdPair>& mapping) {
  swap(g, SeqStatus::kSwapped, Device::kCpu, Device::kGpu, mapping);
}

void BlockManager::swap_out(const SequenceGroup& g, std::vector<BlockIdPair>& mapping) {
  swap(g, SeqStatus::kRunning, Device::kGpu, Device::kCpu, mapping);
}

// ---- views and invariants -------------------------------------------------------------------

void BlockManager::tables(std::vector<std::pair<SeqId, std::span<const BlockId>>>& out) const {
  out.clear();
  for (const SeqState& st : slots_)
    if (st.has_table) out.emplace_back(st.seq_id, st.table.ids());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
}

std::string BlockManager::state_string() const {
  std::string o;
  const auto num = [&](auto v) { o += std::to_string(v) + ' '; };
  std::vector<const SeqState*> live;
  for (const SeqState& st : slots_)
    if (st.seq_id >= 0) live.push_back(&st);
  std::sort(live.begin(), live.end(),
            [](const SeqState* a, const SeqState* b) { return a->seq_id < b->seq_id; });
  for (const SeqState* st : live) {
    o += "seq ";
    num(st->seq_id);
    for (const bool b : {st->live, st->has_table, st->access_tracked, st->has_access_time,
                         st->has_hashes, st->has_cached_tokens})
      o += b ? '1' : '0';
    o += ' ';
    num(st->has_access_time ? st->access_time : 0.0);
    num(st->has_cached_tokens ? st->cached_tokens : 0);
    o += "hashes ";
    for (HashId h : st->hashes) num(to_int(h));
    o += "table ";
    num(st->table.num_full_slots());
    for (std::size_t i = 0; i < st->table.size(); ++i) {
      num(to_int(st->table.ids()[i]));
      num(to_int(st->table.hash(i)));
    }
    o += '\n';
  }
  std::vector<BlockId> ids;
  allocator_.free_lists(Device::kGpu).free_list(ids);
  o += "free ";
  for (BlockId b : ids) num(to_int(b));
  num(allocator_.free_lists(Device::kGpu).num_allocations());
  o += '\n';
  if (const PrefixCachingBlockAllocator* pc = allocator_.prefix(Device::kGpu)) {
    std::vector<std::int32_t> order, unreachable;
    pc->evictor().eviction_order(order, unreachable);
    o += "evictor ";
    for (std::int32_t b : order)
      o += std::to_string(b) + '@' + std::to_string(pc->evictor().last_accessed(b)) + ' ';
    for (std::int32_t b : unreachable) num(b);
    pc->cached_block_ids(ids);
    o += "\nregistered ";
    for (BlockId b : ids) num(to_int(b));
    pc->computed_block_ids(ids);
    o += "\ncomputed ";
    for (BlockId b : ids) num(to_int(b));
    pc->touched_block_ids(ids);
    o += "\ntouched ";
    for (BlockId b : ids) num(to_int(b));
    o += "\ncounters ";
    num(pc->num_evictions());
    num(pc->hit_rate());
    o += '\n';
  }
  return o;
}

std::string BlockManager::find_violation() const {
  if (std::string v = allocator_.find_violation(); !v.empty()) return v;
  const std::int32_t total = num_gpu_blocks() + num_cpu_blocks();
  std::vector<std::int32_t> holders(static_cast<std::size_t>(total), 0);
  std::vector<std::int32_t> hash_refs(allocator_.hashes().capacity(), 0);
  std::int64_t live = 0;
  for (std::size_t s = 0; s < slots_.size(); ++s) {
    const SeqState& st = slots_[s];
    if (st.seq_id < 0) {
      KVSIM_CHECK(!st.has_table && st.hashes.empty(), "a free slot holds state");
      continue;
    }
    ++live;
    const auto it = slot_of_.find(st.seq_id);
    KVSIM_CHECK(it != slot_of_.end() && it->second == static_cast<SeqSlot>(s),
                "seq " + std::to_string(st.seq_id) + ": slot registry disagrees");
    KVSIM_CHECK(st.has_table == st.access_tracked,
                "seq " + std::to_string(st.seq_id) + ": table and last-access tracking disagree");
    KVSIM_CHECK(st.has_hashes || st.hashes.empty(), "hashes kept for an untracked sequence");
    for (HashId h : st.hashes) ++hash_refs[static_cast<std::size_t>(to_int(h))];
    if (!st.has_table) {
      KVSIM_CHECK(!st.table.allocated(), "a sequence without a table holds blocks");
      continue;
    }
    if (std::string v = st.table.find_violation(allocator_); !v.empty())
      return "seq " + std::to_string(st.seq_id) + ": " + v;
    for (BlockId b : st.table.ids()) ++holders[static_cast<std::size_t>(to_int(b))];
    st.table.count_hash_refs(hash_refs);
  }
  KVSIM_CHECK(live == static_cast<std::int64_t>(slot_of_.size()), "slot registry size disagrees");
  for (std::int32_t b = 0; b < total; ++b)
    KVSIM_CHECK(allocator_.ref_count(BlockId{b}) == holders[static_cast<std::size_t>(b)],
                "block " + std::to_string(b) + ": refcount " +
                    std::to_string(allocator_.ref_count(BlockId{b})) + " but " +
                    std::to_string(holders[static_cast<std::size_t>(b)]) + " table entries");
  allocator_.count_hash_refs(hash_refs);
  return allocator_.hashes().find_ref_count_violation(hash_refs);
}

}  // namespace kvsim::v0
