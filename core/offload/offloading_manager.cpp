#include "core/offload/offloading_manager.h"

#include "core/common/assert.h"

namespace kvsim {

void ReuseTracker::count(OffloadKey key) {
  const std::int32_t n = lists_.find(key);
  if (n != KeyLists::kNoNode) {
    lists_.move_to_back(n, 0);
    ++lists_.at(n).value;
    return;
  }
  if (lists_.size(0) >= max_size_) lists_.erase(lists_.front(0));
  lists_.at(lists_.push_back(0, key)).value = 1;
}

std::string ReuseTracker::find_violation() const {
  if (std::string v = lists_.find_violation(); !v.empty()) return "reuse tracker: " + v;
  KVSIM_CHECK(lists_.size(0) <= max_size_, "the reuse tracker is over max_tracker_size");
  for (std::int32_t n = lists_.front(0); n != KeyLists::kNoNode; n = lists_.next(n))
    KVSIM_CHECK(lists_.at(n).value >= 1, "a tracked key has a count below 1");
  return {};
}

OffloadingManager::OffloadingManager(const OffloadManagerConfig& config, KeyHolder* holder)
    : config_(config),
      filter_(config.store_threshold >= 2),
      cpu_(config.num_blocks, config.eviction_policy, config.enable_events, holder),
      tracker_(config.max_tracker_size, holder) {
  KVSIM_ASSERT(!filter_ || config.max_tracker_size >= 1, "max_tracker_size must be >= 1");
}

bool OffloadingManager::prepare_store(std::span<const OffloadKey> keys, PrepareStoreOutput& out) {
  if (!filter_) return cpu_.prepare_store(keys, out);
  // Filtered before the tier sees them: skipped keys take no CPU capacity (and are not
  // protected from this store's evictions).
  eligible_.clear();
  for (const OffloadKey key : keys)
    if (tracker_.get(key) >= config_.store_threshold) eligible_.push_back(key);
  return cpu_.prepare_store(eligible_, out);
}

std::string OffloadingManager::find_violation() const {
  if (std::string v = cpu_.find_violation(); !v.empty()) return v;
  if (filter_) return tracker_.find_violation();
  return {};
}

}  // namespace kvsim
