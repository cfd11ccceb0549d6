#pragma once
// CpuOffloadManager: vLLM v0.20.1's CPUOffloadingManager (vllm/v1/kv_offload/cpu/manager.py) with
// its two cache policies, LRU (cpu/policies/lru.py) and ARC (cpu/policies/arc.py), exactly:
// a pool of num_blocks CPU blocks (fresh ids 0, 1, ... first, then freed ids from the end of the
// free list), one BlockStatus per held key (ref_cnt -1 = being stored, 0 = ready, k > 0 = ready
// with k loads outstanding), the policy's order and victims, and the stored / removed events.
// shared/spec/vllm-0.20-offload-semantics.md §8. No I/O.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/offload/key_lists.h"

namespace kvsim {

/// extra_config `eviction_policy`.
enum class EvictionPolicy : std::uint8_t { kLru, kArc };

/// One event of the CPU medium (vLLM's OffloadingEvent): keys [begin, end) of event_keys(), and
/// their CPU blocks at the same positions of event_blocks().
struct OffloadEvent {
  bool removed = false;
  std::int32_t begin = 0;
  std::int32_t end = 0;
};

/// prepare_store's answer (vLLM's PrepareStoreOutput; store_spec = the CPU block ids).
/// Reused from call to call.
struct PrepareStoreOutput {
  std::vector<OffloadKey> keys_to_store;
  std::vector<std::int64_t> block_ids;  // destination CPU block of each key to store
  std::vector<OffloadKey> evicted_keys;
  std::vector<std::int64_t> evicted_block_ids;  // in eviction order (kvsim: for reports)
  void clear() {
    keys_to_store.clear();
    block_ids.clear();
    evicted_keys.clear();
    evicted_block_ids.clear();
  }
};

class CpuOffloadManager {
 public:
  // List numbers in lists(): LRU keeps one list; ARC its T1, T2 and ghosts B1, B2.
  static constexpr std::int32_t kLruList = 0;
  static constexpr std::int32_t kT1 = 0, kT2 = 1, kB1 = 2, kB2 = 3;

  /// CPUOffloadingManager(num_blocks, cache_policy, enable_events). `holder` (may be null) is
  /// told of keys entering and leaving the policy's lists (ghosts included).
  CpuOffloadManager(std::int64_t num_blocks, EvictionPolicy policy, bool enable_events,
                    KeyHolder* holder = nullptr);

  /// lookup: the key is held and ready. O(1).
  bool lookup(OffloadKey key) const {
    const std::int32_t n = held_node(key);
    return n != KeyLists::kNoNode && lists_.at(n).ref_cnt >= 0;
  }
  /// prepare_load: for each key in order, ref_cnt += 1 and its block id appended to `block_ids`.
  /// False at the first key that is not held or not ready (vLLM's assertion; the keys before it
  /// keep their new reference).
  bool prepare_load(std::span<const OffloadKey> keys, std::vector<std::int64_t>& block_ids);
  /// complete_load: ref_cnt -= 1 for each key. False at the first key not held or with ref_cnt
  /// <= 0 (vLLM's assertion; the keys before it were released).
  bool complete_load(std::span<const OffloadKey> keys);
  /// touch: the policy's touch, keys walked in reverse. O(keys).
  void touch(std::span<const OffloadKey> keys);
  /// prepare_store: the keys not held, with CPU blocks (evicting with the policy when the free
  /// blocks do not suffice, never one of `keys`). False (nothing changed) when it cannot make
  /// room. Fills `out` (cleared first). O(keys + the policy's scan).
  bool prepare_store(std::span<const OffloadKey> keys, PrepareStoreOutput& out);
  /// complete_store: success: keys being stored become ready (a stored event lists them);
  /// failure: keys being stored are dropped and their blocks freed.
  void complete_store(std::span<const OffloadKey> keys, bool success);

  /// The events recorded since clear_events() (none when events are off).
  std::span<const OffloadEvent> events() const { return events_; }
  std::span<const OffloadKey> event_keys(const OffloadEvent& e) const {
    return std::span<const OffloadKey>(event_keys_).subspan(
        static_cast<std::size_t>(e.begin), static_cast<std::size_t>(e.end - e.begin));
  }
  std::span<const std::int64_t> event_blocks(const OffloadEvent& e) const {
    return std::span<const std::int64_t>(event_blocks_).subspan(
        static_cast<std::size_t>(e.begin), static_cast<std::size_t>(e.end - e.begin));
  }
  void clear_events() {
    events_.clear();
    event_keys_.clear();
    event_blocks_.clear();
  }
  bool events_enabled() const { return events_enabled_; }

  // ---- views ----
  EvictionPolicy policy() const { return policy_; }
  std::int64_t num_blocks() const { return num_blocks_; }
  std::int64_t num_allocated() const { return num_allocated_; }
  std::int64_t num_free_blocks() const {
    return static_cast<std::int64_t>(free_list_.size()) + num_blocks_ - num_allocated_;
  }
  const std::vector<std::int64_t>& free_list() const { return free_list_; }
  /// Keys held (ready or not).
  std::int64_t num_held() const {
    return policy_ == EvictionPolicy::kLru ? lists_.size(kLruList)
                                           : lists_.size(kT1) + lists_.size(kT2);
  }
  /// The node of a held key (value = its CPU block id, ref_cnt), or kNoNode (ghosts included).
  std::int32_t held_node(OffloadKey key) const {
    const std::int32_t n = lists_.find(key);
    return n != KeyLists::kNoNode && lists_.at(n).list <= kT2 ? n : KeyLists::kNoNode;
  }
  const KeyLists& lists() const { return lists_; }
  double target_t1_size() const { return target_t1_size_; }

  /// The first broken invariant ("" if none): the lists, every block id < num_allocated either
  /// held by one key or on the free list (once), ref_cnt >= -1, ghosts within the capacity,
  /// 0 <= target_t1_size <= capacity, no ghost or T2 list under LRU. O(blocks + keys).
  std::string find_violation() const;
  /// Test hook: a planted fault (a held block's id is also put on the free list).
  void corrupt_free_list_for_test();

 private:
  /// Evicts exactly n keys that are not stamped (protected) and have ref_cnt 0, into
  /// out.evicted_*; false (nothing changed) when there are fewer.
  bool evict_lru(std::int64_t n, PrepareStoreOutput& out);
  bool evict_arc(std::int64_t n, PrepareStoreOutput& out);
  bool evictable(std::int32_t n) const {
    const KeyLists::Node& node = lists_.at(n);
    return node.ref_cnt == 0 && node.stamp != epoch_;
  }
  void add_event(bool removed, std::span<const OffloadKey> keys,
                 std::span<const std::int64_t> blocks);

  EvictionPolicy policy_;
  bool events_enabled_;
  std::int64_t num_blocks_;
  std::int64_t num_allocated_ = 0;
  std::vector<std::int64_t> free_list_;
  KeyLists lists_;
  double target_t1_size_ = 0;  // ARC
  std::uint32_t epoch_ = 0;    // stamps of this prepare_store's protected and picked keys
  std::vector<std::int32_t> picked_;
  std::vector<std::uint8_t> picked_from_t1_;
  std::vector<OffloadEvent> events_;
  std::vector<OffloadKey> event_keys_;
  std::vector<std::int64_t> event_blocks_;
  std::vector<OffloadKey> scratch_keys_;
  std::vector<std::int64_t> scratch_blocks_;
};

}  // namespace kvsim
