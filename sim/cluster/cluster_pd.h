#pragma once
// ClusterSimulator::Pd (private to the cluster; cluster_pd.cpp has the calls): the P/D state of a
// cluster (shared/spec/cluster-routing.md §7, §4.4, §5.5, §10): the proxy, each client request's
// way through a prefill and a decode replica, the KV reads of the transfer model (pd_transfer.h)
// and what the outputs say of them. The replicas' own P/D loop is the engine's
// (Simulator::set_pd_role, sim/engine/pd_endpoint.h).
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/common/assert.h"
#include "sim/cluster/cluster_simulator.h"
#include "sim/cluster/pd_transfer.h"
#include "sim/metrics/metrics.h"
#include "sim/metrics/prom_text.h"

namespace kvsim {

/// The P/D state of a cluster: the proxy's hooks into the replicas, one Flow per client request
/// in flight, the reads.
class ClusterSimulator::Pd final {
 public:
  /// A client's request on its way (times in ns; -1: not yet / never).
  struct Flow {
    RequestSpec spec;         // the client's request (D gets it, with P's kv_transfer_params)
    SimTimeNs client_ns = 0;  // its arrival at the proxy (the records' arrival)
    std::int32_t prefill = -1, decode = -1;
    SimTimeNs p_arrival = -1, p_scheduled = -1, p_finish = -1, d_arrival = -1;
    SimTimeNs read_start = -1, read_end = -1, d_step_start = -1;
    std::int64_t p_hits = 0, bytes = 0;
    std::int32_t p_preemptions = 0;
    bool to_decode = false;  // P returned kv_transfer_params: D serves the rest
    PdTransferParams params;
  };

  Pd(ClusterSimulator& c, const Scenario& s)
      : c_(c), cfg_(s.cluster.router.pd), model_(cfg_, tps(s)), block_bytes_(pd_block_bytes(s)) {
    // vLLM's NixlPromMetrics buckets (nixl/stats.py): seconds 0.005 .. 5, bytes 2 KiB .. 8 GiB.
    xfer_time_.resize(static_cast<std::size_t>(s.cluster.replicas));
    xfer_bytes_.resize(static_cast<std::size_t>(s.cluster.replicas));
    std::vector<double> bytes;
    for (int i = 1; i < 25; i += 2)
      bytes.push_back(static_cast<double>(std::int64_t{1} << (10 + i)));
    for (std::size_t r = 0; r < xfer_time_.size(); ++r) {
      xfer_time_[r].init({0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0});
      xfer_bytes_[r].init(bytes);
    }
  }

  static std::vector<std::int32_t> tps(const Scenario& s) {
    std::vector<std::int32_t> tp;
    for (std::int64_t r = 0; r < s.cluster.replicas; ++r)
      tp.push_back(static_cast<std::int32_t>(
          replica_scenario(s, static_cast<std::int32_t>(r)).hardware.tensor_parallel_size));
    return tp;
  }
  static std::string engine_name(std::int32_t r) { return fmt::format("replica-{}", r); }
  static std::uint64_t id_of(const std::string& name) {
    std::uint64_t id = 0;
    std::from_chars(name.data(), name.data() + name.size(), id);
    return id;
  }
  Simulator& replica(std::int32_t r) { return *c_.replicas_[static_cast<std::size_t>(r)]; }
  std::int32_t replica_of(const std::string& engine_id) const {
    const auto it = engines_.find(engine_id);
    KVSIM_ASSERT(it != engines_.end(), "a P/D engine id no replica has");
    return it->second;
  }

  /// Replica r's hooks: its calls, with r.
  class Hooks final : public PdHooks {
   public:
    Hooks(Pd& pd, std::int32_t r) : pd_(pd), r_(r) {}
    void on_prefill_done(const PdPrefillResult& res) override { pd_.on_prefill_done(res); }
    void on_read_start(std::uint64_t id, std::int64_t num_blocks, const std::string& engine,
                       SimTimeNs start_ns) override {
      pd_.on_read_start(r_, id, num_blocks, engine, start_ns);
    }
    void on_read_notify(std::uint64_t id, const std::string& engine, const std::string& request,
                        SimTimeNs sent_ns) override {
      pd_.on_read_notify(id, engine, request, sent_ns);
    }
    void on_get_finished(std::span<const std::string> sending, std::span<const std::string> recving,
                         SimTimeNs t_ns) override {
      pd_.on_get_finished(sending, recving, t_ns);
    }

   private:
    Pd& pd_;
    std::int32_t r_;
  };

