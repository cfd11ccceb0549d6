// V0Replayer's scheduler-mode ops (ops-format-v0.md, "sched mode ops"): schedule, update (the
// engine step, with forks), finish, abort.

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "sim/replay/v0_replayer.h"

namespace kvsim {

namespace {
using Index = JsonLine::Index;
using Type = JsonLine::Type;
using v0::SeqStatus;

__extension__ using Int128 = __int128;

// Python's floor modulo on 128-bit intermediates.
Int128 py_mod(Int128 a, Int128 m) {
  Int128 r = a % m;
  if (r != 0 && ((r < 0) != (m < 0))) r += m;
  return r;
}

bool fits_token(std::int64_t t) {
  return t >= std::numeric_limits<Token>::min() && t <= std::numeric_limits<Token>::max();
}
}  // namespace

/// The tokens of an `update` op: sampled_seqs, then sampled, then the rule, else 0; forks from
/// the op's list. Every value was validated before the step starts.
class V0Replayer::UpdateSamples final : public v0::SampleSource {
 public:
  UpdateSamples(const JsonLine& j, Index sampled, Index sampled_seqs, Index forks, bool rule,
                Int128 mul, Int128 add, Int128 mod)
      : j_(j),
        sampled_(sampled),
        sampled_seqs_(sampled_seqs),
        forks_(forks),
        rule_(rule),
        mul_(mul),
        add_(add),
        mod_(mod) {}

  Token token(const v0::SequenceGroup& g, const v0::Sequence& seq) override {
    if (!j_.is_null_or_absent(sampled_seqs_)) {
      const std::string key = std::to_string(seq.seq_id);
      const Index v = j_.find(sampled_seqs_, key);
      if (v != JsonLine::kNone) return static_cast<Token>(j_[v].i);
    }
    if (!j_.is_null_or_absent(sampled_)) {
      const Index v = j_.find(sampled_, g.request_id);
      if (v != JsonLine::kNone) return static_cast<Token>(j_[v].i);
    }
    if (rule_) return static_cast<Token>(py_mod(Int128{seq.get_len()} * mul_ + add_, mod_));
    return 0;
  }

  void forks(const v0::SequenceGroup& /*g*/, const v0::Sequence& parent,
             std::vector<Fork>& out) override {
    if (j_.is_null_or_absent(forks_)) return;
    for (Index e = JsonLine::first_child(forks_), k = 0; k < j_[forks_].size; ++k, e = j_.next(e)) {
      if (j_[j_.find(e, "parent")].i != parent.seq_id) continue;
      Fork f;
      const Index child = j_.find(e, "child");
      if (!j_.is_null_or_absent(child)) f.child_id = j_[child].i;
      const Index tok = j_.find(e, "token");
      if (!j_.is_null_or_absent(tok)) f.token = static_cast<Token>(j_[tok].i);
      out.push_back(f);
    }
  }

