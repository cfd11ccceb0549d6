// V0Replayer's block-manager-mode ops (ops-format-v0.md, "bm mode ops"): the
// SelfAttnBlockSpaceManager driven directly, with the status changes vLLM's scheduler would make.

#include <limits>

#include "sim/replay/v0_replayer.h"

namespace kvsim {

namespace {
using Index = JsonLine::Index;
using Type = JsonLine::Type;
using v0::SeqStatus;
}  // namespace

void V0Replayer::op_can_allocate(JsonWriter& w) {
  require_bm("can_allocate");
  const v0::SequenceGroup& g = group(get_string("id"));
  const std::int64_t la = get_int_or("num_lookahead_slots", 0);
  w.begin_object().key("status").value(v0::alloc_status_name(bm_->can_allocate(g, la)));
  w.end_object();
}

void V0Replayer::op_allocate(JsonWriter& w) {
  require_bm("allocate");
  v0::SequenceGroup& g = group(get_string("id"));
  bm_->allocate(g);
  for (v0::Sequence* s : g.seqs())
    if (s->status == SeqStatus::kWaiting) s->status = SeqStatus::kRunning;
  w.begin_object().key("tables");
  write_tables_of(w, g, false);
  write_free(w);
  w.end_object();
}

void V0Replayer::op_can_append_slots(JsonWriter& w) {
  require_bm("can_append_slots");
  const v0::SequenceGroup& g = group(get_string("id"));
  const std::int64_t la = get_int_or("num_lookahead_slots", 0);
  w.begin_object().key("ok").value(bm_->can_append_slots(g, la)).end_object();
}

void V0Replayer::op_append_slots(JsonWriter& w) {
  require_bm("append_slots");
  v0::Sequence& s = seq_field("seq");
  const std::int64_t la = get_int_or("num_lookahead_slots", 0);
  const Index tokens = json_.find(JsonLine::root(), "tokens");
  if (!json_.is_null_or_absent(tokens)) {
    read_tokens(tokens, tokens_);
    for (Token t : tokens_) s.append_token_id(t);
  }
  pairs_.clear();
  bm_->append_slots(s, la, pairs_);
  w.begin_object().key("cows");
  write_pairs(w, pairs_);
  w.key("table");
  write_ids(w, bm_->block_table(s));
  write_free(w);
  w.end_object();
}

void V0Replayer::op_can_swap_out(JsonWriter& w) {
  require_bm("can_swap_out");
  const v0::SequenceGroup& g = group(get_string("id"));
  w.begin_object().key("ok").value(bm_->can_swap_out(g)).end_object();
}

void V0Replayer::op_can_swap_in(JsonWriter& w) {
  require_bm("can_swap_in");
  const v0::SequenceGroup& g = group(get_string("id"));
  const std::int64_t la = get_int_or("num_lookahead_slots", 0);
  w.begin_object().key("status").value(v0::alloc_status_name(bm_->can_swap_in(g, la)));
  w.end_object();
}

void V0Replayer::op_swap(JsonWriter& w, bool in) {
  require_bm(in ? "swap_in" : "swap_out");
  v0::SequenceGroup& g = group(get_string("id"));
  pairs_.clear();
  const SeqStatus from = in ? SeqStatus::kSwapped : SeqStatus::kRunning;
  if (in)
    bm_->swap_in(g, pairs_);
  else
    bm_->swap_out(g, pairs_);
  for (v0::Sequence* s : g.seqs())
    if (s->status == from) s->status = in ? SeqStatus::kRunning : SeqStatus::kSwapped;
  w.begin_object().key("mapping");
  write_pairs(w, pairs_);
  w.key("tables");
  write_tables_of(w, g, false);
  write_free(w);
  w.end_object();
}

void V0Replayer::op_fork(JsonWriter& w) {
  require_bm("fork");
  v0::Sequence& parent = seq_field("parent");
  std::int64_t child_id = -1;
  if (const Index ci = json_.find(JsonLine::root(), "child"); !json_.is_null_or_absent(ci)) {
    child_id = int_value(ci, "child");
    if (child_id < 0 || seqs_.count(child_id))
      throw OpError{"ValueError: sequence " + std::to_string(child_id) + " exists or is invalid"};
  }
  v0::Sequence& child = new_seq(child_id, {});
  const v0::SeqSlot slot = child.slot;
  child.copy_from(parent, child.seq_id);
  child.slot = slot;
  parent.group->add(&child);
  seqs_.emplace(child.seq_id, &child);
  bm_->fork(parent, child);
  w.begin_object().key("child").value(child.seq_id).key("table");
  if (bm_->has_table(child))
    write_ids(w, bm_->block_table(child));
  else
    w.null();
  write_free(w);
  w.end_object();
}

void V0Replayer::op_free(JsonWriter& w) {
  require_bm("free");
  bm_->free(seq_field("seq"));
  w.begin_object();
  write_free(w);
  w.end_object();
}

void V0Replayer::op_remove_group(JsonWriter& w) {
  require_bm("remove_group");
  v0::SequenceGroup& g = group(get_string("id"));
  for (v0::Sequence* s : g.seqs()) bm_->free(*s);
  drop_group(g);
  w.begin_object();
  write_free(w);
  w.end_object();
}

void V0Replayer::op_set_status(JsonWriter& w) {
  require_bm("set_status");
  v0::Sequence& s = seq_field("seq");
  v0::SeqStatus status;
  if (!v0::parse_status(get_string("status"), status))
    throw OpError{"ValueError: unknown status '" + std::string(get_string("status")) + "'"};
  s.status = status;
  w.begin_object().end_object();
}

void V0Replayer::op_access(JsonWriter& w) {
  require_bm("access");
  const v0::Sequence& s = seq_field("seq");
  bm_->access_all_blocks_in_seq(s, get_double_or("now", bm_now_));
  w.begin_object().end_object();
}

void V0Replayer::op_common_computed(JsonWriter& w) {
  require_bm("get_common_computed_block_ids");
  const Index list = field("seqs");
  if (json_[list].type != Type::kArray) throw OpError{"TypeError: seqs must be a list"};
  seq_list_.clear();
  for (Index e = JsonLine::first_child(list), k = 0; k < json_[list].size; ++k, e = json_.next(e))
    seq_list_.push_back(&seq(int_value(e, "seq id")));
  bm_->get_common_computed_block_ids(seq_list_, blocks_);
  w.begin_object().key("ids");
  write_ids(w, blocks_);
  w.end_object();
}

void V0Replayer::op_num_cached_tokens(JsonWriter& w) {
  require_bm("get_num_cached_tokens");
  w.begin_object().key("n").value(bm_->get_num_cached_tokens(seq_field("seq"))).end_object();
}

}  // namespace kvsim