  void setup() {
    for (std::int32_t r = 0; r < c_.num_replicas(); ++r) {
      const std::string name = engine_name(r);
      engines_.emplace(name, r);
      hooks_.push_back(std::make_unique<Hooks>(*this, r));
      replica(r).set_pd_role(
          c_.role(r) == ReplicaRole::kPrefill ? PdRole::kPrefill : PdRole::kDecode,
          hooks_.back().get(), name);
    }
  }

  /// The client's timeout left for a copy of the request that reaches a replica at `at`.
  static void shift_timeout(RequestSpec& s, SimTimeNs client_ns, SimTimeNs at) {
    if (s.client_timeout_ns >= 0)
      s.client_timeout_ns = std::max<SimTimeNs>(0, s.client_timeout_ns - (at - client_ns));
    s.arrival_ns = at;
  }

  /// A client's request at the proxy now (after the refusal check): routed and sent on.
  void arrive(RequestSpec spec) {
    const SimTimeNs now = c_.now_ns_;
    Flow f;
    f.client_ns = spec.arrival_ns;
    if (cfg_.proxy == PdProxy::kLlmD) {
      // llm-d: the decode profile first, then the prefix-based decider (§4.4), then the prefill
      // profile when it disaggregates.
      RouteDecision d;
      f.decode = c_.route(spec, 1, "decode", &d);
      if (!llm_d_disaggregates(spec, d)) {
        ++kept_on_decode_;
        f.d_arrival = now;
        RequestSpec s = spec;
        shift_timeout(s, f.client_ns, now);
        replica(f.decode).inject_arrival(std::move(s));  // no kv_transfer_params
        c_.touched_.push_back(f.decode);
        flows_.emplace(spec.id, std::move(f));
        return;
      }
    }
    f.prefill = c_.route(spec, 0, "prefill");
    f.p_arrival = now + cfg_.proxy_hop_ns;
    RequestSpec s = spec;
    shift_timeout(s, f.client_ns, f.p_arrival);
    PdTransferParams params;
    params.do_remote_decode = true;
    replica(f.prefill).inject_pd_arrival(std::move(s), std::move(params));
    c_.touched_.push_back(f.prefill);
    f.spec = std::move(spec);
    flows_.emplace(f.spec.id, std::move(f));
  }

  /// llm-d's prefix-based-pd-decider (prefix_based_pd_decider.go:98-128) on the decode pod `d`
  /// chose: the prompt's length stands for its characters / 4 (kvsim has tokens).
  bool llm_d_disaggregates(const RequestSpec& spec, const RouteDecision& d) const {
    const std::int64_t threshold = cfg_.non_cached_tokens;
    if (threshold <= 0) return false;
    const std::int64_t prompt = spec.num_prompt_tokens();
    if (prompt < threshold) return false;
    const std::int64_t matched = std::max<std::int64_t>(d.prefix_blocks, 0);
    return prompt - matched * c_.scenario_.cache.sizing.block_size >= threshold;
  }

  /// P's response for request `id` reaches the proxy now (a kPdHandOff event): on to D.
  void hand_off(std::uint64_t id) {
    Flow& f = flows_.at(id);
    const SimTimeNs now = c_.now_ns_;
    // The toy proxy and Dynamo pick the decode replica when P's response comes back; llm-d's
    // sidecar runs on the decode pod it was routed to.
    if (cfg_.proxy == PdProxy::kLlmD) {
      f.d_arrival = now;
    } else {
      f.decode = c_.route(f.spec, 1, "decode");
      f.d_arrival = now + cfg_.proxy_hop_ns;
    }
    RequestSpec s = std::move(f.spec);
    shift_timeout(s, f.client_ns, f.d_arrival);
    replica(f.decode).inject_pd_arrival(std::move(s), std::move(f.params));
    c_.touched_.push_back(f.decode);
  }

