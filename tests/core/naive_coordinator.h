#pragma once
// A deliberately naive model of vLLM v0.20.1's KV cache manager with KV cache groups (full
// attention, sliding window, chunked local), for differential testing: plain vectors and linear
// scans, a cached block keyed by (the whole token prefix up to its end, its group), so equality is
// exact by construction. Text-only requests, no eagle. Written from the spec
// (shared/spec/vllm-0.20-semantics.md §1-§7), sharing no code with core/.

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

namespace kvsim::test {

class NaiveCoordinator {
 public:
  enum Kind { kFull, kWindow, kChunked };
  struct Group {
    Kind kind = kFull;
    int bs = 4;
    std::int64_t size = 0;  // window or chunk in tokens
  };
  using Lists = std::vector<std::vector<int>>;  // one list per group
  struct Req {
    std::vector<std::int32_t> tokens;
    std::int64_t computed = 0;
    Lists tables;
    std::vector<std::int64_t> num_cached;  // -1: no entry
    std::vector<bool> entry;
  };

  NaiveCoordinator(std::vector<Group> groups, int num_blocks, std::int64_t max_model_len,
                   bool caching, std::int64_t max_num_batched_tokens)
      : groups_(std::move(groups)),
        mml_(max_model_len),
        caching_(caching),
        ref_(static_cast<std::size_t>(num_blocks), 0),
        key_(static_cast<std::size_t>(num_blocks)) {
    for (int b = 1; b < num_blocks; ++b) queue_.push_back(b);  // block 0: the null block
    lcm_ = 1;
    for (const Group& g : groups_) {
      lcm_ = std::lcm(lcm_, std::int64_t{g.bs});
      std::int64_t cap = 0;
      if (g.kind == kWindow)
        cap = cdiv(std::min(g.size - 1 + max_num_batched_tokens, mml_), g.bs) + 1;
      if (g.kind == kChunked) cap = cdiv(std::min(g.size + max_num_batched_tokens, mml_), g.bs);
      cap_.push_back(cap);
    }
    entries_.assign(groups_.size(), 0);
  }

  Req make(std::vector<std::int32_t> tokens) const {
    Req r;
    r.tokens = std::move(tokens);
    r.tables.resize(groups_.size());
    r.num_cached.assign(groups_.size(), -1);
    r.entry.assign(groups_.size(), false);
    return r;
  }

  /// get_computed_blocks: the hits per group and the hit tokens.
  std::pair<Lists, std::int64_t> lookup(const Req& r) const {
    Lists hits(groups_.size());
    if (!caching_) return {hits, 0};
    const std::int64_t max_len = static_cast<std::int64_t>(r.tokens.size()) - 1;
    if (groups_.size() == 1) {
      hits[0] = blocks_of(r, find_together(r, {0}, max_len, groups_[0].bs), 0);
      return {hits, static_cast<std::int64_t>(hits[0].size()) * groups_[0].bs};
    }
    // Types: groups of equal spec together, full attention first. Each shortens the length until
    // all agree; the full attention lookup happens once, then is only cut.
    std::vector<std::vector<std::size_t>> types;
    for (int pass = 0; pass < 2; ++pass)
      for (std::size_t g = 0; g < groups_.size(); ++g) {
        if ((groups_[g].kind == kFull) != (pass == 0)) continue;
        auto it = std::find_if(types.begin(), types.end(),
                               [&](const auto& t) { return same(groups_[t[0]], groups_[g]); });
        if (it == types.end())
          types.push_back({g});
        else
          it->push_back(g);
      }
    std::vector<bool> done(groups_.size(), false);
    std::int64_t length = max_len;
    const bool simple = types.size() == 2 && groups_[types[0][0]].kind == kFull;
    while (true) {
      std::int64_t cur = length;
      for (const auto& t : types) {
        const Group& spec = groups_[t[0]];
        if (spec.kind == kFull && done[t[0]]) {
          cur = cur / spec.bs * spec.bs;
          continue;
        }
        const std::vector<int> h = find_together(r, t, cur, lcm_);
        for (std::size_t g : t) {  // the same positions, each group's own blocks
          hits[g] = blocks_of(r, h, g);
          done[g] = true;
        }
        cur = static_cast<std::int64_t>(h.size()) * spec.bs;
      }
      if (cur >= length) break;
      length = cur;
      if (simple) break;
    }
    if (groups_[types[0][0]].kind == kFull)
      for (std::size_t g : types[0])
        hits[g].resize(std::min<std::size_t>(hits[g].size(),
                                             static_cast<std::size_t>(length / groups_[g].bs)));
    return {hits, length};
  }