 private:
  const JsonLine& j_;
  Index sampled_, sampled_seqs_, forks_;
  bool rule_;
  Int128 mul_, add_, mod_;
};

void V0Replayer::write_queues(JsonWriter& w) {
  const std::uint64_t stamp = ++queue_stamp_;
  const char* names[] = {"waiting", "running", "swapped"};
  const RingDeque<v0::SequenceGroup*>* queues[] = {&sched_->waiting(), &sched_->running_groups(),
                                                   &sched_->swapped()};
  for (int q = 0; q < 3; ++q) {
    w.key(names[q]);
    w.string_array(*queues[q], [stamp](v0::SequenceGroup* g) {
      g->mark = stamp;
      return std::string_view(g->request_id);
    });
  }
}

void V0Replayer::drop_finished(const std::vector<v0::SequenceGroup*>& groups) {
  for (v0::SequenceGroup* g : groups) {
    const auto it = groups_.find(g->request_id);
    if (it != groups_.end() && it->second == g) drop_group(*g, g->mark == queue_stamp_);
  }
}

void V0Replayer::op_schedule(JsonWriter& w) {
  require_sched("schedule");
  const double now = get_double_or("now", sched_->now() + 1);
  const bool update_computed = get_bool_or("update_computed", false);
  sched_->set_clock(now);
  const std::uint64_t was_running = ++queue_stamp_;
  group_list_.clear();
  for (v0::SequenceGroup* g : sched_->running_groups()) {
    g->mark = was_running;
    group_list_.push_back(g);
  }
  const v0::SchedulerOutputs& so = sched_->schedule();
  schedule_pending_ = false;
  if (update_computed)
    for (const v0::ScheduledSeqGroup& s : so.scheduled)
      s.group->update_num_computed_tokens(s.token_chunk_size);
  schedule_pending_ = !update_computed;
  sched_->take_finished_request_ids(finished_ids_);

  w.begin_object().key("scheduled").begin_array();
  for (const v0::ScheduledSeqGroup& s : so.scheduled) {
    w.begin_object().key("id").value(std::string_view(s.group->request_id));
    w.key("chunk").value(s.token_chunk_size);
    w.key("prefill").value(s.is_prompt).key("do_sample").value(s.do_sample);
    w.key("tables");
    write_tables_of(w, *s.group, true);
    w.key("computed_block_nums");
    write_ids(w, std::span<const BlockId>(so.computed_block_nums)
                     .subspan(s.computed_begin, s.computed_end - s.computed_begin));
    w.end_object();
  }
  w.end_array();
  w.key("num_prefill_groups").value(so.num_prefill_groups);
  w.key("num_batched_tokens").value(so.num_batched_tokens);
  w.key("blocks_to_swap_in");
  write_pairs(w, so.blocks_to_swap_in);
  w.key("blocks_to_swap_out");
  write_pairs(w, so.blocks_to_swap_out);
  w.key("blocks_to_copy");
  write_pairs(w, so.blocks_to_copy);
  w.key("ignored").begin_array();
  for (const v0::SequenceGroup* g : so.ignored) w.value(std::string_view(g->request_id));
  w.end_array();
  w.key("preempted").value(so.preempted);
  // Groups that left running: recomputed ones are in waiting (former running order), swapped
  // ones in swapped (swapped order).
  const std::uint64_t in_waiting = ++queue_stamp_;
  for (v0::SequenceGroup* g : sched_->waiting())
    if (g->mark == was_running) g->mark = in_waiting;
  w.key("recomputed").begin_array();
  for (const v0::SequenceGroup* g : group_list_)
    if (g->mark == in_waiting) w.value(std::string_view(g->request_id));
  w.end_array().key("swapped_out").begin_array();
  for (const v0::SequenceGroup* g : sched_->swapped())
    if (g->mark == was_running) w.value(std::string_view(g->request_id));
  w.end_array().key("finished_ids").begin_array();
  for (const std::string& id : finished_ids_) w.value(std::string_view(id));
  w.end_array();
  write_queues(w);
  write_free(w);
  w.end_object();
  for (v0::SequenceGroup* g : so.ignored)
    if (groups_.count(g->request_id) && groups_[g->request_id] == g) drop_group(*g);
}

void V0Replayer::op_update(JsonWriter& w) {
  require_sched("update");
  if (!schedule_pending_) throw OpError{"RuntimeError: update must follow a schedule"};
  const Index sampled = json_.find(JsonLine::root(), "sampled");
  const Index sampled_seqs = json_.find(JsonLine::root(), "sampled_seqs");
  const Index rule = json_.find(JsonLine::root(), "rule");
  const Index forks = json_.find(JsonLine::root(), "forks");
  for (Index obj : {sampled, sampled_seqs}) {
    if (json_.is_null_or_absent(obj)) continue;
    if (json_[obj].type != Type::kObject) throw OpError{"TypeError: sampled must be an object"};
    for (Index e = JsonLine::first_child(obj), k = 0; k < json_[obj].size; ++k) {
      const Index v = e + 1;  // the member's value follows its key
      if (json_[v].type != Type::kInt || !fits_token(json_[v].i))
        throw OpError{"ValueError: sampled tokens must be 32-bit integers"};
      e = json_.next(v);
    }
  }
  Int128 mul = 1, add = 0, mod = Int128{1} << 30;
  const bool have_rule = !json_.is_null_or_absent(rule);
  if (have_rule) {
    if (json_[rule].type != Type::kObject) throw OpError{"TypeError: rule must be an object"};
    const Index m = json_.find(rule, "mul"), a = json_.find(rule, "add"),
                d = json_.find(rule, "mod");
    if (!json_.is_null_or_absent(m)) mul = int_value(m, "mul");
    if (!json_.is_null_or_absent(a)) add = int_value(a, "add");
    if (!json_.is_null_or_absent(d)) mod = int_value(d, "mod");
    if (mod == 0) throw OpError{"ZeroDivisionError: integer modulo by zero"};
    if (mod > (Int128{1} << 31) || mod < -(Int128{1} << 31))
      throw OpError{"ValueError: rule mod must fit a 32-bit token"};
  }
  if (!json_.is_null_or_absent(forks)) {
    if (json_[forks].type != Type::kArray) throw OpError{"TypeError: forks must be a list"};
    std::vector<std::int64_t> children;
    for (Index e = JsonLine::first_child(forks), k = 0; k < json_[forks].size;
         ++k, e = json_.next(e)) {
      if (json_[e].type != Type::kObject) throw OpError{"TypeError: a fork must be an object"};
      const Index parent = json_.find(e, "parent");
      if (parent == JsonLine::kNone || json_[parent].type != Type::kInt ||
          !seqs_.count(json_[parent].i))
        throw OpError{"KeyError: a fork's parent must be a known sequence id"};
      const Index tok = json_.find(e, "token");
      if (!json_.is_null_or_absent(tok) &&
          (json_[tok].type != Type::kInt || !fits_token(json_[tok].i)))
        throw OpError{"ValueError: a fork's token must be a 32-bit integer"};
      const Index child = json_.find(e, "child");
      if (!json_.is_null_or_absent(child)) {
        if (json_[child].type != Type::kInt || json_[child].i < 0 || seqs_.count(json_[child].i) ||
            std::find(children.begin(), children.end(), json_[child].i) != children.end())
          throw OpError{"ValueError: a fork's child id exists or is invalid"};
        children.push_back(json_[child].i);
      }
    }
  }
  schedule_pending_ = false;
  UpdateSamples samples(json_, sampled, sampled_seqs, forks, have_rule, mul, add, mod);
  sched_->process_model_outputs(samples, step_);
  w.begin_object().key("outputs").begin_array();
  for (const v0::SampleOutput& o : step_.outputs) {
    const v0::Sequence& s = *o.seq;
    if (o.parent) seqs_.emplace(s.seq_id, o.seq);
    w.begin_object().key("id").value(std::string_view(o.group->request_id));
    w.key("seq").value(s.seq_id).key("token").value(std::int64_t{o.token});
    w.key("finished").value(s.is_finished()).key("status").value(v0::status_name(s.status));
    w.key("stop_reason");
    if (s.stop_reason)
      w.value(std::int64_t{*s.stop_reason});
    else
      w.null();
    if (o.parent) w.key("parent").value(o.parent->seq_id);
    w.end_object();
  }
  w.end_array().key("finished").begin_array();
  for (const v0::SequenceGroup* g : step_.finished) w.value(std::string_view(g->request_id));
  w.end_array();
  write_queues(w);
  write_free(w);
  w.end_object();
  drop_finished(step_.finished);
}

void V0Replayer::op_finish(JsonWriter& w) {
  require_sched("finish");
  v0::Sequence& s = seq_field("seq");
  SeqStatus status = SeqStatus::kFinishedStopped;
  if (const Index r = json_.find(JsonLine::root(), "reason"); !json_.is_null_or_absent(r)) {
    const std::string_view reason = get_string("reason");
    if (reason == "length")
      status = SeqStatus::kFinishedLengthCapped;
    else if (reason != "stopped")
      throw OpError{"ValueError: reason must be \"stopped\" or \"length\""};
  }
  v0::SequenceGroup& g = *s.group;
  s.status = status;
  sched_->free_seq(s);
  sched_->free_finished_seq_groups();
  w.begin_object();
  write_queues(w);
  write_free(w);
  w.end_object();
  if (g.is_finished()) {
    group_list_.assign(1, &g);
    drop_finished(group_list_);
  }
}

void V0Replayer::op_abort(JsonWriter& w) {
  require_sched("abort");
  const Index ids = field("ids");
  if (json_[ids].type != Type::kArray) throw OpError{"TypeError: ids must be a list"};
  for (Index e = JsonLine::first_child(ids), k = 0; k < json_[ids].size; ++k, e = json_.next(e))
    if (json_[e].type != Type::kString) throw OpError{"TypeError: ids must be strings"};
  for (Index e = JsonLine::first_child(ids), k = 0; k < json_[ids].size; ++k, e = json_.next(e)) {
    // vLLM's abort_seq_group looks in its queues: an untracked orphan is found there too.
    v0::SequenceGroup* g = nullptr;
    if (const auto it = groups_.find(json_[e].s); it != groups_.end()) {
      g = it->second;
    } else {
      for (std::size_t i = 0; i < orphans_.size() && !g; ++i)
        if (orphans_[i]->request_id == json_[e].s) g = orphans_[i];
    }
    if (!g || !sched_->abort_group(*g)) continue;
    const auto orphan = std::find(orphans_.begin(), orphans_.end(), g);
    if (orphan != orphans_.end()) {
      orphans_.erase(orphan);
      sched_->retire_group(*g);
    } else {
      drop_group(*g);
    }
  }
  w.begin_object();
  write_queues(w);
  write_free(w);
  w.end_object();
}

}  // namespace kvsim