  // ---- the replicas' hooks -----------------------------------------------------------------
  void on_prefill_done(const PdPrefillResult& r) {
    if (r.delay_free) held_since_.emplace(r.params.remote_request_id, r.finish_ns);
    // Ended on P (an abort, whose record may come first; EOS on its first token): nothing to hand.
    if (!r.returned_params) return;
    const auto it = flows_.find(r.request_id);
    // The client gave up while P finished it: the proxy sends nothing on, P holds the blocks until
    // the expiry (VLLM_NIXL_ABORT_REQUEST_TIMEOUT).
    if (it == flows_.end()) return;
    Flow& f = it->second;
    f.p_finish = r.finish_ns;
    f.to_decode = true;
    f.params = r.params;
    // P's response reaches the proxy one hop later.
    RequestSpec token;
    token.id = r.request_id;
    const std::int64_t slot = c_.pending_.put(std::move(token), false, kPdHandOff);
    c_.arrivals_.schedule(r.finish_ns + cfg_.proxy_hop_ns, kPriorityArrival, EventKind::kArrival,
                          slot);
  }
  void on_read_start(std::int32_t d, std::uint64_t id, std::int64_t num_blocks,
                     const std::string& engine, SimTimeNs start_ns) {
    const std::int64_t bytes = num_blocks * block_bytes_;
    // (A request aborted while its blocks were being allocated has no flow left: its read runs.)
    if (const auto it = flows_.find(id); it != flows_.end()) {
      it->second.read_start = start_ns;
      it->second.bytes = bytes;
    }
    model_.start(id, replica_of(engine), d, num_blocks, bytes, start_ns);
  }
  void on_read_notify(std::uint64_t id, const std::string& engine, const std::string& request,
                      SimTimeNs sent_ns) {
    // The READ carries the notification: P learns of it when the data have landed (§7.1 7).
    const std::int32_t p = replica_of(engine);
    replica(p).pd_endpoint()->notify(request, sent_ns);
    if (const auto it = flows_.find(id); it != flows_.end() && it->second.read_start < 0)
      it->second.read_start = it->second.read_end = sent_ns;  // no blocks to read
  }
  void on_get_finished(std::span<const std::string> sending, std::span<const std::string> recving,
                       SimTimeNs t_ns) {
    for (const std::string& name : sending)
      if (const auto it = held_since_.find(name); it != held_since_.end()) {
        hold_ns_ += t_ns - it->second;
        ++holds_;
        held_since_.erase(it);
      }
    for (const std::string& name : recving)
      if (const auto it = unseen_.find(id_of(name)); it != unseen_.end()) {
        rows_[it->second].seen_ns = t_ns;
        unseen_.erase(it);
      }
  }

  // ---- reads --------------------------------------------------------------------------------
  /// When the next read ends (kNeverNs: none in flight); the reads ended by `now` delivered.
  SimTimeNs next_read_end() const {
    return model_.num_in_flight() == 0 ? kNeverNs : model_.next_completion_ns();
  }
  void deliver_reads(SimTimeNs now) {
    ended_.clear();
    model_.pop_completions(now, ended_);
    for (const PdTransferRecord& t : ended_) {
      TransferRow row;
      row.request_id = t.id;
      row.prefill_replica = t.prefill_replica;
      row.decode_replica = t.decode_replica;
      row.blocks = t.blocks;
      row.bytes = t.bytes;
      row.start_ns = t.start_ns;
      row.end_ns = t.end_ns;
      row.seen_ns = -1;
      row.concurrent = t.concurrent;
      if (t.blocks > 0) {  // a read NIXL posts: from the post (after the handshake), setup included
        const auto d = static_cast<std::size_t>(t.decode_replica);
        xfer_time_[d].observe(static_cast<double>(t.end_ns - t.move_ns + cfg_.setup_ns) / 1e9);
        xfer_bytes_[d].observe(static_cast<double>(t.bytes));
      }
      unseen_[t.id] = rows_.size();
      rows_.push_back(row);
      if (const auto it = flows_.find(t.id); it != flows_.end()) it->second.read_end = t.end_ns;
      replica(t.decode_replica).pd_endpoint()->read_done(t.id, t.end_ns);
      c_.touched_.push_back(t.decode_replica);
    }
  }

