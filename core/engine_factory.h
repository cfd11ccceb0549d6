#pragma once
// make_engine: the engine of a profile, from the configuration every family reads. The one place
// that knows every family (the simulator and the replayer ask it; nothing else names a family's
// classes).

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/common/engine_config.h"
#include "core/contiguous/extent_allocator.h"
#include "core/engine_api.h"
#include "core/v0/v0_config.h"

namespace kvsim {

/// What an engine is built from. A family reads the fields it implements.
struct EngineParams {
  Profile profile = Profile::kVllm072;
  SchedulerConfig scheduler;
  KVCacheConfig cache;
  // The contiguous family: which hole a reservation takes.
  FitPolicy contiguous_fit = FitPolicy::kFirstFit;
  /// vLLM V0 only: swap space, chunked prefill, preemption mode, policy (the block size, pool,
  /// batch limits and prefix caching come from `scheduler` and `cache`).
  v0::V0Options v0;
};

/// What a profile's release has beyond the engine settings every profile shares.
struct ReleaseFeatures {
  /// vLLM v0.9+: several KV cache groups over one pool (KVCacheConfig::kv_cache_groups).
  bool kv_cache_groups = false;
  /// vLLM v0.20: scheduler.async_scheduling and scheduler.scheduler_reserve_full_isl (both on by
  /// default), the priority policy, chunked prefill off, max_num_scheduled_tokens.
  bool v020_scheduler_settings = false;
};
[[nodiscard]] ReleaseFeatures release_features(Profile profile);
/// The scheduler settings a profile's release starts from: `config` with vLLM's defaults of
/// that release for what only it has (vllm-0.20: async scheduling and reserve_full_isl on).
[[nodiscard]] SchedulerConfig with_release_defaults(SchedulerConfig config, Profile profile);

/// A new engine of `params.profile`, empty (all blocks free, no requests).
[[nodiscard]] std::unique_ptr<EngineCore> make_engine(const EngineParams& params);

/// A setting the profile's release cannot run with: its scenario key ("section.key") and why.
struct SettingError {
  std::string_view key;
  std::string message;
};
/// The first setting of `params` the profile's release lacks or cannot run with (e.g.
/// scheduler.long_prefill_token_threshold > 0 for vLLM v0.7.2), or nullopt.
[[nodiscard]] std::optional<SettingError> check_engine_params(const EngineParams& params);

}  // namespace kvsim
