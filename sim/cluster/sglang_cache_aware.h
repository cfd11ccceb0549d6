#pragma once
// sglang_cache_aware: SGLang router's cache_aware policy (spec §6.1; CacheAwarePolicy::
// select_worker, sgl-router cache_aware.rs @ b6f20641), given the approximate radix tree's answer:
//   1. imbalanced = (max_load - min_load > balance_abs_threshold) AND
//                   (max_load > balance_rel_threshold * min_load)
//   2. imbalanced -> the least-loaded worker, first minimum ("balance");
//   3. else match_rate = matched_chars / text_chars; match_rate > cache_threshold -> the tenant of
//      the deepest matched node ("cache"); otherwise the tenant with the fewest characters in the
//      tree, first minimum ("smallest_tenant").
// Defaults: the command line's 0.3 / 64 / 1.5.

#include <cstdint>
#include <span>

#include "sim/cluster/replica_view.h"

namespace kvsim {

struct SglangParams {
  double cache_threshold = 0.3;
  std::int64_t balance_abs_threshold = 64;
  double balance_rel_threshold = 1.5;
};

/// Worker w as the router holds it.
struct SglangWorker {
  std::int64_t load = 0;        // router-side in-flight requests
  std::int64_t tree_chars = 0;  // characters of the tree tagged with w
};

/// The tree's answer for the request's text.
struct SglangMatch {
  std::int64_t matched_chars = 0;
  std::int32_t tenant = -1;  // the deepest matched node's tenant (lowest index of several); -1 none
  std::int64_t text_chars = 0;
};

/// One decision. O(N), no allocation. score: the load ("balance"), the match rate ("cache",
/// "smallest_tenant").
[[nodiscard]] RouteDecision sglang_cache_aware_pick(std::span<const SglangWorker> workers,
                                                    const SglangMatch& match,
                                                    const SglangParams& params);

}  // namespace kvsim
