// The V0 block manager against a naive model (no caching): random allocate / append / fork /
// free / swap sequences, with the tables, free lists and the invariant walk compared after every
// op; plus targeted behaviours and a planted fault the walk must catch.

#include <catch2/catch.hpp>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "core/v0/block_manager.h"

using namespace kvsim;
using namespace kvsim::v0;

namespace {

/// Sequences and one-sequence groups for driving a BlockManager directly.
struct Harness {
  explicit Harness(std::int32_t bs, std::int32_t gpu, std::int32_t cpu, bool caching,
                   double watermark = 0.0)
      : bm(bs, gpu, cpu, watermark, caching) {}
  struct Item {
    Sequence seq;
    SequenceGroup group;
  };
  Item& add(SeqId id, std::vector<Token> prompt) {
    auto& it = *items.emplace_back(std::make_unique<Item>());
    it.seq.reset(id, prompt);
    it.seq.slot = bm.acquire_slot(id);
    it.group.reset(std::to_string(id), nullptr, {}, 0, 0);
    it.group.add_initial(&it.seq);
    return it;
  }
  BlockManager bm;
  std::vector<std::unique_ptr<Item>> items;
};

std::vector<int> table(const BlockManager& bm, const Sequence& s) {
  std::vector<int> out;
  for (BlockId b : bm.block_table(s)) out.push_back(to_int(b));
  return out;
}

/// The naive reference: LIFO free lists, refcounts, tables of ids, copy-on-write on append.
struct Model {
  std::int32_t bs;
  std::deque<int> free[2];
  std::map<int, int> ref;
  struct T {
    std::vector<int> ids;
    std::int64_t full = 0;
  };
  std::map<SeqId, T> tables;
  Model(std::int32_t block_size, int gpu, int cpu) : bs(block_size) {
    for (int i = 0; i < gpu; ++i) free[0].push_back(i);
    for (int i = 0; i < cpu; ++i) free[1].push_back(gpu + i);
  }
  int pop(int d) {
    const int b = free[d].front();
    free[d].pop_front();
    ref[b] = 1;
    return b;
  }
  void release(int b, int d) {
    if (--ref[b] == 0) free[d].push_front(b);
  }
  void allocate(SeqId s, std::int64_t len) {
    T& t = tables[s];
    for (std::int64_t i = 0; i < (len + bs - 1) / bs; ++i) t.ids.push_back(pop(0));
    t.full = len;
  }
  std::vector<BlockIdPair> append(SeqId s, std::int64_t unseen) {
    T& t = tables[s];
    const std::int64_t empty = static_cast<std::int64_t>(t.ids.size()) * bs - t.full;
    if (empty < unseen)
      for (std::int64_t k = 0; k < (unseen - empty + bs - 1) / bs; ++k) t.ids.push_back(pop(0));
    std::vector<BlockIdPair> cows;
    if (unseen > 0)
      for (std::int64_t i = t.full / bs; i <= (t.full + unseen - 1) / bs; ++i) {
        int& b = t.ids[static_cast<std::size_t>(i)];
        if (ref[b] > 1) {
          --ref[b];
          const int n = pop(0);
          cows.emplace_back(b, n);
          b = n;
        }
      }
    t.full += unseen;
    return cows;
  }
  void fork(SeqId parent, SeqId child) {
    tables[child] = tables[parent];
    for (int b : tables[child].ids) ++ref[b];
  }
  void free_seq(SeqId s) {
    for (int b : tables[s].ids) release(b, dev(b));
    tables.erase(s);
  }
  int gpu_blocks = 0;
  int dev(int b) const { return b < gpu_blocks ? 0 : 1; }
  void swap(SeqId s, int from, int to) {
    T& t = tables[s];
    for (int b : t.ids) release(b, from);
    for (int& b : t.ids) b = pop(to);
  }
};

std::vector<int> free_ids(const BlockManager& bm, Device d) {
  std::vector<BlockId> ids;
  bm.allocator().free_lists(d).free_list(ids);
  std::vector<int> out;
  for (BlockId b : ids) out.push_back(to_int(b));
  return out;
}

}  // namespace

