#pragma once
// The sched mode's CPU offloading connector (shared/spec/ops-format-offload.md §1): the
// OffloadingConnector plugged into the vllm-0.20 scheduler, and the worker side the trace
// drives (transfers finish every step, or when an update op says so). V1Replayer owns one when
// sched_init gives `kv_offload`.

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "core/offload/offload_worker.h"
#include "core/offload/offloading_connector.h"

namespace kvsim {

/// What one schedule() handed to the worker, kept until its update (several steps may be in
/// flight with async scheduling).
struct OffloadStepMeta {
  std::vector<OffloadTransfer> loads, stores;
  std::vector<Request*> flush;
  std::vector<std::int64_t> finished;  // request indices finished before the step
  bool scheduled_tokens = false;
};

struct OffloadSched {
  OffloadSched(const OffloadingConnectorConfig& config, BlockHashTable& hashes)
      : connector(config, hashes) {}
  OffloadingConnector connector;
  OffloadWorker worker;
  bool manual = false;     // completion "manual"
  bool kv_events = false;  // updates report the CPU medium's events
  std::deque<OffloadStepMeta> steps;  // oldest first
  std::vector<Request*> sending, recving;
  /// Requests the scheduler dropped while the worker still refers to them (a load still writing
  /// into freed blocks: vLLM's defect, semantics §9.1); kept alive until it lets go.
  std::vector<std::unique_ptr<Request>> zombies;
};

}  // namespace kvsim
