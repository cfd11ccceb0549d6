// ClusterSimulator's timed loop (shared/spec/cluster-routing.md §1.2-1.3): the replicas' events
// and the cluster's (arrivals, view refreshes) in one global order.
#include <algorithm>

#include "sim/cluster/cluster_simulator.h"

namespace kvsim {

void ClusterSimulator::refresh_view() {
  if (view_delay_ns_ == 0) return router_->on_refresh(now_ns_, step_end_);
  // Each replica's figures at its last step end published by now - delay (spec §1.3).
  const SimTimeNs seen = now_ns_ - view_delay_ns_;
  for (std::size_t r = 0; r < step_history_.size(); ++r) {
    auto& h = step_history_[r];
    while (h.size() >= 2 && h[1].first <= seen) h.pop_front();
    if (!h.empty() && h.front().first <= seen) delayed_view_[r] = h.front().second;
  }
  router_->on_refresh(now_ns_, delayed_view_);
}

void ClusterSimulator::run_timed() {
  // A step end with nothing else queued at its instant must not start the next step at once: the
  // arrivals routed to the replica at that instant come after it (§1.2 (4) before (5)).
  for (auto& r : replicas_) r->set_queue_step_starts(true);
  pull_next_open_loop();
  const SimTimeNs interval = router_->refresh_interval_ns();
  SimTimeNs next_refresh = router_->refresh_phase_ns();
  const auto schedule_refresh = [&] {
    next_refresh += interval;
    arrivals_.schedule(std::max(next_refresh, arrivals_.now()), kPriorityClientAbort,
                       EventKind::kUser);
  };
  if (interval > 0) schedule_refresh();
  const auto n = static_cast<std::int32_t>(replicas_.size());
  for (;;) {
    // The replica whose next event comes first: (time, priority), the lowest index at a tie.
    std::int32_t best = -1;
    SimTimeNs bt = Simulator::kNeverNs;
    std::int32_t bp = 0;
    for (std::int32_t r = 0; r < n; ++r) {
      const Simulator& s = *replicas_[static_cast<std::size_t>(r)];
      const SimTimeNs t = s.next_event_ns();
      if (t == Simulator::kNeverNs || t > bt) continue;
      const std::int32_t p = s.next_event_priority();
      if (t < bt || p < bp) {
        best = r;
        bt = t;
        bp = p;
      }
    }
    const bool cluster_event = !arrivals_.empty();
    // At the same (time, priority) the replicas go first: their step ends and aborts come before
    // a refresh (priority kPriorityClientAbort) and an arrival (kPriorityArrival) of that instant.
    if (best >= 0 && (!cluster_event || bt < arrivals_.peek().time_ns ||
                      (bt == arrivals_.peek().time_ns && bp <= arrivals_.peek().priority))) {
      now_ns_ = bt;
      replicas_[static_cast<std::size_t>(best)]->advance_before(bt, bp + 1);
      check_interrupt();
      continue;
    }
    if (!cluster_event) break;
    const Event ev = *arrivals_.next();
    now_ns_ = ev.time_ns;
    if (ev.kind == EventKind::kUser) {
      refresh_view();
      // The next refresh, while anything is left to happen.
      if (!arrivals_.empty() || best >= 0) schedule_refresh();
      continue;
    }
    const bool open_loop = pending_.open_loop(ev.payload);
    RequestSpec spec = pending_.take(ev.payload);
    if (open_loop) pull_next_open_loop();
    // Refused before routing (§1.2): every replica runs the same profile and server rule.
    if (!replicas_.front()->admits(spec)) {
      record_rejected(spec);
      continue;
    }
    const std::int32_t r = route(spec);
    replicas_[static_cast<std::size_t>(r)]->inject_arrival(std::move(spec));
  }
}

}  // namespace kvsim
