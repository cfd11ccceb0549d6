#pragma once
// sched mode with vLLM v0.20.1's NixlConnector (shared/spec/ops-format-pd.md): one engine of a
// prefill/decode pair, its connector's scheduler role plugged into the vllm-0.20 scheduler, and
// the NIXL worker the trace drives (reads finish when an update names them, or at the end of the
// step that started them; D's read notifications arrive at P when an update names them; P's
// expiries run on the clock the ops set). V1Replayer owns one when sched_init gives `kv_pd`.

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "core/pd/nixl_connector.h"
#include "core/pd/nixl_worker.h"

namespace kvsim {

/// sched_init's kv_pd object.
struct PdConfig {
  NixlConnectorConfig connector;
  std::string engine_id = "oracle-engine";  // kv_transfer_config.engine_id
  std::string host = "localhost";           // VLLM_NIXL_SIDE_CHANNEL_HOST
  std::int64_t port = 5600;                 // VLLM_NIXL_SIDE_CHANNEL_PORT (+ DP index 0)
  std::int64_t tp_size = 1;
  bool step_completion = false;  // completion "step": every read finishes in its own step
  double start_time_s = 0;
};

struct PdSched {
  explicit PdSched(const PdConfig& c) : config(c), connector(c.connector), now_s(c.start_time_s) {
    connector.set_now(now_s);
  }
  PdConfig config;
  NixlConnector connector;
  NixlWorkerSim worker;
  double now_s;                    // the simulated clock (time.perf_counter())
  std::deque<NixlStepMeta> steps;  // metadata of the steps in flight, oldest first
  /// A D request's remote_block_ids, remote_engine_id, remote_request_id as JSON text, by
  /// request index (kept after the request is gone: a read of an aborted request still names them).
  struct Remote {
    std::string block_ids, engine_id, request_id;
  };
  std::vector<Remote> remote;
  // The last update's worker report.
  std::vector<NixlRecv> started, notify_only;
  std::vector<std::string> sending, recving, expired, ignored_notifs, ignored_recving;
  std::vector<Request*> sending_requests, recving_requests;  // handed to the scheduler
  std::string error;  // the update's error once the scheduler applied it ("" if none)
};

}  // namespace kvsim
