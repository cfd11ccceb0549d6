#include "sim/replay/v0_replayer.h"

#include <algorithm>
#include <charconv>
#include <limits>

namespace kvsim {

namespace {
using Index = JsonLine::Index;
using Type = JsonLine::Type;
using v0::Device;
using v0::SeqStatus;

constexpr std::int64_t kMaxBlocks = std::int64_t{1} << 26;
}  // namespace

V0Replayer::V0Replayer(ReplayOptions options) : Replayer(options) {}
V0Replayer::~V0Replayer() { reset(); }

void V0Replayer::reset() {
  groups_.clear();
  seqs_.clear();
  orphans_.clear();
  sched_.reset();
  bm_.reset();
  group_pool_.clear();
  free_groups_.clear();
  seq_pool_.clear();
  free_seqs_.clear();
  mode_ = Mode::kNone;
  dead_.reset();
  tainted_ = false;
  schedule_pending_ = false;
  bm_now_ = 0;
  bm_next_seq_ = 0;
}

void V0Replayer::dispatch(std::string_view op, JsonWriter& w) {
  if (op == "comment") {
    w.begin_object().end_object();
    return;
  }
  if (op == "bm_init") return op_bm_init(w);
  if (op == "sched_init") return op_sched_init(w);
  if (dead_) throw OpError{"EngineDead: " + *dead_};
  try {
    dispatch_mode_op(op, w);
  } catch (const v0::VllmError& e) {
    if (mode_ == Mode::kSched)
      dead_ = e.what();
    else
      tainted_ = true;
    throw OpError{e.what()};
  }
}

void V0Replayer::dispatch_mode_op(std::string_view op, JsonWriter& w) {
  if (mode_ == Mode::kNone) {
    if (op == "set_clock" || op == "snapshot" || op == "add_seq_group" || op == "schedule")
      throw OpError{"RuntimeError: no init op yet"};
    throw OpError{"ValueError: unknown op '" + std::string(op) + "'"};
  }
  // Ops of both modes.
  if (op == "add_seq_group") return op_add_seq_group(w);
  if (op == "append_token") return op_append_token(w);
  if (op == "computed") return op_computed(w);
  if (op == "get_block_table") return op_get_block_table(w);
  if (op == "snapshot") return op_snapshot(w);
  if (op == "get_num_free_blocks") {
    w.begin_object();
    write_free(w);
    w.end_object();
    return;
  }
  if (op == "hit_rate") {
    const Index d = json_.find(JsonLine::root(), "device");
    Device dev = Device::kGpu;
    if (!json_.is_null_or_absent(d)) {
      const std::string_view s = get_string("device");
      if (s == "cpu")
        dev = Device::kCpu;
      else if (s != "gpu")
        throw OpError{"ValueError: device must be \"gpu\" or \"cpu\""};
    }
    w.begin_object().key("rate").value(manager().hit_rate(dev)).end_object();
    return;
  }
  if (op == "reset_prefix_cache") {
    w.begin_object().key("ok").value(manager().reset_prefix_cache()).end_object();
    return;
  }
  if (op == "set_clock") {
    const double now = get_double_or("now", std::numeric_limits<double>::quiet_NaN());
    if (now != now) throw OpError{"KeyError: missing field 'now'"};
    if (mode_ == Mode::kBm)
      bm_now_ = now;
    else
      sched_->set_clock(now);
    w.begin_object().end_object();
    return;
  }
  // bm mode
  if (op == "can_allocate") return op_can_allocate(w);
  if (op == "allocate") return op_allocate(w);
  if (op == "can_append_slots") return op_can_append_slots(w);
  if (op == "append_slots") return op_append_slots(w);
  if (op == "can_swap_out") return op_can_swap_out(w);
  if (op == "swap_out") return op_swap(w, false);
  if (op == "can_swap_in") return op_can_swap_in(w);
  if (op == "swap_in") return op_swap(w, true);
  if (op == "fork") return op_fork(w);
  if (op == "free") return op_free(w);
  if (op == "remove_group") return op_remove_group(w);
  if (op == "set_status") return op_set_status(w);
  if (op == "mark_blocks_as_computed") {
    require_bm("mark_blocks_as_computed");
    bm_->mark_blocks_as_computed();
    w.begin_object().end_object();
    return;
  }
  if (op == "access") return op_access(w);
  if (op == "get_common_computed_block_ids") return op_common_computed(w);
  if (op == "get_num_cached_tokens") return op_num_cached_tokens(w);
  // sched mode
  if (op == "schedule") return op_schedule(w);
  if (op == "update") return op_update(w);
  if (op == "finish") return op_finish(w);
  if (op == "abort") return op_abort(w);
  throw OpError{"ValueError: unknown op '" + std::string(op) + "'"};
}

void V0Replayer::check_all_invariants() const {
  if (tainted_ || dead_) return;  // vLLM's own state after one of its errors: not checked
  std::string v;
  if (mode_ == Mode::kSched) v = sched_->find_violation();
  if (mode_ == Mode::kBm) v = bm_->find_violation();
  for (const auto& [id, s] : seqs_)
    if (v.empty() &&
        (s->seq_id != id || !s->group || groups_.find(s->group->request_id) == groups_.end()))
      v = "replayer: sequence " + std::to_string(id) + " is not in a tracked group";
  if (!v.empty()) {
    std::fprintf(stderr, "kvsim replay: invariant violated: %s\n", v.c_str());
    std::abort();
  }
}

// ---- helpers ------------------------------------------------------------------------------

v0::BlockManager& V0Replayer::manager() {
  if (mode_ == Mode::kBm) return *bm_;
  return sched_->block_manager();
}

void V0Replayer::require_bm(const char* op) const {
  if (mode_ != Mode::kBm) throw OpError{std::string("RuntimeError: ") + op + " needs bm mode"};
}

void V0Replayer::require_sched(const char* op) const {
  if (mode_ != Mode::kSched)
    throw OpError{std::string("RuntimeError: ") + op + " needs sched mode"};
}

v0::SequenceGroup& V0Replayer::group(std::string_view id) {
  const auto it = groups_.find(id);
  if (it == groups_.end()) throw OpError{"KeyError: unknown request '" + std::string(id) + "'"};
  return *it->second;
}

v0::Sequence& V0Replayer::seq(std::int64_t id) {
  const auto it = seqs_.find(id);
  if (it == seqs_.end()) throw OpError{"KeyError: unknown sequence " + std::to_string(id)};
  return *it->second;
}

double V0Replayer::get_double_or(std::string_view key, double dflt) const {
  const Index i = json_.find(JsonLine::root(), key);
  if (json_.is_null_or_absent(i)) return dflt;
  if (json_[i].type == Type::kInt) return static_cast<double>(json_[i].i);
  if (json_[i].type == Type::kDouble) return json_[i].d;
  throw OpError{"TypeError: '" + std::string(key) + "' must be a number"};
}

v0::Sequence& V0Replayer::new_seq(v0::SeqId id, std::span<const Token> prompt) {
  if (mode_ == Mode::kSched) return sched_->create_seq(id, prompt);
  v0::Sequence* s;
  if (free_seqs_.empty()) {
    s = seq_pool_.emplace_back(std::make_unique<v0::Sequence>()).get();
  } else {
    s = free_seqs_.back();
    free_seqs_.pop_back();
  }
  if (id < 0) {
    id = bm_next_seq_++;
  } else {
    bm_next_seq_ = std::max(bm_next_seq_, id + 1);
  }
  s->reset(id, prompt);
  s->slot = bm_->acquire_slot(id);
  return *s;
}

void V0Replayer::drop_group(v0::SequenceGroup& g, bool still_queued) {
  for (v0::Sequence* s : g.seqs()) seqs_.erase(s->seq_id);
  groups_.erase(g.request_id);
  if (mode_ == Mode::kSched) {
    if (still_queued)
      orphans_.push_back(&g);
    else
      sched_->retire_group(g);
    return;
  }
  for (v0::Sequence* s : g.seqs()) {
    bm_->release_slot(s->slot);
    free_seqs_.push_back(s);
  }
  free_groups_.push_back(&g);
}

void V0Replayer::write_ids(JsonWriter& w, std::span<const BlockId> ids) const {
  w.int_array(ids, [](BlockId b) { return to_int(b); });
}

void V0Replayer::write_pairs(JsonWriter& w, const std::vector<v0::BlockIdPair>& pairs) const {
  w.begin_array();
  for (const auto& [a, b] : pairs)
    w.begin_array().value(std::int64_t{a}).value(std::int64_t{b}).end_array();
  w.end_array();
}

void V0Replayer::write_free(JsonWriter& w) {
  w.key("free_gpu").value(std::int64_t{manager().num_free_gpu_blocks()});
  w.key("free_cpu").value(std::int64_t{manager().num_free_cpu_blocks()});
}

void V0Replayer::write_seq_key(JsonWriter& w, v0::SeqId id) {
  const auto r = std::to_chars(num_buf_, num_buf_ + sizeof num_buf_, id);
  w.key(std::string_view(num_buf_, static_cast<std::size_t>(r.ptr - num_buf_)));
}

void V0Replayer::write_tables_of(JsonWriter& w, const v0::SequenceGroup& g, bool running_only) {
  v0::BlockManager& m = manager();
  w.begin_object();
  for (const v0::Sequence* s : g.seqs()) {
    if (running_only ? s->status != SeqStatus::kRunning : !m.has_table(*s)) continue;
    write_seq_key(w, s->seq_id);
    write_ids(w, m.block_table(*s));
  }
  w.end_object();
}

// ---- init ---------------------------------------------------------------------------------

void V0Replayer::op_bm_init(JsonWriter& w) {
  const std::int64_t bs = get_int("block_size");
  const std::int64_t gpu = get_int("num_gpu_blocks");
  const std::int64_t cpu = get_int("num_cpu_blocks");
  const double watermark = get_double_or("watermark", 0.01);
  const bool caching = get_bool_or("enable_caching", false);
  const double clock = get_double_or("clock", 0);
  if (!json_.is_null_or_absent(json_.find(JsonLine::root(), "sliding_window")))
    throw OpError{"NotImplementedError: sliding_window is out of scope"};
  if (bs <= 0 || bs > (1 << 20)) throw OpError{"ValueError: block_size must be in 1..2^20"};
  if (gpu < 0 || cpu < 0 || gpu + cpu > kMaxBlocks)
    throw OpError{"ValueError: block counts must be in 0..2^26"};
  reset();
  mode_ = Mode::kBm;
  bm_now_ = clock;
  try {
    bm_ = std::make_unique<v0::BlockManager>(static_cast<std::int32_t>(bs),
                                             static_cast<std::int32_t>(gpu),
                                             static_cast<std::int32_t>(cpu), watermark, caching);
  } catch (const v0::VllmError& e) {
    reset();
    throw OpError{e.what()};
  }
  w.begin_object().end_object();
}

void V0Replayer::op_sched_init(JsonWriter& w) {
  v0::V0Config c;
  const std::int64_t bs = get_int("block_size");
  const std::int64_t gpu = get_int("num_gpu_blocks");
  const std::int64_t cpu = get_int("num_cpu_blocks");
  c.max_num_seqs = get_int("max_num_seqs");
  c.max_num_batched_tokens = get_int("max_num_batched_tokens");
  c.max_model_len = get_int("max_model_len");
  c.enable_chunked_prefill = get_bool_or("enable_chunked_prefill", false);
  c.enable_prefix_caching = get_bool_or("enable_prefix_caching", false);
  c.delay_factor = get_double_or("delay_factor", 0);
  const double clock = get_double_or("clock", 0);
  const Index mode = json_.find(JsonLine::root(), "preemption_mode");
  if (!json_.is_null_or_absent(mode)) {
    const std::string_view m = get_string("preemption_mode");
    if (m == "swap")
      c.preemption_mode = v0::PreemptionMode::kSwap;
    else if (m == "recompute")
      c.preemption_mode = v0::PreemptionMode::kRecompute;
    else
      throw OpError{"ValueError: preemption_mode must be null, \"swap\" or \"recompute\""};
  }
  const Index policy = json_.find(JsonLine::root(), "policy");
  if (!json_.is_null_or_absent(policy)) {
    const std::string_view p = get_string("policy");
    if (p == "priority")
      c.policy = v0::SchedulingPolicy::kPriority;
    else if (p != "fcfs")
      throw OpError{"ValueError: policy must be \"fcfs\" or \"priority\""};
  }
  if (!json_.is_null_or_absent(json_.find(JsonLine::root(), "sliding_window")))
    throw OpError{"NotImplementedError: sliding_window is out of scope"};
  if (bs <= 0 || bs > (1 << 20)) throw OpError{"ValueError: block_size must be in 1..2^20"};
  if (gpu < 0 || cpu < 0 || gpu + cpu > kMaxBlocks)
    throw OpError{"ValueError: block counts must be in 0..2^26"};
  c.block_size = static_cast<std::int32_t>(bs);
  c.num_gpu_blocks = static_cast<std::int32_t>(gpu);
  c.num_cpu_blocks = static_cast<std::int32_t>(cpu);
  reset();
  mode_ = Mode::kSched;
  if (std::string e = v0::v0_config_error(c); !e.empty()) {
    dead_ = "ValueError: " + e;  // vLLM's SchedulerConfig raised: no engine
    throw OpError{*dead_};
  }
  sched_ = std::make_unique<v0::Scheduler>(c);
  sched_->set_clock(clock);
  w.begin_object().end_object();
}

}  // namespace kvsim
