// prefix_hash (spec §6.2): h = 0; for each of the request's first k block ids: h = splitmix64(h ^
// id); replica h mod N (fewer ids: hash those). The ids are ClusterSimulator::block_ids' content
// ids (a partial last block included), not a Mooncake row's own hash_ids: the same partition of
// requests by their leading content, under other numbers.
#include "sim/cluster/router.h"

namespace kvsim {
namespace {

class PrefixHashRouter final : public Router {
 public:
  explicit PrefixHashRouter(std::int64_t k) : k_(k) {}
  RouteDecision route(const RouteInput& in, std::span<const ReplicaLoad> loads) override {
    RouteDecision d;
    d.replica = static_cast<std::int32_t>(prefix_hash_of(in.block_ids) % loads.size());
    d.branch = "hash";
    return d;
  }
  std::int64_t block_ids_needed() const override { return k_; }

 private:
  std::int64_t k_;
};

}  // namespace

std::unique_ptr<Router> make_prefix_hash_router(std::int64_t k) {
  return std::make_unique<PrefixHashRouter>(k);
}

}  // namespace kvsim
