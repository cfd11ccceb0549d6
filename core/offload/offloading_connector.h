#pragma once
// OffloadingConnector's scheduler side (vLLM v0.20.1's OffloadingConnectorScheduler,
// vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py) over the CPU tier
// (OffloadingManager): offload keys from the request's block hashes, the maximal-prefix lookup,
// the loads and stores of each step, the preemption flush, delayed frees and the completion of
// reported transfers. shared/spec/vllm-0.20-offload-semantics.md §1-§4, §6-§7. No I/O.
//
// One KV cache group (v0.20.1 refuses the connector otherwise). An offload key is the interned
// block hash of the offloaded block's last GPU block (group 0); the connector keeps every key
// the tier or the reuse filter holds alive in the BlockHashTable.

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/common/block_hash.h"
#include "core/offload/offloading_manager.h"
#include "core/v1/kv_connector.h"

namespace kvsim {

struct OffloadingConnectorConfig {
  std::int32_t gpu_block_size = 16;
  std::int32_t block_size_factor = 1;  // offloaded block = factor GPU blocks
  bool enable_prefix_caching = true;   // tracks keys being loaded (vLLM: None without)
  OffloadManagerConfig manager;
};

/// One get_num_new_matched_tokens call (for reports).
struct OffloadLookup {
  Request* request = nullptr;
  std::int64_t local = 0;     // the GPU hit tokens it was given
  std::int64_t external = 0;  // its answer (-1: None, ask again later)
};

/// One transfer of the step's metadata (vLLM's (src, dst) TransferSpec of one request).
struct OffloadTransfer {
  Request* request = nullptr;
  std::vector<std::int64_t> gpu_block_ids;  // GPU blocks to fill (load) or read (store)
  std::vector<std::int64_t> cpu_block_ids;  // source (load) or destination (store) CPU blocks
  std::int64_t group_size = 0;              // vLLM's group_sizes[0]
  std::int64_t block_index = 0;             // vLLM's block_indices[0]
};

class OffloadingConnector final : public KVConnector, private KeyHolder {
 public:
  /// `hashes` is the scheduler's block-hash table (it must outlive the connector).
  OffloadingConnector(const OffloadingConnectorConfig& config, BlockHashTable& hashes);

  /// The request's kv_transfer_params say do_remote_decode (P/D prefill): after a CPU load the
  /// loaded prefix is offered for storing again. Set before its first lookup.
  void set_do_remote_decode(const Request& request, bool on);

  ExternalMatch lookup(Request& request, std::int64_t num_local_tokens) override;
  void update_state_after_alloc(Request& request, const ConnectorBlocks& blocks,
                                std::int64_t num_external_tokens) override;
  const char* build_connector_meta(const SchedulerOutput& out) override;
  bool request_finished(Request& request, std::span<const BlockId> block_ids) override;
  void update_connector_output(const ConnectorOutput& output) override;
  /// One per key the tier (ghosts included) and the reuse filter hold.
  void hash_references(std::vector<HashId>& out) const override;

  // ---- the step's metadata (valid until the next build_connector_meta) ----
  std::span<const OffloadTransfer> loads() const { return {loads_.data(), num_loads_}; }
  std::span<const OffloadTransfer> stores() const { return {stores_.data(), num_stores_}; }
  std::span<Request* const> flush() const { return flush_; }
  /// The lookups of the step, in call order.
  std::span<const OffloadLookup> lookups() const { return lookups_; }
  /// CPU blocks evicted by this step's stores, in eviction order.
  std::span<const std::int64_t> evicted() const { return evicted_; }

  // ---- views ----
  OffloadingManager& manager() { return manager_; }
  const OffloadingManager& manager() const { return manager_; }
  const OffloadingConnectorConfig& config() const { return config_; }
  /// Requests the connector keeps state for (vLLM's _req_status), by request index.
  bool tracks(const Request& r) const { return states_.count(r.index()) != 0; }
  std::int64_t num_tracked() const { return static_cast<std::int64_t>(states_.size()); }
  /// -1: not in _reqs_being_stored; else its number of keys (0 after a flush).
  std::int64_t num_being_stored(const Request& r) const;
  std::int64_t num_being_loaded(const Request& r) const;
  /// -1 when not tracked (prefix caching off).
  std::int64_t num_blocks_being_loaded() const {
    return config_.enable_prefix_caching ? static_cast<std::int64_t>(blocks_being_loaded_.size())
                                         : -1;
  }
  // The for_each_* walks go in no particular order (callers sort what they report).
  template <class F>
  void for_each_tracked(F f) const {
    for (const auto& [index, st] : states_) f(index);
  }
  template <class F>
  void for_each_being_stored(F f) const {
    for (const auto& [index, keys] : being_stored_) f(index, static_cast<std::int64_t>(keys.size()));
  }
  template <class F>
  void for_each_being_loaded(F f) const {
    for (const auto& [index, keys] : being_loaded_) f(index, static_cast<std::int64_t>(keys.size()));
  }

  /// The tier's invariants, and: every key being loaded is held, ready, with a load reference;
  /// every key being stored is held. ("" if none.)
  std::string find_violation() const;

 private:
  struct RequestState {
    std::vector<OffloadKey> keys;      // one per complete offloaded block, lazily extended
    std::vector<std::int64_t> blocks;  // GPU block ids handed to the request so far
    std::int64_t next_stored_block = 0;
    std::int64_t num_local_tokens = 0;
    bool do_remote_decode = false;
  };
  void retain(OffloadKey key) override {
    hashes_.retain(HashId{static_cast<std::int32_t>(to_int(key))});
  }
  void release(OffloadKey key) override {
    hashes_.release(HashId{static_cast<std::int32_t>(to_int(key))});
  }
  static OffloadKey key_of(HashId h) { return OffloadKey{to_int(h)}; }
  void update_keys(RequestState& st, const Request& r) const;
  ExternalMatch lookup_keys(Request& request, std::int64_t num_local_tokens);
  OffloadTransfer& next_transfer(std::vector<OffloadTransfer>& v, std::size_t& n);
  /// _get_reqs_to_store for one scheduled request; "" or vLLM's exception.
  const char* store_request(const ScheduledRequest& s, bool resumed);

  OffloadingConnectorConfig config_;
  std::int64_t offloaded_block_size_;
  BlockHashTable& hashes_;
  OffloadingManager manager_;
  std::unordered_map<std::int64_t, RequestState> states_;  // by request index
  std::unordered_map<std::int64_t, std::vector<OffloadKey>> being_stored_;
  std::unordered_map<std::int64_t, std::vector<OffloadKey>> being_loaded_;
  std::unordered_set<std::int64_t> blocks_being_loaded_;  // keys (prefix caching on)
  std::unordered_set<std::int64_t> remote_decode_;        // request indices (do_remote_decode)
  // This step's metadata: loads are added by update_state_after_alloc (before the step is built).
  // build_connector_meta publishes the pending loads (swapped into loads_) and builds stores_.
  // The vectors keep their entries (and the entries their capacity) from step to step.
  std::vector<OffloadTransfer> loads_, pending_loads_, stores_;
  std::size_t num_loads_ = 0, num_pending_loads_ = 0, num_stores_ = 0;
  std::vector<Request*> flush_;
  std::vector<OffloadLookup> lookups_, pending_lookups_;
  std::vector<std::int64_t> evicted_;
  PrepareStoreOutput store_out_;
  std::vector<OffloadKey> scratch_keys_;
  std::vector<std::int64_t> scratch_blocks_;
};

}  // namespace kvsim
