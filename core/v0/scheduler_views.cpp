// The V0 Scheduler's read-only EngineCore views: pool statistics, the KV breakdown, cached blocks
// and the invariant walk.

#include <algorithm>

#include "core/common/assert.h"
#include "core/v0/scheduler.h"

namespace kvsim::v0 {

KVPoolStats Scheduler::pool_stats() const {
  KVPoolStats s = gpu_pool_stats();
  for (const SequenceGroup* g : running_)
    for (const Sequence* q : g->seqs())
      if (q->status == SeqStatus::kRunning && bm_.has_table(*q))
        s.num_table_blocks += static_cast<std::int64_t>(bm_.block_table(*q).size());
  return s;
}

KVPoolStats Scheduler::gpu_pool_stats() const {
  const CpuGpuBlockAllocator& a = bm_.allocator();
  KVPoolStats s;
  s.block_size = config_.block_size;
  s.num_blocks = bm_.num_gpu_blocks();
  s.num_free_blocks = bm_.num_free_gpu_blocks();
  // vLLM V0's gpu_cache_usage_sys: 1 - free / total.
  s.usage = s.num_blocks > 0
                ? 1.0 - static_cast<double>(s.num_free_blocks) / static_cast<double>(s.num_blocks)
                : 0.0;
  const PrefixCachingBlockAllocator* pc = a.prefix(Device::kGpu);
  s.evictions = pc ? pc->num_evictions() : 0;
  s.blocks_allocated = a.free_lists(Device::kGpu).num_allocations() + s.evictions;
  s.num_cpu_blocks = bm_.num_cpu_blocks();
  s.num_free_cpu_blocks = bm_.num_free_cpu_blocks();
  return s;
}

KVBreakdown Scheduler::kv_breakdown(std::span<const std::int64_t> final_kv_tokens) const {
  const std::int64_t bs = config_.block_size;
  const std::int32_t num_gpu = bm_.num_gpu_blocks();
  // A block shared by several tables (forks, prefix hits) counts once, by its first holder.
  std::vector<char> seen(static_cast<std::size_t>(num_gpu), 0);
  KVBreakdown b;
  std::int64_t used_blocks = 0;
  for (const SequenceGroup* g : running_) {
    for (const Sequence* q : g->seqs()) {
      if (q->status != SeqStatus::kRunning || !bm_.has_table(*q)) continue;
      const std::int64_t idx = q->request() ? q->request()->index() : -1;
      const std::span<const BlockId> ids = bm_.block_table(*q);
      const std::int64_t computed = q->num_computed_tokens();
      const std::int64_t fin = idx >= 0 && static_cast<std::size_t>(idx) < final_kv_tokens.size()
                                   ? final_kv_tokens[static_cast<std::size_t>(idx)]
                                   : q->get_len();
      for (std::size_t i = 0; i < ids.size(); ++i) {
        const std::int32_t id = to_int(ids[i]);
        if (id >= num_gpu || seen[static_cast<std::size_t>(id)]) continue;
        seen[static_cast<std::size_t>(id)] = 1;
        const std::int64_t base = static_cast<std::int64_t>(i) * bs;
        const std::int64_t c = std::clamp<std::int64_t>(computed - base, 0, bs);
        const std::int64_t f = std::clamp<std::int64_t>(fin - base, c, bs);
        b.token_states += c;
        b.reservation += f - c;
        b.internal_fragmentation += bs - f;
        ++used_blocks;
      }
    }
  }
  const std::int64_t num_free = bm_.num_free_gpu_blocks();
  KVSIM_ASSERT(used_blocks == num_gpu - num_free,
               "KV breakdown: blocks in running tables disagree with the free count");
  const PrefixCachingBlockAllocator* pc = bm_.allocator().prefix(Device::kGpu);
  const std::int64_t cached_free = pc ? pc->evictor().num_blocks() : 0;
  b.cached_free = cached_free * bs;
  b.free = (num_free - cached_free) * bs;
  return b;
}

void Scheduler::cached_blocks(std::vector<BlockId>& out) const {
  out.clear();
  const PrefixCachingBlockAllocator* pc = bm_.allocator().prefix(Device::kGpu);
  if (!pc) return;
  std::vector<std::int32_t> order, unreachable;
  pc->evictor().eviction_order(order, unreachable);
  for (std::int32_t b : order) out.push_back(BlockId{b});
  for (std::int32_t b : unreachable) out.push_back(BlockId{b});
  std::vector<BlockId> registered;
  pc->cached_block_ids(registered);
  for (BlockId b : registered)
    if (pc->ref_count(b) > 0) out.push_back(b);
}

std::string Scheduler::state_string() const {
  std::string o = "clock " + std::to_string(now_) + ' ' + std::to_string(prev_time_) + ' ' +
                  std::to_string(prev_prompt_) + ' ' + std::to_string(last_prompt_latency_) + ' ' +
                  std::to_string(budget_mark_) + ' ' + std::to_string(next_seq_id_) + '\n';
  const char* names[] = {"waiting", "running", "swapped"};
  int qi = 0;
  for (const auto* q : {&waiting_, &running_, &swapped_}) {
    o += names[qi++];
    for (const SequenceGroup* g : *q) {
      o += " [" + std::to_string(g->budget_tokens_mark) + ' ' + std::to_string(g->budget_seqs_mark);
      for (const Sequence* s : g->seqs()) {
        o += " seq " + std::to_string(s->seq_id) + ' ' +
             std::to_string(static_cast<int>(s->status)) + ' ' + std::to_string(s->is_prefill()) +
             ' ' + std::to_string(s->get_len()) + ' ' + std::to_string(s->num_computed_tokens()) +
             ' ' + std::to_string(s->num_table_blocks_seen);
        if (s->stop_reason) o += " stop " + std::to_string(*s->stop_reason);
      }
      o += ']';
    }
    o += '\n';
  }
  return o + bm_.state_string();
}

std::string Scheduler::find_violation() const {
  if (std::string v = bm_.find_violation(); !v.empty()) return v;
  std::vector<const SequenceGroup*> all;
  for (const auto* q : {&waiting_, &running_, &swapped_})
    for (const SequenceGroup* g : *q) {
      KVSIM_CHECK(!g->seqs().empty(), "a queued group has no sequences");
      all.push_back(g);
    }
  std::sort(all.begin(), all.end());
  KVSIM_CHECK(std::adjacent_find(all.begin(), all.end()) == all.end(),
              "a sequence group is queued twice");
  for (const SequenceGroup* g : all)
    KVSIM_CHECK(std::find(retired_.begin(), retired_.end(), g) == retired_.end(),
                "a retired group is still queued");
  return {};
}

}  // namespace kvsim::v0