  /// allocate_slots: nullopt = None; else the new blocks per group.
  std::optional<Lists> allocate(Req& r, std::int64_t n, std::int64_t hit_tokens, const Lists& hits,
                                std::int64_t lookahead) {
    const std::int64_t local = r.computed + hit_tokens;
    const std::int64_t total = std::min(local, mml_);
    const std::int64_t need = std::min(total + n + lookahead, mml_);
    for (std::size_t g = 0; g < groups_.size(); ++g) drop_skipped(r, g, total);
    std::int64_t want = 0;
    for (std::size_t g = 0; g < groups_.size(); ++g)
      want += to_allocate(r, g, need, hits[g], local);
    if (want > static_cast<std::int64_t>(queue_.size())) return std::nullopt;
    bool any = false;
    for (const auto& h : hits) any = any || !h.empty();
    if (any)
      for (std::size_t g = 0; g < groups_.size(); ++g) {
        if (r.num_cached[g] >= 0) continue;
        set_entry(r, g);
        const std::int64_t skip = std::max<std::int64_t>(0, skipped(g, local) / groups_[g].bs);
        for (std::size_t i = 0; i < hits[g].size(); ++i) {
          if (static_cast<std::int64_t>(i) < skip) continue;
          const int b = hits[g][i];
          if (b == 0) continue;  // the null block's count is not kept
          if (ref_[static_cast<std::size_t>(b)] == 0)
            queue_.erase(std::find(queue_.begin(), queue_.end(), b));
          ++ref_[static_cast<std::size_t>(b)];
        }
        for (std::int64_t i = 0; i < skip; ++i) r.tables[g].push_back(0);
        for (std::size_t i = static_cast<std::size_t>(
                 std::min<std::int64_t>(skip, static_cast<std::int64_t>(hits[g].size())));
             i < hits[g].size(); ++i)
          r.tables[g].push_back(hits[g][i]);
        r.num_cached[g] = static_cast<std::int64_t>(r.tables[g].size());
      }
    Lists fresh(groups_.size());
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      set_entry(r, g);
      while (static_cast<std::int64_t>(r.tables[g].size()) < cdiv(need, groups_[g].bs)) {
        const int b = queue_.front();
        queue_.erase(queue_.begin());
        if (key_[static_cast<std::size_t>(b)]) {  // evict
          index_.erase(std::find(index_.begin(), index_.end(),
                                 std::make_pair(*key_[static_cast<std::size_t>(b)], b)));
          key_[static_cast<std::size_t>(b)].reset();
        }
        ref_[static_cast<std::size_t>(b)] = 1;
        r.tables[g].push_back(b);
        fresh[g].push_back(b);
      }
    }
    if (caching_) cache(r, std::min(total + n, static_cast<std::int64_t>(r.tokens.size())));
    return fresh;
  }

  /// can_fit_full_sequence.
  bool can_fit(const Req& r, std::int64_t hit_tokens, const Lists& hits) const {
    const std::int64_t total = std::min(r.computed + hit_tokens, mml_);
    const std::int64_t full = std::min(static_cast<std::int64_t>(r.tokens.size()), mml_);
    std::int64_t want = 0;
    for (std::size_t g = 0; g < groups_.size(); ++g)
      want += to_allocate(r, g, full, hits[g], total);
    return want <= static_cast<std::int64_t>(queue_.size());
  }

