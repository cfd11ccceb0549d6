#pragma once
// NixlConnector's scheduler role (vLLM v0.20.1's NixlConnectorScheduler,
// vllm/distributed/kv_transfer/kv_connector/v1/nixl/scheduler.py), a connector of the vllm-0.20
// V1 scheduler (core/v1/kv_connector.h): the decode side's remote prefill (a request whose
// kv_transfer_params say do_remote_prefill waits in WAITING_FOR_REMOTE_KVS for a read of its
// newly allocated blocks) and the prefill side's delayed free (a do_remote_decode request that
// finished FINISHED_LENGTH_CAPPED keeps its blocks until the decode side read them, or until its
// expiry). shared/spec/ops-format-pd.md §3, shared/spec/cluster-routing.md §7. No I/O.
//
// vLLM keys the connector's state by request id (a string); so does this class, so that what it
// hands to the worker outlives the Request. The clock is seconds as a double: vLLM stamps an
// expiry as time.perf_counter() + VLLM_NIXL_ABORT_REQUEST_TIMEOUT, and the same double sum is
// what the worker compares with. One KV cache group (the hybrid layouts are not simulated); a
// single sliding-window group clips the blocks it hands out as get_sw_clipped_blocks does.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/v1/kv_connector.h"

namespace kvsim {

/// What a request's kv_transfer_params say, as the connector reads them (each flag is Python's
/// truthiness of params.get(key); `present` is `bool(params)`).
struct PdParams {
  bool present = false;            // not None and not {}
  bool do_remote_prefill = false;  // D: read the prompt's KV from P (cleared after one transfer)
  bool do_remote_decode = false;   // P: hold the blocks for D's read once finished
  bool remote_block_ids = false;   // params.get("remote_block_ids") is truthy
  bool remote_keys = false;        // remote_engine_id, _request_id, _host, _port all present
  bool remote_meta = false;        // the five remote_* keys the worker's metadata reads exist
};

struct NixlConnectorConfig {
  double abort_timeout_s = 480;  // VLLM_NIXL_ABORT_REQUEST_TIMEOUT
  std::int64_t sw_blocks = 0;    // blocks_per_sw of the one group (0: not a clipped window)
};

/// One get_num_new_matched_tokens call (for reports).
struct NixlLookup {
  Request* request = nullptr;
  std::int64_t local = 0;     // the local prefix-cache hit tokens it was given
  std::int64_t external = 0;  // tokens it offers
  bool load_async = false;
};

/// A read of the step's metadata (vLLM's reqs_to_recv entry).
struct NixlRecv {
  std::string id;
  std::int64_t request_index = -1;       // the Request's index (it may be gone by now)
  bool notify_only = false;              // local_block_ids is () / []: only notify P
  std::vector<BlockId> local_block_ids;  // group 0's blocks to fill
};

/// The metadata one schedule() hands to the worker (build_connector_meta).
struct NixlStepMeta {
  std::vector<NixlRecv> reqs_to_recv;                          // insertion order
  std::vector<std::pair<std::string, double>> reqs_to_send;    // (id, expiry), registration order
  std::vector<std::string> reqs_in_batch, reqs_not_processed;  // sorted
};

/// What request_finished decided for one request (for reports).
struct NixlFinish {
  std::int64_t request_index = -1;
  bool delay_free = false;
  bool returned_params = false;    // P's kv_transfer_params (else None)
  std::vector<BlockId> block_ids;  // remote_block_ids' one group
};

class NixlConnector final : public KVConnector {
 public:
  explicit NixlConnector(const NixlConnectorConfig& config) : config_(config) {}

  /// The request's kv_transfer_params (before its first lookup).
  void set_params(const Request& request, const PdParams& params);
  const PdParams& params(const Request& request) const;
  /// The clock request_finished reads (time.perf_counter()).
  void set_now(double now_s) { now_s_ = now_s; }
  double now() const { return now_s_; }

  ExternalMatch lookup(Request& request, std::int64_t num_local_tokens) override;
  void update_state_after_alloc(Request& request, const ConnectorBlocks& blocks,
                                std::int64_t num_external_tokens) override;
  /// Moves the pending reads, expiries and sets into meta() and clears them. Returns vLLM's
  /// exception of this schedule() ("" if none): an assertion in update_state_after_alloc, or a
  /// KeyError of a read whose params lack a remote_* key.
  const char* build_connector_meta(const SchedulerOutput& out) override;
  bool request_finished(Request& request, std::span<const BlockId> block_ids) override;
  void update_connector_output(const ConnectorOutput& /*output*/) override {}

  // ---- the last schedule()'s record (valid until the next build_connector_meta) ----
  const NixlStepMeta& meta() const { return meta_; }
  std::span<const NixlLookup> lookups() const { return lookups_; }
  /// Requests moved to WAITING_FOR_REMOTE_KVS in that step, in order.
  std::span<Request* const> to_remote() const { return to_remote_; }
  /// request_finished's decisions since the last clear_finishes(), in call order.
  std::span<const NixlFinish> finishes() const { return finishes_; }
  void clear_finishes() { finishes_.clear(); }

  // ---- views (snapshots) ----
  std::vector<std::string> need_recv_ids() const;
  std::vector<std::string> need_send_ids() const;
  const std::vector<std::string>& in_batch() const { return in_batch_; }
  const std::vector<std::string>& not_processed() const { return not_processed_; }

 private:
  /// get_sw_clipped_blocks of one group.
  std::span<const BlockId> clipped(std::span<const BlockId> blocks) const;

  NixlConnectorConfig config_;
  double now_s_ = 0;
  std::vector<PdParams> params_;  // by request index
  // _reqs_need_recv, _reqs_need_send (dicts: insertion order), _reqs_in_batch,
  // _reqs_not_processed (sets).
  std::vector<NixlRecv> need_recv_;
  std::vector<std::pair<std::string, double>> need_send_;
  std::vector<std::string> in_batch_, not_processed_;
  const char* error_ = "";
  std::vector<NixlLookup> pending_lookups_, lookups_;
  std::vector<Request*> pending_to_remote_, to_remote_;
  NixlStepMeta meta_;
  std::vector<NixlFinish> finishes_;
};

}  // namespace kvsim
