// V1Replayer's sched-mode ops: schedule, update, abort (see sim/replay/v1_replayer.h).

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

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
  sched_->schedule(sched_out_);
  schedule_pending_ = true;
  w.begin_object().key("new").begin_array();
  for (const ScheduledRequest& s : sched_out_.scheduled) {
    if (s.kind != ScheduledRequest::Kind::kNew) continue;
    w.begin_object().key("id").value(name_of(*s.request)).key("block_ids");
    write_blocks(w, s.request->blocks);
    w.key("num_computed_tokens").value(s.num_computed_tokens).end_object();
  }
  w.end_array().key("cached").begin_array();
  for (int pass = 0; pass < 2; ++pass) {
    const auto kind =
        pass == 0 ? ScheduledRequest::Kind::kResumed : ScheduledRequest::Kind::kRunning;
    for (const ScheduledRequest& s : sched_out_.scheduled) {
      if (s.kind != kind) continue;
      w.begin_object().key("id").value(name_of(*s.request)).key("new_block_ids").begin_array();
      const auto& table = s.request->blocks;
      const std::size_t from = kind == ScheduledRequest::Kind::kResumed
                                   ? 0
                                   : table.size() - static_cast<std::size_t>(s.num_new_blocks);
      for (std::size_t i = from; i < table.size(); ++i) w.value(std::int64_t{to_int(table[i])});
      w.end_array().key("num_computed_tokens").value(s.num_computed_tokens);
      w.key("resumed").value(kind == ScheduledRequest::Kind::kResumed).end_object();
    }
  }
  w.end_array().key("num_scheduled_tokens").begin_array();
  for (const ScheduledRequest& s : sched_out_.scheduled)
    w.begin_array().value(name_of(*s.request)).value(s.num_tokens).end_array();
  w.end_array();
  w.key("total").value(sched_out_.total_num_scheduled_tokens);
  w.key("num_common_prefix_blocks").value(std::int64_t{sched_out_.num_common_prefix_blocks});
  std::vector<std::string_view> finished;
  for (std::int64_t i : sched_out_.finished)
    finished.push_back(names_[static_cast<std::size_t>(i)]);
  std::sort(finished.begin(), finished.end());
  w.key("finished").begin_array();
  for (std::string_view f : finished) w.value(f);
  // Victims leave from the back of the running list: running-list order is the reverse.
  w.end_array().key("preempted").begin_array();
  for (auto it = sched_out_.preempted.rbegin(); it != sched_out_.preempted.rend(); ++it)
    w.value(name_of(**it));
  w.end_array();
  write_queues(w);
  w.end_object();
}

void V1Replayer::op_update(JsonWriter& w) {
  if (mode_ != Mode::kSched) throw OpError{"RuntimeError: update needs sched mode (sched_init)"};
  if (!schedule_pending_) throw OpError{"RuntimeError: update must follow a schedule"};
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
  // Iterate the running list, not the step's output: a request aborted since schedule() is gone.
  for (Request* rp : sched_->running()) {
    Request& r = *rp;
    if (r.num_scheduled_tokens == 0) continue;
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
  sched_->update_from_output(outputs_);
  schedule_pending_ = false;
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
    w.end_object();
  }
  w.end_array();
  write_queues(w);
  w.end_object();
  for (const RequestOutput& o : outputs_)
    if (o.finished) forget(o.request->index());
}

void V1Replayer::op_abort(JsonWriter& w) {
  if (mode_ != Mode::kSched) throw OpError{"RuntimeError: abort needs sched mode (sched_init)"};
  const Index ids = field("ids");
  if (json_[ids].type != Type::kArray) throw OpError{"TypeError: ids must be a list"};
  for (Index e = JsonLine::first_child(ids), k = 0; k < json_[ids].size; ++k, e = json_.next(e)) {
    if (json_[e].type != Type::kString) throw OpError{"TypeError: ids must be strings"};
    const auto it = live_.find(json_[e].s);
    if (it == live_.end()) continue;
    const std::int64_t index = it->second;
    if (sched_->abort_request(*requests_[static_cast<std::size_t>(index)])) forget(index);
  }
  w.begin_object().end_object();
}

}  // namespace kvsim
