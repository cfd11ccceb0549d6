// sched mode with vLLM v0.20.1's OffloadingConnector (shared/spec/ops-format-offload.md §1):
// sched_init's kv_offload, the schedule / update / snapshot additions, connector_cache_stats.

#include "sim/replay/offload_sched.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "sim/replay/v1_replayer.h"

namespace kvsim {

namespace {
using Index = JsonLine::Index;
using Type = JsonLine::Type;

void write_ints(JsonWriter& w, const std::vector<std::int64_t>& v) {
  w.int_array(v, [](std::int64_t x) { return x; });
}
}  // namespace

OffloadingConnectorConfig V1Replayer::read_kv_offload(Index obj, const KVCacheConfig& c,
                                                      bool& manual, bool& kv_events) const {
  if (json_[obj].type != Type::kObject) throw OpError{"TypeError: kv_offload must be an object"};
  static constexpr std::string_view kFields[] = {
      "cpu_bytes_to_use", "num_cpu_blocks",   "kv_bytes_per_block",
      "world_size",       "block_size",       "eviction_policy",
      "store_threshold",  "max_tracker_size", "kv_events",
      "completion",       "disable_hybrid_kv_cache_manager",
      "kv_load_failure_policy", "spec_name"};
  for (Index k = JsonLine::first_child(obj), i = 0; i < json_[obj].size; ++i) {
    const std::string_view name = json_[k].s;
    if (std::find(std::begin(kFields), std::end(kFields), name) == std::end(kFields))
      throw OpError{"ValueError: unknown kv_offload field '" + std::string(name) + "'"};
    k = json_.next(json_.next(k));  // past the key and its value
  }
  const auto member = [&](std::string_view key) {
    const Index i = json_.find(obj, key);
    return json_.is_null_or_absent(i) ? JsonLine::kNone : i;
  };
  const auto int_or = [&](std::string_view key, std::int64_t dflt) {
    const Index i = member(key);
    return i == JsonLine::kNone ? dflt : int_value(i, key);
  };
  const auto bool_or = [&](std::string_view key, bool dflt) {
    const Index i = member(key);
    if (i == JsonLine::kNone) return dflt;
    if (json_[i].type != Type::kBool)
      throw OpError{"TypeError: '" + std::string(key) + "' must be a boolean"};
    return json_[i].b;
  };
  const auto string_or = [&](std::string_view key, std::string_view dflt) {
    const Index i = member(key);
    if (i == JsonLine::kNone) return dflt;
    if (json_[i].type != Type::kString)
      throw OpError{"TypeError: '" + std::string(key) + "' must be a string"};
    return json_[i].s;
  };
  if (!bool_or("disable_hybrid_kv_cache_manager", true))
    throw OpError{"ValueError: Connector OffloadingConnector does not support HMA but HMA is "
                  "enabled. Please set `--disable-hybrid-kv-cache-manager`."};
  if (c.kv_cache_groups.size() > 1)
    throw OpError{"AssertionError: the OffloadingConnector needs a single KV cache group"};
  const std::string_view spec = string_or("spec_name", "CPUOffloadingSpec");
  if (spec != "CPUOffloadingSpec")
    throw OpError{"ValueError: Unsupported spec type: " + std::string(spec)};
  OffloadingConnectorConfig cfg;
  cfg.gpu_block_size = c.kv_cache_groups.empty() ? c.block_size : c.kv_cache_groups[0].block_size;
  cfg.enable_prefix_caching = c.enable_caching;
  const std::int64_t obs = int_or("block_size", cfg.gpu_block_size);
  if (obs <= 0 || obs % cfg.gpu_block_size != 0 || obs / cfg.gpu_block_size > (1 << 20))
    throw OpError{"AssertionError: the offloaded block_size must be a multiple of the GPU's"};
  cfg.block_size_factor = static_cast<std::int32_t>(obs / cfg.gpu_block_size);
  const std::int64_t kv_bytes = int_or("kv_bytes_per_block", 1);
  const std::int64_t world = int_or("world_size", 1);
  if (kv_bytes <= 0 || world <= 0 || kv_bytes > (std::int64_t{1} << 40) || world > (1 << 20))
    throw OpError{"ValueError: kv_bytes_per_block and world_size must be > 0"};
  const std::int64_t per_block = kv_bytes * world * cfg.block_size_factor;
  std::int64_t num_cpu_blocks = 0;
  if (const Index n = member("num_cpu_blocks"); n != JsonLine::kNone) {
    num_cpu_blocks = int_value(n, "num_cpu_blocks");
    if (num_cpu_blocks <= 0 || num_cpu_blocks > (std::int64_t{1} << 31))
      throw OpError{"Exception: cpu_bytes_to_use must be specified in kv_connector_extra_config"};
  } else {
    const Index b = member("cpu_bytes_to_use");
    double bytes = 0;
    if (b != JsonLine::kNone) {
      if (json_[b].type == Type::kInt)
        bytes = static_cast<double>(json_[b].i);
      else if (json_[b].type == Type::kDouble)
        bytes = json_[b].d;
      else
        throw OpError{"TypeError: cpu_bytes_to_use must be a number"};
    }
    if (!(bytes >= 1) || bytes > 9e18)  // int() of it is 0 (or it is absent): vLLM refuses
      throw OpError{"Exception: cpu_bytes_to_use must be specified in kv_connector_extra_config"};
    num_cpu_blocks = static_cast<std::int64_t>(std::trunc(bytes)) / per_block;
    if (num_cpu_blocks > (std::int64_t{1} << 31))
      throw OpError{"ValueError: the CPU tier is too large"};
  }
  cfg.manager.num_blocks = num_cpu_blocks;
  const std::string_view policy = string_or("eviction_policy", "lru");
  if (policy == "arc")
    cfg.manager.eviction_policy = EvictionPolicy::kArc;
  else if (policy != "lru")
    throw OpError{"ValueError: Unknown cache policy: '" + std::string(policy) + "'"};
  cfg.manager.store_threshold = int_or("store_threshold", 0);
  cfg.manager.max_tracker_size = int_or("max_tracker_size", 64000);
  if (cfg.manager.store_threshold >= 2 && cfg.manager.max_tracker_size < 1)
    throw OpError{"ValueError: FilterReusedOffloadingManager max_tracker_size must be >= 1"};
  kv_events = bool_or("kv_events", false);
  cfg.manager.enable_events = kv_events;
  const std::string_view completion = string_or("completion", "step");
  if (completion != "step" && completion != "manual")
    throw OpError{"ValueError: completion must be 'step' or 'manual'"};
  manual = completion == "manual";
  const std::string_view failure = string_or("kv_load_failure_policy", "fail");
  if (failure != "fail" && failure != "recompute")
    throw OpError{"ValueError: kv_load_failure_policy must be 'fail' or 'recompute'"};
  return cfg;
}

void V1Replayer::start_offload(const OffloadingConnectorConfig& cfg, bool manual, bool kv_events) {
  KVCacheManager& kv = sched_->kv_cache_manager();
  kv.coordinator()->hash_without_caching();  // EngineCore hashes requests for a connector
  offload_ = std::make_unique<OffloadSched>(cfg, kv.hashes());
  offload_->manual = manual;
  offload_->kv_events = kv_events;
  sched_->set_connector(&offload_->connector);
}

void V1Replayer::offload_read_transfer_params(const Request& r) {
  const Index params = json_.find(JsonLine::root(), "kv_transfer_params");
  if (json_.is_null_or_absent(params)) return;
  if (json_[params].type != Type::kObject)
    throw OpError{"TypeError: kv_transfer_params must be an object"};
  // The connector reads params.get("do_remote_decode") (offloading/scheduler.py:327-328).
  const Index flag = json_.find(params, "do_remote_decode");
  if (json_.is_null_or_absent(flag)) return;
  bool on = false;
  if (json_[flag].type == Type::kBool)
    on = json_[flag].b;
  else if (json_[flag].type == Type::kInt)
    on = json_[flag].i != 0;
  else
    throw OpError{"TypeError: do_remote_decode must be a boolean"};
  offload_->connector.set_do_remote_decode(r, on);
}

void V1Replayer::write_transfers(JsonWriter& w, std::span<const OffloadTransfer> transfers) const {
  w.begin_array();
  for (const OffloadTransfer& t : transfers) {
    w.begin_object().key("id").value(name_of(*t.request));
    w.key("gpu_block_ids");
    write_ints(w, t.gpu_block_ids);
    w.key("cpu_block_ids");
    write_ints(w, t.cpu_block_ids);
    w.key("group_sizes").begin_array().value(t.group_size).end_array();
    w.key("block_indices").begin_array().value(t.block_index).end_array();
    w.end_object();
  }
  w.end_array();
}

void V1Replayer::write_skipped(JsonWriter& w) const {
  w.key("skipped_waiting").begin_array();
  for (const Request* r : sched_->skipped_waiting()) w.value(name_of(*r));
  w.end_array();
}

void V1Replayer::write_sorted_ids(JsonWriter& w, std::vector<std::string_view> ids) const {
  std::sort(ids.begin(), ids.end());
  w.begin_array();
  for (const std::string_view id : ids) w.value(id);
  w.end_array();
}

void V1Replayer::offload_record_step() {
  const OffloadingConnector& c = offload_->connector;
  OffloadStepMeta& m = offload_->steps.emplace_back();
  m.loads.assign(c.loads().begin(), c.loads().end());
  m.stores.assign(c.stores().begin(), c.stores().end());
  m.flush.assign(c.flush().begin(), c.flush().end());
  m.finished = sched_out_.finished;
  m.scheduled_tokens = sched_out_.total_num_scheduled_tokens > 0;
}

void V1Replayer::offload_after_schedule(JsonWriter& w) {
  const OffloadingConnector& c = offload_->connector;
  write_skipped(w);
  w.key("offload").begin_object().key("lookups").begin_array();
  for (const OffloadLookup& l : c.lookups()) {
    w.begin_object().key("id").value(name_of(*l.request)).key("local").value(l.local);
    w.key("external");
    if (l.external < 0)
      w.null();
    else
      w.value(l.external);
    w.end_object();
  }
  w.end_array().key("loads");
  write_transfers(w, c.loads());
  w.key("stores");
  write_transfers(w, c.stores());
  w.key("flush").begin_array();
  for (const Request* r : c.flush()) w.value(name_of(*r));
  w.end_array().key("evicted");
  w.int_array(c.evicted(), [](std::int64_t b) { return b; });
  w.key("cpu_used").value(c.manager().cpu().num_held());
  w.end_object();
}

void V1Replayer::offload_before_update() {
  OffloadSched& o = *offload_;
  KVSIM_ASSERT(!o.steps.empty(), "an update without its step's metadata");
  const OffloadStepMeta m = std::move(o.steps.front());
  o.steps.pop_front();
  OffloadWorker& worker = o.worker;
  worker.handle_preemptions(m.flush);
  worker.start_loads(m.loads);
  if (m.scheduled_tokens) worker.prepare_stores(m.stores);
  if (!o.manual) {
    worker.complete_all();
  } else {
    const auto each_id = [&](std::string_view key, auto f) {
      const Index ids = json_.find(JsonLine::root(), key);
      if (json_.is_null_or_absent(ids)) return;
      if (json_[ids].type != Type::kArray)
        throw OpError{"TypeError: '" + std::string(key) + "' must be a list"};
      // (By the worker's own requests: one the scheduler dropped may still have a transfer.)
      for (Index e = JsonLine::first_child(ids), k = 0; k < json_[ids].size;
           ++k, e = json_.next(e)) {
        if (json_[e].type != Type::kString) throw OpError{"TypeError: ids must be strings"};
        for (const OffloadWorker::Job& j : worker.in_flight())
          if (name_of(*j.request) == json_[e].s) {
            f(*j.request);
            break;
          }
      }
    };
    each_id("complete_loads", [&](const Request& r) { worker.complete_loads(r); });
    each_id("complete_stores", [&](const Request& r) { worker.complete_stores(r); });
    if (get_bool_or("complete_all", false)) worker.complete_all();
  }
  worker.get_finished(m.finished, o.sending, o.recving);
  sched_->set_connector_output({o.sending, o.recving});
  std::erase_if(o.zombies, [&](const std::unique_ptr<Request>& r) {
    return !o.worker.references(*r) &&
           std::find(o.sending.begin(), o.sending.end(), r.get()) == o.sending.end() &&
           std::find(o.recving.begin(), o.recving.end(), r.get()) == o.recving.end();
  });
}

void V1Replayer::offload_after_update(JsonWriter& w) {
  OffloadSched& o = *offload_;
  std::vector<std::string_view> ids;
  for (const Request* r : o.sending) ids.push_back(name_of(*r));
  w.key("finished_sending");
  write_sorted_ids(w, ids);
  ids.clear();
  for (const Request* r : o.recving) ids.push_back(name_of(*r));
  w.key("finished_recving");
  write_sorted_ids(w, ids);
  for (const bool store : {false, true}) {
    w.key(store ? "stores_done" : "loads_done").begin_array();
    for (const OffloadWorker::Job& j : o.worker.done()) {
      if (j.store != store) continue;
      w.begin_object().key("id").value(name_of(*j.request)).key("gpu_block_ids");
      write_ints(w, j.gpu_block_ids);
      w.key("cpu_block_ids");
      write_ints(w, j.cpu_block_ids);
      if (store) w.key("flushed").value(j.flushed);
      w.end_object();
    }
    w.end_array();
  }
  write_skipped(w);
  if (o.kv_events) {
    CpuOffloadManager& cpu = o.connector.manager().cpu();
    w.key("offload_events").begin_array();
    std::vector<std::int64_t> blocks;
    for (const OffloadEvent& e : cpu.events()) {
      const auto b = cpu.event_blocks(e);
      blocks.assign(b.begin(), b.end());
      std::sort(blocks.begin(), blocks.end());
      w.begin_object().key("removed").value(e.removed).key("cpu_block_ids");
      write_ints(w, blocks);
      w.end_object();
    }
    w.end_array();
    cpu.clear_events();
  }
}

void V1Replayer::write_offload_snapshot(JsonWriter& w) const {
  const OffloadSched& o = *offload_;
  const OffloadingConnector& c = o.connector;
  const CpuOffloadManager& cpu = c.manager().cpu();
  write_skipped(w);
  w.key("offload").begin_object().key("cpu").begin_object();
  w.key("num_blocks").value(cpu.num_blocks()).key("num_allocated").value(cpu.num_allocated());
  w.key("free_list");
  write_ints(w, cpu.free_list());
  const KeyLists& lists = cpu.lists();
  const auto write_list = [&](std::int32_t list) {
    w.begin_array();
    for (std::int32_t n = lists.front(list); n != KeyLists::kNoNode; n = lists.next(n))
      w.begin_array().value(lists.at(n).value).value(std::int64_t{lists.at(n).ref_cnt}).end_array();
    w.end_array();
  };
  if (cpu.policy() == EvictionPolicy::kLru) {
    w.key("policy").value("lru").key("order");
    write_list(CpuOffloadManager::kLruList);
  } else {
    w.key("policy").value("arc").key("t1");
    write_list(CpuOffloadManager::kT1);
    w.key("t2");
    write_list(CpuOffloadManager::kT2);
    w.key("b1").value(lists.size(CpuOffloadManager::kB1));
    w.key("b2").value(lists.size(CpuOffloadManager::kB2));
    w.key("target_t1_size").value(cpu.target_t1_size());
  }
  w.end_object();
  std::vector<std::string_view> ids;
  c.for_each_tracked([&](std::int64_t i) { ids.push_back(names_[static_cast<std::size_t>(i)]); });
  w.key("tracked_requests");
  write_sorted_ids(w, ids);
  std::vector<std::pair<std::string_view, std::int64_t>> counts;
  const auto write_counts = [&](const char* key) {
    std::sort(counts.begin(), counts.end());
    w.key(key).begin_object();
    for (const auto& [id, n] : counts) w.key(id).value(n);
    w.end_object();
    counts.clear();
  };
  c.for_each_being_stored([&](std::int64_t i, std::int64_t n) {
    counts.emplace_back(names_[static_cast<std::size_t>(i)], n);
  });
  write_counts("being_stored");
  c.for_each_being_loaded([&](std::int64_t i, std::int64_t n) {
    counts.emplace_back(names_[static_cast<std::size_t>(i)], n);
  });
  write_counts("being_loaded");
  w.key("blocks_being_loaded");
  if (c.num_blocks_being_loaded() < 0)
    w.null();
  else
    w.value(c.num_blocks_being_loaded());
  ids.clear();
  for (const Request* r : sched_->finished_recving_pending()) ids.push_back(name_of(*r));
  w.key("finished_recving_pending");
  write_sorted_ids(w, ids);
  w.key("worker").begin_object();
  const auto jobs = [&](const char* key, bool store, bool submitted) {
    w.key(key).begin_array();
    for (const OffloadWorker::Job& j : o.worker.in_flight())
      if (j.store == store && j.submitted == submitted) w.value(name_of(*j.request));
    w.end_array();
  };
  jobs("loads_in_flight", false, true);
  jobs("stores_in_flight", true, true);
  jobs("stores_unsubmitted", true, false);
  ids.clear();
  o.worker.for_each_waiting_for_store([&](const Request& r) { ids.push_back(name_of(r)); });
  w.key("finished_waiting_for_store");
  write_sorted_ids(w, ids);
  w.end_object();
  if (c.manager().has_filter()) w.key("tracker_size").value(c.manager().tracker().size());
  w.end_object();
}

void V1Replayer::op_connector_cache_stats(JsonWriter& w) {
  if (mode_ != Mode::kSched || sched_->connector() == nullptr)
    throw OpError{"RuntimeError: connector_cache_stats needs a KV connector"};
  const ConnectorCacheStats s = sched_->take_connector_cache_stats();
  w.begin_object().key("requests").value(s.requests).key("queries").value(s.queries);
  w.key("hits").value(s.hits).key("preempted_requests").value(s.preempted_requests);
  w.key("preempted_queries").value(s.preempted_queries);
  w.key("preempted_hits").value(s.preempted_hits).key("reset").value(s.reset).end_object();
}

}  // namespace kvsim
