// vLLM v0.7.2's Block object pools (vllm/core/block/common.py BlockPool) and the defect they
// carry: a Block object swapped to the CPU keeps its GPU pool_id and is freed into the CPU's pool,
// whose later init_block pops that id beyond its own object list -> IndexError.

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "core/v0/block_manager.h"

using namespace kvsim;
using namespace kvsim::v0;

namespace {

struct Item {
  Sequence seq;
  SequenceGroup group;
};

/// A 1-token RUNNING sequence in its own group, allocated on the GPU.
Item& allocate_one(BlockManager& bm, std::vector<std::unique_ptr<Item>>& items, SeqId id) {
  Item& it = *items.emplace_back(std::make_unique<Item>());
  it.seq.reset(id, std::vector<Token>{static_cast<Token>(id % 7)});
  it.seq.slot = bm.acquire_slot(id);
  it.group.reset(std::to_string(id), nullptr, {}, 0, 0);
  it.group.add_initial(&it.seq);
  REQUIRE(bm.can_allocate(it.group) == AllocStatus::kOk);
  bm.allocate(it.group);
  it.seq.status = SeqStatus::kRunning;
  if (bm.caching()) bm.get_num_cached_tokens(it.seq);  // as the scheduler does before a free
  return it;
}

void swap_out(BlockManager& bm, Item& it) {
  REQUIRE(bm.can_swap_out(it.group));
  std::vector<BlockIdPair> map;
  bm.swap_out(it.group, map);
  it.seq.status = SeqStatus::kSwapped;
}

std::vector<std::int64_t> free_ids(const BlockObjectPool& p) {
  std::vector<std::int64_t> out;
  p.free_ids(out);
  return out;
}

}  // namespace

TEST_CASE("a block object pool pops from the head, gives back to the head, doubles when empty",
          "[core]") {
  BlockObjectPool p(2);
  CHECK(p.init_block() == 0);
  CHECK(p.init_block() == 1);
  CHECK(free_ids(p).empty());
  CHECK(p.init_block() == 2);  // increase_pool: 2 -> 4, ids 2 and 3 appended
  CHECK(p.size() == 4);
  p.free_block(0);
  p.free_block(1);
  CHECK(free_ids(p) == std::vector<std::int64_t>{1, 0, 3});
  CHECK(p.init_block() == 1);
  p.init_and_free();  // takes 0 and gives it back
  CHECK(free_ids(p) == std::vector<std::int64_t>{0, 3});
  p.free_block(4);  // another pool's id, beyond this list
  CHECK_THROWS_WITH(p.init_block(), "IndexError: list index out of range");
  BlockObjectPool empty(0);
  CHECK_THROWS_WITH(empty.init_block(), "AssertionError: assert len(self._free_ids) > 0");
}

TEST_CASE("a swapped block freed on the CPU sends its GPU pool id to the CPU pool (IndexError)",
          "[core]") {
  const bool caching = GENERATE(false, true);
  INFO("caching " << caching);
  // 1-token blocks; 8 GPU blocks (32 objects), 1 CPU block (4 objects).
  BlockManager bm(1, 8, 1, 0.0, caching);
  std::vector<std::unique_ptr<Item>> items;
  for (SeqId id = 0; id < 4; ++id) allocate_one(bm, items, id);  // GPU objects 0..3
  Item& a = allocate_one(bm, items, 4);                          // GPU object 4
  CHECK(bm.allocator_for_tests().object_pool(Device::kGpu).size() == 32);
  swap_out(bm, a);
  bm.free(a.seq);  // freed on the CPU: GPU pool id 4 goes to the CPU pool's head
  CHECK(free_ids(bm.allocator_for_tests().object_pool(Device::kCpu)) ==
        std::vector<std::int64_t>{4, 0, 1, 2, 3});
  std::vector<BlockIdPair> map;
  REQUIRE(bm.can_swap_out(items[0]->group));
  CHECK_THROWS_WITH(bm.swap_out(items[0]->group, map), "IndexError: list index out of range");
}

TEST_CASE("a GPU pool id within the CPU pool's list is harmless", "[core]") {
  BlockManager bm(1, 8, 1, 0.0, false);
  std::vector<std::unique_ptr<Item>> items;
  Item& a = allocate_one(bm, items, 0);  // GPU object 0
  for (SeqId id = 1; id < 4; ++id) allocate_one(bm, items, id);
  swap_out(bm, a);
  bm.free(a.seq);  // id 0 goes to the CPU pool: its own object 0 again
  for (std::size_t i = 1; i < 4; ++i) {
    swap_out(bm, *items[i]);
    std::vector<BlockIdPair> map;
    bm.swap_in(items[i]->group, map);
    items[i]->seq.status = SeqStatus::kRunning;
  }
  CHECK(free_ids(bm.allocator_for_tests().object_pool(Device::kCpu)) ==
        std::vector<std::int64_t>{0, 0, 1, 2, 3});
  CHECK(bm.find_violation() == "");
}

TEST_CASE("object ids lost to the CPU make the GPU pool double and the first id past the CPU "
          "pool's list raises on the next swap-out", "[core]") {
  // 1 GPU block (4 objects), 1 CPU block (4 objects): each round allocates a sequence, swaps it
  // out and frees it on the CPU, so GPU object k is lost and k heads the CPU pool's free ids.
  BlockManager bm(1, 1, 1, 0.0, false);
  std::vector<std::unique_ptr<Item>> items;
  for (SeqId k = 0; k < 5; ++k) {
    INFO("round " << k);
    Item& it = allocate_one(bm, items, k);
    CHECK(bm.allocator_for_tests().object_pool(Device::kGpu).size() == (k < 4 ? 4 : 8));
    swap_out(bm, it);  // pops the previous round's id (k - 1 < 4): fine
    bm.free(it.seq);
    bm.release_slot(it.seq.slot);
  }
  Item& last = allocate_one(bm, items, 5);
  std::vector<BlockIdPair> map;
  CHECK_THROWS_WITH(bm.swap_out(last.group, map), "IndexError: list index out of range");
}
