#pragma once
// ValidationHarness: the StepObserver that turns simulated steps into paged-attention kernel
// calls over the simulator's real block tables and checks them against a dense reference.
//
// Every step (on_step_begin, i.e. after schedule(), before the batch "runs"):
//   1. For each scheduled request, the K/V of its tokens [num_computed, num_computed + num_tokens)
//      (validate/kv_content.h) are written through the slot mapping
//      slot = block_table[p / block_size] * block_size + p % block_size (vLLM's
//      reshape_and_cache), so a block holds whatever its last writer put there. The write is
//      recorded in a host-side shadow (the content key each slot last received); the backend's
//      pool receives it lazily (pool_sync.h): before a checked step reads a block, the block is
//      brought up to date from the shadow through the backend's write_kv. Since K/V are a function
//      of the key alone, every slot a checked step reads holds exactly what writing every step
//      would have put there (validate/README.md, "Lazy writes").
// At a checked step (sample_plan.h says which), additionally:
//   2. One attention call over the whole batch (decode rows and prefill/append chunks together;
//      queries are each request's scheduled tokens, context = num_computed + num_tokens) reads
//      the pool through the block tables; it is timed by the backend's time_attention (CPU: wall
//      clock; CUDA: events around each launch on the backend's own pool).
//   3. Each request's reference comes from its own tokens only: Q/K/V regenerated from the content
//      model (never read from the pool), dense attention in double (kernels/dense_reference.h).
//   4. The step's errors (max abs, relative Frobenius, NMSE) are judged against the dtype's
//      tolerance (kernels/metrics.h); a content audit also counts context positions whose pool
//      slot was last written with another token's K/V (from the shadow). A step passes when both
//      are clean: the audit catches what attention cannot see (a permuted block table leaves a
//      decode row's output unchanged, since attention sums over its keys).
//
// Block moves (vLLM V0), every step before the writes, in the worker's order (worker.py
// execute_worker): blocks_to_swap_in (swap pool -> pool), blocks_to_swap_out (pool -> swap pool),
// blocks_to_copy (pool -> pool). The backend moves whole blocks physically (its swap_blocks /
// copy_blocks, a source brought up to date from the shadow first) and the shadow follows the
// same moves, so a block a move filled is read as the move left it, and a wrong mapping leaves
// a block with other K/V than its request's tokens say: the reference and the audit see it.
//
// Memory (CPU backend): the pool holds only blocks written for a checked step (kernels/backend.h);
// those, plus the shadow (8 bytes per slot) and per-block bookkeeping, stay under
// ValidationOptions::max_pool_bytes: when a checked step would pass it, the blocks it does not
// read are dropped first (they are rewritten from the shadow when read again). The CUDA backend
// holds its whole pool (and a timing mirror), which must fit the limit.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/dtype.h"
#include "kernels/metrics.h"
#include "sim/config/scenario.h"
#include "sim/engine/observer.h"
#include "validate/progress.h"
#include "validate/sample_plan.h"

namespace kvsim::validate {

/// Test-only fault injection: plants one class of KV-cache bug in the harness's own copy of the
/// batch (core/ is never touched), at the first step >= from_step where it can be planted with
/// content that really differs, and forces that step to be sampled.
struct FaultInjection {
  enum class Kind : std::uint8_t {
    kNone,
    kWrongPrefixHit,      // a request admitted with a prefix hit reads its last hit block from a
                          // cached block of a different prefix
    kBlockSharedInUse,    // a block that a running request is writing is one another running
                          // request of the batch holds (its writes land in the other's block)
    kSlotOffByOne,        // every write from from_step on goes to slot + 1 (persistent)
    kCorruptBlockTable,   // a request's first block-table entry read with one bit of its id flipped
    kPermutedBlockTable,  // two full context entries of a request's table swapped for the read
    kWrongSwapIn,         // (V0) a swapped-in block lands in another GPU block than the table's
    kWrongCopyDst,        // (V0) a copy-on-write copy goes to another GPU block than the table's
  };
  Kind kind = Kind::kNone;
  std::int64_t from_step = 0;
};
const char* fault_kind_name(FaultInjection::Kind kind);

/// How the harness runs (the CLI resolves these from flags and the scenario's `validate:`).
struct ValidationOptions {
  kernels::BackendKind backend = kernels::BackendKind::kCpu;
  kernels::DType dtype = kernels::DType::kBF16;
  std::int64_t sample_every_steps = 0;  // > 0: check the steps with step % N == 0
  double sample_prob = 0.0;             // > 0 (and no every): each step with probability P
  std::int64_t sample_steps = 200;      // neither: a bounded plan of this many (sample_plan.h)
  double sample_budget_s = 40;          // bounded: estimated seconds of checking, at most
  std::int32_t warmup = -1;             // untimed calls before timing; -1: cuda 3, cpu 0
  std::int32_t repeats = -1;            // timed calls (median); -1: cuda 20, cpu 3
  std::int64_t max_pool_bytes = std::int64_t{2} << 30;  // pool held + shadow + bookkeeping
  std::int32_t threads = 0;         // workers for the dense references; 0: one per hardware thread
  bool write_every_step = false;    // tests: write K/V into the pool at every step (no lazy writes)
  bool ignore_block_moves = false;  // tests: leave vLLM V0's block moves out (the pool goes wrong)
  /// Called once before the run with the plan's one-line description (CLI: stdout).
  std::function<void(const std::string&)> announce;
  /// Called while the run goes, at most every 0.25 s of wall clock, and once at the end
  /// (CLI: terminal_progress(stderr), which draws nothing unless stderr is a terminal).
  ProgressFn progress;
  FaultInjection fault;  // tests only
};

/// The sampling rule of `options` for a scenario with `seed`.
SamplingRule sampling_rule(const ValidationOptions& options, std::uint64_t seed);

/// One sampled step (a validation.csv row).
struct ValidationRecord {
  std::int64_t step = 0;
  double time_s = 0;  // simulated time of the step's start
  std::int64_t num_seqs = 0;
  std::int64_t num_prefill_seqs = 0;  // as StepView counts them (not single-token decodes)
  std::int64_t prefill_tokens = 0;
  std::int64_t decode_tokens = 0;
  std::int64_t max_context = 0;  // max over seqs of num_computed + num_tokens
  std::int64_t sum_context_tokens = 0;
  double sum_context_sq = 0;
  kernels::error_stats err;            // whole batch against the reference
  std::int64_t mismatched_slots = 0;   // context positions whose slot holds other K/V (audit)
  std::uint64_t worst_request_id = 0;  // the request (requests.csv id) with the largest max abs
  bool pass = true;                    // within tolerance and mismatched_slots == 0
  double latency_us = 0, latency_p10_us = 0, latency_p90_us = 0;  // kernel only, median of repeats
  std::int32_t repeats = 0;
  std::int64_t bytes = 0;        // unique bytes the call must move: K/V context + Q + O + tables
  double achieved_gb_per_s = 0;  // bytes / latency
  bool timer_output_mismatch = false;  // cuda: the last timed launch != one more call (bitwise)
  bool fault_planted = false;          // tests: the injected fault was planted at this step
  std::uint8_t reasons = 0;            // why the step was checked (SampleReason bits)