TEST_CASE("V0 block manager matches a naive model over random ops, invariants after each",
          "[core]") {
  for (std::uint64_t seed : {1u, 2u, 3u, 4u, 5u}) {
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    const std::int32_t bs = 1 + static_cast<std::int32_t>(rng() % 4);
    const int gpu = 8 + static_cast<int>(rng() % 16), cpu = static_cast<int>(rng() % 12);
    Harness h(bs, gpu, cpu, false);
    Model m(bs, gpu, cpu);
    m.gpu_blocks = gpu;
    std::vector<Harness::Item*> running, swapped;
    SeqId next = 0;
    for (int step = 0; step < 600; ++step) {
      INFO("step " << step);
      const int op = static_cast<int>(rng() % 6);
      if (op == 0) {
        std::vector<Token> prompt(1 + rng() % (3 * bs), 7);
        Harness::Item& it = h.add(next++, prompt);
        if (h.bm.can_allocate(it.group) != AllocStatus::kOk) continue;
        h.bm.allocate(it.group);
        it.seq.status = SeqStatus::kRunning;
        m.allocate(it.seq.seq_id, it.seq.get_len());
        running.push_back(&it);
      } else if (op == 1 && !running.empty()) {
        Harness::Item& it = *running[rng() % running.size()];
        const int k = 1 + static_cast<int>(rng() % (bs + 1));
        for (int i = 0; i < k; ++i) it.seq.append_token_id(static_cast<Token>(rng() % 5));
        if (!h.bm.can_append_slots(it.group, 0)) {
          h.bm.free(it.seq);
          m.free_seq(it.seq.seq_id);
          running.erase(std::find(running.begin(), running.end(), &it));
          continue;
        }
        std::vector<BlockIdPair> cows;
        const std::int64_t unseen = it.seq.get_len() - m.tables[it.seq.seq_id].full;
        h.bm.append_slots(it.seq, 0, cows);
        CHECK(cows == m.append(it.seq.seq_id, unseen));
      } else if (op == 2 && !running.empty()) {
        Harness::Item& p = *running[rng() % running.size()];
        Harness::Item& c = h.add(next++, {});
        const SeqSlot slot = c.seq.slot;
        c.seq.copy_from(p.seq, c.seq.seq_id);
        c.seq.slot = slot;
        h.bm.fork(p.seq, c.seq);
        m.fork(p.seq.seq_id, c.seq.seq_id);
        running.push_back(&c);
      } else if (op == 3 && !running.empty()) {
        const std::size_t i = rng() % running.size();
        h.bm.free(running[i]->seq);
        m.free_seq(running[i]->seq.seq_id);
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
      } else if (op == 4 && !running.empty()) {
        const std::size_t i = rng() % running.size();
        Harness::Item& it = *running[i];
        if (!h.bm.can_swap_out(it.group)) continue;
        std::vector<BlockIdPair> map;
        h.bm.swap_out(it.group, map);
        it.seq.status = SeqStatus::kSwapped;
        m.swap(it.seq.seq_id, 0, 1);
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
        swapped.push_back(&it);
      } else if (op == 5 && !swapped.empty()) {
        Harness::Item& it = *swapped.front();
        if (h.bm.can_swap_in(it.group, 0) != AllocStatus::kOk) continue;
        std::vector<BlockIdPair> map;
        h.bm.swap_in(it.group, map);
        it.seq.status = SeqStatus::kRunning;
        m.swap(it.seq.seq_id, 1, 0);
        swapped.erase(swapped.begin());
        running.push_back(&it);
      }
      REQUIRE(h.bm.find_violation() == "");
      REQUIRE(free_ids(h.bm, Device::kGpu) == std::vector<int>(m.free[0].begin(), m.free[0].end()));
      REQUIRE(free_ids(h.bm, Device::kCpu) == std::vector<int>(m.free[1].begin(), m.free[1].end()));
      for (Harness::Item* it : running)
        REQUIRE(table(h.bm, it->seq) == m.tables[it->seq.seq_id].ids);
      for (Harness::Item* it : swapped)
        REQUIRE(table(h.bm, it->seq) == m.tables[it->seq.seq_id].ids);
    }
  }
}

