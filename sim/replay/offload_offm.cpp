// offm mode (shared/spec/ops-format-offload.md §2): OffmReplay's keys, snapshots and events, and
// V1Replayer's offload_* ops.

#include "sim/replay/offload_offm.h"

#include <string>

#include "sim/replay/v1_replayer.h"

namespace kvsim {

namespace {
using Index = JsonLine::Index;
using Type = JsonLine::Type;
}  // namespace

bool OffmReplay::intern(const JsonLine& json, Index value, OffloadKey& key) {
  const JsonLine::Value& v = json[value];
  std::string name;
  if (v.type == Type::kInt)
    name = std::to_string(v.i);
  else if (v.type == Type::kString)
    name = std::string(v.s);
  else
    return false;
  const auto [it, added] = ids_.try_emplace(name, static_cast<std::int64_t>(spellings_.size()));
  if (added) {
    Spelling& s = spellings_.emplace_back();
    s.is_int = v.type == Type::kInt;
    s.i = v.i;
    s.s = std::move(name);
  }
  key = OffloadKey{it->second};
  return true;
}

void OffmReplay::write_key(JsonWriter& w, OffloadKey key) const {
  const Spelling& s = spellings_[static_cast<std::size_t>(to_int(key))];
  if (s.is_int)
    w.value(s.i);
  else
    w.value(std::string_view(s.s));
}

void OffmReplay::write_snapshot(JsonWriter& w) const {
  const CpuOffloadManager& cpu = manager_.cpu();
  const KeyLists& lists = cpu.lists();
  const auto write_blocks = [&](std::int32_t list) {
    w.begin_array();
    for (std::int32_t n = lists.front(list); n != KeyLists::kNoNode; n = lists.next(n)) {
      w.begin_array();
      write_key(w, lists.at(n).key);
      w.value(lists.at(n).value).value(std::int64_t{lists.at(n).ref_cnt}).end_array();
    }
    w.end_array();
  };
  const auto write_ghosts = [&](std::int32_t list) {
    w.begin_array();
    for (std::int32_t n = lists.front(list); n != KeyLists::kNoNode; n = lists.next(n))
      write_key(w, lists.at(n).key);
    w.end_array();
  };
  w.begin_object().key("num_blocks").value(cpu.num_blocks());
  w.key("num_allocated").value(cpu.num_allocated());
  w.key("free_list").int_array(cpu.free_list(), [](std::int64_t b) { return b; });
  if (cpu.policy() == EvictionPolicy::kLru) {
    w.key("policy").value("lru").key("order");
    write_blocks(CpuOffloadManager::kLruList);
  } else {
    w.key("policy").value("arc").key("t1");
    write_blocks(CpuOffloadManager::kT1);
    w.key("t2");
    write_blocks(CpuOffloadManager::kT2);
    w.key("b1");
    write_ghosts(CpuOffloadManager::kB1);
    w.key("b2");
    write_ghosts(CpuOffloadManager::kB2);
    w.key("target_t1_size").value(cpu.target_t1_size());
  }
  if (manager_.has_filter()) {
    const KeyLists& t = manager_.tracker().lists();
    w.key("tracker").begin_array();
    for (std::int32_t n = t.front(0); n != KeyLists::kNoNode; n = t.next(n)) {
      w.begin_array();
      write_key(w, t.at(n).key);
      w.value(t.at(n).value).end_array();
    }
    w.end_array();
  }
  w.end_object();
}

void OffmReplay::write_take_events(JsonWriter& w) {
  CpuOffloadManager& cpu = manager_.cpu();
  w.begin_object().key("events").begin_array();
  for (const OffloadEvent& e : cpu.events()) {
    w.begin_object().key("keys").begin_array();
    for (const OffloadKey k : cpu.event_keys(e)) write_key(w, k);
    w.end_array().key("medium").value("CPU").key("removed").value(e.removed).end_object();
  }
  w.end_array().end_object();
  cpu.clear_events();
}

// ---- V1Replayer's offload_* ops ------------------------------------------------------------

void V1Replayer::read_offload_keys(std::string_view name, std::vector<OffloadKey>& out) {
  const Index arr = field(name);
  if (json_[arr].type != Type::kArray)
    throw OpError{"TypeError: '" + std::string(name) + "' must be a list"};
  out.clear();
  Index e = JsonLine::first_child(arr);
  for (std::uint32_t k = 0; k < json_[arr].size; ++k, e = json_.next(e)) {
    OffloadKey key;
    if (!offm_->intern(json_, e, key)) throw OpError{"TypeError: a key must be an int or a string"};
    out.push_back(key);
  }
}

void V1Replayer::op_offload(std::string_view op, JsonWriter& w) {
  if (op == "offload_init") {
    OffloadManagerConfig c;
    c.num_blocks = get_int("num_blocks");
    if (c.num_blocks < 0 || c.num_blocks > (std::int64_t{1} << 31))
      throw OpError{"ValueError: num_blocks must be in 0..2^31"};
    const Index pol = json_.find(JsonLine::root(), "eviction_policy");
    if (!json_.is_null_or_absent(pol)) {
      const std::string_view p = get_string("eviction_policy");
      if (p == "arc")
        c.eviction_policy = EvictionPolicy::kArc;
      else if (p != "lru")
        throw OpError{"ValueError: Unknown cache policy: '" + std::string(p) + "'"};
    }
    c.enable_events = get_bool_or("enable_events", true);
    c.store_threshold = get_int_or("store_threshold", 0);
    c.max_tracker_size = get_int_or("max_tracker_size", 64000);
    if (c.store_threshold >= 2 && c.max_tracker_size < 1)
      throw OpError{"ValueError: FilterReusedOffloadingManager max_tracker_size must be >= 1"};
    reset();
    offm_ = std::make_unique<OffmReplay>(c);
    mode_ = Mode::kOffm;
    w.begin_object().end_object();
    return;
  }
  if (mode_ != Mode::kOffm) throw OpError{"RuntimeError: " + std::string(op) + " needs offm mode"};
  OffloadingManager& m = offm_->manager();
  std::vector<OffloadKey>& keys = offm_->scratch_keys();
  if (op == "offload_lookup") {
    OffloadKey key;
    if (!offm_->intern(json_, field("key"), key))
      throw OpError{"TypeError: a key must be an int or a string"};
    w.begin_object().key("hit").value(m.lookup(key)).end_object();
  } else if (op == "offload_prepare_store") {
    read_offload_keys("keys", keys);
    PrepareStoreOutput& out = offm_->store_out();
    if (!m.prepare_store(keys, out)) {
      w.begin_object().key("ok").value(false).end_object();
      return;
    }
    w.begin_object().key("ok").value(true).key("keys_to_store").begin_array();
    for (const OffloadKey k : out.keys_to_store) offm_->write_key(w, k);
    w.end_array().key("store_block_ids").int_array(out.block_ids, [](std::int64_t b) { return b; });
    w.key("evicted_keys").begin_array();
    for (const OffloadKey k : out.evicted_keys) offm_->write_key(w, k);
    w.end_array().end_object();
  } else if (op == "offload_complete_store") {
    read_offload_keys("keys", keys);
    m.complete_store(keys, get_bool_or("success", true));
    w.begin_object().end_object();
  } else if (op == "offload_prepare_load") {
    read_offload_keys("keys", keys);
    std::vector<std::int64_t>& blocks = offm_->scratch_blocks();
    blocks.clear();
    if (!m.prepare_load(keys, blocks))
      throw OpError{"AssertionError: a block is not in the cache or not ready for reading"};
    w.begin_object().key("block_ids").int_array(blocks, [](std::int64_t b) { return b; });
    w.end_object();
  } else if (op == "offload_complete_load") {
    read_offload_keys("keys", keys);
    if (!m.complete_load(keys))
      throw OpError{"AssertionError: a block is not in the cache or its ref_cnt is already 0"};
    w.begin_object().end_object();
  } else if (op == "offload_touch") {
    read_offload_keys("keys", keys);
    m.touch(keys);
    w.begin_object().end_object();
  } else if (op == "offload_take_events") {
    offm_->write_take_events(w);
  } else if (op == "offload_snapshot") {
    offm_->write_snapshot(w);
  } else {
    throw OpError{"ValueError: unknown op '" + std::string(op) + "'"};
  }
}

}  // namespace kvsim
