#include "sim/metrics/overload.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kvsim {

OverloadDetector::Bucket& OverloadDetector::bucket_at(SimTimeNs t) {
  const SimTimeNs tt = std::max<SimTimeNs>(t, 0);
  while (tt / width_ns_ >= static_cast<SimTimeNs>(kBuckets)) {
    // Twice as wide: bucket i takes old buckets 2i and 2i + 1.
    for (std::size_t i = 0; i < kBuckets / 2; ++i) {
      const Bucket& a = buckets_[2 * i];
      const Bucket& b = buckets_[2 * i + 1];
      Bucket m;
      m.arrivals = a.arrivals + b.arrivals;
      m.departures = a.departures + b.departures;
      m.min_waiting = a.min_waiting < 0   ? b.min_waiting
                      : b.min_waiting < 0 ? a.min_waiting
                                          : std::min(a.min_waiting, b.min_waiting);
      buckets_[i] = m;
    }
    std::fill(buckets_.begin() + kBuckets / 2, buckets_.end(), Bucket{});
    width_ns_ *= 2;
    step_bucket_end_ns_ = 0;
  }
  return buckets_[static_cast<std::size_t>(tt / width_ns_)];
}

void OverloadDetector::new_step_bucket(SimTimeNs t) {
  bucket_at(t);  // widens first when needed
  step_bucket_ = static_cast<std::size_t>(std::max<SimTimeNs>(t, 0) / width_ns_);
  step_bucket_end_ns_ = static_cast<SimTimeNs>(step_bucket_ + 1) * width_ns_;
}

void OverloadDetector::on_request_done(const RequestRecord& r) {
  if (r.reason == FinishReason::kRejected) return;
  ++bucket_at(r.arrival_ns).arrivals;
  if (first_arrival_ns_ < 0 || r.arrival_ns < first_arrival_ns_) first_arrival_ns_ = r.arrival_ns;
  last_arrival_ns_ = std::max(last_arrival_ns_, r.arrival_ns);
  if (r.finish_ns >= 0) ++bucket_at(r.finish_ns).departures;
}

OverloadDetector::Verdict OverloadDetector::verdict() const {
  Verdict v;
  if (first_arrival_ns_ < 0 || num_steps_ == 0) return v;
  const SimTimeNs mid = first_arrival_ns_ + (last_arrival_ns_ - first_arrival_ns_) / 2;
  const auto b0 = static_cast<std::size_t>(mid / width_ns_);
  const auto b1 = static_cast<std::size_t>(last_arrival_ns_ / width_ns_);  // inclusive
  const std::size_t bm = (b0 + b1 + 1) / 2;  // the last quarter starts here
  v.window_start_ns = static_cast<SimTimeNs>(b0) * width_ns_;
  v.window_end_ns = static_cast<SimTimeNs>(b1 + 1) * width_ns_;
  auto min_waiting = [&](std::size_t lo, std::size_t hi) {  // [lo, hi); no step ended: idle, 0
    std::int64_t m = -1;
    for (std::size_t i = lo; i < hi; ++i) {
      const std::int64_t w = buckets_[i].min_waiting;
      if (w >= 0 && (m < 0 || w < m)) m = w;
    }
    return std::max<std::int64_t>(m, 0);
  };
  for (std::size_t i = b0; i <= b1; ++i) {
    v.arrivals += buckets_[i].arrivals;
    v.completions += buckets_[i].departures;
  }
  const double seconds = static_cast<double>(v.window_end_ns - v.window_start_ns) / 1e9;
  v.arrival_rate_per_s = static_cast<double>(v.arrivals) / seconds;
  v.completion_rate_per_s = static_cast<double>(v.completions) / seconds;
  v.min_waiting_q3 = min_waiting(b0, bm);
  v.min_waiting_q4 = min_waiting(bm, b1 + 1);
  const auto growth_needed = std::max<std::int64_t>(
      1,
      static_cast<std::int64_t>(std::ceil(kMinGrowthFraction * static_cast<double>(v.arrivals))));
  v.overloaded =
      v.arrivals >= kMinArrivals && static_cast<std::int64_t>(b1 + 1 - b0) >= kMinBuckets &&
      static_cast<double>(v.completions) < kMaxCompletionRatio * static_cast<double>(v.arrivals) &&
      v.min_waiting_q4 - v.min_waiting_q3 >= growth_needed;
  return v;
}

std::string overload_warning(const std::string& name, const OverloadDetector::Verdict& v) {
  return fmt::format(
      "{}: overloaded: requests arrive at {:.2f}/s but complete at {:.2f}/s over the second half "
      "of the arrivals ({:.3f}-{:.3f} s); the waiting queue grows through the run (at least {} "
      "to {}), so its latencies depend on the run's length (sim/OUTPUTS.md, overloaded)",
      name, v.arrival_rate_per_s, v.completion_rate_per_s,
      static_cast<double>(v.window_start_ns) / 1e9, static_cast<double>(v.window_end_ns) / 1e9,
      v.min_waiting_q3, v.min_waiting_q4);
}

}  // namespace kvsim
