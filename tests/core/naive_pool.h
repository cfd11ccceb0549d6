#pragma once
// A deliberately naive model of vLLM V1's KV cache manager, at v0.7.2 or at v0.8.5.post1, for
// differential testing: plain vectors and linear scans, block hashes represented by the full token
// prefix they cover (so equality is exact by construction). Text-only requests (no extra keys).
// Written from the spec (shared/spec/vllm-kv-cache-semantics.md §1-§8 and §11), sharing no code
// with core/.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace kvsim::test {

/// Which release the model follows.
struct NaiveRelease {
  bool v085 = false;                // v0.8.5.post1 (null block 0, no preallocation, ...)
  std::int64_t sliding_window = 0;  // v0.8.5 only: the window in tokens, 0 = full attention
};

class NaivePool {
 public:
  using Key = std::vector<std::int32_t>;  // the whole prefix of tokens up to the block's end
  struct Req {
    std::vector<std::int32_t> tokens;
    std::int64_t computed = 0;
    std::vector<Key> hashes;
    std::vector<int> table;
    std::int64_t num_cached = -1;  // v0.8.5's num_cached_block entry (-1: none)
  };

  NaivePool(int bs, int num_blocks, std::int64_t max_model_len, bool caching,
            std::int64_t prealloc_tokens, NaiveRelease release = {})
      : bs_(bs),
        caching_(caching),
        rel_(release),
        ref_(static_cast<std::size_t>(num_blocks), 0),
        hash_(static_cast<std::size_t>(num_blocks)) {
    prealloc_blocks_ = rel_.v085 ? 0 : static_cast<int>((prealloc_tokens + bs - 1) / bs);
    max_blocks_ = static_cast<int>((max_model_len + bs - 1) / bs);
    for (int i = rel_.v085 ? 1 : 0; i < num_blocks; ++i) queue_.push_back(i);  // 0: null block
  }

  std::vector<int> get_computed_blocks(Req& r) {
    std::vector<int> hits;
    if (!caching_) return hits;
    if (r.hashes.empty()) {
      for (std::size_t end = static_cast<std::size_t>(bs_); end <= r.tokens.size();
           end += static_cast<std::size_t>(bs_))
        r.hashes.emplace_back(r.tokens.begin(),
                              r.tokens.begin() + static_cast<std::ptrdiff_t>(end));
    }
    std::size_t n = r.hashes.size();
    // v0.8.5: a prompt whose hashes cover every token never hits its last block.
    if (rel_.v085 && n > 0 && n * static_cast<std::size_t>(bs_) == r.tokens.size()) --n;
    if (rel_.sliding_window == 0) {
      for (std::size_t i = 0; i < n; ++i) {
        const int b = lookup(r.hashes[i]);
        if (b < 0) break;
        hits.push_back(b);
      }
      return hits;
    }
    // Sliding window: the rightmost `need` consecutive hits, the null block before them; with
    // no such run, the hits from block 0 on (a run shorter than `need`, possibly empty).
    const std::size_t need = std::max<std::size_t>(
        1, static_cast<std::size_t>((rel_.sliding_window - 1 + bs_ - 1) / bs_));
    for (std::size_t end = n; end >= need && end > 0; --end) {
      bool all = true;
      for (std::size_t i = end - need; i < end; ++i) all = all && lookup(r.hashes[i]) >= 0;
      if (!all) continue;
      hits.assign(end - need, 0);
      for (std::size_t i = end - need; i < end; ++i) hits.push_back(lookup(r.hashes[i]));
      return hits;
    }
    for (std::size_t i = 0; i < n && lookup(r.hashes[i]) >= 0; ++i)
      hits.push_back(lookup(r.hashes[i]));
    return hits;
  }

