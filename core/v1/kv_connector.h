#pragma once
// KVConnector: the scheduler role of vLLM v0.20.1's KV connectors (KVConnectorBase_V1,
// vllm/distributed/kv_transfer/kv_connector/v1/base.py), as the V1 scheduler of the vllm-0.20
// profile calls it (vllm/v1/core/sched/scheduler.py). One interface for every connector kvsim
// models: the CPU tier (OffloadingConnector, core/offload/offloading_connector.h) and P/D's
// remote prefill (NixlConnector's scheduler role, shared/spec/ops-format-pd.md).
//
// The scheduler holds at most one connector (nullptr: none; then it pays one predictable branch
// per step and nothing per block). The calls, in vLLM's order:
//   schedule():  for a waiting request with no computed tokens, after the GPU prefix-cache lookup:
//                  lookup()                      (get_num_new_matched_tokens)
//                after its blocks were allocated: update_state_after_alloc()
//                once the step's output is built, before computed tokens advance:
//                  build_connector_meta()
//   finishing:   request_finished() decides whether the request's blocks are freed now or when
//                the worker reports it in finished_sending (a delayed free)
//   update:      update_connector_output() with what the worker reported (finished_sending,
//                finished_recving), before the scheduler frees or promotes those requests
// The worker side (transfer jobs, their completion) is not the scheduler's: the caller (the
// replayer, the simulator's transfer clock) drives it and hands its reports to the scheduler.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/common/request.h"
#include "core/common/types.h"
#include "core/engine_api.h"

namespace kvsim {

/// get_num_new_matched_tokens's answer.
struct ExternalMatch {
  std::int64_t num_tokens = 0;  // tokens the connector can provide beyond the local hits
  bool ask_later = false;       // vLLM's None: skip the request this step, ask again later
  bool load_async = false;      // the tokens arrive between steps (WAITING_FOR_REMOTE_KVS)
};

/// What update_state_after_alloc sees of the request's blocks (vLLM's KVCacheBlocks, one group).
struct ConnectorBlocks {
  std::span<const BlockId> block_ids;  // the request's whole table (null blocks as block 0)
  /// Index of the first table entry that is neither the null block nor a block with a hash
  /// (block_ids.size() when there is none): where the blocks to fill start.
  std::int64_t first_unhashed = 0;
};

/// What the worker reported at the end of a step (vLLM's KVConnectorOutput).
struct ConnectorOutput {
  std::span<Request* const> finished_sending;  // ascending request id (the oracle's set order)
  std::span<Request* const> finished_recving;
};

class KVConnector {
 public:
  virtual ~KVConnector() = default;

  /// get_num_new_matched_tokens(request, num_local_tokens): how many tokens beyond the
  /// `num_local_tokens` GPU prefix-cache hits the connector provides.
  virtual ExternalMatch lookup(Request& request, std::int64_t num_local_tokens) = 0;
  /// update_state_after_alloc(request, blocks, num_external_tokens), after a successful
  /// allocation of a request the connector was asked about (num_external_tokens may be 0).
  virtual void update_state_after_alloc(Request& request, const ConnectorBlocks& blocks,
                                        std::int64_t num_external_tokens) = 0;
  /// build_connector_meta(scheduler_output): the step's transfers. `out` is the step's output
  /// (scheduled entries with their computed tokens before the step, preempted requests).
  /// Returns "" or the exception vLLM raises inside schedule().
  virtual const char* build_connector_meta(const SchedulerOutput& out) = 0;
  /// request_finished(request, block_ids): true = delay freeing the request's blocks until the
  /// worker reports it in finished_sending. The connector forgets the request's scheduling state.
  virtual bool request_finished(Request& request, std::span<const BlockId> block_ids) = 0;
  /// update_connector_output(connector_output).
  virtual void update_connector_output(const ConnectorOutput& output) = 0;
  /// reset_cache(): nullopt when the connector has none (vLLM's base class answers None, which
  /// the scheduler takes as success), else whether the reset succeeded.
  virtual std::optional<bool> reset_cache() { return std::nullopt; }
  /// Appends one entry per reference the connector holds in the scheduler's block-hash table
  /// (for the scheduler's invariant walk).
  virtual void hash_references(std::vector<HashId>& /*out*/) const {}
};

}  // namespace kvsim
