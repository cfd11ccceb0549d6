// The CPU offloading tier (core/offload): vLLM v0.20.1's CPUOffloadingManager with its LRU and
// ARC policies and the reuse filter, checked on hand-made sequences (the semantics file's rules),
// against a naive reference written straight from vLLM's Python (random op streams, the invariant
// walk after every op), and with planted faults the walks must catch.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include "core/offload/offloading_manager.h"

using kvsim::CpuOffloadManager;
using kvsim::EvictionPolicy;
using kvsim::KeyLists;
using kvsim::OffloadingManager;
using kvsim::OffloadKey;
using kvsim::OffloadManagerConfig;
using kvsim::PrepareStoreOutput;

namespace {

std::vector<OffloadKey> keys(std::initializer_list<std::int64_t> ks) {
  std::vector<OffloadKey> v;
  for (const auto k : ks) v.push_back(OffloadKey{k});
  return v;
}
std::vector<std::int64_t> ints(const std::vector<OffloadKey>& ks) {
  std::vector<std::int64_t> v;
  for (const auto k : ks) v.push_back(kvsim::to_int(k));
  return v;
}
/// A list of the tier as [key, block, ref_cnt] triples, head first.
std::vector<std::vector<std::int64_t>> list_of(const CpuOffloadManager& m, std::int32_t list) {
  std::vector<std::vector<std::int64_t>> v;
  const KeyLists& l = m.lists();
  for (std::int32_t n = l.front(list); n != KeyLists::kNoNode; n = l.next(n))
    v.push_back({kvsim::to_int(l.at(n).key), l.at(n).value, l.at(n).ref_cnt});
  return v;
}
void require_valid(const OffloadingManager& m) { REQUIRE(m.find_violation() == ""); }

/// Counts each key's holders: a KeyLists must retain a key once while it holds it.
struct CountingHolder final : kvsim::KeyHolder {
  std::map<std::int64_t, int> refs;
  void retain(OffloadKey k) override { ++refs[kvsim::to_int(k)]; }
  void release(OffloadKey k) override {
    if (--refs[kvsim::to_int(k)] == 0) refs.erase(kvsim::to_int(k));
  }
};

}  // namespace

TEST_CASE("the LRU tier hands out fresh blocks first, then freed ones from the end", "[core]") {
  OffloadingManager m({.num_blocks = 4, .enable_events = true});
  PrepareStoreOutput out;
  REQUIRE(m.prepare_store(keys({1, 2}), out));
  CHECK(out.block_ids == std::vector<std::int64_t>{0, 1});
  CHECK_FALSE(m.lookup(OffloadKey{1}));  // being stored: not ready
  m.complete_store(keys({1, 2}), true);
  CHECK(m.lookup(OffloadKey{1}));
  // 3 new keys, 2 free blocks: the oldest ready key (1) goes; 2 is offered, so protected.
  REQUIRE(m.prepare_store(keys({2, 3, 4, 5}), out));
  CHECK(ints(out.keys_to_store) == std::vector<std::int64_t>{3, 4, 5});
  CHECK(out.block_ids == std::vector<std::int64_t>{2, 3, 0});
  CHECK(ints(out.evicted_keys) == std::vector<std::int64_t>{1});
  // Nothing evictable (2 is protected, the rest are being stored): no change at all.
  REQUIRE_FALSE(m.prepare_store(keys({1, 6}), out));
  CHECK(m.cpu().num_free_blocks() == 0);
  m.complete_store(keys({2, 3, 4, 5}), true);
  std::vector<std::int64_t> loaded;
  REQUIRE(m.prepare_load(keys({2, 3}), loaded));
  CHECK(loaded == std::vector<std::int64_t>{1, 2});
  REQUIRE_FALSE(m.prepare_store(keys({6, 7, 8}), out));  // 2, 3 are being loaded
  REQUIRE(m.complete_load(keys({2, 3})));
  REQUIRE(m.prepare_store(keys({6, 7, 8}), out));
  CHECK(out.block_ids == std::vector<std::int64_t>{3, 2, 1});  // the free list, last first
  CHECK(ints(out.evicted_keys) == std::vector<std::int64_t>{2, 3, 4});
  // Events: stored {1,2}, removed {1}, stored {3,4,5} (2 was ready already), removed {2,3,4}.
  const auto events = m.cpu().events();
  REQUIRE(events.size() == 4);
  CHECK_FALSE(events[0].removed);
  CHECK(events[1].removed);
  CHECK(ints({m.cpu().event_keys(events[2]).begin(), m.cpu().event_keys(events[2]).end()}) ==
        std::vector<std::int64_t>{3, 4, 5});
  CHECK(m.cpu().event_blocks(events[3]).size() == 3);
  require_valid(m);
}

