// Simulator::schedule_engine: one EngineCore::schedule and what the engine may answer besides a
// batch -- requests it ignores (vLLM V0's FINISHED_IGNORED) and an engine that dies (vLLM V0
// without CPU swap space for a preemption).

#include <fmt/format.h>

#include "sim/engine/simulator.h"

namespace kvsim {

void Simulator::schedule_engine() {
  try {
    core_->schedule(out_);
  } catch (const EngineAborted& e) {
    const Request* r = e.request();
    if (r == nullptr)  // not the swap space: an exception of vLLM's own code ends the run
      throw RunError(fmt::format(
          "step {}: the engine raised out of schedule(), as the {} engine does, ending the run: "
          "{}{}",
          step_, profile_name(scenario_.engine.profile), e.what(),
          std::string_view(e.what()).starts_with("IndexError")
              ? " (vLLM v0.7.2's V0 Block object-pool defect: a Block object moved to the CPU by a "
                "swap keeps the pool_id of the GPU's object pool and is freed into the CPU's pool; "
                "a later swap-out pops that id beyond the CPU pool's object list)"
              : ""));
    const std::string who =
        r && static_cast<std::size_t>(r->index()) < request_ids_.size()
            ? fmt::format("request {}", request_ids_[static_cast<std::size_t>(r->index())])
            : std::string("a request");
    const bool fork = scenario_.workload.per_request.parallel_sampling ==
                      PerRequestConfig::ParallelSampling::kFork;
    throw RunError(fmt::format(
        "step {}: {}: the engine aborted as vLLM's does: {}; cache.swap_space {} GiB = {} CPU "
        "blocks of {} tokens{}",
        step_, who, e.what(), scenario_.cache.swap_space, scenario_.num_cpu_blocks,
        scenario_.cache.sizing.block_size,
        fork ? "" : " (scheduler.on_swap_space_exhausted: recompute would recompute the victim)"));
  }
  check_step_error("schedule()");
  for (Request* r : out_.ignored) finish_request(r->index(), FinishReason::kIgnored);
}

void Simulator::check_step_error(const char* where) const {
  const char* e = core_->step_error();
  if (e == nullptr || *e == '\0') [[likely]]
    return;
  throw RunError(fmt::format(
      "step {}: the engine raised out of {}, as the {} engine does, ending the run: {}{}", step_, where,
      profile_name(scenario_.engine.profile), e,
      std::string_view(e).find("free blocks") != std::string_view::npos
          ? " (vLLM v0.20.1's sliding-window admission-cap defect, upstream PR #40027: a pool "
            "nearly full while a request longer than the window + max_num_batched_tokens grows; "
            "a larger pool or max_num_batched_tokens >= max_model_len - window + 1 avoids it)"
      : std::string_view(e).find("group_sizes") != std::string_view::npos
          ? " (vLLM v0.20.1's CPU tier defect with a sliding window and offloaded blocks of "
            "several GPU blocks: a key whose first GPU block left the window is stored, the null "
            "block skipped in the block list but counted in group_sizes; "
            "kv_offloading_block_size equal to cache.block_size avoids it)"
          : ""));
}

}  // namespace kvsim
