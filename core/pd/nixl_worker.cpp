// NixlWorkerSim (see nixl_worker.h).

#include "core/pd/nixl_worker.h"

#include <algorithm>

namespace kvsim {

namespace {
bool contains(const std::vector<std::string>& v, const std::string& id) {
  return std::find(v.begin(), v.end(), id) != v.end();
}
void erase(std::vector<std::string>& v, const std::string& id) {
  const auto it = std::find(v.begin(), v.end(), id);
  if (it != v.end()) v.erase(it);
}
}  // namespace

void NixlWorkerSim::start_load_kv(const NixlStepMeta& meta, std::vector<const NixlRecv*>& started,
                                  std::vector<const NixlRecv*>& notify_only) {
  for (const NixlRecv& r : meta.reqs_to_recv) {
    if (r.notify_only) {  // _read_blocks: no local blocks, send_notif only
      notify_only.push_back(&r);
      continue;
    }
    started.push_back(&r);
    bool found = false;  // (a dict: a second read of one id replaces the first)
    for (Read& e : recving_)
      if (e.recv.id == r.id) {
        e = {r, false};
        found = true;
      }
    if (!found) recving_.push_back({r, false});
  }
  for (const std::string& id : meta.reqs_in_batch)
    if (!contains(to_process_, id)) to_process_.push_back(id);
  for (const std::string& id : meta.reqs_not_processed) erase(to_process_, id);
  for (const auto& [id, expiry] : meta.reqs_to_send) {
    if (!contains(to_process_, id)) continue;  // read already, or aborted
    bool found = false;
    for (auto& e : to_send_)
      if (e.first == id) {
        e.second = expiry;
        found = true;
      }
    if (!found) to_send_.emplace_back(id, expiry);
  }
}

bool NixlWorkerSim::complete_read(const std::string& id) {
  for (Read& e : recving_)
    if (e.recv.id == id) {
      e.done = true;
      return true;
    }
  return false;
}

void NixlWorkerSim::complete_all_reads() {
  for (Read& e : recving_) e.done = true;
}

bool NixlWorkerSim::notify(const std::string& id) {
  const bool sending =
      std::any_of(to_send_.begin(), to_send_.end(), [&](const auto& e) { return e.first == id; });
  if (!sending && !contains(to_process_, id)) return false;  // "unrecognized request"
  if (!contains(notified_, id)) notified_.push_back(id);
  erase(to_process_, id);
  std::erase_if(to_send_, [&](const auto& e) { return e.first == id; });
  return true;
}

void NixlWorkerSim::get_finished(double now_s, std::vector<std::string>& sending,
                                 std::vector<std::string>& recving,
                                 std::vector<std::string>& expired) {
  sending.clear();
  recving.clear();
  expired.clear();
  sending.swap(notified_);
  for (const Read& e : recving_)
    if (e.done) recving.push_back(e.recv.id);
  std::erase_if(recving_, [](const Read& e) { return e.done; });
  // Expiries in registration order; the first one not due ends the walk.
  while (!to_send_.empty() && !(now_s < to_send_.front().second)) {
    const std::string id = to_send_.front().first;
    to_send_.erase(to_send_.begin());
    erase(to_process_, id);
    expired.push_back(id);
    if (!contains(sending, id)) sending.push_back(id);
  }
  std::sort(sending.begin(), sending.end());
  std::sort(recving.begin(), recving.end());
}

std::vector<std::string> NixlWorkerSim::recving() const {
  std::vector<std::string> ids;
  for (const Read& e : recving_) ids.push_back(e.recv.id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<std::string> NixlWorkerSim::reqs_to_process() const {
  std::vector<std::string> ids = to_process_;
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::string NixlWorkerSim::find_violation() const {
  for (std::size_t i = 0; i < to_send_.size(); ++i) {
    if (!contains(to_process_, to_send_[i].first))
      return "reqs_to_send has " + to_send_[i].first + " outside reqs_to_process";
    for (std::size_t j = 0; j < i; ++j)
      if (to_send_[j].first == to_send_[i].first)
        return "reqs_to_send repeats " + to_send_[i].first;
  }
  for (std::size_t i = 0; i < to_process_.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (to_process_[j] == to_process_[i]) return "reqs_to_process repeats " + to_process_[i];
  return "";
}

}  // namespace kvsim