TEST_CASE("LRU touch walks its keys in reverse: the first key ends most recent", "[core]") {
  OffloadingManager m({.num_blocks = 3});
  PrepareStoreOutput out;
  REQUIRE(m.prepare_store(keys({1, 2, 3}), out));
  m.complete_store(keys({1, 2, 3}), true);
  m.touch(keys({1, 2}));
  CHECK(list_of(m.cpu(), CpuOffloadManager::kLruList) ==
        std::vector<std::vector<std::int64_t>>{{3, 2, 0}, {2, 1, 0}, {1, 0, 0}});
}

TEST_CASE("a failed store frees its blocks and an ARC victim stays a ghost", "[core]") {
  OffloadingManager m({.num_blocks = 2, .eviction_policy = EvictionPolicy::kArc});
  PrepareStoreOutput out;
  REQUIRE(m.prepare_store(keys({1, 2}), out));
  m.complete_store(keys({1}), true);
  m.complete_store(keys({2}), false);
  CHECK(m.cpu().free_list() == std::vector<std::int64_t>{1});
  REQUIRE(m.prepare_store(keys({3, 4}), out));  // one free block, 1 evicted to B1
  CHECK(ints(out.evicted_keys) == std::vector<std::int64_t>{1});
  CHECK(m.cpu().lists().size(CpuOffloadManager::kB1) == 1);
  // Touching the ghost raises the target: max(1, |B2| / |B1|) = 1.
  m.touch(keys({1}));
  CHECK(m.cpu().target_t1_size() == 1.0);
  require_valid(m);
}

TEST_CASE("ARC promotes a ready key to T2 on touch, a key being stored stays in T1", "[core]") {
  OffloadingManager m({.num_blocks = 4, .eviction_policy = EvictionPolicy::kArc});
  PrepareStoreOutput out;
  REQUIRE(m.prepare_store(keys({1, 2}), out));
  m.complete_store(keys({1}), true);
  m.touch(keys({1, 2}));
  CHECK(list_of(m.cpu(), CpuOffloadManager::kT1) ==
        std::vector<std::vector<std::int64_t>>{{2, 1, -1}});
  CHECK(list_of(m.cpu(), CpuOffloadManager::kT2) ==
        std::vector<std::vector<std::int64_t>>{{1, 0, 0}});
}

TEST_CASE("ARC below its T1 target evicts from T2 only, and fails when T2 has none", "[core]") {
  OffloadingManager m({.num_blocks = 2, .eviction_policy = EvictionPolicy::kArc});
  PrepareStoreOutput out;
  REQUIRE(m.prepare_store(keys({1, 2}), out));
  m.complete_store(keys({1, 2}), true);
  REQUIRE(m.prepare_store(keys({3}), out));  // |T1| = 2 >= 0: T1's head (1) goes to B1
  m.complete_store(keys({3}), true);
  m.touch(keys({1}));  // B1 ghost: target 1
  m.touch(keys({1}));  // again: target 2 (capped at the capacity)
  CHECK(m.cpu().target_t1_size() == 2.0);
  // |T1| = 2 >= int(2): still T1 first. Promote both to T2, leaving T1 empty.
  m.touch(keys({2, 3}));
  REQUIRE(m.cpu().lists().size(CpuOffloadManager::kT2) == 2);
  REQUIRE(m.prepare_store(keys({4}), out));  // |T1| = 0 < 2: from T2 (its head: 3)
  CHECK(ints(out.evicted_keys) == std::vector<std::int64_t>{3});
  m.complete_store(keys({4}), true);
  // Now T1 = {4} (1 < 2: T2 first), T2 = {2} loaded: T2 has no candidate, T1's is not tried.
  std::vector<std::int64_t> loaded;
  REQUIRE(m.prepare_load(keys({2}), loaded));
  REQUIRE_FALSE(m.prepare_store(keys({5}), out));
  require_valid(m);
}

