#pragma once
// OffloadingManager: what the connector's scheduler side talks to -- vLLM v0.20.1's
// CPUOffloadingManager, wrapped in FilterReusedOffloadingManager (vllm/v1/kv_offload/
// reuse_manager.py) when store_threshold >= 2: every lookup counts its key in an LRU of counts
// (the oldest entry dropped beyond max_tracker_size) and prepare_store passes on only the keys
// counted at least store_threshold times. shared/spec/vllm-0.20-offload-semantics.md §8. No I/O.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/offload/cpu_offload_manager.h"
#include "core/offload/key_lists.h"

namespace kvsim {

struct OffloadManagerConfig {
  std::int64_t num_blocks = 0;  // CPU blocks of the tier
  EvictionPolicy eviction_policy = EvictionPolicy::kLru;
  bool enable_events = false;
  std::int64_t store_threshold = 0;  // >= 2: the reuse filter; 0 and 1: none
  std::int64_t max_tracker_size = 64000;
};

/// FilterReusedOffloadingManager's tracker: an LRU of lookup counts.
class ReuseTracker {
 public:
  ReuseTracker(std::int64_t max_size, KeyHolder* holder) : max_size_(max_size), lists_(1, holder) {}
  /// Counts one lookup of `key` (most recent; the oldest entry goes when the tracker is full).
  void count(OffloadKey key);
  /// The lookups counted for `key` (0 when not tracked).
  std::int64_t get(OffloadKey key) const {
    const std::int32_t n = lists_.find(key);
    return n == KeyLists::kNoNode ? 0 : lists_.at(n).value;
  }
  std::int64_t size() const { return lists_.size(0); }
  /// Entries oldest first: node ids of lists() (key, value = count).
  const KeyLists& lists() const { return lists_; }
  std::string find_violation() const;

 private:
  std::int64_t max_size_;
  KeyLists lists_;
};

class OffloadingManager {
 public:
  /// `holder` (may be null) keeps the keys' identity alive while the tier or the tracker holds
  /// them.
  explicit OffloadingManager(const OffloadManagerConfig& config, KeyHolder* holder = nullptr);

  /// lookup (counted by the filter first). O(1).
  bool lookup(OffloadKey key) {
    if (filter_) tracker_.count(key);
    return cpu_.lookup(key);
  }
  /// prepare_store of the keys the filter lets through (all without a filter).
  bool prepare_store(std::span<const OffloadKey> keys, PrepareStoreOutput& out);
  bool prepare_load(std::span<const OffloadKey> keys, std::vector<std::int64_t>& block_ids) {
    return cpu_.prepare_load(keys, block_ids);
  }
  bool complete_load(std::span<const OffloadKey> keys) { return cpu_.complete_load(keys); }
  void touch(std::span<const OffloadKey> keys) { cpu_.touch(keys); }
  void complete_store(std::span<const OffloadKey> keys, bool success) {
    cpu_.complete_store(keys, success);
  }

  const CpuOffloadManager& cpu() const { return cpu_; }
  CpuOffloadManager& cpu() { return cpu_; }
  bool has_filter() const { return filter_; }
  const ReuseTracker& tracker() const { return tracker_; }
  const OffloadManagerConfig& config() const { return config_; }

  /// The CPU tier's and the tracker's invariants ("" if none).
  std::string find_violation() const;

 private:
  OffloadManagerConfig config_;
  bool filter_;
  CpuOffloadManager cpu_;
  ReuseTracker tracker_;
  std::vector<OffloadKey> eligible_;
};

}  // namespace kvsim
