#pragma once
// The fast-forward state tests' two engines side by side (tests/core/v1/test_decode_fast_forward,
// tests/core/contiguous/test_contiguous_fast_forward): one advanced k decode steps at once, the
// other stepped k times, each owning its requests and their planned outputs.

#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "core/engine_api.h"

namespace kvsim::test {

template <class Engine>
struct DecodeSide {
  Engine sched;
  std::deque<Request> requests;
  std::deque<std::vector<Token>> plans;
  SchedulerOutput out;
  std::vector<RequestOutput> outputs;
  template <class... Args>
  explicit DecodeSide(Args&&... args) : sched(std::forward<Args>(args)...) {}
  /// One schedule() / update_from_output() pair.
  void step() {
    sched.schedule(out);
    sched.update_from_output(outputs);
  }
};

/// The first difference between request i of one side (`x`) and of the other (`y`) in what every
/// family keeps on the Request (status, tokens, computed and scheduled tokens, stop reason), as
/// "request i: what"; "" when none.
inline std::string request_difference(std::size_t i, const Request& x, const Request& y) {
  const std::string id = "request " + std::to_string(i) + ": ";
  if (x.status != y.status) return id + "status";
  if (x.all_token_ids() != y.all_token_ids()) return id + "tokens";
  if (x.num_computed_tokens != y.num_computed_tokens) return id + "computed tokens";
  if (x.num_scheduled_tokens != y.num_scheduled_tokens) return id + "scheduled tokens";
  if (x.stop_reason != y.stop_reason) return id + "stop reason";
  return "";
}

/// Whether two pools' figures are the same (every counter the metrics read).
inline bool same_pool(const KVPoolStats& a, const KVPoolStats& b) {
  return a.num_blocks == b.num_blocks && a.num_free_blocks == b.num_free_blocks &&
         a.usage == b.usage && a.evictions == b.evictions &&
         a.blocks_allocated == b.blocks_allocated;
}

}  // namespace kvsim::test