TEST_CASE("the reuse filter stores a key only after store_threshold lookups", "[core]") {
  OffloadingManager m({.num_blocks = 4, .store_threshold = 2, .max_tracker_size = 3});
  PrepareStoreOutput out;
  m.lookup(OffloadKey{1});
  m.lookup(OffloadKey{2});
  REQUIRE(m.prepare_store(keys({1, 2}), out));
  CHECK(out.keys_to_store.empty());
  m.lookup(OffloadKey{1});
  REQUIRE(m.prepare_store(keys({1, 2}), out));
  CHECK(ints(out.keys_to_store) == std::vector<std::int64_t>{1});
  m.lookup(OffloadKey{3});
  m.lookup(OffloadKey{4});  // the tracker is full: its oldest entry (2) goes
  CHECK(m.tracker().get(OffloadKey{2}) == 0);
  CHECK(m.tracker().get(OffloadKey{1}) == 2);
  CHECK(m.tracker().size() == 3);
  require_valid(m);
}

TEST_CASE("the tier holds one reference per key it keeps, ghosts and tracker included", "[core]") {
  CountingHolder holder;
  {
    OffloadingManager m(
        {.num_blocks = 2, .eviction_policy = EvictionPolicy::kArc, .store_threshold = 2}, &holder);
    for (int k = 0; k < 6; ++k) {
      m.lookup(OffloadKey{k});
      m.lookup(OffloadKey{k});
    }
    PrepareStoreOutput out;
    REQUIRE(m.prepare_store(keys({0, 1}), out));
    m.complete_store(keys({0, 1}), true);
    REQUIRE(m.prepare_store(keys({2, 3}), out));  // 0 and 1 become ghosts
    CHECK(holder.refs.at(0) == 2);                // tracker + ghost list
    CHECK(holder.refs.at(4) == 1);                // tracker only
  }
  CHECK(holder.refs.empty());  // the manager's lists released every key
}

TEST_CASE("the invariant walks catch planted faults", "[core]") {
  OffloadingManager m({.num_blocks = 4});
  PrepareStoreOutput out;
  REQUIRE(m.prepare_store(keys({1, 2}), out));
  require_valid(m);
  m.cpu().corrupt_free_list_for_test();
  CHECK(m.find_violation() != "");
  KeyLists lists(2);
  lists.push_back(0, OffloadKey{7});
  CHECK(lists.find_violation() == "");
  lists.corrupt_size_for_test(1);
  CHECK(lists.find_violation() != "");
}

// ---- a naive reference, written straight from vLLM's Python -------------------------------

namespace {

struct RefBlock {
  std::int64_t key, block;
  int ref;
};
using RefList = std::vector<RefBlock>;  // head = oldest

struct RefManager {
  std::int64_t n = 0;
  bool arc = false;
  std::int64_t allocated = 0;
  std::vector<std::int64_t> free_list;
  RefList lru, t1, t2;
  std::vector<std::int64_t> b1, b2;
  double target = 0;