  /// nullopt: no space (or an error). Otherwise the new blocks.
  std::optional<std::vector<int>> allocate(Req& r, std::int64_t n, const std::vector<int>& hits,
                                           std::int64_t lookahead = 0) {
    if (rel_.sliding_window > 0) {  // blocks wholly before the window become the null block
      const std::int64_t first_kept = (r.computed - rel_.sliding_window + 1) / bs_;
      if (r.computed - rel_.sliding_window + 1 >= bs_) {
        for (std::int64_t i = first_kept - 1; i >= 0; --i) {
          int& b = r.table[static_cast<std::size_t>(i)];
          if (b == 0) break;
          release(b);
          b = 0;
        }
      }
    }
    const std::int64_t computed = r.computed + static_cast<std::int64_t>(hits.size()) * bs_;
    const std::int64_t required = (computed + n + lookahead + bs_ - 1) / bs_;
    const std::int64_t num_new = required - static_cast<std::int64_t>(r.table.size() + hits.size());
    std::int64_t evictable = 0;
    for (int b : hits) evictable += ref_[static_cast<std::size_t>(b)] == 0;
    if (num_new > static_cast<std::int64_t>(queue_.size()) - evictable) return std::nullopt;
    for (int b : hits) {
      if (ref_[static_cast<std::size_t>(b)] == 0 && !is_null(b))
        queue_.erase(std::find(queue_.begin(), queue_.end(), b));
      ++ref_[static_cast<std::size_t>(b)];
    }
    r.table.insert(r.table.end(), hits.begin(), hits.end());
    std::vector<int> fresh;
    if (num_new > 0) {
      const std::int64_t k = std::min(
          {num_new + prealloc_blocks_, static_cast<std::int64_t>(queue_.size()),
           static_cast<std::int64_t>(max_blocks_) - static_cast<std::int64_t>(r.table.size())});
      for (std::int64_t i = 0; i < k; ++i) {
        const int b = queue_.front();
        queue_.erase(queue_.begin());
        if (caching_ && hash_[static_cast<std::size_t>(b)]) {
          index_.erase(std::find(index_.begin(), index_.end(),
                                 std::make_pair(*hash_[static_cast<std::size_t>(b)], b)));
          hash_[static_cast<std::size_t>(b)].reset();
        }
        ref_[static_cast<std::size_t>(b)] = 1;
        fresh.push_back(b);
      }
      r.table.insert(r.table.end(), fresh.begin(), fresh.end());
    }
    if (!caching_) return fresh;
    const std::int64_t full =
        std::min((computed + n) / bs_, static_cast<std::int64_t>(r.table.size()));
    // v0.7.2 caches from floor(computed / bs) on, skipping blocks that already carry a hash;
    // v0.8.5 from the count of blocks cached so far (the hits for a request without an entry).
    const std::int64_t first =
        rel_.v085 ? (r.num_cached >= 0 ? r.num_cached : static_cast<std::int64_t>(hits.size()))
                  : computed / bs_;
    if (rel_.v085) r.num_cached = (computed + n) / bs_;
    const std::size_t listed = r.hashes.size();
    for (std::int64_t i = first; i < full; ++i) {
      const int b = r.table[static_cast<std::size_t>(i)];
      if (hash_[static_cast<std::size_t>(b)]) continue;  // v0.7.2's leading skip
      Key k;
      if (static_cast<std::size_t>(i) < listed) {
        k = r.hashes[static_cast<std::size_t>(i)];
      } else {
        k.assign(r.tokens.begin(), r.tokens.begin() + (i + 1) * bs_);
        r.hashes.push_back(k);
      }
      hash_[static_cast<std::size_t>(b)] = k;
      index_.emplace_back(k, b);
    }
    return fresh;
  }

  void free(Req& r) {
    if (caching_) std::reverse(r.table.begin(), r.table.end());
    for (int b : r.table) release(b);
    r.table.clear();
    r.num_cached = -1;
  }

  bool reset_prefix_cache() {
    if (queue_.size() != ref_.size() - (rel_.v085 ? 1 : 0)) return false;
    index_.clear();
    for (auto& h : hash_) h.reset();
    return true;
  }

  const std::vector<int>& queue() const { return queue_; }
  const std::vector<int>& refs() const { return ref_; }
  bool cached(int b) const { return hash_[static_cast<std::size_t>(b)].has_value(); }

 private:
  bool is_null(int b) const { return rel_.v085 && b == 0; }
  void release(int b) {
    if (--ref_[static_cast<std::size_t>(b)] == 0 && !is_null(b)) queue_.push_back(b);
  }
  int lookup(const Key& k) const {
    for (const auto& [key, b] : index_)
      if (key == k) return b;
    return -1;
  }

  int bs_;
  bool caching_;
  NaiveRelease rel_;
  int prealloc_blocks_;
  int max_blocks_;
  std::vector<int> ref_;
  std::vector<std::optional<Key>> hash_;
  std::vector<int> queue_;                  // front = next to reuse
  std::vector<std::pair<Key, int>> index_;  // insertion order
};

}  // namespace kvsim::test