  /// max_abs, or +inf when the output holds NaN/inf (a garbage output is an infinite error).
  double error_score() const;
};

/// What is being validated (validation.json's header).
struct ValidationSetup {
  kernels::BackendKind backend = kernels::BackendKind::kCpu;
  kernels::DType dtype = kernels::DType::kBF16;
  std::string device;
  kernels::kv_pool_shape pool;
  std::int32_t num_q_heads = 0;
  std::int64_t num_layers = 0;
  std::int64_t pool_bytes = 0;         // the whole pool, K and V, one layer
  std::int64_t bookkeeping_bytes = 0;  // shadow and per-block state (counted in the limit)
  std::int64_t block_bytes = 0;
  bool block_moves = false;         // vLLM V0: the steps' block moves are applied
  std::int64_t num_cpu_blocks = 0;  // V0: the swap pool (vLLM's CPU cache), one layer
  std::int64_t swap_pool_bytes = 0;
  kernels::tolerance tol;
  std::int32_t warmup = 0, repeats = 0;
};

/// How the pool's memory went (CPU backend: the lazily held blocks).
struct PoolUsage {
  std::int64_t peak_bytes = 0;        // most pool bytes held at once (+ bookkeeping)
  std::int64_t clears = 0;            // checked steps that let go of every other block (limit)
  std::int64_t rows_written = 0;      // K/V rows written into the backend's pool
  std::int64_t blocks_refreshed = 0;  // stale blocks brought up to date before a checked step
  std::int64_t blocks_released = 0;   // held blocks let go (pool_sync.h)
  std::int64_t moved_slots_read = 0;  // (V0) slots of blocks checked steps read that still
                                      // hold what a block move put there
};

/// vLLM V0's block moves the harness applied to the pool (harness.h, "Block moves").
struct BlockMoveCounts {
  std::int64_t swapped_in = 0;     // blocks, swap pool -> pool
  std::int64_t swapped_out = 0;    // blocks, pool -> swap pool
  std::int64_t copied = 0;         // blocks, pool -> pool (copy-on-write)
  std::int64_t steps = 0;          // steps with at least one move
  std::int64_t checked_steps = 0;  // of those, checked steps
};

class ValidationHarness final : public StepObserver {
 public:
  /// Checks the scenario (timed mode, a model with plain attention heads, bookkeeping and (CUDA)
  /// the dense pool under the limit, shapes the backend supports) and creates the pool. Throws
  /// ConfigError on bad input and std::runtime_error when the backend cannot start.
  ValidationHarness(const Scenario& scenario, const ValidationOptions& options);
  ~ValidationHarness() override;

  /// The checking cost of this attention shape (for survey_run).
  CheckCostModel cost_model() const;
  /// The steps to check: `plan` from plan_samples over `traits`, survey_run of the same scenario
  /// with cost_model(). Required before the first step. Throws ConfigError when a planned step
  /// reads more pool than the limit allows (before anything runs).
  void set_plan(SamplePlan plan, std::vector<StepTraits> traits);
  const SamplePlan& plan() const;

  /// Records the step's new K/V and, at a checked step, runs and checks the kernel.
  void on_step_begin(const StepView& view) override;
  /// Reports the final progress (done: a terminal's progress line is erased); later calls do
  /// nothing.
  void finish();

  const ValidationSetup& setup() const { return setup_; }
  const std::vector<ValidationRecord>& records() const { return records_; }
  std::int64_t steps_seen() const { return steps_seen_; }
  std::int64_t tokens_written() const { return tokens_written_; }
  PoolUsage pool_usage() const;
  /// vLLM V0: the block moves applied so far (zeros for other families).
  BlockMoveCounts block_moves() const;
  /// The step the injected fault was planted at, or -1.
  std::int64_t fault_step() const { return fault_step_; }

 private:
  struct Impl;
  ValidationSetup setup_;
  std::vector<ValidationRecord> records_;
  std::int64_t steps_seen_ = 0;
  std::int64_t tokens_written_ = 0;
  std::int64_t fault_step_ = -1;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvsim::validate