  // ---- records ------------------------------------------------------------------------------
  /// Whether request `id` finishing on replica r ends the client's request (P hands it on: no).
  bool ends_here(std::int32_t r, std::uint64_t id) const {
    if (c_.role(r) == ReplicaRole::kDecode) return true;
    const auto it = flows_.find(id);
    return it == flows_.end() || !it->second.to_decode;
  }
  /// Replica r's step started at `start_ns` gave request `id` its first token.
  void on_first_token(std::int32_t r, std::uint64_t id, SimTimeNs start_ns) {
    if (c_.role(r) != ReplicaRole::kDecode) return;
    if (const auto it = flows_.find(id); it != flows_.end() && it->second.d_step_start < 0)
      it->second.d_step_start = start_ns;
  }
  /// Replica r's record of a request: the client's record once the request ended there.
  void on_record(std::int32_t r, const RequestRecord& rec) {
    const auto it = flows_.find(rec.request_id);
    KVSIM_ASSERT(it != flows_.end(), "a P/D record of a request the proxy never sent");
    Flow& f = it->second;
    if (c_.role(r) == ReplicaRole::kPrefill && f.to_decode) {  // P's part; D records the request
      f.p_scheduled = rec.first_scheduled_ns;
      f.p_hits = rec.first_lookup_hit_tokens;
      f.p_preemptions = rec.num_preemptions;
      return;
    }
    RequestRecord out = rec;
    out.arrival_ns = f.client_ns;
    columns_ = PdRequestColumns{};
    columns_.prefill_replica = f.prefill;
    SimTimeNs* part = columns_.ttft_parts_ns;
    const bool token = rec.first_token_ns >= 0;
    if (c_.role(r) == ReplicaRole::kPrefill) {
      // Ended on P: its first (and only) token, or an abort.
      if (token && rec.first_scheduled_ns >= 0) {
        part[0] = f.p_arrival - f.client_ns;
        part[1] = rec.first_scheduled_ns - f.p_arrival;
        part[2] = rec.first_token_ns - rec.first_scheduled_ns;
        std::fill(part + 3, part + PdRequestColumns::kParts, 0);
      }
    } else {
      columns_.decode_replica = r;
      if (f.prefill >= 0) {
        out.first_scheduled_ns = f.p_scheduled;
        out.first_lookup_hit_tokens = f.p_hits;
        out.num_preemptions += f.p_preemptions;
      }
      if (f.read_start >= 0 && f.read_end >= 0) {
        columns_.kv_transfer_ns = f.read_end - f.read_start;
        columns_.kv_transfer_bytes = f.bytes;
      }
      if (token && f.d_step_start >= 0) {
        if (f.prefill >= 0) {
          part[0] = (f.p_arrival - f.client_ns) + (f.d_arrival - f.p_finish);
          part[1] = f.p_scheduled - f.p_arrival;
          part[2] = f.p_finish - f.p_scheduled;
          part[3] = f.read_start - f.d_arrival;
          part[4] = f.read_end - f.read_start;
          part[5] = f.d_step_start - f.read_end;
        } else {  // served whole on D (llm-d's decider)
          part[0] = f.d_arrival - f.client_ns;
          part[1] = part[2] = part[4] = 0;
          part[3] = rec.first_scheduled_ns - f.d_arrival;
          part[5] = f.d_step_start - rec.first_scheduled_ns;
        }
        part[6] = rec.first_token_ns - f.d_step_start;
      }
    }
    flows_.erase(it);
    c_.current_ = r;
    ++c_.requests_done_;
    for (StepObserver* o : c_.cluster_observers_) o->on_request_done(out);
  }
  void clear_columns() { columns_ = PdRequestColumns{}; }
  const PdRequestColumns& columns() const { return columns_; }
  std::span<const TransferRow> rows() const { return rows_; }

  /// Replica r's P/D families for metrics.prom (vLLM's names, every replica the same families):
  /// the connector's external prefix cache counters, and NixlPromMetrics' transfer histograms
  /// (D's reads) and counters (P's expired holds; no failures are modelled). Not modelled:
  /// vllm:nixl_post_time_seconds and vllm:nixl_num_descriptors (NIXL's own telemetry).
  std::string prometheus(std::int32_t r, const std::string& model) const {
    const std::string label = fmt::format("model_name=\"{}\"", model);
    const PdStats& st = c_.replicas_[static_cast<std::size_t>(r)]->pd_endpoint()->stats();
    std::string o;
    append_prom_scalar(o, "vllm:external_prefix_cache_queries_total", "counter",
                       "External prefix cache queries from KV connector cross-instance cache "
                       "sharing, in terms of number of queried tokens.",
                       label, static_cast<double>(st.external_queries));
    append_prom_scalar(o, "vllm:external_prefix_cache_hits_total", "counter",
                       "External prefix cache hits from KV connector cross-instance cache "
                       "sharing, in terms of number of cached tokens.",
                       label, static_cast<double>(st.external_hits));
    append_prom_histogram(o, "vllm:nixl_xfer_time_seconds",
                          "Histogram of transfer duration for NIXL KV Cache transfers.", label,
                          xfer_time_[static_cast<std::size_t>(r)]);
    append_prom_histogram(o, "vllm:nixl_bytes_transferred",
                          "Histogram of bytes transferred per NIXL KV Cache transfers.", label,
                          xfer_bytes_[static_cast<std::size_t>(r)]);
    append_prom_scalar(o, "vllm:nixl_num_failed_transfers_total", "counter",
                       "Number of failed NIXL KV Cache transfers.", label, 0);
    append_prom_scalar(o, "vllm:nixl_num_failed_notifications_total", "counter",
                       "Number of failed NIXL KV Cache notifications.", label, 0);
    append_prom_scalar(o, "vllm:nixl_num_kv_expired_reqs_total", "counter",
                       "Number of requests that had their KV expire. NOTE: This metric is "
                       "tracked on the P instance.",
                       label, static_cast<double>(st.expired));
    return o;
  }

