#pragma once
// make_engine: the engine of a profile, from the configuration every family reads. The one place
// that knows every family (the simulator and the replayer ask it; nothing else names a family's
// classes).

#include <memory>

#include "core/common/engine_config.h"
#include "core/engine_api.h"
#include "core/v0/v0_config.h"

namespace kvsim {

/// What an engine is built from. A family reads the fields it implements.
struct EngineParams {
  Profile profile = Profile::kVllm072;
  SchedulerConfig scheduler;
  KVCacheConfig cache;
  /// vLLM V0 only: swap space, chunked prefill, preemption mode, policy (the block size, pool,
  /// batch limits and prefix caching come from `scheduler` and `cache`).
  v0::V0Options v0;
};

/// A new engine of `params.profile`, empty (all blocks free, no requests).
[[nodiscard]] std::unique_ptr<EngineCore> make_engine(const EngineParams& params);

}  // namespace kvsim
