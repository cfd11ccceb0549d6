#pragma once
// Internal to validate/: the state of a ValidationHarness, shared by harness.cpp (setup, the
// writes of every step) and step_check.cpp (the check of a sampled step).

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "validate/harness.h"
#include "validate/kv_content.h"
#include "validate/pool_sync.h"
#include "validate/reference_workers.h"
#include "validate/step_batch.h"

namespace kvsim::validate {

struct ValidationHarness::Impl : detail::StepBatch {
  ValidationOptions opt;
  std::unique_ptr<kernels::AttentionBackend> backend;
  KvContentModel content;
  std::unique_ptr<detail::PoolSync> pool;
  std::int32_t num_q_heads = 0;
  std::int32_t warmup = 0, repeats = 1;  // resolved (ValidationSetup)
  // The plan and the survey it came from (costs for the progress estimate).
  SamplePlan plan;
  std::vector<StepTraits> traits;
  bool has_plan = false;
  // Progress: estimated seconds of work done, and when the last report went out.
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now(), last_report = t0;
  double work_done_s = 0;
  std::int64_t checked = 0;
  bool finished = false;  // finish() has reported
  /// Content keys of live requests by Request::index(), extended as their contexts grow; an
  /// entry belongs to the request whose requests.csv id it records (indices are reused).
  struct KeyCache {
    std::uint64_t request_id = ~std::uint64_t{0};
    std::vector<std::uint64_t> keys;
  };
  std::vector<KeyCache> key_cache;
  // vLLM V0's swap pool: the key each swap slot last received (0 = none), and the moves applied.
  std::vector<std::uint64_t> swap_shadow;
  BlockMoveCounts moves;
  // Scratch, reused across steps.
  std::vector<std::int64_t> written_blocks;  // write-every-step mode
  std::vector<std::int32_t> tables, lens, q_indptr;
  std::vector<std::byte> q, out, out_timer;
  std::vector<float> qf, out_f, ref_f;
  detail::ReferenceWorkers reference_workers;

  Impl(const ValidationOptions& o, std::uint64_t seed, int hq, int hkv, int d)
      : opt(o), content(seed, hq, hkv, d, o.dtype), reference_workers(o.threads) {}

  std::size_t dsize() const { return kernels::dtype_size_bytes(opt.dtype); }

  void load_batch(const StepView& view, bool full_tables);
  void write_step(bool off_by_one);
  /// Copies the step's block moves into the batch (swap_in, swap_out, copies).
  void load_moves(const StepView& view);
  /// Applies the batch's block moves to the backend and the shadows (block_moves.cpp).
  /// Returns whether the step had any.
  bool apply_moves();
  void check(ValidationRecord& rec, std::int64_t step);
  void report(std::int64_t steps_seen, bool done);
};

}  // namespace kvsim::validate