  std::string summary_keys() const {
    std::int64_t bytes = 0, blocks = 0;
    QuantileSketch ms;
    for (const TransferRow& t : rows_) {
      bytes += t.bytes;
      blocks += t.blocks;
      ms.add(t.end_ns - t.start_ns);
    }
    PdStats sum;
    for (const auto& rep : c_.replicas_) {
      const PdStats& s = rep->pd_endpoint()->stats();
      sum.external_queries += s.external_queries;
      sum.external_hits += s.external_hits;
      sum.expired += s.expired;
    }
    const ClusterConfig& cc = c_.scenario_.cluster;
    std::string o;
    o += fmt::format("  \"num_prefill_replicas\": {},\n", cc.prefill_replicas);
    o += fmt::format("  \"num_decode_replicas\": {},\n", cc.decode_replicas);
    o += fmt::format("  \"pd_proxy\": \"{}\",\n", pd_proxy_name(cfg_.proxy));
    o += fmt::format("  \"pd_requests_kept_on_decode\": {},\n", kept_on_decode_);
    o += fmt::format("  \"kv_transfers\": {},\n", rows_.size());
    o += fmt::format("  \"kv_transfer_bytes\": {},\n", bytes);
    o += fmt::format("  \"kv_transfer_blocks\": {},\n", blocks);
    o += fmt::format("  \"mean_kv_transfer_ms\": {:.6f},\n", ms.mean() / 1e6);
    o += fmt::format("  \"p99_kv_transfer_ms\": {:.6f},\n", ms.percentile(99) / 1e6);
    o += fmt::format("  \"external_prefix_cache_queries\": {},\n", sum.external_queries);
    o += fmt::format("  \"external_prefix_cache_hits\": {},\n", sum.external_hits);
    o += fmt::format("  \"num_kv_expired_reqs\": {},\n", sum.expired);
    o += fmt::format(
        "  \"mean_prefill_hold_ms\": {:.6f},\n",
        holds_ > 0 ? static_cast<double>(hold_ns_) / 1e6 / static_cast<double>(holds_) : 0.0);
    // The transfer model's parameters: modelled values, to be calibrated (§7.5).
    o += fmt::format(
        "  \"kv_transfer_model\": {{\"modelled\": true, \"block_bytes\": {}, "
        "\"link_bandwidth_gb_per_s\": {}, \"efficiency\": {}, \"setup_ms\": {:.6f}, "
        "\"handshake_ms\": {:.6f}, \"proxy_hop_ms\": {:.6f}, \"shared_nic\": {}}},\n",
        block_bytes_, cfg_.link_bandwidth_gb_per_s, cfg_.efficiency,
        static_cast<double>(cfg_.setup_ns) / 1e6, static_cast<double>(cfg_.handshake_ns) / 1e6,
        static_cast<double>(cfg_.proxy_hop_ns) / 1e6, cfg_.shared_nic ? "true" : "false");
    return o;
  }

 private:
  static constexpr SimTimeNs kNeverNs = Simulator::kNeverNs;
  ClusterSimulator& c_;
  const PdConfig& cfg_;
  PdTransferModel model_;
  std::int64_t block_bytes_;
  std::map<std::string, std::int32_t, std::less<>> engines_;
  std::vector<std::unique_ptr<Hooks>> hooks_;
  std::unordered_map<std::uint64_t, Flow> flows_;
  std::vector<PdTransferRecord> ended_;                    // scratch
  std::vector<TransferRow> rows_;                          // in completion order
  std::unordered_map<std::uint64_t, std::size_t> unseen_;  // rows D has not seen yet
  std::unordered_map<std::string, SimTimeNs> held_since_;  // P's holds, by P's request name
  std::int64_t hold_ns_ = 0, holds_ = 0, kept_on_decode_ = 0;
  PdRequestColumns columns_;
  std::vector<PromHistogram> xfer_time_, xfer_bytes_;  // per replica (D's reads)
};

}  // namespace kvsim
