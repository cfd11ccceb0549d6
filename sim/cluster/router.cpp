#include "sim/cluster/router.h"

#include "core/common/assert.h"
#include "sim/cluster/dynamo_kv.h"
#include "sim/cluster/llm_d.h"
#include "sim/cluster/sglang_cache_aware.h"

namespace kvsim {
namespace {
__extension__ typedef unsigned __int128 U128;  // GCC/Clang
}  // namespace

std::uint64_t uniform_below(RngStream& rng, std::uint64_t n) {
  KVSIM_ASSERT(n >= 1);
  // Lemire (2019), "Fast random integer generation in an interval".
  U128 m = static_cast<U128>(rng()) * n;
  auto low = static_cast<std::uint64_t>(m);
  if (low < n) {
    const std::uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<U128>(rng()) * n;
      low = static_cast<std::uint64_t>(m);
    }
  }
  return static_cast<std::uint64_t>(m >> 64);
}

std::unique_ptr<Router> make_router(const RouterConfig& config, std::int32_t num_replicas,
                                    const RouterEnv& env) {
  KVSIM_ASSERT(num_replicas >= 1);
  switch (config.policy) {
    case RouterPolicy::kRoundRobin:
      return make_round_robin_router(config.start);
    case RouterPolicy::kRandom:
      return make_random_router(config.seed);
    case RouterPolicy::kLeastRequests:
      return make_least_requests_router(num_replicas);
    case RouterPolicy::kPowerOfTwo:
      return make_power_of_two_router(config.seed);
    case RouterPolicy::kPrefixHash:
      return make_prefix_hash_router(config.k);
    case RouterPolicy::kLeastWaiting:
      return make_least_waiting_router(
          num_replicas, config.refresh_interval_ns >= 0 ? config.refresh_interval_ns : 50'000'000,
          config.phase_ns);
    case RouterPolicy::kVllmDp: {
      const bool moe = config.moe >= 0 ? config.moe == 1 : env.moe_model;
      const SimTimeNs dflt = moe ? 100'000'000 : 5'000'000'000;
      return make_vllm_dp_router(
          num_replicas, config.api_servers, moe,
          config.refresh_interval_ns >= 0 ? config.refresh_interval_ns : dflt, config.phase_ns);
    }
    case RouterPolicy::kLlmD: {
      LlmDParams p;
      p.weights =
          LlmDWeights{config.w_queue,          config.w_kv_usage,   config.w_prefix,
                      config.w_precise_prefix, config.w_load_aware, config.w_active_request};
      const std::int64_t cap = config.lru_capacity_per_server > 0 ? config.lru_capacity_per_server
                               : env.num_gpu_blocks > 0           ? env.num_gpu_blocks
                                                                  : 31'250;
      return make_llm_d_router(
          num_replicas, p, config.seed,
          config.refresh_interval_ns >= 0 ? config.refresh_interval_ns : 50'000'000,
          config.phase_ns, cap, env.block_size);
    }
    case RouterPolicy::kSglangCacheAware: {
      SglangParams p;
      p.cache_threshold = config.cache_threshold;
      p.balance_abs_threshold = config.balance_abs_threshold;
      p.balance_rel_threshold = config.balance_rel_threshold;
      return make_sglang_router(num_replicas, p, env.block_size);
    }
    case RouterPolicy::kPrefixIdeal:
      return make_prefix_ideal_router(num_replicas, env.block_size);
    case RouterPolicy::kPrefixBounded:
      return make_prefix_bounded_router(num_replicas, env.block_size, config.eps);
    case RouterPolicy::kDynamoKv:
      return make_dynamo_router(
          num_replicas, DynamoParams{config.overlap_score_weight, config.router_temperature},
          config.track_active_blocks, config.seed, env.block_size, env.samples_per_request);
  }
  KVSIM_ASSERT(false, "unknown router policy");
  return nullptr;
}

std::unique_ptr<Router> make_pd_router(const RouterConfig& config, std::int32_t num_replicas,
                                       const RouterEnv& env, bool decode) {
  switch (config.pd.proxy) {
    case PdProxy::kToyProxy:
      return make_round_robin_router(config.start);
    case PdProxy::kLlmD: {
      RouterConfig c = config;
      if (decode) c.seed = config.seed + 1;
      return make_router(c, num_replicas, env);
    }
    case PdProxy::kDynamo:
      if (decode)  // overlap weight 0, no KV reuse assumed, no prefill tokens booked (§5.5)
        return make_dynamo_decode_router(num_replicas, config.seed, env.block_size,
                                         env.samples_per_request);
      return make_dynamo_router(
          num_replicas, DynamoParams{config.overlap_score_weight, config.router_temperature}, false,
          config.seed, env.block_size, env.samples_per_request);
  }
  KVSIM_ASSERT(false, "unknown P/D proxy");
  return nullptr;
}

}  // namespace kvsim