TEST_CASE("the invariant walk catches a leaked refcount and a block freed under a table",
          "[core]") {
  Harness h(2, 6, 2, true);
  Harness::Item& a = h.add(0, {1, 2, 3});
  h.bm.allocate(a.group);
  h.bm.get_num_cached_tokens(a.seq);
  REQUIRE(h.bm.find_violation() == "");
  const BlockId b = h.bm.block_table(a.seq)[1];
  h.bm.allocator_for_tests().fork_block(Device::kGpu, b);  // a reference no table holds
  CHECK(h.bm.find_violation().find("refcount") != std::string::npos);
  h.bm.allocator_for_tests().free(b, kNoHash, 0);  // back in step
  REQUIRE(h.bm.find_violation() == "");
  h.bm.allocator_for_tests().free(b, kNoHash, 0);  // freed while the table still holds it
  CHECK(h.bm.find_violation() != "");
}

TEST_CASE("can_allocate applies the watermark: NEVER past the pool, LATER when busy", "[core]") {
  Harness h(4, 100, 0, false, 0.01);  // watermark_blocks = 1
  REQUIRE(h.bm.watermark_blocks() == 1);
  Harness::Item& big = h.add(0, std::vector<Token>(400, 1));  // 100 blocks: 100 - 100 < 1
  CHECK(h.bm.can_allocate(big.group) == AllocStatus::kNever);
  Harness::Item& fits = h.add(1, std::vector<Token>(396, 1));  // 99 blocks: leaves exactly 1
  CHECK(h.bm.can_allocate(fits.group) == AllocStatus::kOk);
  h.bm.allocate(fits.group);
  Harness::Item& one = h.add(2, {1});
  CHECK(h.bm.can_allocate(one.group) == AllocStatus::kLater);
}

TEST_CASE("blocks touched by an append count 1 for one token even when it fits", "[core]") {
  Harness h(4, 8, 0, false);
  Harness::Item& a = h.add(0, {1, 2, 3, 4, 5});
  h.bm.allocate(a.group);
  a.seq.status = SeqStatus::kRunning;
  CHECK(h.bm.can_append_slots(a.group, 0));  // 0 unseen tokens on a partial block: 1 block
  a.seq.append_token_id(6);
  std::vector<BlockIdPair> cows;
  h.bm.append_slots(a.seq, 0, cows);
  CHECK(table(h.bm, a.seq).size() == 2);
  for (int i = 0; i < 2; ++i) a.seq.append_token_id(7);  // fills block 1 exactly
  h.bm.append_slots(a.seq, 0, cows);
  CHECK(table(h.bm, a.seq).size() == 2);
  CHECK(cows.empty());
}

TEST_CASE("swapping loses sharing: forked sequences get one CPU copy each (naive)", "[core]") {
  Harness h(2, 8, 8, false);
  Harness::Item& a = h.add(0, {1, 2, 3});
  h.bm.allocate(a.group);
  a.seq.status = SeqStatus::kRunning;
  Sequence child;
  child.copy_from(a.seq, 1);
  child.slot = h.bm.acquire_slot(1);
  a.group.add(&child);
  h.bm.fork(a.seq, child);
  CHECK(h.bm.num_free_gpu_blocks() == 6);
  REQUIRE(h.bm.can_swap_out(a.group));
  std::vector<BlockIdPair> map;
  h.bm.swap_out(a.group, map);
  CHECK(map.size() == 4);  // two blocks per sequence
  CHECK(h.bm.num_free_cpu_blocks() == 4);
  CHECK(h.bm.num_free_gpu_blocks() == 8);
  REQUIRE(h.bm.find_violation() == "");
  h.bm.free(a.seq);
  h.bm.free(child);
  h.bm.release_slot(child.slot);
  h.bm.release_slot(a.seq.slot);
  CHECK(h.bm.num_slots_in_use() == 0);
}
