// ClusterSimulator's P/D outputs (the state and the proxy: cluster_pd.h).
#include "sim/cluster/cluster_pd.h"

namespace kvsim {

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
