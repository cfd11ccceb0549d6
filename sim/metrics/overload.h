#pragma once
// OverloadDetector: tells a timed run whose arrivals outpace what the engine completes, so that
// its waiting queue grows through the run (it never reaches a steady state, and its latencies
// depend on how long it runs). sim/OUTPUTS.md states the criterion:
//
// The arrival window runs from the first to the last arrival (rejected requests aside); its
// second half W is measured. The run is overloaded when, over W,
//   (1) requests complete (finish or are aborted) at less than kMaxCompletionRatio times the rate
//       they arrive, and
//   (2) the waiting queue grows: its minimum over the last quarter of the arrival window exceeds
//       its minimum over the third quarter by at least max(1, kMinGrowthFraction * arrivals in W).
// (2) keeps a burst that drains from counting: the queue's minimum falls back in both quarters.
// Runs without steps (cache_only), with fewer than kMinArrivals arrivals in W, or whose W spans
// fewer than kMinBuckets time buckets, are never flagged.
//
// Time is kept in kBuckets buckets from t = 0 whose width doubles (merging pairs) when the run
// outgrows them, so memory is fixed and every bound is at the resolution of 1/kBuckets to
// 2/kBuckets of the run. O(1) per step and per request, amortized. Deterministic.

#include <array>
#include <cstdint>
#include <string>

#include "sim/engine/observer.h"

namespace kvsim {

class OverloadDetector final : public StepObserver {
 public:
  static constexpr std::size_t kBuckets = 1024;
  static constexpr SimTimeNs kInitialBucketNs = 1'000'000;  // 1 ms: the first 1.024 s
  static constexpr double kMaxCompletionRatio = 0.97;
  static constexpr double kMinGrowthFraction = 0.01;
  static constexpr std::int64_t kMinArrivals = 32;
  static constexpr std::int64_t kMinBuckets = 8;

  /// The waiting queue (StepView::num_waiting) at the step's end. Inline: once per step.
  void on_step(const StepView& v) override { on_step_end(v.end_ns, v.num_waiting); }
  /// A step ended at `end_ns` with `num_waiting` requests waiting.
  void on_step_end(SimTimeNs end_ns, std::int64_t num_waiting) {
    ++num_steps_;
    if (end_ns >= step_bucket_end_ns_) new_step_bucket(end_ns);
    Bucket& b = buckets_[step_bucket_];
    if (b.min_waiting < 0 || num_waiting < b.min_waiting) b.min_waiting = num_waiting;
  }
  /// An arrival at r.arrival_ns (unless rejected) and, unless rejected, a departure at
  /// r.finish_ns.
  void on_request_done(const RequestRecord& r) override;

  struct Verdict {
    bool overloaded = false;
    double arrival_rate_per_s = 0, completion_rate_per_s = 0;  // over the window
    SimTimeNs window_start_ns = 0, window_end_ns = 0;          // bucket-aligned W
    std::int64_t arrivals = 0, completions = 0;                // in W
    std::int64_t min_waiting_q3 = 0, min_waiting_q4 = 0;
  };
  /// The verdict on what has been observed (call it at the end of the run). O(kBuckets).
  Verdict verdict() const;

 private:
  struct Bucket {
    std::int64_t arrivals = 0, departures = 0;
    std::int64_t min_waiting = -1;  // -1: no step ended in it
  };
  /// The bucket of time t, widening the buckets first when t lies beyond them.
  Bucket& bucket_at(SimTimeNs t);
  /// Points step_bucket_ at the bucket of a step ending at t (beyond the previous one's).
  void new_step_bucket(SimTimeNs t);

  std::array<Bucket, kBuckets> buckets_{};
  SimTimeNs width_ns_ = kInitialBucketNs;
  // Step ends come in time order: the bucket of the last one and where it ends (no division per
  // step).
  std::size_t step_bucket_ = 0;
  SimTimeNs step_bucket_end_ns_ = 0;  // 0: recompute
  std::int64_t num_steps_ = 0;
  SimTimeNs first_arrival_ns_ = -1, last_arrival_ns_ = -1;
};

/// The one warning line for an overloaded run of scenario `name` (no trailing newline).
[[nodiscard]] std::string overload_warning(const std::string& name,
                                           const OverloadDetector::Verdict& v);

}  // namespace kvsim