  static RefList::iterator find(RefList& l, std::int64_t k) {
    return std::find_if(l.begin(), l.end(), [&](const RefBlock& b) { return b.key == k; });
  }
  static bool erase_key(std::vector<std::int64_t>& g, std::int64_t k) {
    const auto it = std::find(g.begin(), g.end(), k);
    if (it == g.end()) return false;
    g.erase(it);
    return true;
  }
  RefBlock* get(std::int64_t k) {
    for (RefList* l : {&lru, &t1, &t2})
      if (auto it = find(*l, k); it != l->end()) return &*it;
    return nullptr;
  }
  bool lookup(std::int64_t k) {
    const RefBlock* b = get(k);
    return b && b->ref >= 0;
  }
  void touch(const std::vector<std::int64_t>& ks) {
    for (auto r = ks.rbegin(); r != ks.rend(); ++r) {
      const std::int64_t k = *r;
      if (!arc) {
        if (auto it = find(lru, k); it != lru.end()) {
          const RefBlock b = *it;
          lru.erase(it);
          lru.push_back(b);
        }
      } else if (auto it = find(t1, k); it != t1.end()) {
        const RefBlock b = *it;
        t1.erase(it);
        (b.ref >= 0 ? t2 : t1).push_back(b);
      } else if (auto it2 = find(t2, k); it2 != t2.end()) {
        const RefBlock b = *it2;
        t2.erase(it2);
        t2.push_back(b);
      } else if (erase_key(b1, k)) {
        const double d = std::max(1.0, double(b2.size()) / double(b1.size() + 1));
        target = std::min(target + d, double(n));
        b1.push_back(k);
      } else if (erase_key(b2, k)) {
        const double d = std::max(1.0, double(b1.size()) / double(b2.size() + 1));
        target = std::max(target - d, 0.0);
        b2.push_back(k);
      }
    }
  }
  std::optional<std::vector<std::int64_t>> evict(std::int64_t cnt,
                                                 const std::vector<std::int64_t>& prot) {
    const auto ok = [&](const RefBlock& b, const std::vector<std::int64_t>& picked) {
      return b.ref == 0 && std::find(prot.begin(), prot.end(), b.key) == prot.end() &&
             std::find(picked.begin(), picked.end(), b.key) == picked.end();
    };
    std::vector<std::int64_t> picked;
    std::vector<bool> from_t1;
    if (!arc) {
      for (const RefBlock& b : lru)
        if ((std::int64_t)picked.size() < cnt && ok(b, picked)) picked.push_back(b.key);
      if ((std::int64_t)picked.size() < cnt) return std::nullopt;
    } else {
      std::int64_t vt1 = (std::int64_t)t1.size();
      for (std::int64_t i = 0; i < cnt; ++i) {
        bool found = false;
        if (vt1 >= (std::int64_t)target)
          for (const RefBlock& b : t1)
            if (ok(b, picked)) {
              picked.push_back(b.key), from_t1.push_back(true), --vt1, found = true;
              break;
            }
        if (!found) {
          for (const RefBlock& b : t2)
            if (ok(b, picked)) {
              picked.push_back(b.key), from_t1.push_back(false), found = true;
              break;
            }
          if (!found) return std::nullopt;
        }
      }
    }
    std::vector<std::int64_t> blocks;
    for (std::size_t i = 0; i < picked.size(); ++i) {
      RefList& l = !arc ? lru : from_t1[i] ? t1 : t2;
      const auto it = find(l, picked[i]);
      blocks.push_back(it->block);
      l.erase(it);
      if (arc) (from_t1[i] ? b1 : b2).push_back(picked[i]);
    }
    if (arc)
      for (auto* g : {&b1, &b2})
        while ((std::int64_t)g->size() > n) g->erase(g->begin());
    for (const auto b : blocks) free_list.push_back(b);
    return picked;
  }
  // Returns nullopt for None, else (keys to store, block ids, evicted keys).
  std::optional<std::vector<std::vector<std::int64_t>>> prepare_store(
      const std::vector<std::int64_t>& ks) {
    std::vector<std::int64_t> to_store;
    for (const auto k : ks)
      if (!get(k)) to_store.push_back(k);
    if (to_store.empty()) return std::vector<std::vector<std::int64_t>>{{}, {}, {}};
    const std::int64_t need =
        (std::int64_t)to_store.size() - ((std::int64_t)free_list.size() + n - allocated);
    std::vector<std::int64_t> evicted;
    if (need > 0) {
      auto e = evict(need, ks);
      if (!e) return std::nullopt;
      evicted = *e;
    }
    std::vector<std::int64_t> blocks;
    for (const auto k : to_store) {
      std::int64_t b;
      if (allocated < n) {
        b = allocated++;
      } else {
        b = free_list.back();
        free_list.pop_back();
      }
      blocks.push_back(b);
      (arc ? t1 : lru).push_back({k, b, -1});
      erase_key(b1, k);
      erase_key(b2, k);
    }
    return std::vector<std::vector<std::int64_t>>{to_store, blocks, evicted};
  }
  void complete_store(const std::vector<std::int64_t>& ks, bool success) {
    for (const auto k : ks) {
      RefBlock* b = get(k);
      if (!b || b->ref >= 0) continue;
      if (success) {
        b->ref = 0;
      } else {
        free_list.push_back(b->block);
        for (RefList* l : {&lru, &t1, &t2})
          if (auto it = find(*l, k); it != l->end()) l->erase(it);
      }
    }
  }
};

}  // namespace

