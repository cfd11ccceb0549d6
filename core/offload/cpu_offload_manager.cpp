#include "core/offload/cpu_offload_manager.h"

#include <algorithm>

#include "core/common/assert.h"

namespace kvsim {

CpuOffloadManager::CpuOffloadManager(std::int64_t num_blocks, EvictionPolicy policy,
                                     bool enable_events, KeyHolder* holder)
    : policy_(policy),
      events_enabled_(enable_events),
      num_blocks_(num_blocks),
      lists_(policy == EvictionPolicy::kLru ? 1 : 4, holder) {
  KVSIM_ASSERT(num_blocks >= 0);
}

bool CpuOffloadManager::prepare_load(std::span<const OffloadKey> keys,
                                     std::vector<std::int64_t>& block_ids) {
  for (const OffloadKey key : keys) {
    const std::int32_t n = held_node(key);
    if (n == KeyLists::kNoNode || lists_.at(n).ref_cnt < 0) return false;
    ++lists_.at(n).ref_cnt;
    block_ids.push_back(lists_.at(n).value);
  }
  return true;
}

bool CpuOffloadManager::complete_load(std::span<const OffloadKey> keys) {
  for (const OffloadKey key : keys) {
    const std::int32_t n = held_node(key);
    if (n == KeyLists::kNoNode || lists_.at(n).ref_cnt <= 0) return false;
    --lists_.at(n).ref_cnt;
  }
  return true;
}

void CpuOffloadManager::touch(std::span<const OffloadKey> keys) {
  for (std::size_t i = keys.size(); i-- > 0;) {
    const std::int32_t n = lists_.find(keys[i]);
    if (n == KeyLists::kNoNode) continue;
    if (policy_ == EvictionPolicy::kLru) {
      lists_.move_to_back(n, kLruList);
      continue;
    }
    switch (lists_.at(n).list) {
      case kT1:  // a block just prepared for storing is not really touched twice: it stays in T1
        lists_.move_to_back(n, lists_.at(n).ref_cnt >= 0 ? kT2 : kT1);
        break;
      case kT2:
        lists_.move_to_back(n, kT2);
        break;
      case kB1: {
        const double b1 = static_cast<double>(lists_.size(kB1));
        const double delta = std::max(1.0, static_cast<double>(lists_.size(kB2)) / b1);
        target_t1_size_ = std::min(target_t1_size_ + delta, static_cast<double>(num_blocks_));
        lists_.move_to_back(n, kB1);
        break;
      }
      default: {  // kB2
        const double b2 = static_cast<double>(lists_.size(kB2));
        const double delta = std::max(1.0, static_cast<double>(lists_.size(kB1)) / b2);
        target_t1_size_ = std::max(target_t1_size_ - delta, 0.0);
        lists_.move_to_back(n, kB2);
        break;
      }
    }
  }
}

bool CpuOffloadManager::evict_lru(std::int64_t n, PrepareStoreOutput& out) {
  picked_.clear();
  for (std::int32_t x = lists_.front(kLruList);
       x != KeyLists::kNoNode && static_cast<std::int64_t>(picked_.size()) < n; x = lists_.next(x))
    if (evictable(x)) picked_.push_back(x);
  if (static_cast<std::int64_t>(picked_.size()) < n) return false;
  for (const std::int32_t x : picked_) {
    out.evicted_keys.push_back(lists_.at(x).key);
    out.evicted_block_ids.push_back(lists_.at(x).value);
    free_list_.push_back(lists_.at(x).value);
    lists_.erase(x);
  }
  return true;
}

bool CpuOffloadManager::evict_arc(std::int64_t n, PrepareStoreOutput& out) {
  // vLLM rescans each list from its head for every victim, skipping the keys picked already;
  // a cursor per list finds the same keys (every key before it is picked or not evictable).
  picked_.clear();
  picked_from_t1_.clear();
  std::int64_t virtual_t1 = lists_.size(kT1);
  std::int32_t c1 = lists_.front(kT1);
  std::int32_t c2 = lists_.front(kT2);
  const auto target = static_cast<std::int64_t>(target_t1_size_);  // Python's int()
  for (std::int64_t i = 0; i < n; ++i) {
    std::int32_t pick = KeyLists::kNoNode;
    bool from_t1 = false;
    if (virtual_t1 >= target) {
      while (c1 != KeyLists::kNoNode && !evictable(c1)) c1 = lists_.next(c1);
      if (c1 != KeyLists::kNoNode) {
        pick = c1;
        from_t1 = true;
        --virtual_t1;
        c1 = lists_.next(c1);
      }
    }
    if (pick == KeyLists::kNoNode) {
      while (c2 != KeyLists::kNoNode && !evictable(c2)) c2 = lists_.next(c2);
      if (c2 == KeyLists::kNoNode) return false;  // the picked stamps die with this epoch
      pick = c2;
      c2 = lists_.next(c2);
    }
    lists_.at(pick).stamp = epoch_;
    picked_.push_back(pick);
    picked_from_t1_.push_back(from_t1 ? 1 : 0);
  }
  for (std::size_t i = 0; i < picked_.size(); ++i) {
    const std::int32_t x = picked_[i];
    out.evicted_keys.push_back(lists_.at(x).key);
    out.evicted_block_ids.push_back(lists_.at(x).value);
    free_list_.push_back(lists_.at(x).value);
    lists_.move_to_back(x, picked_from_t1_[i] ? kB1 : kB2);  // the key stays, as a ghost
  }
  for (const std::int32_t ghost : {kB1, kB2})
    while (lists_.size(ghost) > num_blocks_) lists_.erase(lists_.front(ghost));
  return true;
}

bool CpuOffloadManager::prepare_store(std::span<const OffloadKey> keys, PrepareStoreOutput& out) {
  out.clear();
  for (const OffloadKey key : keys)
    if (held_node(key) == KeyLists::kNoNode) out.keys_to_store.push_back(key);
  if (out.keys_to_store.empty()) return true;
  const std::int64_t to_evict =
      static_cast<std::int64_t>(out.keys_to_store.size()) - num_free_blocks();
  if (to_evict > 0) {
    // The offered keys are protected: a block already stored stays after this call.
    if (++epoch_ == 0) ++epoch_;
    for (const OffloadKey key : keys)
      if (const std::int32_t n = held_node(key); n != KeyLists::kNoNode)
        lists_.at(n).stamp = epoch_;
    const bool ok = policy_ == EvictionPolicy::kLru ? evict_lru(to_evict, out)
                                                    : evict_arc(to_evict, out);
    if (!ok) {
      out.clear();
      return false;
    }
    if (events_enabled_) add_event(/*removed=*/true, out.evicted_keys, out.evicted_block_ids);
  }
  const std::int32_t list = policy_ == EvictionPolicy::kLru ? kLruList : kT1;
  for (const OffloadKey key : out.keys_to_store) {
    std::int64_t block;
    if (num_allocated_ < num_blocks_) {
      block = num_allocated_++;
    } else {
      KVSIM_ASSERT(!free_list_.empty(), "no CPU block left after the eviction");
      block = free_list_.back();
      free_list_.pop_back();
    }
    std::int32_t n = lists_.find(key);
    if (n == KeyLists::kNoNode)
      n = lists_.push_back(list, key);
    else
      lists_.move_to_back(n, list);  // ARC: out of the ghost lists, into T1
    KeyLists::Node& node = lists_.at(n);
    node.value = block;
    node.ref_cnt = -1;
    out.block_ids.push_back(block);
  }
  return true;
}

void CpuOffloadManager::complete_store(std::span<const OffloadKey> keys, bool success) {
  scratch_keys_.clear();
  scratch_blocks_.clear();
  for (const OffloadKey key : keys) {
    const std::int32_t n = held_node(key);
    if (n == KeyLists::kNoNode || lists_.at(n).ref_cnt >= 0) continue;
    if (success) {
      lists_.at(n).ref_cnt = 0;
      scratch_keys_.push_back(key);
      scratch_blocks_.push_back(lists_.at(n).value);
    } else {
      free_list_.push_back(lists_.at(n).value);
      lists_.erase(n);
    }
  }
  if (!scratch_keys_.empty() && events_enabled_)
    add_event(/*removed=*/false, scratch_keys_, scratch_blocks_);
}

void CpuOffloadManager::add_event(bool removed, std::span<const OffloadKey> keys,
                                  std::span<const std::int64_t> blocks) {
  OffloadEvent& e = events_.emplace_back();
  e.removed = removed;
  e.begin = static_cast<std::int32_t>(event_keys_.size());
  event_keys_.insert(event_keys_.end(), keys.begin(), keys.end());
  event_blocks_.insert(event_blocks_.end(), blocks.begin(), blocks.end());
  e.end = static_cast<std::int32_t>(event_keys_.size());
}

std::string CpuOffloadManager::find_violation() const {
  if (std::string v = lists_.find_violation(); !v.empty()) return "CPU tier lists: " + v;
  KVSIM_CHECK(num_allocated_ >= 0 && num_allocated_ <= num_blocks_,
              "num_allocated outside [0, num_blocks]");
  std::vector<std::uint8_t> seen(static_cast<std::size_t>(num_allocated_), 0);
  const auto mark = [&](std::int64_t b) {
    if (b < 0 || b >= num_allocated_ || seen[static_cast<std::size_t>(b)]) return false;
    seen[static_cast<std::size_t>(b)] = 1;
    return true;
  };
  const std::int32_t num_held_lists = policy_ == EvictionPolicy::kLru ? 1 : 2;
  for (std::int32_t l = 0; l < num_held_lists; ++l)
    for (std::int32_t n = lists_.front(l); n != KeyLists::kNoNode; n = lists_.next(n)) {
      const KeyLists::Node& node = lists_.at(n);
      KVSIM_CHECK(node.ref_cnt >= -1, "a CPU block has ref_cnt < -1");
      KVSIM_CHECK(mark(node.value), "a held key's CPU block is out of range or held twice");
    }
  for (const std::int64_t b : free_list_)
    KVSIM_CHECK(mark(b), "a free-list CPU block is out of range, held, or listed twice");
  KVSIM_CHECK(std::all_of(seen.begin(), seen.end(), [](std::uint8_t s) { return s != 0; }),
              "an allocated CPU block is neither held nor free");
  if (policy_ == EvictionPolicy::kArc) {
    KVSIM_CHECK(lists_.size(kB1) <= num_blocks_ && lists_.size(kB2) <= num_blocks_,
                "an ARC ghost list is longer than the capacity");
    KVSIM_CHECK(target_t1_size_ >= 0 && target_t1_size_ <= static_cast<double>(num_blocks_),
                "ARC's target_t1_size is outside [0, capacity]");
  }
  for (const OffloadEvent& e : events_)
    KVSIM_CHECK(e.begin <= e.end && e.end <= static_cast<std::int32_t>(event_keys_.size()),
                "an event's key range is out of bounds");
  return {};
}

void CpuOffloadManager::corrupt_free_list_for_test() {
  const std::int32_t n = lists_.front(policy_ == EvictionPolicy::kLru ? kLruList : kT1);
  if (n != KeyLists::kNoNode) free_list_.push_back(lists_.at(n).value);
}

}  // namespace kvsim
