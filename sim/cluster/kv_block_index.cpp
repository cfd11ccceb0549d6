#include "sim/cluster/kv_block_index.h"

#include <algorithm>
#include <bit>

#include "core/common/assert.h"
#include "core/common/block_hash.h"

namespace kvsim {

KvBlockIndex::KvBlockIndex(std::int32_t num_replicas, Removal removal)
    : removal_(removal),
      extra_copies_(removal == Removal::kCount ? static_cast<std::size_t>(num_replicas) : 0),
      num_blocks_(static_cast<std::size_t>(num_replicas), 0) {
  KVSIM_ASSERT(num_replicas >= 1 && num_replicas <= 64, "KvBlockIndex: 1 to 64 replicas");
}

void KvBlockIndex::apply(std::int32_t r, std::span<const KvEvent> events) {
  for (const KvEvent& e : events) {
    switch (e.kind) {
      case KvEvent::Kind::kStored:
        if (e.group == 0) add(r, e.block_hash);
        break;
      case KvEvent::Kind::kRemoved:
        if (e.group == 0) remove(r, e.block_hash);
        break;
      case KvEvent::Kind::kAllCleared:
        clear(r);
        break;
    }
  }
}

void KvBlockIndex::add(std::int32_t r, std::uint64_t hash) {
  const std::uint64_t bit = std::uint64_t{1} << r;
  std::uint64_t& m = holders_[hash];
  if ((m & bit) == 0) {
    m |= bit;
    ++num_blocks_[static_cast<std::size_t>(r)];
  } else if (removal_ == Removal::kCount) {
    ++extra_copies_[static_cast<std::size_t>(r)][hash];
  }
}

void KvBlockIndex::remove(std::int32_t r, std::uint64_t hash) {
  const std::uint64_t bit = std::uint64_t{1} << r;
  const auto it = holders_.find(hash);
  if (it == holders_.end() || (it->second & bit) == 0) return;  // kDrop: already dropped
  if (removal_ == Removal::kCount) {
    auto& extra = extra_copies_[static_cast<std::size_t>(r)];
    if (const auto c = extra.find(hash); c != extra.end()) {
      if (--c->second == 0) extra.erase(c);
      return;
    }
  }
  it->second &= ~bit;
  --num_blocks_[static_cast<std::size_t>(r)];
  if (it->second == 0) holders_.erase(it);
}

void KvBlockIndex::clear(std::int32_t r) {
  const std::uint64_t bit = std::uint64_t{1} << r;
  for (auto it = holders_.begin(); it != holders_.end();) {
    it->second &= ~bit;
    it = it->second == 0 ? holders_.erase(it) : std::next(it);
  }
  num_blocks_[static_cast<std::size_t>(r)] = 0;
  if (removal_ == Removal::kCount) extra_copies_[static_cast<std::size_t>(r)].clear();
}

bool KvBlockIndex::holds(std::int32_t r, std::uint64_t hash) const {
  const auto it = holders_.find(hash);
  return it != holders_.end() && (it->second >> r & 1) != 0;
}

void KvBlockIndex::longest_prefix(std::span<const std::uint64_t> hashes,
                                  std::span<std::int64_t> matched) const {
  const auto n = static_cast<std::int32_t>(matched.size());
  KVSIM_ASSERT(n == num_replicas());
  std::uint64_t alive = n == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << n) - 1;
  std::int64_t j = 0;
  const auto settle = [&](std::uint64_t dropped) {
    for (; dropped != 0; dropped &= dropped - 1) matched[std::countr_zero(dropped)] = j;
  };
  for (; j < static_cast<std::int64_t>(hashes.size()) && alive != 0; ++j) {
    const auto it = holders_.find(hashes[static_cast<std::size_t>(j)]);
    const std::uint64_t next = it == holders_.end() ? 0 : alive & it->second;
    settle(alive & ~next);
    alive = next;
  }
  settle(alive);
}

void prompt_content_hashes(std::span<const Token> prompt, std::int64_t block_size,
                           std::int64_t max_blocks, std::vector<std::uint64_t>& out) {
  out.clear();
  const auto bs = static_cast<std::size_t>(block_size);
  std::uint64_t h = kRootContentHash;
  for (std::size_t b = 0;
       b + bs <= prompt.size() && static_cast<std::int64_t>(out.size()) < max_blocks; b += bs) {
    h = block_content_hash(h, prompt.subspan(b, bs), 0);
    out.push_back(h);
  }
}

}  // namespace kvsim