TEST_CASE("random op streams agree with a naive reference of vLLM's manager", "[core]") {
  for (const bool arc : {false, true}) {
    for (std::uint64_t seed = 1; seed <= 40; ++seed) {
      INFO("seed " << seed << (arc ? " arc" : " lru"));
      std::mt19937_64 rng(seed);
      const std::int64_t n = 1 + static_cast<std::int64_t>(rng() % 6);
      const std::int64_t num_keys = 3 + static_cast<std::int64_t>(rng() % 12);
      OffloadingManager m({.num_blocks = n,
                           .eviction_policy = arc ? EvictionPolicy::kArc : EvictionPolicy::kLru});
      RefManager ref;
      ref.n = n;
      ref.arc = arc;
      PrepareStoreOutput out;
      std::vector<std::int64_t> loaded;
      for (int op = 0; op < 400; ++op) {
        // A few distinct keys.
        std::vector<std::int64_t> ks;
        const std::size_t len = 1 + rng() % std::min<std::uint64_t>(4, num_keys);
        while (ks.size() < len) {
          const auto k = static_cast<std::int64_t>(rng() % num_keys);
          if (std::find(ks.begin(), ks.end(), k) == ks.end()) ks.push_back(k);
        }
        std::vector<OffloadKey> oks;
        for (const auto k : ks) oks.push_back(OffloadKey{k});
        switch (rng() % 5) {
          case 0:
            CHECK(m.lookup(oks[0]) == ref.lookup(ks[0]));
            break;
          case 1: {
            const auto r = ref.prepare_store(ks);
            const bool ok = m.prepare_store(oks, out);
            REQUIRE(ok == r.has_value());
            if (ok) {
              CHECK(ints(out.keys_to_store) == (*r)[0]);
              CHECK(out.block_ids == (*r)[1]);
              CHECK(ints(out.evicted_keys) == (*r)[2]);
            }
            break;
          }
          case 2: {
            const bool success = rng() % 4 != 0;
            m.complete_store(oks, success);
            ref.complete_store(ks, success);
            break;
          }
          case 3:
            m.touch(oks);
            ref.touch(ks);
            break;
          default: {  // a load and its completion, when every key is ready
            if (!std::all_of(ks.begin(), ks.end(), [&](auto k) { return ref.lookup(k); })) break;
            loaded.clear();
            REQUIRE(m.prepare_load(oks, loaded));
            for (const auto k : ks) ++ref.get(k)->ref;
            if (rng() % 2) {
              REQUIRE(m.complete_load(oks));
              for (const auto k : ks) --ref.get(k)->ref;
            }
            break;
          }
        }
        require_valid(m);
        const auto as_ref = [&](std::int32_t l) {
          RefList v;
          for (const auto& t : list_of(m.cpu(), l)) v.push_back({t[0], t[1], int(t[2])});
          return v;
        };
        const auto same = [](const RefList& a, const RefList& b) {
          return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](auto& x,
                                                                                          auto& y) {
                   return x.key == y.key && x.block == y.block && x.ref == y.ref;
                 });
        };
        if (arc) {
          REQUIRE(same(as_ref(CpuOffloadManager::kT1), ref.t1));
          REQUIRE(same(as_ref(CpuOffloadManager::kT2), ref.t2));
          CHECK(m.cpu().target_t1_size() == ref.target);
        } else {
          REQUIRE(same(as_ref(CpuOffloadManager::kLruList), ref.lru));
        }
        REQUIRE(m.cpu().free_list() == ref.free_list);
      }
    }
  }
}
