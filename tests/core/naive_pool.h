#pragma once
// A deliberately naive model of vLLM v0.7.2's KV cache manager for differential testing: plain
// vectors and linear scans, block hashes represented by the full token prefix they cover (so
// equality is exact by construction). Text-only requests (no extra keys). Written from the spec,
// sharing no code with core/.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace kvsim::test {

class NaivePool {
 public:
  using Key = std::vector<std::int32_t>;  // the whole prefix of tokens up to the block's end
  struct Req {
    std::vector<std::int32_t> tokens;
    std::int64_t computed = 0;
    std::vector<Key> hashes;
    std::vector<int> table;
  };

  NaivePool(int bs, int num_blocks, std::int64_t max_model_len, bool caching,
            std::int64_t prealloc_tokens)
      : bs_(bs),
        caching_(caching),
        ref_(static_cast<std::size_t>(num_blocks), 0),
        hash_(static_cast<std::size_t>(num_blocks)) {
    prealloc_blocks_ = static_cast<int>((prealloc_tokens + bs - 1) / bs);
    max_blocks_ = static_cast<int>((max_model_len + bs - 1) / bs);
    for (int i = 0; i < num_blocks; ++i) queue_.push_back(i);
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
    for (const Key& k : r.hashes) {
      const int b = lookup(k);
      if (b < 0) break;
      hits.push_back(b);
    }
    return hits;
  }

  /// nullopt: no space. Otherwise the new blocks.
  std::optional<std::vector<int>> allocate(Req& r, std::int64_t n, const std::vector<int>& hits) {
    const std::int64_t computed = r.computed + static_cast<std::int64_t>(hits.size()) * bs_;
    const std::int64_t required = (computed + n + bs_ - 1) / bs_;
    const std::int64_t num_new = required - static_cast<std::int64_t>(r.table.size() + hits.size());
    std::int64_t evictable = 0;
    for (int b : hits) evictable += ref_[static_cast<std::size_t>(b)] == 0;
    if (num_new > static_cast<std::int64_t>(queue_.size()) - evictable) return std::nullopt;
    for (int b : hits) {
      if (ref_[static_cast<std::size_t>(b)] == 0)
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
    const std::int64_t first = computed / bs_;
    const std::int64_t end =
        std::min((computed + n) / bs_, static_cast<std::int64_t>(r.table.size()));
    const std::size_t listed = r.hashes.size();
    for (std::int64_t i = first; i < end; ++i) {
      const int b = r.table[static_cast<std::size_t>(i)];
      if (hash_[static_cast<std::size_t>(b)]) continue;  // already hashed (leading skip)
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
    for (int b : r.table)
      if (--ref_[static_cast<std::size_t>(b)] == 0) queue_.push_back(b);
    r.table.clear();
  }

  bool reset_prefix_cache() {
    if (queue_.size() != ref_.size()) return false;
    index_.clear();
    for (auto& h : hash_) h.reset();
    return true;
  }

  const std::vector<int>& queue() const { return queue_; }
  const std::vector<int>& refs() const { return ref_; }
  bool cached(int b) const { return hash_[static_cast<std::size_t>(b)].has_value(); }

 private:
  int lookup(const Key& k) const {
    for (const auto& [key, b] : index_)
      if (key == k) return b;
    return -1;
  }

  int bs_;
  bool caching_;
  int prealloc_blocks_;
  int max_blocks_;
  std::vector<int> ref_;
  std::vector<std::optional<Key>> hash_;
  std::vector<int> queue_;                  // front = next to reuse
  std::vector<std::pair<Key, int>> index_;  // insertion order
};

}  // namespace kvsim::test