  void free(Req& r) {
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      for (auto it = r.tables[g].rbegin(); it != r.tables[g].rend(); ++it) release(*it);
      r.tables[g].clear();
      r.num_cached[g] = -1;
      if (r.entry[g]) --entries_[g];
      r.entry[g] = false;
    }
  }

  /// get_num_common_prefix_blocks (the request gets a table entry in full-attention groups).
  std::vector<int> common_prefix(Req& r) {
    std::vector<int> out(groups_.size(), 0);
    if (!caching_) return out;
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      if (groups_[g].kind != kFull) continue;
      set_entry(r, g);
      for (int b : r.tables[g]) {
        if (ref_[static_cast<std::size_t>(b)] != entries_[g]) break;
        ++out[g];
      }
    }
    return out;
  }

  bool reset() {
    if (queue_.size() != ref_.size() - 1) return false;
    index_.clear();
    for (auto& k : key_) k.reset();
    return true;
  }

  const std::vector<int>& queue() const { return queue_; }
  const std::vector<int>& refs() const { return ref_; }
  bool cached(int b) const { return key_[static_cast<std::size_t>(b)].has_value(); }

 private:
  using Key = std::pair<std::vector<std::int32_t>, std::size_t>;  // (prefix, group)
  static std::int64_t cdiv(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
  static bool same(const Group& a, const Group& b) {
    return a.kind == b.kind && a.bs == b.bs && a.size == b.size;
  }
  Key key(const Req& r, std::size_t g, std::int64_t i) const {
    const auto end = static_cast<std::ptrdiff_t>((i + 1) * groups_[g].bs);
    return {std::vector<std::int32_t>(r.tokens.begin(), r.tokens.begin() + end), g};
  }
  int cached_block(const Key& k) const {
    for (const auto& [key, b] : index_)
      if (key == k) return b;
    return -1;
  }
  bool hit_all(const Req& r, const std::vector<std::size_t>& t, std::int64_t i) const {
    for (std::size_t g : t)
      if (cached_block(key(r, g, i)) < 0) return false;
    return true;
  }
  // A type's hits for its first group's positions (0 = null); the caller maps them per group.
  std::vector<int> find_together(const Req& r, const std::vector<std::size_t>& t,
                                 std::int64_t max_len, std::int64_t align) const {
    const Group& spec = groups_[t[0]];
    const std::int64_t bs = spec.bs, max_blocks = max_len / bs;
    std::vector<int> pos;  // 1 = hit, 0 = null
    const auto aligned = [&](std::int64_t nblocks) { return nblocks * bs % align == 0; };
    if (spec.kind == kFull) {
      while (static_cast<std::int64_t>(pos.size()) < max_blocks &&
             hit_all(r, t, static_cast<std::int64_t>(pos.size())))
        pos.push_back(1);
      while (!aligned(static_cast<std::int64_t>(pos.size()))) pos.pop_back();
    } else if (spec.kind == kWindow) {
      // The largest aligned end e with every block in [max(0, e - need), e) hit.
      const std::int64_t need = cdiv(spec.size - 1, bs);
      for (std::int64_t e = max_blocks; e >= 1; --e) {
        if (!aligned(e)) continue;
        bool all = true;
        for (std::int64_t i = std::max<std::int64_t>(0, e - need); i < e; ++i)
          all = all && hit_all(r, t, i);
        if (!all) continue;
        for (std::int64_t i = 0; i < e; ++i) pos.push_back(i >= e - need ? 1 : 0);
        break;
      }
    } else {  // chunked local: nulls before the current chunk, then hits
      const std::int64_t start = max_len > 0 ? max_len / spec.size * spec.size / bs : 0;
      pos.assign(static_cast<std::size_t>(start), 0);
      while (static_cast<std::int64_t>(pos.size()) < max_blocks &&
             hit_all(r, t, static_cast<std::int64_t>(pos.size())))
        pos.push_back(1);
    }
    // Encode positions as 1 + index for hits.
    for (std::size_t i = 0; i < pos.size(); ++i) pos[i] = pos[i] ? static_cast<int>(i) + 1 : 0;
    return pos;
  }
  // Positions (0: null, 1 + i: block i hit) as group g's blocks.
  std::vector<int> blocks_of(const Req& r, const std::vector<int>& pos, std::size_t g) const {
    std::vector<int> out;
    for (int p : pos) out.push_back(p == 0 ? 0 : cached_block(key(r, g, p - 1)));
    return out;
  }

  std::int64_t skipped(std::size_t g, std::int64_t computed) const {
    const Group& s = groups_[g];
    if (s.kind == kWindow) return std::max<std::int64_t>(0, computed - s.size + 1);
    if (s.kind == kChunked) return computed / s.size * s.size;
    return 0;
  }
  std::int64_t to_allocate(const Req& r, std::size_t g, std::int64_t tokens,
                           const std::vector<int>& hits, std::int64_t total) const {
    std::int64_t required = cdiv(tokens, groups_[g].bs);
    if (cap_[g] > 0) required = std::min(required, cap_[g]);
    const auto held = static_cast<std::int64_t>(r.tables[g].size());
    if (r.num_cached[g] >= 0) return std::max<std::int64_t>(required - held, 0);
    const std::int64_t skip = skipped(g, total) / groups_[g].bs;
    std::int64_t n = std::max<std::int64_t>(
        required - std::max(skip, static_cast<std::int64_t>(hits.size()) + held), 0);
    for (std::size_t i = static_cast<std::size_t>(std::max<std::int64_t>(0, skip - held));
         i < hits.size(); ++i)
      n += hits[i] != 0 && ref_[static_cast<std::size_t>(hits[i])] == 0;
    return n;
  }
  void drop_skipped(Req& r, std::size_t g, std::int64_t total) {
    const std::int64_t sk = skipped(g, total);
    if (sk <= 0) return;
    set_entry(r, g);
    auto& t = r.tables[g];
    for (std::int64_t i = std::min(sk / groups_[g].bs, static_cast<std::int64_t>(t.size())) - 1;
         i >= 0 && t[static_cast<std::size_t>(i)] != 0; --i) {
      release(t[static_cast<std::size_t>(i)]);
      t[static_cast<std::size_t>(i)] = 0;
    }
  }
  void cache(Req& r, std::int64_t tokens) {
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      const std::int64_t from = std::max<std::int64_t>(r.num_cached[g], 0);
      const std::int64_t full = tokens / groups_[g].bs;
      if (from >= full) continue;
      set_entry(r, g);
      for (std::int64_t i = from; i < std::min(full, static_cast<std::int64_t>(r.tables[g].size()));
           ++i) {
        const int b = r.tables[g][static_cast<std::size_t>(i)];
        if (b == 0) continue;
        key_[static_cast<std::size_t>(b)] = key(r, g, i);
        index_.emplace_back(*key_[static_cast<std::size_t>(b)], b);
      }
      r.num_cached[g] = full;
    }
  }
  void set_entry(Req& r, std::size_t g) {
    if (!r.entry[g]) ++entries_[g];
    r.entry[g] = true;
  }
  void release(int b) {
    if (b == 0) return;  // the null block's count is not kept
    if (--ref_[static_cast<std::size_t>(b)] == 0) queue_.push_back(b);
  }

  std::vector<Group> groups_;
  std::int64_t mml_;
  bool caching_;
  std::int64_t lcm_;
  std::vector<std::int64_t> cap_;
  std::vector<int> ref_;
  std::vector<std::optional<Key>> key_;
  std::vector<int> queue_;                  // front = next to reuse
  std::vector<std::pair<Key, int>> index_;  // insertion order
  std::vector<int> entries_;
};

}  // namespace kvsim::test
