// V0Replayer's snapshot op (ops-format-v0.md): tables of every sequence the manager holds, each
// device's free list, refcounts and prefix-cache state, the tracked sequences, the queues.

#include <algorithm>

#include "sim/replay/v0_replayer.h"

namespace kvsim {

void V0Replayer::write_device(JsonWriter& w, v0::Device d) const {
  const v0::BlockManager& m = mode_ == Mode::kBm ? *bm_ : sched_->block_manager();
  const v0::CpuGpuBlockAllocator& a = m.allocator();
  const v0::NaiveBlockAllocator& naive = a.free_lists(d);
  std::vector<BlockId> ids;
  w.begin_object();
  naive.free_list(ids);
  w.key("free_list");
  write_ids(w, ids);
  w.key("refcounts").begin_array();
  for (std::int32_t p = 0; p < naive.num_total_blocks(); ++p)
    w.value(std::int64_t{naive.ref_count(BlockId{to_int(naive.first_id()) + p})});
  w.end_array();
  if (const v0::PrefixCachingBlockAllocator* pc = a.prefix(d)) {
    const std::int32_t first = to_int(naive.first_id());
    std::vector<std::int32_t> order, unreachable;
    pc->evictor().eviction_order(order, unreachable);
    w.key("evictor").begin_array();
    for (std::int32_t b : order)
      w.begin_array()
          .value(std::int64_t{first + b})
          .value(pc->evictor().last_accessed(b))
          .value(pc->evictor().num_hashed_tokens(b))
          .end_array();
    w.end_array().key("evictor_unreachable").begin_array();
    for (std::int32_t b : unreachable) w.value(std::int64_t{first + b});
    w.end_array();
    pc->cached_block_ids(ids);
    w.key("cached_block_ids");
    write_ids(w, ids);
    w.key("num_cached_hashes").value(pc->num_cached_hashes());
    pc->computed_block_ids(ids);
    w.key("computed_block_ids");
    write_ids(w, ids);
    pc->touched_block_ids(ids);
    w.key("touched_block_ids");
    write_ids(w, ids);
  }
  w.end_object();
}

void V0Replayer::op_snapshot(JsonWriter& w) {
  const bool brief = get_bool_or("brief", false);
  v0::BlockManager& m = manager();
  w.begin_object();
  write_free(w);
  std::vector<std::pair<v0::SeqId, std::span<const BlockId>>> tables;
  m.tables(tables);
  w.key("tables").begin_object();
  for (const auto& [id, t] : tables) {
    write_seq_key(w, id);
    write_ids(w, t);
  }
  w.end_object();
  if (!brief) {
    w.key("gpu");
    write_device(w, v0::Device::kGpu);
    w.key("cpu");
    write_device(w, v0::Device::kCpu);
  }
  std::vector<const v0::Sequence*> seqs;
  seqs.reserve(seqs_.size());
  for (const auto& [id, s] : seqs_) seqs.push_back(s);
  std::sort(seqs.begin(), seqs.end(),
            [](const v0::Sequence* a, const v0::Sequence* b) { return a->seq_id < b->seq_id; });
  w.key("seqs").begin_object();
  for (const v0::Sequence* s : seqs) {
    write_seq_key(w, s->seq_id);
    w.begin_object().key("group").value(std::string_view(s->group->request_id));
    w.key("status").value(v0::status_name(s->status));
    w.key("len").value(s->get_len()).key("output_len").value(s->output_len());
    w.key("computed").value(s->num_computed_tokens()).key("prefill").value(s->is_prefill());
    w.end_object();
  }
  w.end_object();
  if (mode_ == Mode::kSched) write_queues(w);
  w.end_object();
}

}  // namespace kvsim
