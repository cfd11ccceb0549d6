// ClusterSimulator's P/D calls (the state: cluster_pd.h).
#include "sim/cluster/cluster_pd.h"

namespace kvsim {

void ClusterSimulator::pd_setup() {
  pd_ = std::make_unique<Pd>(*this, scenario_);
  pd_->setup();
}
void ClusterSimulator::pd_arrive(RequestSpec spec) { pd_->arrive(std::move(spec)); }
void ClusterSimulator::pd_on_record(std::int32_t r, const RequestRecord& rec) {
  pd_->on_record(r, rec);
}
void ClusterSimulator::pd_on_first_token(std::int32_t r, std::uint64_t id, SimTimeNs start_ns) {
  pd_->on_first_token(r, id, start_ns);
}
bool ClusterSimulator::pd_ends_here(std::int32_t r, std::uint64_t id) const {
  return pd_->ends_here(r, id);
}
void ClusterSimulator::pd_hand_off(std::int64_t slot) { pd_->hand_off(pending_.take(slot).id); }
SimTimeNs ClusterSimulator::pd_next_read_end() const { return pd_->next_read_end(); }
void ClusterSimulator::pd_deliver_reads() { pd_->deliver_reads(now_ns_); }
void ClusterSimulator::pd_clear_columns() { pd_->clear_columns(); }
const PdRequestColumns* ClusterSimulator::current_pd_columns() const {
  return pd_ ? &pd_->columns() : nullptr;
}
std::span<const TransferRow> ClusterSimulator::transfers() const {
  return pd_ ? pd_->rows() : std::span<const TransferRow>{};
}
std::string ClusterSimulator::pd_prometheus(std::int32_t r, const std::string& model) const {
  return pd_ ? pd_->prometheus(r, model) : "";
}
std::string ClusterSimulator::pd_summary_keys() const { return pd_ ? pd_->summary_keys() : ""; }

}  // namespace kvsim
