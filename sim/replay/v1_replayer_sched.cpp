// V1Replayer's sched-mode ops: schedule, update, abort (see sim/replay/v1_replayer.h).

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "sim/replay/offload_sched.h"
#include "sim/replay/pd_sched.h"
#include "sim/replay/v1_replayer.h"

namespace kvsim {
namespace {
using Index = JsonLine::Index;
using Type = JsonLine::Type;

__extension__ using Int128 = __int128;

// Python's floor modulo on 128-bit intermediates.
Int128 py_mod(Int128 a, Int128 m) {
  Int128 r = a % m;
  if (r != 0 && ((r < 0) != (m < 0))) r += m;
  return r;
}
}  // namespace

// ---- sched mode ---------------------------------------------------------------------------

void V1Replayer::op_schedule(JsonWriter& w) {
  if (mode_ != Mode::kSched) throw OpError{"RuntimeError: schedule needs sched mode (sched_init)"};
  // The running list before the step: victims are listed in its order.
  running_pos_.resize(requests_.size());
  for (std::size_t k = 0; k < sched_->running().size(); ++k)
    running_pos_[static_cast<std::size_t>(sched_->running()[k]->index())] = k;
  if (pd_) pd_set_clock();
  sched_->schedule(sched_out_);
  if (offload_) offload_record_step();  // (the step is in flight even when vLLM raised)
  if (pd_) pd_record_step();
  if (v020_ && sched_->step_error()[0] != 0) throw OpError{sched_->step_error()};
  schedule_pending_ = true;
  const auto groups = static_cast<std::size_t>(sched_->num_kv_cache_groups());
  w.begin_object().key("new").begin_array();
  for (const ScheduledRequest& s : sched_out_.scheduled) {
    if (s.kind != ScheduledRequest::Kind::kNew) continue;
    w.begin_object().key("id").value(name_of(*s.request)).key("block_ids");
    write_tables(w, *s.request);
    w.key("num_computed_tokens").value(s.num_computed_tokens).end_object();
  }
  w.end_array().key("cached").begin_array();
  // v0.20 lists the running requests before the resumed ones; the older releases the reverse.
  const ScheduledRequest::Kind order[2] = {
      v020_ ? ScheduledRequest::Kind::kRunning : ScheduledRequest::Kind::kResumed,
      v020_ ? ScheduledRequest::Kind::kResumed : ScheduledRequest::Kind::kRunning};
  for (const ScheduledRequest::Kind kind : order) {
    for (std::size_t i = 0; i < sched_out_.scheduled.size(); ++i) {
      const ScheduledRequest& s = sched_out_.scheduled[i];
      if (s.kind != kind) continue;
      const bool resumed = kind == ScheduledRequest::Kind::kResumed;
      w.begin_object().key("id").value(name_of(*s.request)).key("new_block_ids");
      if (resumed) {
        write_tables(w, *s.request);
      } else if (v020_) {
        scratch_counts_.assign(1, s.num_new_blocks);
        if (groups > 1)
          scratch_counts_.assign(
              sched_out_.group_new_blocks.begin() + static_cast<std::ptrdiff_t>(i * groups),
              sched_out_.group_new_blocks.begin() + static_cast<std::ptrdiff_t>((i + 1) * groups));
        write_new_blocks(w, *s.request, scratch_counts_);
      } else {
        const auto& table = s.request->blocks;
        w.begin_array();
        for (std::size_t k = table.size() - static_cast<std::size_t>(s.num_new_blocks);
             k < table.size(); ++k)
          w.value(std::int64_t{to_int(table[k])});
        w.end_array();
      }
      w.key("num_computed_tokens").value(s.num_computed_tokens);
      w.key("resumed").value(resumed).end_object();
    }
  }
  w.end_array().key("num_scheduled_tokens").begin_array();
  for (const ScheduledRequest& s : sched_out_.scheduled)
    w.begin_array().value(name_of(*s.request)).value(s.num_tokens).end_array();
  w.end_array();
  w.key("total").value(sched_out_.total_num_scheduled_tokens);
  w.key("num_common_prefix_blocks");
  if (v020_) {
    if (groups > 1)
      write_group_counts(w, sched_out_.group_common_prefix_blocks);
    else
      write_group_counts(w, std::span<const std::int32_t>(&sched_out_.num_common_prefix_blocks, 1));
  } else {
    w.value(std::int64_t{sched_out_.num_common_prefix_blocks});
  }
  std::vector<std::string_view> finished;
  for (std::int64_t i : sched_out_.finished)
    finished.push_back(names_[static_cast<std::size_t>(i)]);
  // vLLM's finished_req_ids is a set of ids: an id reused after its request finished, then
  // finished again before this step, is listed once.
  std::sort(finished.begin(), finished.end());
  finished.erase(std::unique(finished.begin(), finished.end()), finished.end());
  w.key("finished").begin_array();
  for (std::string_view f : finished) w.value(f);
  w.end_array().key("preempted").begin_array();
  std::vector<const Request*> victims(sched_out_.preempted.begin(), sched_out_.preempted.end());
  std::sort(victims.begin(), victims.end(), [&](const Request* a, const Request* b) {
    return running_pos_[static_cast<std::size_t>(a->index())] <
           running_pos_[static_cast<std::size_t>(b->index())];
  });
  for (const Request* v : victims) w.value(name_of(*v));
  w.end_array();
  write_queues(w);
  if (offload_) offload_after_schedule(w);
  if (pd_) pd_after_schedule(w);
  w.end_object();
}

void V1Replayer::op_update(JsonWriter& w) {
  if (mode_ != Mode::kSched) throw OpError{"RuntimeError: update needs sched mode (sched_init)"};
  if (v020_ ? sched_->num_steps_in_flight() == 0 : !schedule_pending_)
    throw OpError{"RuntimeError: update must follow a schedule"};
  const Index sampled = json_.find(JsonLine::root(), "sampled");
  const Index rule = json_.find(JsonLine::root(), "rule");
  if (!json_.is_null_or_absent(sampled) && json_[sampled].type != Type::kObject)
    throw OpError{"TypeError: sampled must be an object"};
  Int128 mul = 0, add = 0, mod = 0;
  const bool have_rule = !json_.is_null_or_absent(rule);
  if (have_rule) {
    const Index m = json_.find(rule, "mul"), a = json_.find(rule, "add"),
                d = json_.find(rule, "mod");
    if (m == JsonLine::kNone || a == JsonLine::kNone || d == JsonLine::kNone)
      throw OpError{"KeyError: rule needs mul, add and mod"};
    mul = int_value(m, "mul");
    add = int_value(a, "add");
    mod = int_value(d, "mod");
    if (mod == 0) throw OpError{"ZeroDivisionError: integer modulo by zero"};
  }
  // The requests of the step the update applies (v0.20: the oldest in flight; before: the
  // running list, not the step's output, since a request aborted after schedule() is gone).
  scratch_requests_.clear();
  if (v020_) {
    for (const InFlightRequest& e : sched_->oldest_in_flight())
      if (e.request) scratch_requests_.push_back(e.request);
  } else {
    for (Request* rp : sched_->running())
      if (rp->num_scheduled_tokens > 0) scratch_requests_.push_back(rp);
  }
  for (Request* rp : scratch_requests_) {
    Request& r = *rp;
    std::int64_t tok = 0;
    const Index given =
        json_.is_null_or_absent(sampled) ? JsonLine::kNone : json_.find(sampled, name_of(r));
    if (given != JsonLine::kNone)
      tok = int_value(given, "sampled token");
    else if (have_rule)
      tok = static_cast<std::int64_t>(py_mod(Int128{r.num_tokens()} * mul + add, mod));
    if (tok < std::numeric_limits<Token>::min() || tok > std::numeric_limits<Token>::max())
      throw OpError{"ValueError: sampled token out of the 32-bit range"};
    r.sampled_token = static_cast<Token>(tok);
  }
  if (offload_) offload_before_update();
  if (pd_) pd_before_update();
  sched_->update_from_output(outputs_);
  schedule_pending_ = false;
  const std::string pd_error = pd_ ? std::exchange(pd_->error, std::string()) : std::string();
  if ((v020_ && sched_->step_error()[0] != 0) || !pd_error.empty()) {
    for (const RequestOutput& o : outputs_)
      if (o.finished) forget_unless_held(*o.request);
    throw OpError{pd_error.empty() ? std::string(sched_->step_error()) : pd_error};
  }
  w.begin_object().key("outputs").begin_array();
  for (const RequestOutput& o : outputs_) {
    const Request& r = *o.request;
    w.begin_object().key("id").value(name_of(r));
    w.key("new_token_ids").begin_array().value(std::int64_t{o.token}).end_array();
    w.key("finished").value(o.finished);
    w.key("finish_reason");
    if (const char* fr = finish_reason(r.status))
      w.value(fr);
    else
      w.null();
    w.key("stop_reason");
    if (r.stop_reason)
      w.value(std::int64_t{*r.stop_reason});
    else
      w.null();
    if (pd_ && o.finished) pd_write_finish(w, r);
    w.end_object();
  }
  w.end_array();
  write_queues(w);
  if (offload_) offload_after_update(w);
  if (pd_) pd_after_update(w);
  w.end_object();
  for (const RequestOutput& o : outputs_)
    if (o.finished) forget_unless_held(*o.request);
  if (offload_ || pd_)
    for (const Request* r : sched_->released())
      if (requests_[static_cast<std::size_t>(r->index())]) forget(r->index());
}

void V1Replayer::forget_unless_held(const Request& r) {
  const auto held = sched_->held();
  if (std::find(held.begin(), held.end(), &r) == held.end()) forget(r.index());
}

void V1Replayer::op_abort(JsonWriter& w) {
  if (mode_ != Mode::kSched) throw OpError{"RuntimeError: abort needs sched mode (sched_init)"};
  const Index ids = field("ids");
  if (json_[ids].type != Type::kArray) throw OpError{"TypeError: ids must be a list"};
  for (Index e = JsonLine::first_child(ids), k = 0; k < json_[ids].size; ++k, e = json_.next(e))
    if (json_[e].type != Type::kString) throw OpError{"TypeError: ids must be strings"};
  if (pd_) {
    pd_set_clock();
    pd_->connector.clear_finishes();
  }
  std::vector<const Request*> aborted;
  for (Index e = JsonLine::first_child(ids), k = 0; k < json_[ids].size; ++k, e = json_.next(e)) {
    const auto it = live_.find(json_[e].s);
    if (it == live_.end()) continue;
    const std::int64_t index = it->second;
    Request& r = *requests_[static_cast<std::size_t>(index)];
    if (sched_->abort_request(r)) aborted.push_back(&r);
  }
  w.begin_object();
  if (pd_) {
    w.key("pd_finished").begin_array();
    for (const Request* r : aborted) {
      w.begin_object().key("id").value(name_of(*r));
      pd_write_finish(w, *r);
      w.end_object();
    }
    w.end_array();
    pd_write_queue_keys(w);
  }
  w.end_object();
  for (const Request* r : aborted) forget_unless_held(*r);
}

}  // namespace kvsim
