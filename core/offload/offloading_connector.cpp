#include "core/offload/offloading_connector.h"

#include <algorithm>

#include "core/common/assert.h"

namespace kvsim {

OffloadingConnector::OffloadingConnector(const OffloadingConnectorConfig& config,
                                         BlockHashTable& hashes)
    : config_(config),
      offloaded_block_size_(std::int64_t{config.gpu_block_size} * config.block_size_factor),
      hashes_(hashes),
      manager_(config.manager, this) {
  KVSIM_ASSERT(config.gpu_block_size > 0 && config.block_size_factor > 0);
}

void OffloadingConnector::set_do_remote_decode(const Request& r, bool on) {
  if (on)
    remote_decode_.insert(r.index());
  else
    remote_decode_.erase(r.index());
}

// update_offload_keys: one key per complete offloaded block the request's hashes cover.
void OffloadingConnector::update_keys(RequestState& st, const Request& r) const {
  const auto f = static_cast<std::size_t>(config_.block_size_factor);
  for (std::size_t i = f * (st.keys.size() + 1) - 1; i < r.block_hashes.size(); i += f)
    st.keys.push_back(key_of(r.block_hashes[i]));
}

OffloadTransfer& OffloadingConnector::next_transfer(std::vector<OffloadTransfer>& v,
                                                    std::size_t& n) {
  if (n == v.size()) v.emplace_back();
  OffloadTransfer& t = v[n++];
  t.gpu_block_ids.clear();
  t.cpu_block_ids.clear();
  t.group_size = t.block_index = 0;
  return t;
}

ExternalMatch OffloadingConnector::lookup(Request& r, std::int64_t num_local_tokens) {
  const ExternalMatch m = lookup_keys(r, num_local_tokens);
  pending_lookups_.push_back({&r, num_local_tokens, m.ask_later ? -1 : m.num_tokens});
  return m;
}

ExternalMatch OffloadingConnector::lookup_keys(Request& r, std::int64_t num_local_tokens) {
  RequestState& st = states_[r.index()];
  st.blocks.clear();  // (re)starting: its GPU blocks are forgotten
  update_keys(st, r);
  st.num_local_tokens = num_local_tokens;
  manager_.touch(st.keys);  // every key, first block most recent
  const std::int64_t obs = offloaded_block_size_;
  const std::int64_t num_blocks = r.num_tokens() / obs;
  KVSIM_ASSERT(static_cast<std::int64_t>(st.keys.size()) >= num_blocks,
               "the request's block hashes do not cover its tokens");
  if (num_blocks * obs - num_local_tokens < obs) return {};  // less than one block to load
  const std::int64_t start = num_local_tokens / obs;
  std::int64_t hits = 0;
  while (start + hits < num_blocks &&
         manager_.lookup(st.keys[static_cast<std::size_t>(start + hits)]))
    ++hits;
  if (hits == 0) return {};
  const std::int64_t hit_tokens = obs * (start + hits) - num_local_tokens;
  if (hit_tokens < obs) return {};
  if (!blocks_being_loaded_.empty())
    for (std::int64_t i = start; i < start + hits; ++i)
      if (blocks_being_loaded_.count(to_int(st.keys[static_cast<std::size_t>(i)])))
        return {.ask_later = true};  // hit blocks are being loaded: delay the request
  return {.num_tokens = hit_tokens, .load_async = true};
}

void OffloadingConnector::update_state_after_alloc(Request& r, const ConnectorBlocks& blocks,
                                                   std::int64_t num_external_tokens) {
  if (num_external_tokens == 0) return;
  RequestState& st = states_.at(r.index());
  const std::int64_t bs = config_.gpu_block_size;
  const std::int64_t num_cached = st.num_local_tokens + num_external_tokens;
  const std::int64_t num_gpu_blocks = cdiv(num_cached, bs);
  KVSIM_ASSERT(static_cast<std::int64_t>(blocks.block_ids.size()) >= num_gpu_blocks);
  const std::int64_t local_gpu = std::min(blocks.first_unhashed, num_gpu_blocks);
  KVSIM_ASSERT(st.num_local_tokens <= local_gpu * bs);
  const std::int64_t pending = num_gpu_blocks - local_gpu;
  const std::int64_t num_blocks = cdiv(num_cached, offloaded_block_size_);
  KVSIM_ASSERT(static_cast<std::int64_t>(st.keys.size()) >= num_blocks);
  scratch_keys_.clear();
  if (pending > 0)
    for (std::int64_t i = local_gpu / config_.block_size_factor; i < num_blocks; ++i)
      scratch_keys_.push_back(st.keys[static_cast<std::size_t>(i)]);
  if (!remote_decode_.count(r.index())) st.next_stored_block = num_blocks;
  OffloadTransfer& t = next_transfer(pending_loads_, num_pending_loads_);
  t.request = &r;
  for (std::int64_t i = local_gpu; i < num_gpu_blocks; ++i)
    t.gpu_block_ids.push_back(to_int(blocks.block_ids[static_cast<std::size_t>(i)]));
  t.group_size = pending;
  t.block_index = local_gpu;
  const bool ok = manager_.prepare_load(scratch_keys_, t.cpu_block_ids);
  KVSIM_ASSERT(ok, "a CPU hit is no longer loadable");
  std::vector<OffloadKey>& loading = being_loaded_[r.index()];
  for (const OffloadKey k : scratch_keys_)
    if (std::find(loading.begin(), loading.end(), k) == loading.end()) loading.push_back(k);
  if (config_.enable_prefix_caching)
    for (const OffloadKey k : loading) blocks_being_loaded_.insert(to_int(k));
}

const char* OffloadingConnector::store_request(const ScheduledRequest& s, bool resumed) {
  Request& r = *s.request;
  RequestState& st = states_.at(r.index());
  update_keys(st, r);
  const std::span<const BlockId> table(r.kv_groups[0].blocks);
  if (resumed) st.blocks.clear();
  // New and resumed requests bring their whole table, running ones the step's new blocks.
  const std::size_t first = s.kind == ScheduledRequest::Kind::kRunning
                                ? table.size() - static_cast<std::size_t>(s.num_new_blocks)
                                : 0;
  for (std::size_t i = first; i < table.size(); ++i) st.blocks.push_back(to_int(table[i]));
  // With async scheduling num_tokens lags by the token in flight.
  const std::int64_t offloadable =
      std::min(s.num_computed_tokens + s.num_tokens, r.num_tokens());
  const std::int64_t f = config_.block_size_factor;
  const std::int64_t num_blocks = offloadable / offloaded_block_size_;
  const std::int64_t start = st.next_stored_block;
  // Keys whose last GPU block is the null block (out of a sliding window) are skipped.
  scratch_keys_.clear();
  for (std::int64_t i = start; i < num_blocks; ++i)
    if (st.blocks[static_cast<std::size_t>(i * f + f - 1)] != 0)
      scratch_keys_.push_back(st.keys[static_cast<std::size_t>(i)]);
  if (scratch_keys_.empty()) {
    st.next_stored_block = num_blocks;
    return "";
  }
  if (!manager_.prepare_store(scratch_keys_, store_out_)) return "";  // retried next step
  evicted_.insert(evicted_.end(), store_out_.evicted_block_ids.begin(),
                  store_out_.evicted_block_ids.end());
  if (store_out_.keys_to_store.empty()) {
    st.next_stored_block = num_blocks;
    return "";
  }
  manager_.touch(st.keys);
  OffloadTransfer& t = next_transfer(stores_, num_stores_);
  t.request = &r;
  std::int64_t start_gpu = -1;
  const auto& to_store = store_out_.keys_to_store;
  for (std::int64_t i = start; i < num_blocks; ++i) {
    if (std::find(to_store.begin(), to_store.end(), st.keys[static_cast<std::size_t>(i)]) ==
        to_store.end())
      continue;
    t.group_size += f;
    for (std::int64_t j = 0; j < f; ++j) {
      const std::int64_t b = st.blocks[static_cast<std::size_t>(i * f + j)];
      if (b == 0) {
        if (start_gpu >= 0) return "AssertionError: a skipped block after a stored block";
        continue;
      }
      if (start_gpu < 0) start_gpu = i * f + j;
      t.gpu_block_ids.push_back(b);
    }
  }
  t.block_index = std::max<std::int64_t>(start_gpu, 0);
  t.cpu_block_ids.assign(store_out_.block_ids.begin(), store_out_.block_ids.end());
  st.next_stored_block = num_blocks;
  std::vector<OffloadKey>& storing = being_stored_[r.index()];
  storing.insert(storing.end(), to_store.begin(), to_store.end());
  // GPULoadStoreSpec's check (a defect with sliding windows and factor > 1, semantics §9.2).
  if (t.group_size != static_cast<std::int64_t>(t.gpu_block_ids.size()))
    return "AssertionError: sum(group_sizes) == len(block_ids)";
  return "";
}

const char* OffloadingConnector::build_connector_meta(const SchedulerOutput& out) {
  lookups_.swap(pending_lookups_);
  pending_lookups_.clear();
  std::swap(loads_, pending_loads_);
  num_loads_ = num_pending_loads_;
  num_pending_loads_ = 0;
  num_stores_ = 0;
  evicted_.clear();
  // New requests first, then the cached ones: running, then resumed (vLLM's output order).
  using Kind = ScheduledRequest::Kind;
  for (const Kind kind : {Kind::kNew, Kind::kRunning, Kind::kResumed})
    for (const ScheduledRequest& s : out.scheduled)
      if (s.kind == kind)
        if (const char* e = store_request(s, kind == Kind::kResumed); e[0] != 0) return e;
  // Preempted requests: their stores are trusted to finish (the worker waits for them).
  flush_.assign(out.preempted.begin(), out.preempted.end());
  std::sort(flush_.begin(), flush_.end(),
            [](const Request* a, const Request* b) { return a->request_id < b->request_id; });
  for (Request* r : flush_) {
    const auto it = being_stored_.find(r->index());
    if (it == being_stored_.end() || it->second.empty()) continue;
    manager_.complete_store(it->second, true);
    it->second.clear();  // (the entry stays: the request still counts as storing)
  }
  return "";
}

bool OffloadingConnector::request_finished(Request& r, std::span<const BlockId>) {
  states_.erase(r.index());
  remote_decode_.erase(r.index());
  return being_stored_.count(r.index()) != 0;
}

void OffloadingConnector::update_connector_output(const ConnectorOutput& output) {
  for (Request* r : output.finished_sending) {
    const auto it = being_stored_.find(r->index());
    if (it == being_stored_.end()) continue;
    if (!it->second.empty()) manager_.complete_store(it->second, true);
    being_stored_.erase(it);
  }
  for (Request* r : output.finished_recving) {
    const auto it = being_loaded_.find(r->index());
    if (it == being_loaded_.end()) continue;
    if (!it->second.empty()) {
      for (const OffloadKey k : it->second) blocks_being_loaded_.erase(to_int(k));
      const bool ok = manager_.complete_load(it->second);
      KVSIM_ASSERT(ok, "a finished load holds no reference");
    }
    being_loaded_.erase(it);
  }
}

void OffloadingConnector::hash_references(std::vector<HashId>& out) const {
  const auto walk = [&](const KeyLists& lists, std::int32_t num_lists) {
    for (std::int32_t l = 0; l < num_lists; ++l)
      for (std::int32_t n = lists.front(l); n != KeyLists::kNoNode; n = lists.next(n))
        out.push_back(HashId{static_cast<std::int32_t>(to_int(lists.at(n).key))});
  };
  const CpuOffloadManager& cpu = manager_.cpu();
  walk(cpu.lists(), cpu.policy() == EvictionPolicy::kLru ? 1 : 4);
  if (manager_.has_filter()) walk(manager_.tracker().lists(), 1);
}

std::int64_t OffloadingConnector::num_being_stored(const Request& r) const {
  const auto it = being_stored_.find(r.index());
  return it == being_stored_.end() ? -1 : static_cast<std::int64_t>(it->second.size());
}

std::int64_t OffloadingConnector::num_being_loaded(const Request& r) const {
  const auto it = being_loaded_.find(r.index());
  return it == being_loaded_.end() ? -1 : static_cast<std::int64_t>(it->second.size());
}

std::string OffloadingConnector::find_violation() const {
  if (std::string v = manager_.find_violation(); !v.empty()) return v;
  const CpuOffloadManager& cpu = manager_.cpu();
  for (const auto& [index, keys] : being_loaded_)
    for (const OffloadKey k : keys) {
      const std::int32_t n = cpu.held_node(k);
      KVSIM_CHECK(n != KeyLists::kNoNode && cpu.lists().at(n).ref_cnt > 0,
                  "a key being loaded is not held with a load reference");
    }
  for (const auto& [index, keys] : being_stored_)
    for (const OffloadKey k : keys)
      KVSIM_CHECK(cpu.held_node(k) != KeyLists::kNoNode, "a key being stored is not held");
  for (const std::int64_t k : blocks_being_loaded_) {
    const std::int32_t n = cpu.held_node(OffloadKey{k});
    KVSIM_CHECK(n != KeyLists::kNoNode && cpu.lists().at(n).ref_cnt > 0,
                "a block being loaded is not held with a load reference");
  }
  return {};
}

}  // namespace kvsim
