// ClusterSimulator's timed loop (shared/spec/cluster-routing.md §1.2-1.3): the replicas' events
// and the cluster's (arrivals, view refreshes) in one global order.
#include <algorithm>

#include "sim/cluster/cluster_pd.h"
#include "sim/cluster/cluster_simulator.h"
#include "sim/cluster/replica_queue.h"

namespace kvsim {

void ClusterSimulator::refresh_view() {
  if (view_delay_ns_ > 0) {
    // Each replica's figures at its last step end published by now - delay (spec §1.3).
    const SimTimeNs seen = now_ns_ - view_delay_ns_;
    for (std::size_t r = 0; r < step_history_.size(); ++r) {
      auto& h = step_history_[r];
      while (h.size() >= 2 && h[1].first <= seen) h.pop_front();
      if (!h.empty() && h.front().first <= seen) delayed_view_[r] = h.front().second;
    }
  }
  const std::span<const ReplicaView> view = view_delay_ns_ > 0 ? delayed_view_ : step_end_;
  for (Pool& pool : pools_)
    pool.router->on_refresh(now_ns_, view.subspan(static_cast<std::size_t>(pool.first),
                                                  static_cast<std::size_t>(pool.size)));
}

void ClusterSimulator::run_timed() {
  // A step end with nothing else queued at its instant must not start the next step at once: the
  // arrivals routed to the replica at that instant come after it (§1.2 (4) before (5)).
  for (auto& r : replicas_) r->set_queue_step_starts(true);
  pull_next_open_loop();
  // (P/D's two routers are of one policy and configuration: one refresh period.)
  const SimTimeNs interval = pools_[0].router->refresh_interval_ns();
  SimTimeNs next_refresh = pools_[0].router->refresh_phase_ns();
  for (const Pool& pool : pools_)
    KVSIM_ASSERT(pool.router->refresh_interval_ns() == interval &&
                 pool.router->refresh_phase_ns() == next_refresh);
  const auto schedule_refresh = [&] {
    next_refresh += interval;
    arrivals_.schedule(std::max(next_refresh, arrivals_.now()), kPriorityClientAbort,
                       EventKind::kUser);
  };
  if (interval > 0) schedule_refresh();
  // The replicas keyed by their next event (time, priority), the lowest index first at a tie. A
  // replica's next event changes only when it handles events (advance_before) or is handed an
  // arrival (inject_arrival): it is re-keyed after each, O(log N), nothing allocated.
  const auto n = static_cast<std::int32_t>(replicas_.size());
  ReplicaQueue queue(n);
  const auto rekey = [&](std::int32_t r) {
    const Simulator& s = *replicas_[static_cast<std::size_t>(r)];
    queue.set(r, s.next_event_ns(), s.next_event_priority());
  };
  for (std::int32_t r = 0; r < n; ++r) rekey(r);
  // The lockstep barrier sets other replicas' step ends and wakes idle ones: re-key them too.
  // P/D hands replicas requests and reads outside their own events: re-key those too.
  const auto rekey_touched = [&] {
    if (lockstep_)
      for (const std::int32_t r : lockstep_->take_touched()) rekey(r);
    for (const std::int32_t r : touched_) rekey(r);
    touched_.clear();
  };
  for (;;) {
    // The replica whose next event comes first (none when every replica is idle).
    const SimTimeNs bt = queue.top_time();
    const std::int32_t best = bt == Simulator::kNeverNs ? -1 : queue.top();
    const std::int32_t bp = queue.top_priority();
    const bool cluster_event = !arrivals_.empty();
    // P/D: the reads that end first are delivered to their decode replicas before anything else
    // happens at that instant (D's step ending then sees them; §7.3).
    if (pd_) {
      const SimTimeNs tr = pd_->next_read_end();
      if (tr != Simulator::kNeverNs && (best < 0 || tr <= bt) &&
          (!cluster_event || tr <= arrivals_.peek().time_ns)) {
        now_ns_ = tr;
        pd_->deliver_reads(now_ns_);
        rekey_touched();
        continue;
      }
    }
    // At the same (time, priority) the replicas go first: their step ends and aborts come before
    // a refresh (priority kPriorityClientAbort) and an arrival (kPriorityArrival) of that instant.
    if (best >= 0 && (!cluster_event || bt < arrivals_.peek().time_ns ||
                      (bt == arrivals_.peek().time_ns && bp <= arrivals_.peek().priority))) {
      now_ns_ = bt;
      replicas_[static_cast<std::size_t>(best)]->advance_before(bt, bp + 1);
      rekey(best);
      rekey_touched();
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
    if (pending_.tag(ev.payload) == kPdHandOff) {  // P's response at the proxy
      pd_->hand_off(pending_.take(ev.payload).id);
      rekey_touched();
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
    if (pd_) {
      pd_->arrive(std::move(spec));
    } else {
      const std::int32_t r = route(spec);
      replicas_[static_cast<std::size_t>(r)]->inject_arrival(std::move(spec));
      rekey(r);
    }
    rekey_touched();
  }
}

}  // namespace kvsim
