#pragma once
// NixlWorkerSim: the bookkeeping of vLLM v0.20.1's NixlConnectorWorker that the scheduler sees
// (nixl/worker.py: start_load_kv 1840-1895, get_finished 1651-1730, _get_new_notifs), with the
// NIXL agent replaced by the caller: it says when a read finished and when P received D's read
// notification. Reads are tracked from the step whose metadata started them until they are
// reported in finished_recving; a P request is tracked from the step that put it in a batch
// (reqs_to_process) until D's notification or its expiry reports it in finished_sending.
// Homogeneous TP (one notification per request), handshakes done, reads never fail. No I/O.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/pd/nixl_connector.h"

namespace kvsim {

class NixlWorkerSim {
 public:
  /// start_load_kv(metadata): reads with local blocks start (in flight until completed), reads of
  /// no blocks only notify P (`notify_only`); the batch's P requests become tracked, aborted
  /// ones untracked, and a tracked request's expiry is registered.
  void start_load_kv(const NixlStepMeta& meta, std::vector<const NixlRecv*>& started,
                     std::vector<const NixlRecv*>& notify_only);
  /// The read of `id` finished; false when no read of it is in flight.
  bool complete_read(const std::string& id);
  /// Every read in flight finished.
  void complete_all_reads();
  /// D's read notification for `id` arrived; false when the worker does not track it (ignored).
  bool notify(const std::string& id);
  /// get_finished at `now_s`: the notified requests and those whose expiry passed (`expired`, in
  /// expiry order) in `sending`, the finished reads in `recving`; both sorted by id.
  void get_finished(double now_s, std::vector<std::string>& sending,
                    std::vector<std::string>& recving, std::vector<std::string>& expired);

  // ---- views ----
  /// Reads in flight (sorted ids).
  std::vector<std::string> recving() const;
  /// _reqs_to_process, sorted.
  std::vector<std::string> reqs_to_process() const;
  /// _reqs_to_send: (id, expiry) in registration order.
  const std::vector<std::pair<std::string, double>>& reqs_to_send() const { return to_send_; }
  /// "" or the first broken invariant (reqs_to_send ⊆ reqs_to_process, no duplicates).
  std::string find_violation() const;

 private:
  struct Read {
    NixlRecv recv;
    bool done = false;
  };
  std::vector<Read> recving_;  // _recving_transfers (insertion order)
  std::vector<std::string> to_process_;
  std::vector<std::pair<std::string, double>> to_send_;
  std::vector<std::string> notified_;  // this step's notifications (a set)
};

}  // namespace kvsim
