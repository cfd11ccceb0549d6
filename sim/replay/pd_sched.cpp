// sched mode with vLLM v0.20.1's NixlConnector (shared/spec/ops-format-pd.md): sched_init's
// kv_pd, add_request's kv_transfer_params, the clock, the schedule / update / abort / snapshot
// additions.

#include "sim/replay/pd_sched.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "sim/replay/v1_replayer.h"

namespace kvsim {

namespace {
using Index = JsonLine::Index;
using Type = JsonLine::Type;

// Python's bool(value) of a JSON value.
bool truthy(const JsonLine& j, Index i) {
  if (j.is_null_or_absent(i)) return false;
  const JsonLine::Value& v = j[i];
  switch (v.type) {
    case Type::kBool:
      return v.b;
    case Type::kInt:
      return v.i != 0;
    case Type::kDouble:
      return v.d != 0;
    case Type::kString:
      return !v.s.empty();
    case Type::kArray:
    case Type::kObject:
      return v.size > 0;
    default:
      return false;
  }
}

void write_value(const JsonLine& j, Index i, JsonWriter& w) {
  const JsonLine::Value& v = j[i];
  switch (v.type) {
    case Type::kNull:
      w.null();
      break;
    case Type::kBool:
      w.value(v.b);
      break;
    case Type::kInt:
      w.value(v.i);
      break;
    case Type::kDouble:
      w.value(v.d);
      break;
    case Type::kString:
      w.value(v.s);
      break;
    case Type::kArray: {
      w.begin_array();
      Index e = JsonLine::first_child(i);
      for (std::uint32_t k = 0; k < v.size; ++k, e = j.next(e)) write_value(j, e, w);
      w.end_array();
      break;
    }
    case Type::kObject: {
      w.begin_object();
      Index e = JsonLine::first_child(i);
      for (std::uint32_t k = 0; k < v.size; ++k) {
        w.key(j[e].s);
        e = j.next(e);
        write_value(j, e, w);
        e = j.next(e);
      }
      w.end_object();
      break;
    }
  }
}

// The JSON text of member `key` of `obj` ("null" when absent).
std::string json_text(const JsonLine& j, Index obj, std::string_view key) {
  const Index i = j.find(obj, key);
  if (i == JsonLine::kNone) return "null";
  OutBuf buf;
  JsonWriter w(buf);
  write_value(j, i, w);
  return std::string(buf.view());
}

void write_strings(JsonWriter& w, const std::vector<std::string>& ids) {
  w.begin_array();
  for (const std::string& id : ids) w.value(std::string_view(id));
  w.end_array();
}
}  // namespace

PdConfig V1Replayer::read_kv_pd(Index obj, const KVCacheConfig& c) const {
  if (json_[obj].type != Type::kObject) throw OpError{"TypeError: kv_pd must be an object"};
  static constexpr std::string_view kFields[] = {"engine_id",
                                                 "kv_role",
                                                 "side_channel_host",
                                                 "side_channel_port",
                                                 "abort_timeout",
                                                 "tp_size",
                                                 "completion",
                                                 "start_time",
                                                 "kv_load_failure_policy",
                                                 "disable_hybrid_kv_cache_manager"};
  for (Index k = JsonLine::first_child(obj), i = 0; i < json_[obj].size; ++i) {
    const std::string_view name = json_[k].s;
    if (std::find(std::begin(kFields), std::end(kFields), name) == std::end(kFields))
      throw OpError{"ValueError: unknown kv_pd field '" + std::string(name) + "'"};
    k = json_.next(json_.next(k));  // past the key and its value
  }
  const auto member = [&](std::string_view key) {
    const Index i = json_.find(obj, key);
    return json_.is_null_or_absent(i) ? JsonLine::kNone : i;
  };
  const auto string_or = [&](std::string_view key, std::string_view dflt) {
    const Index i = member(key);
    if (i == JsonLine::kNone) return std::string(dflt);
    if (json_[i].type != Type::kString)
      throw OpError{"TypeError: kv_pd '" + std::string(key) + "' must be a string"};
    return std::string(json_[i].s);
  };
  const auto number_or = [&](std::string_view key, double dflt) {
    const Index i = member(key);
    if (i == JsonLine::kNone) return dflt;
    if (json_[i].type == Type::kInt) return static_cast<double>(json_[i].i);
    if (json_[i].type == Type::kDouble && std::isfinite(json_[i].d)) return json_[i].d;
    throw OpError{"TypeError: kv_pd '" + std::string(key) + "' must be a number"};
  };
  const auto int_or = [&](std::string_view key, std::int64_t dflt) {
    const Index i = member(key);
    if (i == JsonLine::kNone) return dflt;
    if (json_[i].type != Type::kInt)
      throw OpError{"TypeError: kv_pd '" + std::string(key) + "' must be an integer"};
    return json_[i].i;
  };
  PdConfig pd;
  pd.engine_id = string_or("engine_id", "oracle-engine");
  const std::string role = string_or("kv_role", "kv_both");
  if (role != "kv_producer" && role != "kv_consumer" && role != "kv_both")
    throw OpError{"ValueError: Unsupported kv_role: " + role};
  pd.host = string_or("side_channel_host", "localhost");
  pd.port = int_or("side_channel_port", 5600);
  if (pd.port < 0 || pd.port > 65535)
    throw OpError{"ValueError: side_channel_port must be in 0..65535"};
  pd.connector.abort_timeout_s = number_or("abort_timeout", 480);
  pd.tp_size = int_or("tp_size", 1);
  if (pd.tp_size < 1 || pd.tp_size > (1 << 20)) throw OpError{"ValueError: tp_size must be >= 1"};
  const std::string completion = string_or("completion", "manual");
  if (completion != "manual" && completion != "step")
    throw OpError{"ValueError: completion must be 'manual' or 'step'"};
  pd.step_completion = completion == "step";
  pd.start_time_s = number_or("start_time", 0.0);
  const std::string failure = string_or("kv_load_failure_policy", "fail");
  if (failure != "fail" && failure != "recompute")
    throw OpError{"ValueError: kv_load_failure_policy must be 'fail' or 'recompute'"};
  bool disable_hybrid = false;
  if (const Index i = member("disable_hybrid_kv_cache_manager"); i != JsonLine::kNone) {
    if (json_[i].type != Type::kBool)
      throw OpError{"TypeError: kv_pd 'disable_hybrid_kv_cache_manager' must be a boolean"};
    disable_hybrid = json_[i].b;
  }
  // One KV cache group (hybrid and mamba models with P/D are not simulated).
  if (c.kv_cache_groups.size() > 1 ||
      (c.kv_cache_groups.size() == 1 && c.kv_cache_groups[0].kind == KVGroupKind::kMamba))
    throw OpError{
        "NotImplementedError: P/D with several KV cache groups or mamba is not simulated"};
  // get_sw_clipped_blocks: a sliding-window group keeps its last cdiv(window, block) + 1 blocks
  // when the hybrid manager is on.
  std::int64_t window = c.sliding_window;
  std::int64_t bs = c.block_size;
  if (c.kv_cache_groups.size() == 1) {
    window = c.kv_cache_groups[0].kind == KVGroupKind::kSlidingWindow
                 ? c.kv_cache_groups[0].sliding_window
                 : 0;
    bs = c.kv_cache_groups[0].block_size;
  }
  if (!disable_hybrid && window > 0) pd.connector.sw_blocks = (window + bs - 1) / bs + 1;
  return pd;
}

void V1Replayer::start_pd(const PdConfig& config) {
  sched_->kv_cache_manager().coordinator()->hash_without_caching();  // EngineCore hashes for it
  pd_ = std::make_unique<PdSched>(config);
  sched_->set_connector(&pd_->connector);
}

void V1Replayer::pd_read_transfer_params(const Request& r) {
  const Index params = json_.find(JsonLine::root(), "kv_transfer_params");
  PdParams p;
  PdSched::Remote remote{"null", "null", "null"};
  if (!json_.is_null_or_absent(params)) {
    if (json_[params].type != Type::kObject)
      throw OpError{"TypeError: kv_transfer_params must be an object"};
    p.present = json_[params].size > 0;
    p.do_remote_prefill = truthy(json_, json_.find(params, "do_remote_prefill"));
    p.do_remote_decode = truthy(json_, json_.find(params, "do_remote_decode"));
    p.remote_block_ids = truthy(json_, json_.find(params, "remote_block_ids"));
    p.remote_keys = true;
    for (const std::string_view k :
         {"remote_engine_id", "remote_request_id", "remote_host", "remote_port"})
      p.remote_keys = p.remote_keys && json_.find(params, k) != JsonLine::kNone;
    p.remote_meta = p.remote_keys && json_.find(params, "remote_block_ids") != JsonLine::kNone;
    remote = {json_text(json_, params, "remote_block_ids"),
              json_text(json_, params, "remote_engine_id"),
              json_text(json_, params, "remote_request_id")};
  }
  pd_->connector.set_params(r, p);
  const auto i = static_cast<std::size_t>(r.index());
  if (pd_->remote.size() <= i) pd_->remote.resize(i + 1);
  pd_->remote[i] = std::move(remote);
}

void V1Replayer::pd_set_clock() {
  const Index now = json_.find(JsonLine::root(), "now");
  if (json_.is_null_or_absent(now)) return;
  double t = 0;
  if (json_[now].type == Type::kInt)
    t = static_cast<double>(json_[now].i);
  else if (json_[now].type == Type::kDouble && std::isfinite(json_[now].d))
    t = json_[now].d;
  else
    throw OpError{"TypeError: now must be a number"};
  pd_->now_s = std::max(pd_->now_s, t);  // never backwards
  pd_->connector.set_now(pd_->now_s);
}

void V1Replayer::pd_record_step() {
  // The step's metadata (none when vLLM raised before building it).
  if (sched_->step_error()[0] != 0)
    pd_->steps.emplace_back();
  else
    pd_->steps.push_back(pd_->connector.meta());
}

void V1Replayer::pd_write_queue_keys(JsonWriter& w) const {
  write_skipped(w);
  std::vector<std::string_view> ids;
  for (const Request* r : sched_->skipped_waiting())
    if (r->status == RequestStatus::kWaitingForRemoteKvs) ids.push_back(name_of(*r));
  w.key("waiting_for_remote_kvs");
  write_sorted_ids(w, ids);
  std::vector<const Request*> held(sched_->held().begin(), sched_->held().end());
  std::sort(held.begin(), held.end(),
            [&](const Request* a, const Request* b) { return name_of(*a) < name_of(*b); });
  w.key("held").begin_object();
  for (const Request* r : held) {
    w.key(name_of(*r));
    write_tables(w, *r);
  }
  w.end_object();
}

void V1Replayer::pd_after_schedule(JsonWriter& w) {
  const NixlConnector& c = pd_->connector;
  pd_write_queue_keys(w);
  w.key("pd").begin_object().key("now").value(pd_->now_s);
  w.key("lookups").begin_array();
  for (const NixlLookup& l : c.lookups()) {
    w.begin_object().key("id").value(name_of(*l.request)).key("local").value(l.local);
    w.key("external").value(l.external).key("load_async").value(l.load_async).end_object();
  }
  w.end_array().key("to_remote_kvs").begin_array();
  for (const Request* r : c.to_remote()) {
    w.begin_object().key("id").value(name_of(*r));
    w.key("num_computed_tokens").value(r->num_computed_tokens).key("block_ids");
    write_tables(w, *r);
    w.end_object();
  }
  w.end_array().key("promoted").begin_array();
  for (const Scheduler::Promotion& p : sched_->promoted()) {
    const Request& r = *p.request;
    w.begin_object().key("id").value(name_of(r));
    w.key("num_computed_tokens").value(p.num_computed_tokens).key("cached_block_ids");
    const std::vector<BlockId>& table = r.kv_groups[0].blocks;
    w.int_array(std::span<const BlockId>(table).subspan(
                    static_cast<std::size_t>(p.first_cached),
                    static_cast<std::size_t>(p.end_cached - p.first_cached)),
                [](BlockId b) { return to_int(b); });
    w.key("failed").value(false).end_object();
  }
  w.end_array().key("recv").begin_array();
  const NixlStepMeta& m = pd_->steps.back();
  std::vector<const NixlRecv*> recv;
  for (const NixlRecv& r : m.reqs_to_recv) recv.push_back(&r);
  std::sort(recv.begin(), recv.end(),
            [](const NixlRecv* a, const NixlRecv* b) { return a->id < b->id; });
  for (const NixlRecv* r : recv) {
    w.begin_object().key("id").value(std::string_view(r->id)).key("local_block_ids");
    pd_write_local_blocks(w, *r);
    w.end_object();
  }
  w.end_array().key("send").begin_array();
  for (const auto& [id, expiry] : m.reqs_to_send)
    w.begin_array().value(std::string_view(id)).value(expiry).end_array();
  w.end_array().key("in_batch");
  write_strings(w, m.reqs_in_batch);
  w.key("not_processed");
  write_strings(w, m.reqs_not_processed);
  w.end_object();
}

void V1Replayer::pd_write_local_blocks(JsonWriter& w, const NixlRecv& r) const {
  // vLLM's local_block_ids: one list per group, or () for a notification only.
  if (r.notify_only) {
    w.begin_array().end_array();
    return;
  }
  if (grouped_) w.begin_array();
  w.int_array(r.local_block_ids, [](BlockId b) { return to_int(b); });
  if (grouped_) w.end_array();
}

void V1Replayer::pd_before_update() {
  PdSched& pd = *pd_;
  // The op's fields first: a bad one leaves the step in flight, as if the op never came.
  const auto read_ids = [&](std::string_view key, std::vector<std::string>& out) {
    out.clear();
    const Index ids = json_.find(JsonLine::root(), key);
    if (json_.is_null_or_absent(ids)) return;
    if (json_[ids].type != Type::kArray)
      throw OpError{"TypeError: '" + std::string(key) + "' must be a list"};
    for (Index e = JsonLine::first_child(ids), k = 0; k < json_[ids].size; ++k, e = json_.next(e)) {
      if (json_[e].type != Type::kString) throw OpError{"TypeError: ids must be strings"};
      out.emplace_back(json_[e].s);
    }
  };
  std::vector<std::string> reads_done, notified;
  read_ids("finished_recving", reads_done);
  read_ids("finished_sending", notified);
  const Index all = json_.find(JsonLine::root(), "complete_all");
  if (!json_.is_null_or_absent(all) && json_[all].type != Type::kBool)
    throw OpError{"TypeError: complete_all must be a boolean"};
  pd_set_clock();
  KVSIM_ASSERT(!pd.steps.empty(), "an update without its step's metadata");
  const NixlStepMeta meta = std::move(pd.steps.front());
  pd.steps.pop_front();
  std::vector<const NixlRecv*> started, notify_only;
  pd.worker.start_load_kv(meta, started, notify_only);
  pd.started.clear();
  pd.notify_only.clear();
  for (const NixlRecv* r : started) pd.started.push_back(*r);
  for (const NixlRecv* r : notify_only) pd.notify_only.push_back(*r);
  pd.ignored_recving.clear();
  pd.ignored_notifs.clear();
  for (const std::string& id : reads_done)
    if (!pd.worker.complete_read(id)) pd.ignored_recving.push_back(id);
  if (pd.config.step_completion || (!json_.is_null_or_absent(all) && json_[all].b))
    pd.worker.complete_all_reads();
  for (const std::string& id : notified)
    if (!pd.worker.notify(id)) pd.ignored_notifs.push_back(id);
  pd.worker.get_finished(pd.now_s, pd.sending, pd.recving, pd.expired);
  // The scheduler looks them up in its requests; vLLM asserts req_id in self.requests (a
  // notification for a P request aborted while a step that batched it was in flight): the
  // update answers that error, after applying the step without it.
  pd.error.clear();
  const auto to_requests = [&](const std::vector<std::string>& ids, std::vector<Request*>& out) {
    out.clear();
    for (const std::string& id : ids) {
      const auto it = live_.find(id);
      if (it == live_.end()) {
        pd.error = "AssertionError: req_id in self.requests";
        continue;
      }
      out.push_back(requests_[static_cast<std::size_t>(it->second)].get());
    }
  };
  to_requests(pd.sending, pd.sending_requests);
  to_requests(pd.recving, pd.recving_requests);
  sched_->set_connector_output({pd.sending_requests, pd.recving_requests});
  pd.connector.clear_finishes();
}

void V1Replayer::pd_write_finish(JsonWriter& w, const Request& r) const {
  const NixlFinish* f = nullptr;
  for (const NixlFinish& e : pd_->connector.finishes())
    if (e.request_index == r.index()) f = &e;
  w.key("kv_transfer_params");
  if (f == nullptr || !f->returned_params) {
    w.null();
  } else {
    const PdConfig& c = pd_->config;
    w.begin_object().key("do_remote_prefill").value(true).key("do_remote_decode").value(false);
    w.key("remote_block_ids").begin_array();
    w.int_array(f->block_ids, [](BlockId b) { return to_int(b); });
    w.end_array();
    w.key("remote_engine_id").value(std::string_view(c.engine_id));
    w.key("remote_request_id").value(name_of(r));
    w.key("remote_host").value(std::string_view(c.host));
    w.key("remote_port").value(c.port).key("tp_size").value(c.tp_size).end_object();
  }
  w.key("delay_free").value(f != nullptr && f->delay_free);
}

void V1Replayer::pd_after_update(JsonWriter& w) {
  const PdSched& pd = *pd_;
  const auto reads = [&](const char* key, const std::vector<NixlRecv>& list) {
    w.key(key).begin_array();
    for (const NixlRecv& r : list) {
      const PdSched::Remote& remote = pd.remote[static_cast<std::size_t>(r.request_index)];
      w.begin_object().key("id").value(std::string_view(r.id)).key("local_block_ids");
      pd_write_local_blocks(w, r);
      w.key("remote_block_ids").raw(remote.block_ids);
      w.key("remote_engine_id").raw(remote.engine_id);
      w.key("remote_request_id").raw(remote.request_id).end_object();
    }
    w.end_array();
  };
  w.key("pd").begin_object();
  reads("reads_started", pd.started);
  reads("notify_only", pd.notify_only);
  w.key("finished_recving");
  write_strings(w, pd.recving);
  w.key("finished_sending");
  write_strings(w, pd.sending);
  w.key("expired");
  write_strings(w, pd.expired);
  w.key("ignored_notifs");
  write_strings(w, pd.ignored_notifs);
  w.key("ignored_recving");
  write_strings(w, pd.ignored_recving);
  w.key("now").value(pd.now_s).end_object();
  pd_write_queue_keys(w);
}

void V1Replayer::write_pd_snapshot(JsonWriter& w) const {
  const PdSched& pd = *pd_;
  const NixlConnector& c = pd.connector;
  pd_write_queue_keys(w);
  w.key("pd").begin_object().key("now").value(pd.now_s);
  std::vector<std::string_view> ids;
  for (const Request* r : sched_->finished_recving_pending()) ids.push_back(name_of(*r));
  w.key("finished_recving_pending");
  write_sorted_ids(w, ids);
  w.key("connector").begin_object().key("reqs_need_recv");
  write_strings(w, c.need_recv_ids());
  w.key("reqs_need_send");
  write_strings(w, c.need_send_ids());
  std::vector<std::string> set = c.in_batch();
  std::sort(set.begin(), set.end());
  w.key("reqs_in_batch");
  write_strings(w, set);
  set = c.not_processed();
  std::sort(set.begin(), set.end());
  w.key("reqs_not_processed");
  write_strings(w, set);
  w.end_object().key("worker").begin_object().key("recving");
  write_strings(w, pd.worker.recving());
  w.key("reqs_to_process");
  write_strings(w, pd.worker.reqs_to_process());
  w.key("reqs_to_send").begin_array();
  for (const auto& [id, expiry] : pd.worker.reqs_to_send())
    w.begin_array().value(std::string_view(id)).value(expiry).end_array();
  w.end_array().end_object().end_object();
}

}  // namespace kvsim
