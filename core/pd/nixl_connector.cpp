// NixlConnectorScheduler of vLLM v0.20.1 (nixl/scheduler.py): get_num_new_matched_tokens
// (264-302), update_state_after_alloc (304-364), build_connector_meta (401-429), request_finished
// (431-504).

#include "core/pd/nixl_connector.h"

#include <algorithm>

#include "core/common/assert.h"

namespace kvsim {

namespace {
// Python's dict assignment: a new key goes to the end, an existing one keeps its place.
template <class V, class Value>
void dict_set(std::vector<V>& dict, const std::string& id, Value&& value) {
  for (V& e : dict)
    if (e.first == id) {
      e.second = std::forward<Value>(value);
      return;
    }
  dict.emplace_back(id, std::forward<Value>(value));
}

void set_add(std::vector<std::string>& set, const std::string& id) {
  if (std::find(set.begin(), set.end(), id) == set.end()) set.push_back(id);
}
}  // namespace

void NixlConnector::set_params(const Request& request, const PdParams& params) {
  const auto i = static_cast<std::size_t>(request.index());
  if (params_.size() <= i) params_.resize(i + 1);
  params_[i] = params;
}

const PdParams& NixlConnector::params(const Request& request) const {
  static const PdParams kNone;
  const auto i = static_cast<std::size_t>(request.index());
  return i < params_.size() ? params_[i] : kNone;
}

std::span<const BlockId> NixlConnector::clipped(std::span<const BlockId> blocks) const {
  // blocks[-n:] of the window's group (all of them when the table is shorter).
  if (config_.sw_blocks <= 0 || blocks.empty()) return blocks;
  const auto n = static_cast<std::size_t>(config_.sw_blocks);
  return blocks.size() <= n ? blocks : blocks.subspan(blocks.size() - n);
}

ExternalMatch NixlConnector::lookup(Request& request, std::int64_t num_local_tokens) {
  const PdParams& p = params(request);
  ExternalMatch m;
  if (p.present && p.do_remote_prefill) {
    // Remote prefill: every prompt token beyond the local hits comes from P.
    const std::int64_t count = request.num_prompt_tokens() - num_local_tokens;
    if (count > 0) {
      m.num_tokens = count;
      m.load_async = true;
    }
  }
  pending_lookups_.push_back({&request, num_local_tokens, m.num_tokens, m.load_async});
  return m;
}

void NixlConnector::update_state_after_alloc(Request& request, const ConnectorBlocks& blocks,
                                             std::int64_t num_external_tokens) {
  // The scheduler calls this right after the lookup of the same request.
  if (!pending_lookups_.empty() && pending_lookups_.back().request == &request &&
      pending_lookups_.back().load_async)
    pending_to_remote_.push_back(&request);
  const auto i = static_cast<std::size_t>(request.index());
  if (i >= params_.size() || !params_[i].present) return;
  PdParams& p = params_[i];
  if (p.do_remote_decode) set_add(in_batch_, request.request_id);
  // (use_host_buffer is false: kv_buffer_device is the GPU.)
  if (!p.do_remote_prefill) return;
  if (p.remote_block_ids) {
    if (p.remote_keys) {
      // The unhashed blocks (not the local hits) are read; none on a full local hit, which
      // still notifies P.
      NixlRecv recv;
      recv.id = request.request_id;
      recv.request_index = request.index();
      recv.notify_only = num_external_tokens <= 0;
      if (!recv.notify_only) {
        const auto first = static_cast<std::size_t>(blocks.first_unhashed);
        const auto unhashed = blocks.block_ids.subspan(std::min(first, blocks.block_ids.size()));
        const auto c = clipped(unhashed);
        recv.local_block_ids.assign(c.begin(), c.end());
      }
      bool found = false;
      for (NixlRecv& e : need_recv_)
        if (e.id == recv.id) {
          e = std::move(recv);
          found = true;
          break;
        }
      if (!found) need_recv_.push_back(std::move(recv));
    }
    // else: vLLM warns "Got invalid KVTransferParams" and reads nothing.
  } else if (num_external_tokens != 0 && error_[0] == 0) {
    error_ = "AssertionError: num_external_tokens == 0";
  }
  p.do_remote_prefill = false;  // one transfer per request
}

const char* NixlConnector::build_connector_meta(const SchedulerOutput& /*out*/) {
  const char* error = error_;
  error_ = "";
  meta_.reqs_to_recv.clear();
  meta_.reqs_to_recv.swap(need_recv_);
  for (const NixlRecv& r : meta_.reqs_to_recv)  // add_new_req_to_recv reads params[remote_*]
    if (!params_[static_cast<std::size_t>(r.request_index)].remote_meta && error[0] == 0)
      error = "KeyError: 'remote_block_ids'";
  meta_.reqs_to_send.clear();
  meta_.reqs_to_send.swap(need_send_);
  meta_.reqs_in_batch.clear();
  meta_.reqs_in_batch.swap(in_batch_);
  std::sort(meta_.reqs_in_batch.begin(), meta_.reqs_in_batch.end());
  meta_.reqs_not_processed.clear();
  meta_.reqs_not_processed.swap(not_processed_);
  std::sort(meta_.reqs_not_processed.begin(), meta_.reqs_not_processed.end());
  lookups_.swap(pending_lookups_);
  pending_lookups_.clear();
  to_remote_.swap(pending_to_remote_);
  pending_to_remote_.clear();
  return error;
}

bool NixlConnector::request_finished(Request& request, std::span<const BlockId> block_ids) {
  NixlFinish& f = finishes_.emplace_back();
  f.request_index = request.index();
  const auto i = static_cast<std::size_t>(request.index());
  if (i >= params_.size() || !params_[i].present) return false;
  PdParams& p = params_[i];
  if (p.do_remote_prefill) {
    // Aborted before its blocks were allocated: a read of no blocks only tells P to free.
    NixlRecv recv;
    recv.id = request.request_id;
    recv.request_index = request.index();
    recv.notify_only = true;
    bool found = false;
    for (NixlRecv& e : need_recv_)
      if (e.id == recv.id) {
        e = std::move(recv);
        found = true;
        break;
      }
    if (!found) need_recv_.push_back(std::move(recv));
    p.do_remote_prefill = false;
    return false;
  }
  if (!p.do_remote_decode) return false;
  if (request.status != RequestStatus::kFinishedLengthCapped) {
    // An abort or a stop on the first token: freed now, the worker stops tracking it.
    set_add(not_processed_, request.request_id);
    return false;
  }
  f.returned_params = true;
  f.delay_free = !block_ids.empty();
  if (f.delay_free) {
    dict_set(need_send_, request.request_id, now_s_ + config_.abort_timeout_s);
    const auto c = clipped(block_ids);
    f.block_ids.assign(c.begin(), c.end());
  }
  return f.delay_free;
}

std::vector<std::string> NixlConnector::need_recv_ids() const {
  std::vector<std::string> ids;
  for (const NixlRecv& r : need_recv_) ids.push_back(r.id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<std::string> NixlConnector::need_send_ids() const {
  std::vector<std::string> ids;
  for (const auto& e : need_send_) ids.push_back(e.first);
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace kvsim
