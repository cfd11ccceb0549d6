#include "sim/replay/v1_replayer.h"

#include "core/common/assert.h"
#include "sim/replay/offload_offm.h"
#include "sim/replay/offload_sched.h"
#include "sim/replay/pd_sched.h"

#include <algorithm>
#include <limits>

namespace kvsim {

namespace {
using Index = JsonLine::Index;
using Type = JsonLine::Type;

}  // namespace

V1Replayer::V1Replayer(Profile profile, ReplayOptions options)
    : Replayer(options), profile_(profile), v020_(v1_policy(profile).kv_cache_coordinator) {}
V1Replayer::~V1Replayer() { reset(); }

void V1Replayer::dispatch(std::string_view op, JsonWriter& w) {
  if (op == "allocate_slots") return v020_ ? op_allocate_slots_v020(w) : op_allocate_slots(w);
  if (op == "set_num_computed_tokens") return op_set_num_computed_tokens(w);
  if (op == "get_computed_blocks")
    return v020_ ? op_get_computed_blocks_v020(w) : op_get_computed_blocks(w);
  if (op == "add_request") return op_add_request(w);
  if (op == "append_output") return op_append_output(w);
  if (op == "schedule") return op_schedule(w);
  if (op == "update") return op_update(w);
  if (op == "finish") return op_free(w, true);
  if (op == "free") return op_free(w, false);
  if (op == "abort") return op_abort(w);
  if (op == "snapshot") return op_snapshot(w);
  if (op == "req_info") return op_req_info(w);
  if (op == "get_num_common_prefix_blocks")
    return v020_ ? op_common_prefix_v020(w) : op_common_prefix(w);
  if (op == "reset_prefix_cache") return op_reset_prefix_cache(w);
  if (op == "init") return op_init(w);
  if (op == "sched_init") return op_sched_init(w);
  if (op == "comment") {
    w.begin_object().end_object();
    return;
  }
  if (v020_) {
    if (op == "prefix_cache_stats") return op_prefix_cache_stats(w);
    if (op == "can_fit_full_sequence") return op_can_fit_full_sequence(w);
    if (op == "cache_blocks") return op_cache_blocks(w);
    if (op == "new_step") return op_new_step(w);
    if (op.starts_with("offload_")) return op_offload(op, w);
    if (op == "connector_cache_stats") return op_connector_cache_stats(w);
  }
  throw OpError{"ValueError: unknown op '" + std::string(op) + "'"};
}

Request& V1Replayer::live_request(std::string_view id) {
  const auto it = live_.find(id);
  if (it == live_.end()) throw OpError{"KeyError: unknown request '" + std::string(id) + "'"};
  return *requests_[static_cast<std::size_t>(it->second)];
}

// Ops that drive the manager directly would corrupt the scheduler's state in sched mode.
void V1Replayer::require_kvm_mode(const char* op) const {
  if (mode_ != Mode::kKvm)
    throw OpError{std::string("RuntimeError: ") + op + " needs kvm mode (an init op)"};
}

KVCacheManager& V1Replayer::manager() {
  if (mode_ == Mode::kKvm) return *kvm_;
  if (mode_ == Mode::kSched) return sched_->kv_cache_manager();
  throw OpError{"RuntimeError: no init op yet"};
}

void V1Replayer::forget(std::int64_t index) {
  live_.erase(names_[static_cast<std::size_t>(index)]);
  std::unique_ptr<Request>& r = requests_[static_cast<std::size_t>(index)];
  if (offload_ && offload_->worker.references(*r)) {
    offload_->zombies.push_back(std::move(r));
    return;
  }
  r.reset();
}

void V1Replayer::write_blocks(JsonWriter& w, const std::vector<BlockId>& blocks) const {
  w.begin_array();
  for (BlockId b : blocks) w.value(std::int64_t{to_int(b)});
  w.end_array();
}

void V1Replayer::write_queues(JsonWriter& w) const {
  w.key("running").begin_array();
  for (const Request* r : sched_->running()) w.value(name_of(*r));
  w.end_array().key("waiting").begin_array();
  for (const Request* r : sched_->waiting()) w.value(name_of(*r));
  w.end_array();
}

void V1Replayer::check_all_invariants() const {
  if (mode_ == Mode::kSched) {
    sched_->check_invariants();
    if (offload_) {
      KVSIM_ASSERT_NO_VIOLATION(offload_->connector.find_violation());
      KVSIM_ASSERT_NO_VIOLATION(offload_->worker.find_violation());
    }
    if (pd_) KVSIM_ASSERT_NO_VIOLATION(pd_->worker.find_violation());
  } else if (mode_ == Mode::kKvm) {
    std::vector<const Request*> live;
    for (const auto& r : requests_)
      if (r) live.push_back(r.get());
    kvm_->check_invariants(live);
  } else if (mode_ == Mode::kOffm) {
    KVSIM_ASSERT_NO_VIOLATION(offm_->manager().find_violation());
  }
}

// ---- init ---------------------------------------------------------------------------------

KVCacheConfig V1Replayer::read_kv_config() const {
  const std::int64_t bs = get_int("block_size");
  const std::int64_t blocks = get_int("num_gpu_blocks");
  const std::int64_t max_len = get_int("max_model_len");
  const bool caching = get_bool_or("enable_caching", true);
  const std::int64_t prealloc = get_int_or("num_preallocate_tokens", 64);
  const std::int64_t window = get_int_or("sliding_window", 0);
  const bool eagle = get_bool_or("use_eagle", false);
  if (bs <= 0 || bs > (1 << 20)) throw OpError{"ValueError: block_size must be in 1..2^20"};
  if (blocks <= 0 || blocks > (1 << 28))
    throw OpError{"ValueError: num_gpu_blocks must be in 1..2^28"};
  if (max_len <= 0) throw OpError{"ValueError: max_model_len must be > 0"};
  if (prealloc < 0) throw OpError{"ValueError: num_preallocate_tokens must be >= 0"};
  if (window < 0) throw OpError{"ValueError: sliding_window must be >= 0"};
  if (eagle && !v1_policy(profile_).lookahead_slots)
    throw OpError{"TypeError: this release's KVCacheManager has no use_eagle"};
  KVCacheConfig c;
  c.block_size = static_cast<std::int32_t>(bs);
  c.num_gpu_blocks = static_cast<std::int32_t>(blocks);
  c.max_model_len = max_len;
  c.enable_caching = caching;
  c.num_preallocate_tokens = prealloc;
  c.sliding_window = window;
  c.use_eagle = eagle;
  if (v020_)
    read_v020_kv_fields(c);
  else if (!json_.is_null_or_absent(json_.find(JsonLine::root(), "kv_cache_groups")))
    throw OpError{"TypeError: this release has one KV cache group (no kv_cache_groups)"};
  return c;
}

void V1Replayer::reset() {
  // Requests hold hash references into the manager: drop them before the manager goes.
  num_added_ = 0;
  requests_.clear();
  names_.clear();
  live_.clear();
  kvm_.reset();
  offload_.reset();  // (its keys hold references in the scheduler's hash table)
  pd_.reset();
  sched_.reset();
  offm_.reset();
  schedule_pending_ = false;
}

void V1Replayer::op_init(JsonWriter& w) {
  const KVCacheConfig c = read_kv_config();
  KVCacheConfig kc = c;
  if (v020_) {  // kvm mode: no admission cap unless the op gives the scheduler's budget
    kc.max_num_batched_tokens = get_int_or("max_num_batched_tokens", 0);
    if (kc.max_num_batched_tokens < 0)
      throw OpError{"ValueError: max_num_batched_tokens must be > 0"};
  }
  reset();
  grouped_ = v020_ && !json_.is_null_or_absent(json_.find(JsonLine::root(), "kv_cache_groups"));
  kvm_ = std::make_unique<KVCacheManager>(kc, v1_policy(profile_));
  mode_ = Mode::kKvm;
  w.begin_object().end_object();
}

void V1Replayer::op_sched_init(JsonWriter& w) {
  const KVCacheConfig c = read_kv_config();
  SchedulerConfig sc;
  sc.max_model_len = c.max_model_len;
  sc.max_num_seqs = get_int("max_num_seqs");
  sc.max_num_batched_tokens = get_int("max_num_batched_tokens");
  sc.long_prefill_token_threshold = get_int_or("long_prefill_token_threshold", 0);
  sc.num_lookahead_tokens = get_int_or("num_lookahead_tokens", 0);
  if (sc.max_num_seqs <= 0 || sc.max_num_batched_tokens <= 0)
    throw OpError{"ValueError: max_num_seqs and max_num_batched_tokens must be > 0"};
  if (sc.long_prefill_token_threshold < 0 || sc.num_lookahead_tokens < 0 ||
      sc.num_lookahead_tokens > (1 << 30))
    throw OpError{"ValueError: long_prefill_token_threshold and num_lookahead_tokens must be >= 0"};
  if (sc.num_lookahead_tokens > 0 && !v1_policy(profile_).lookahead_slots)
    throw OpError{"TypeError: this release's scheduler has no lookahead tokens"};
  // vLLM's sliding-window manager fails an assertion inside schedule() once such a window nulls
  // the parent of a block to cache; kvsim's scheduler stops on it, so the op is refused here.
  if (v1_policy(profile_).sliding_window_manager && !v020_ && c.enable_caching &&
      c.sliding_window > 0 && c.sliding_window <= c.block_size)
    throw OpError{"ValueError: sliding_window must exceed block_size in sched mode"};
  if (v020_) {
    sc.enable_chunked_prefill = get_bool_or("enable_chunked_prefill", true);
    sc.scheduler_reserve_full_isl = get_bool_or("scheduler_reserve_full_isl", true);
    sc.async_scheduling = get_bool_or("async_scheduling", false);
    sc.max_num_scheduled_tokens = get_int_or("max_num_scheduled_tokens", 0);
    if (sc.max_num_scheduled_tokens < 0)
      throw OpError{"ValueError: max_num_scheduled_tokens must be > 0"};
    const Index policy = json_.find(JsonLine::root(), "policy");
    if (!json_.is_null_or_absent(policy)) {
      const std::string_view p = get_string("policy");
      if (p != "fcfs" && p != "priority")
        throw OpError{"ValueError: Unknown scheduling policy: " + std::string(p)};
      sc.priority_policy = p == "priority";
    }
  }
  const Index offload = json_.find(JsonLine::root(), "kv_offload");
  const bool with_offload = v020_ && !json_.is_null_or_absent(offload);
  bool manual = false, kv_events = false;
  const OffloadingConnectorConfig oc =
      with_offload ? read_kv_offload(offload, c, manual, kv_events) : OffloadingConnectorConfig{};
  const Index pd = json_.find(JsonLine::root(), "kv_pd");
  const bool with_pd = v020_ && !json_.is_null_or_absent(pd);
  if (with_pd && with_offload)
    throw OpError{"ValueError: kv_pd and kv_offload cannot be combined (one KV connector)"};
  const PdConfig pdc = with_pd ? read_kv_pd(pd, c) : PdConfig{};
  reset();
  grouped_ = v020_ && !json_.is_null_or_absent(json_.find(JsonLine::root(), "kv_cache_groups"));
  sched_ = std::make_unique<Scheduler>(sc, c, profile_);
  if (with_offload) start_offload(oc, manual, kv_events);
  if (with_pd) start_pd(pdc);
  mode_ = Mode::kSched;
  w.begin_object().end_object();
}

// ---- requests -----------------------------------------------------------------------------

void V1Replayer::op_add_request(JsonWriter& w) {
  if (mode_ == Mode::kNone) throw OpError{"RuntimeError: no init op yet"};
  const std::string_view id = get_string("id");
  if (live_.count(id)) throw OpError{"ValueError: request '" + std::string(id) + "' is live"};
  std::vector<Token> prompt;
  read_tokens(field("prompt"), prompt);
  if (prompt.empty()) throw OpError{"ValueError: the prompt must not be empty"};
  SamplingLimits lim;
  lim.max_tokens = get_int_or("max_tokens", 16);
  if (lim.max_tokens < 1) throw OpError{"ValueError: max_tokens must be at least 1"};
  const std::int64_t eos = get_int_or("eos_token_id", std::numeric_limits<std::int64_t>::min());
  if (eos != std::numeric_limits<std::int64_t>::min()) lim.eos_token_id = static_cast<Token>(eos);
  lim.ignore_eos = get_bool_or("ignore_eos", false);
  const bool prompt_logprobs =
      !json_.is_null_or_absent(json_.find(JsonLine::root(), "prompt_logprobs"));
  const Index stops = json_.find(JsonLine::root(), "stop_token_ids");
  if (!json_.is_null_or_absent(stops)) read_tokens(stops, lim.stop_token_ids);

  std::vector<MMPlaceholder> mm;
  const Index pos = json_.find(JsonLine::root(), "mm_positions");
  if (!json_.is_null_or_absent(pos)) {
    if (json_[pos].type != Type::kArray) throw OpError{"TypeError: mm_positions must be a list"};
    for (Index e = JsonLine::first_child(pos), k = 0; k < json_[pos].size; ++k, e = json_.next(e)) {
      const Index off = json_.find(e, "offset");
      const Index len = json_.find(e, "length");
      if (off == JsonLine::kNone || len == JsonLine::kNone)
        throw OpError{"KeyError: mm_positions entries need 'offset' and 'length'"};
      mm.push_back({int_value(off, "offset"), int_value(len, "length"), {}});
    }
    const Index hashes = json_.find(JsonLine::root(), "mm_hashes");
    const bool listed = !json_.is_null_or_absent(hashes);
    if (listed && json_[hashes].type != Type::kArray)
      throw OpError{"TypeError: mm_hashes must be a list"};
    const std::size_t num_listed = listed ? json_[hashes].size : 0;
    // v0.20: an item without an identifier (none listed for it, or null) gets "hash_<index>";
    // the older releases need one string per item.
    if (num_listed > mm.size() || (!v020_ && num_listed != mm.size()))
      throw OpError{"ValueError: mm_positions and mm_hashes must have the same length"};
    Index e = listed ? JsonLine::first_child(hashes) : JsonLine::kNone;
    for (std::size_t k = 0; k < mm.size(); ++k) {
      const bool named = k < num_listed && json_[e].type == Type::kString;
      if (k < num_listed && !named && (!v020_ || json_[e].type != Type::kNull))
        throw OpError{"TypeError: mm_hashes must be strings"};
      mm[k].hash = named ? std::string(json_[e].s) : "hash_" + std::to_string(k);
      if (k + 1 < num_listed) e = json_.next(e);
    }
  }
  if (v020_) {
    lim.min_tokens = get_int_or("min_tokens", 0);
    if (lim.min_tokens < 0) throw OpError{"ValueError: min_tokens must be >= 0"};
  }
  const auto index = static_cast<std::int64_t>(requests_.size());
  requests_.push_back(
      std::make_unique<Request>(index, std::move(prompt), std::move(lim), std::move(mm)));
  Request& r = *requests_.back();
  r.wants_prompt_logprobs = prompt_logprobs;
  names_.emplace_back(id);
  live_.emplace(names_.back(), index);
  if (v020_) {
    r.request_id = std::string(id);
    r.priority = get_int_or("priority", 0);
    const Index at = json_.find(JsonLine::root(), "arrival_time");
    r.arrival_time = static_cast<double>(num_added_);
    if (!json_.is_null_or_absent(at)) {
      if (json_[at].type == Type::kDouble)
        r.arrival_time = json_[at].d;
      else
        r.arrival_time = static_cast<double>(int_value(at, "arrival_time"));
    }
    const Index salt = json_.find(JsonLine::root(), "cache_salt");
    if (!json_.is_null_or_absent(salt)) r.cache_salt = std::string(get_string("cache_salt"));
    const Index lora = json_.find(JsonLine::root(), "lora_name");
    if (!json_.is_null_or_absent(lora)) r.lora_name = std::string(get_string("lora_name"));
    if (mode_ == Mode::kKvm) kvm_->add_request(r);
  }
  ++num_added_;
  if (mode_ == Mode::kSched && offload_) offload_read_transfer_params(r);
  if (mode_ == Mode::kSched && pd_) pd_read_transfer_params(r);
  if (mode_ == Mode::kSched) sched_->add_request(r);
  w.begin_object().end_object();
}

void V1Replayer::op_get_computed_blocks(JsonWriter& w) {
  require_kvm_mode("get_computed_blocks");
  KVCacheManager& kv = manager();
  Request& r = live_request(get_string("id"));
  const std::int64_t n = kv.get_computed_blocks(r, scratch_blocks_);
  w.begin_object().key("blocks");
  write_blocks(w, scratch_blocks_);
  w.key("num_computed_tokens").value(n).end_object();
}

void V1Replayer::op_allocate_slots(JsonWriter& w) {
  require_kvm_mode("allocate_slots");
  KVCacheManager& kv = manager();
  Request& r = live_request(get_string("id"));
  const std::int64_t n = get_int("num_tokens");
  if (n < 0) throw OpError{"ValueError: num_tokens must be greater than 0"};
  const std::int64_t lookahead = get_int_or("num_lookahead_tokens", 0);
  if (lookahead < 0 || lookahead > (1 << 30))
    throw OpError{"ValueError: num_lookahead_tokens must be in 0..2^30"};
  if (lookahead > 0 && !kv.policy().lookahead_slots)
    throw OpError{"TypeError: allocate_slots() got an unexpected keyword 'num_lookahead_tokens'"};
  scratch_blocks_.clear();
  const Index hits = json_.find(JsonLine::root(), "new_computed_blocks");
  if (!json_.is_null_or_absent(hits)) {
    if (json_[hits].type != Type::kArray)
      throw OpError{"TypeError: new_computed_blocks must be a list"};
    for (Index e = JsonLine::first_child(hits), k = 0; k < json_[hits].size;
         ++k, e = json_.next(e)) {
      const std::int64_t b = int_value(e, "block id");
      if (b < 0 || b >= kv.pool().num_blocks()) throw OpError{"IndexError: block id out of range"};
      scratch_blocks_.push_back(BlockId{static_cast<std::int32_t>(b)});
    }
  }
  const AllocResult res = kv.allocate_slots(r, n, scratch_blocks_, lookahead);
  if (res.status == AllocStatus::kNoFreeBlocks) {
    w.begin_object().key("blocks").null().end_object();
    return;
  }
  if (!res.ok()) throw OpError{alloc_status_message(res.status)};
  w.begin_object().key("blocks").begin_array();
  const auto& table = r.blocks;
  for (std::size_t i = table.size() - static_cast<std::size_t>(res.num_new_blocks);
       i < table.size(); ++i)
    w.value(std::int64_t{to_int(table[i])});
  w.end_array().end_object();
}

void V1Replayer::op_append_output(JsonWriter& w) {
  require_kvm_mode("append_output");
  Request& r = live_request(get_string("id"));
  read_tokens(field("tokens"), scratch_tokens_);
  for (Token t : scratch_tokens_) r.append_output_token(t);  // (v0.20: hashed when read)
  w.begin_object().end_object();
}

void V1Replayer::op_set_num_computed_tokens(JsonWriter& w) {
  require_kvm_mode("set_num_computed_tokens");
  Request& r = live_request(get_string("id"));
  const std::int64_t n = get_int("n");
  if (n < 0) throw OpError{"ValueError: n must be >= 0"};
  r.num_computed_tokens = n;
  w.begin_object().end_object();
}

void V1Replayer::op_free(JsonWriter& w, bool forget_request) {
  require_kvm_mode(forget_request ? "finish" : "free");
  const std::string_view id = get_string("id");
  Request& r = live_request(id);
  kvm_->free(r);
  if (forget_request) {
    kvm_->release_request(r);
    forget(r.index());
  }
  w.begin_object().end_object();
}

void V1Replayer::op_common_prefix(JsonWriter& w) {
  KVCacheManager& kv = manager();
  Request& r = live_request(get_string("id"));
  const std::int64_t num_running = get_int("num_running");
  r.status = RequestStatus::kRunning;
  w.begin_object().key("n").value(std::int64_t{kv.get_num_common_prefix_blocks(r, num_running)});
  w.end_object();
}

void V1Replayer::op_reset_prefix_cache(JsonWriter& w) {
  const bool reset_running = get_bool_or("reset_running_requests", false);
  const bool reset_connector = get_bool_or("reset_connector", false);
  if ((reset_running || reset_connector) && !(v020_ && mode_ == Mode::kSched))
    throw OpError{"TypeError: reset_running_requests and reset_connector need vllm-0.20's "
                  "scheduler (sched mode)"};
  const bool ok = mode_ == Mode::kSched && v020_
                      ? sched_->reset_prefix_cache(reset_running, reset_connector)
                      : manager().reset_prefix_cache();
  if (mode_ == Mode::kSched && v020_ && sched_->step_error()[0] != 0)
    throw OpError{sched_->step_error()};
  w.begin_object().key("ok").value(ok).end_object();
}

void V1Replayer::op_req_info(JsonWriter& w) {
  KVCacheManager& kv = manager();
  Request& r = live_request(get_string("id"));
  kv.sync_block_hashes(r);
  w.begin_object();
  w.key("num_tokens").value(r.num_tokens());
  w.key("num_computed_tokens").value(r.num_computed_tokens);
  w.key("num_output_tokens").value(r.num_output_tokens());
  w.key("num_block_hashes").value(static_cast<std::int64_t>(r.block_hashes.size()));
  w.key("block_hash_extra_keys").begin_array();
  for (HashId h : r.block_hashes) {
    const ExtraKeysId e = kv.hashes().extra(h);
    if (e == kExtraNone) {
      w.null();
      continue;
    }
    w.begin_array();
    for (const std::string& s : kv.hashes().extra_strings(e)) {
      if (!v020_) {
        w.value(std::string_view(s));
      } else if (s[0] == 's') {  // KVCacheCoordinator's encoding: "s<text>", "p<id>\0<offset>"
        w.value(std::string_view(s).substr(1));
      } else {
        const std::size_t nul = s.find('\0');
        w.begin_array().value(std::string_view(s).substr(1, nul - 1));
        w.value(static_cast<std::int64_t>(std::stoll(s.substr(nul + 1)))).end_array();
      }
    }
    w.end_array();
  }
  w.end_array();
  w.key("blocks");
  write_tables(w, r);
  w.end_object();
}

void V1Replayer::op_snapshot(JsonWriter& w) {
  KVCacheManager& kv = manager();
  const BlockPool& pool = kv.pool();
  const bool brief = get_bool_or("brief", false);
  w.begin_object();
  w.key("num_free_blocks").value(std::int64_t{pool.num_free_blocks()});
  w.key("usage").value(kv.usage());
  w.key("num_cached_hashes").value(pool.num_cached_hashes());
  w.key("num_cached_blocks").value(pool.num_cached_blocks());
  // Groups of blocks sharing one hash (size >= 2), sorted by their first id.
  std::vector<std::vector<BlockId>> groups;
  for (std::int32_t b = 0; b < pool.num_blocks(); ++b) {
    const KVCacheBlock& blk = pool.block(BlockId{b});
    if (blk.block_hash == kNoHash || blk.hash_prev != kNoBlock || blk.hash_next == kNoBlock)
      continue;
    groups.emplace_back();
    pool.cached_blocks_of(blk.block_hash, groups.back());
  }
  std::sort(groups.begin(), groups.end(),
            [](const auto& a, const auto& b) { return to_int(a.front()) < to_int(b.front()); });
  w.key("dup_hashes").begin_array();
  for (const auto& g : groups) write_blocks(w, g);
  w.end_array();
  w.key("req_blocks").begin_object();
  for (std::size_t i = 0; i < requests_.size(); ++i) {
    if (!requests_[i]) continue;
    bool holds = !requests_[i]->blocks.empty();
    for (const KVGroupTable& t : requests_[i]->kv_groups) holds = holds || !t.blocks.empty();
    if (!holds) continue;
    w.key(names_[i]);
    write_tables(w, *requests_[i]);
  }
  w.end_object();
  if (!brief) {
    w.key("free_queue").begin_array();
    for (const KVCacheBlock& blk : pool.free_queue())
      w.value(std::int64_t{to_int(pool.id_of(blk))});
    w.end_array();
    w.key("cached_block_ids").begin_array();
    for (std::int32_t b = 0; b < pool.num_blocks(); ++b)
      if (pool.block(BlockId{b}).block_hash != kNoHash) w.value(std::int64_t{b});
    w.end_array();
    w.key("ref_cnts").begin_array();
    for (std::int32_t b = 0; b < pool.num_blocks(); ++b)  // v0.20: the null block's is not kept
      w.value(v020_ && BlockId{b} == pool.null_block()
                  ? std::int64_t{0}
                  : std::int64_t{pool.block(BlockId{b}).ref_cnt});
    w.end_array();
  }
  if (mode_ == Mode::kSched) {
    write_queues(w);
    w.key("requests").begin_object();
    for (std::size_t i = 0; i < requests_.size(); ++i) {
      if (!requests_[i]) continue;
      const Request& r = *requests_[i];
      w.key(names_[i]).begin_object();
      w.key("num_tokens").value(r.num_tokens());
      w.key("num_computed_tokens").value(r.num_computed_tokens);
      w.key("num_output_tokens").value(r.num_output_tokens());
      w.key("status").value(status_name(r.status));
      w.end_object();
    }
    w.end_object();
    if (offload_) write_offload_snapshot(w);
    if (pd_) write_pd_snapshot(w);
  }
  w.end_object();
}

}  // namespace kvsim
