#include "core/engine_factory.h"

#include "core/common/assert.h"
#include "core/contiguous/contiguous_scheduler.h"
#include "core/v0/scheduler.h"
#include "core/v1/kv_cache_coordinator.h"
#include "core/v1/scheduler.h"
#include "core/v1/v1_policy.h"

namespace kvsim {

ReleaseFeatures release_features(Profile profile) {
  if (profile_info(profile).family != EngineFamily::kV1) return {};
  const V1Policy& policy = v1_policy(profile);
  return {policy.kv_cache_coordinator, policy.v020_scheduler_settings};
}

SchedulerConfig with_release_defaults(SchedulerConfig config, Profile profile) {
  if (release_features(profile).v020_scheduler_settings) {
    config.async_scheduling = true;
    config.scheduler_reserve_full_isl = true;
  }
  return config;
}

std::unique_ptr<EngineCore> make_engine(const EngineParams& params) {
  switch (profile_info(params.profile).family) {
    case EngineFamily::kV1:
      return std::make_unique<Scheduler>(params.scheduler, params.cache, params.profile);
    case EngineFamily::kContiguous: {
      ContiguousPolicy policy = contiguous_policy(params.profile);
      policy.fit = params.contiguous_fit;
      return std::make_unique<ContiguousScheduler>(params.profile, policy, params.scheduler,
                                                   params.cache);
    }
    case EngineFamily::kV0:
      return std::make_unique<v0::Scheduler>(
          v0::make_v0_config(params.scheduler, params.cache, params.v0));
  }
  KVSIM_ASSERT(false, "make_engine: no implementation for this profile's family");
  return nullptr;
}

namespace {

/// A V0-only setting given to another family (an explicit value other than what that family
/// does), or nullopt. `engine` says which engine the release runs, `chunks` whether it chunks
/// prefills.
std::optional<SettingError> check_no_v0_settings(const EngineParams& params, const char* engine,
                                                 bool chunks) {
  const std::string release = std::string(profile_name(params.profile)) + " (" + engine + ")";
  const v0::V0Options& o = params.v0;
  if (o.swap_space_gib != v0::V0Options{}.swap_space_gib)
    return SettingError{"cache.swap_space", release + " has no CPU swap space"};
  if (o.preemption_mode)
    return SettingError{"scheduler.preemption_mode",
                        release + " has no such setting (it preempts by recompute only)"};
  if (o.enable_chunked_prefill && *o.enable_chunked_prefill != chunks)
    return SettingError{"scheduler.enable_chunked_prefill",
                        release + (chunks ? " always chunks prefills" : " never chunks prefills")};
  if (o.policy != v0::SchedulingPolicy::kFcfs)
    return SettingError{"scheduler.scheduling_policy",
                        release + " schedules first come, first served only"};
  if (o.on_swap_space_exhausted != v0::SwapSpaceExhausted::kAbort)
    return SettingError{"scheduler.on_swap_space_exhausted", release + " never swaps"};
  return std::nullopt;
}

}  // namespace

std::optional<SettingError> check_engine_params(const EngineParams& params) {
  switch (profile_info(params.profile).family) {
    case EngineFamily::kV1: {
      if (auto bad = check_no_v0_settings(params, "vLLM's V1 engine", true)) return bad;
      const V1Policy& policy = v1_policy(params.profile);
      const std::string release = profile_name(params.profile);
      if (params.scheduler.long_prefill_token_threshold > 0 && !policy.long_prefill_token_threshold)
        return SettingError{"scheduler.long_prefill_token_threshold",
                            release + " (vLLM's release) has no such setting"};
      if (params.scheduler.num_lookahead_tokens > 0 && !policy.lookahead_slots)
        return SettingError{"scheduler.num_lookahead_tokens",
                            release + " (vLLM's release) has no such setting"};
      // A window no longer than a block lets the sliding-window manager null the block before
      // the first one to cache, and caching then fails vLLM's assertion on its parent's hash.
      const SchedulerConfig& sc = params.scheduler;
      if (!policy.v020_scheduler_settings) {
        const auto lacks = [&](std::string_view key) {
          return SettingError{key, release + " (vLLM's release) has no such setting"};
        };
        if (sc.async_scheduling) return lacks("scheduler.async_scheduling");
        if (sc.scheduler_reserve_full_isl) return lacks("scheduler.scheduler_reserve_full_isl");
        if (sc.priority_policy) return lacks("scheduler.policy");
        if (!sc.enable_chunked_prefill) return lacks("scheduler.enable_chunked_prefill");
        if (sc.max_num_scheduled_tokens > 0) return lacks("scheduler.max_num_scheduled_tokens");
      }
      const KVCacheConfig& c = params.cache;
      if (!policy.kv_cache_coordinator && !c.kv_cache_groups.empty())
        return SettingError{"model", release + " (vLLM's release) manages one KV cache group"};
      if (policy.kv_cache_coordinator) {  // v0.20 handles any window; the layout must be valid
        if (std::string why = KVCacheCoordinator::check_layout(c); !why.empty())
          return SettingError{"model",
                              release + " cannot run this model's KV cache groups: " + why};
        return std::nullopt;
      }
      if (policy.sliding_window_manager && c.enable_caching && c.sliding_window > 0 &&
          c.sliding_window <= c.block_size)
        return SettingError{"cache.block_size",
                            std::to_string(c.block_size) + " is not shorter than the model's " +
                                "sliding_window (" + std::to_string(c.sliding_window) +
                                "): " + release + "'s sliding-window manager fails an assertion"};
      return std::nullopt;
    }
    case EngineFamily::kV0: {
      const std::string release = profile_name(params.profile);
      if (params.scheduler.long_prefill_token_threshold > 0)
        return SettingError{"scheduler.long_prefill_token_threshold",
                            release + " (vLLM's V0 engine) has no such setting"};
      if (params.scheduler.num_lookahead_tokens > 0)
        return SettingError{"scheduler.num_lookahead_tokens",
                            release + " (vLLM's V0 engine) has no such setting"};
      // SchedulerConfig._verify_args, and the chunk-size check vLLM makes at the first chunk.
      const v0::V0Config c = v0::make_v0_config(params.scheduler, params.cache, params.v0);
      if (std::string e = v0::v0_config_error(c); !e.empty())
        return SettingError{"scheduler.max_num_batched_tokens", "vLLM raises ValueError: " + e};
      if (c.enable_chunked_prefill && c.enable_prefix_caching &&
          c.max_num_batched_tokens % c.block_size != 0)
        return SettingError{
            "scheduler.max_num_batched_tokens",
            "vLLM raises ValueError: When enabling chunked prefill and prefix caching, "
            "max_num_batched_tokens (chunk size) must be dividable by block size, but got "
            "chunk_size (" +
                std::to_string(c.max_num_batched_tokens) + ") % block_size (" +
                std::to_string(c.block_size) +
                ") = " + std::to_string(c.max_num_batched_tokens % c.block_size)};
      return std::nullopt;
    }
    case EngineFamily::kContiguous:
      return check_no_v0_settings(params, "an Orca-style contiguous engine", false);
  }
  return std::nullopt;
}

}  // namespace kvsim
