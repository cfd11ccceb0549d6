// PdEndpoint (see pd_endpoint.h): NixlConnector and the NIXL worker's bookkeeping of one replica,
// on the replica's clock.

#include "sim/engine/pd_endpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "core/common/assert.h"
#include "core/v1/scheduler.h"
#include "sim/engine/engine.h"

namespace kvsim {

namespace {
std::uint64_t id_of(std::string_view name) {
  std::uint64_t id = 0;
  std::from_chars(name.data(), name.data() + name.size(), id);
  return id;
}
}  // namespace

PdEndpoint::PdEndpoint(Scheduler& scheduler, const Engine& clock, PdRole role, PdHooks* hooks,
                       std::string engine_id, double abort_timeout_s)
    : scheduler_(scheduler),
      clock_(clock),
      role_(role),
      hooks_(hooks),
      engine_id_(std::move(engine_id)),
      nixl_(NixlConnectorConfig{abort_timeout_s, 0}) {
  KVSIM_ASSERT(scheduler_.kv_cache_manager().coordinator() != nullptr &&
                   scheduler_.kv_cache_manager().coordinator()->num_groups() == 1,
               "P/D runs on vllm-0.20 with one KV cache group");
  // EngineCore hashes every request's blocks when a connector is set, prefix caching or not.
  scheduler_.kv_cache_manager().coordinator()->hash_without_caching();
  scheduler_.set_connector(this);
}

PdEndpoint::~PdEndpoint() { scheduler_.set_connector(nullptr); }

std::string PdEndpoint::request_name(std::uint64_t id) {
  // Zero-padded: the ids' string order (vLLM's sorted sets here) is their numeric order.
  return fmt::format("{:020}", id);
}

double PdEndpoint::now_s() const { return static_cast<double>(clock_.now()) / 1e9; }

// ---- the cluster's calls --------------------------------------------------------------------

void PdEndpoint::read_done(std::uint64_t request_id, SimTimeNs t_ns) {
  std::string name = request_name(request_id);
  const auto it = remote_.find(name);
  KVSIM_ASSERT(it != remote_.end(), "read_done for a request with no read in flight");
  if (hooks_ != nullptr)
    hooks_->on_read_notify(request_id, it->second.engine_id, it->second.request_name, t_ns);
  remote_.erase(it);
  reads_done_.emplace_back(std::move(name), t_ns);
}

void PdEndpoint::notify(std::string_view request_id, SimTimeNs t_ns) {
  notifications_.emplace_back(std::string(request_id), t_ns);
}

// ---- the simulator's calls ------------------------------------------------------------------

void PdEndpoint::expect(std::uint64_t request_id, PdTransferParams params) {
  KVSIM_ASSERT(role_ == PdRole::kPrefill ? params.do_remote_decode && !params.do_remote_prefill
                                         : params.do_remote_prefill && !params.do_remote_decode,
               "kv_transfer_params that do not fit the replica's P/D role");
  expected_.emplace_back(request_id, std::move(params));
}

void PdEndpoint::on_admit(Request& request, std::uint64_t request_id) {
  request.request_id = request_name(request_id);
  PdParams p;
  const auto it = std::find_if(expected_.begin(), expected_.end(),
                               [&](const auto& e) { return e.first == request_id; });
  if (it != expected_.end()) {
    const PdTransferParams& t = it->second;
    // The proxy sends every key (null ones to P): present, with the remote_* keys.
    p.present = true;
    p.do_remote_decode = t.do_remote_decode;
    p.do_remote_prefill = t.do_remote_prefill;
    p.remote_block_ids = !t.remote_block_ids.empty();
    p.remote_keys = p.remote_meta = true;
    if (t.do_remote_prefill)
      remote_[request.request_id] = {request_id, t.remote_engine_id, t.remote_request_id};
    expected_.erase(it);
  }
  nixl_.set_params(request, p);
}

void PdEndpoint::on_dropped(std::uint64_t request_id) {
  const auto it = std::find_if(expected_.begin(), expected_.end(),
                               [&](const auto& e) { return e.first == request_id; });
  if (it == expected_.end()) return;
  if (it->second.do_remote_prefill)
    dropped_.push_back({request_id, it->second.remote_engine_id, it->second.remote_request_id});
  expected_.erase(it);
}

bool PdEndpoint::has_requests() const {
  // (A dropped request is a finished id to flush in vLLM.)
  return scheduler_.num_unfinished_requests() > 0 || scheduler_.has_finished_requests() ||
         !dropped_.empty();
}

void PdEndpoint::start_execution(SimTimeNs t_ns) {
  KVSIM_ASSERT(!unstarted_.empty(), "a step starts with no metadata");
  const NixlStepMeta& meta = unstarted_.front().meta;
  started_.clear();
  notify_only_.clear();
  worker_.start_load_kv(meta, started_, notify_only_);
  for (const NixlRecv* r : started_) {
    ++stats_.reads_started;
    const auto n = static_cast<std::int64_t>(r->local_block_ids.size());
    stats_.blocks_read += n;
    const auto it = remote_.find(r->id);
    KVSIM_ASSERT(it != remote_.end());
    if (hooks_ != nullptr)
      hooks_->on_read_start(it->second.request_id, n, it->second.engine_id, t_ns);
  }
  for (const NixlRecv* r : notify_only_) {
    // _read_blocks with no local blocks: only the notification (at once).
    ++stats_.notify_only;
    const auto it = remote_.find(r->id);
    if (it == remote_.end()) continue;
    if (hooks_ != nullptr)
      hooks_->on_read_notify(it->second.request_id, it->second.engine_id, it->second.request_name,
                             t_ns);
    remote_.erase(it);
  }
  for (const Remote& r : unstarted_.front().dropped) {  // aborted before admission
    ++stats_.notify_only;
    if (hooks_ != nullptr) hooks_->on_read_notify(r.request_id, r.engine_id, r.request_name, t_ns);
  }
  unstarted_.pop_front();
  ++started_steps_;
}

void PdEndpoint::end_execution(SimTimeNs t_ns) {
  KVSIM_ASSERT(started_steps_ > 0, "a step ends that never started");
  --started_steps_;
  // The reads done and the notifications arrived by now (_get_new_notifs, _pop_done_transfers).
  std::erase_if(reads_done_, [&](const auto& e) {
    if (e.second > t_ns) return false;
    KVSIM_ASSERT(worker_.complete_read(e.first), "read_done for a read the worker never started");
    return true;
  });
  std::erase_if(notifications_, [&](const auto& e) {
    if (e.second > t_ns) return false;
    ++stats_.notifications_received;
    if (worker_.notify(e.first)) ++stats_.freed_by_notification;  // else: vLLM ignores it
    return true;
  });
  worker_.get_finished(static_cast<double>(t_ns) / 1e9, sending_, recving_, expired_);
  stats_.expired += static_cast<std::int64_t>(expired_.size());
  if (hooks_ != nullptr) hooks_->on_get_finished(sending_, recving_, t_ns);
  Report& r = reports_.emplace_back();
  r.sending.swap(sending_);
  r.recving.swap(recving_);
}

Request* PdEndpoint::find(const std::string& id, bool held_only) const {
  for (Request* r : scheduler_.held())
    if (r->request_id == id) return r;
  if (!held_only)
    for (Request* r : scheduler_.skipped_waiting())
      if (r->request_id == id) return r;
  return nullptr;  // (vLLM asserts req_id in self.requests; kvsim leaves it out)
}

void PdEndpoint::convert(const std::vector<std::string>& ids, bool held_only,
                         std::vector<Request*>& out) {
  out.clear();
  for (const std::string& id : ids)
    if (Request* r = find(id, held_only); r != nullptr) out.push_back(r);
}

void PdEndpoint::apply_report() {
  KVSIM_ASSERT(!reports_.empty(), "an update with no worker report");
  const Report& r = reports_.front();
  // finished_sending: P's held requests; finished_recving: D's loading requests (or aborted ones
  // the scheduler holds until their read ends).
  convert(r.sending, /*held_only=*/true, sending_req_);
  convert(r.recving, /*held_only=*/false, recving_req_);
  last_report_changed_ = !sending_req_.empty() || !recving_req_.empty();
  reports_.pop_front();
  scheduler_.set_connector_output({sending_req_, recving_req_});
}

bool PdEndpoint::transfers_pending() const {
  return !worker_.recving().empty() || !unstarted_.empty() || !reads_done_.empty() ||
         !notifications_.empty() || !reports_.empty();
}

bool PdEndpoint::holds(const Request& request) const {
  const std::span<Request* const> held = scheduler_.held();
  return std::find(held.begin(), held.end(), &request) != held.end();
}

std::int64_t PdEndpoint::take_external_tokens(const Request& request) {
  const auto it = external_tokens_.find(request.request_id);
  if (it == external_tokens_.end()) return 0;
  const std::int64_t n = it->second;
  external_tokens_.erase(it);
  return n;
}

void PdEndpoint::reap(std::vector<std::int64_t>& free_slots) {
  std::erase_if(parked_, [&](Parked& p) {
    if (holds(*p.request)) return false;
    free_slots.push_back(p.slot);
    return true;
  });
}

// ---- KVConnector ----------------------------------------------------------------------------

ExternalMatch PdEndpoint::lookup(Request& request, std::int64_t num_local_tokens) {
  return nixl_.lookup(request, num_local_tokens);
}

void PdEndpoint::update_state_after_alloc(Request& request, const ConnectorBlocks& blocks,
                                          std::int64_t num_external_tokens) {
  nixl_.update_state_after_alloc(request, blocks, num_external_tokens);
  if (num_external_tokens > 0) external_tokens_[request.request_id] = num_external_tokens;
}

const char* PdEndpoint::build_connector_meta(const SchedulerOutput& out) {
  // The scheduler's connector_prefix_cache_stats of this schedule() (first lookups and those
  // after a preemption, as the CPU tier counts them).
  const ConnectorCacheStats cs = scheduler_.take_connector_cache_stats();
  stats_.external_queries += cs.queries + cs.preempted_queries;
  stats_.external_hits += cs.hits + cs.preempted_hits;
  const char* error = nixl_.build_connector_meta(out);
  StepMeta& m = unstarted_.emplace_back();
  m.meta = nixl_.meta();
  m.dropped.swap(dropped_);
  return error;
}

bool PdEndpoint::request_finished(Request& request, std::span<const BlockId> block_ids) {
  nixl_.set_now(now_s());  // time.perf_counter() of the expiry stamp
  external_tokens_.erase(request.request_id);
  const bool decode_side = nixl_.params(request).present && nixl_.params(request).do_remote_decode;
  const bool delay = nixl_.request_finished(request, block_ids);
  if (decode_side) {
    const NixlFinish& f = nixl_.finishes().back();
    PdPrefillResult res;
    res.request_id = id_of(request.request_id);
    res.returned_params = f.returned_params;
    res.delay_free = f.delay_free;
    res.finish_ns = clock_.now();
    if (f.returned_params) {
      ++stats_.prefills_returned;
      res.params.do_remote_prefill = true;
      res.params.remote_block_ids = f.block_ids;
      res.params.remote_engine_id = engine_id_;
      res.params.remote_request_id = request.request_id;
    }
    if (hooks_ != nullptr) hooks_->on_prefill_done(res);
  }
  nixl_.clear_finishes();
  return delay;
}

void PdEndpoint::update_connector_output(const ConnectorOutput& output) {
  nixl_.update_connector_output(output);
}

}  // namespace kvsim
