// bench_extent_allocator [--ops N] [--reps R]: allocate/free throughput of ExtentAllocator (a
// sorted vector of holes) against the same first-fit policy on a std::map of holes (the node-based
// alternative: one allocation per inserted hole), at several numbers of live extents. Each run
// keeps `live` extents of random lengths in a pool sized so that about 10% stays free, then
// replaces a random live extent (free + allocate) N times. Prints the best of R reps in ns/op.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/contiguous/extent_allocator.h"

namespace {

/// First fit on a std::map offset -> length of holes, coalescing on free.
class MapAllocator {
 public:
  explicit MapAllocator(std::int64_t capacity) { holes_[0] = capacity; }
  std::optional<std::int64_t> allocate(std::int64_t length) {
    for (auto it = holes_.begin(); it != holes_.end(); ++it) {
      if (it->second < length) continue;
      const std::int64_t off = it->first, rest = it->second - length;
      holes_.erase(it);
      if (rest > 0) holes_.emplace(off + length, rest);
      return off;
    }
    return std::nullopt;
  }
  void free(std::int64_t offset, std::int64_t length) {
    auto next = holes_.lower_bound(offset);
    if (next != holes_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        offset = prev->first;
        length += prev->second;
        holes_.erase(prev);
      }
    }
    if (next != holes_.end() && offset + length == next->first) {
      length += next->second;
      holes_.erase(next);
    }
    holes_.emplace(offset, length);
  }

 private:
  std::map<std::int64_t, std::int64_t> holes_;
};

struct Live {
  std::int64_t offset, length;
};

template <class Alloc>
double run(std::int64_t live_target, std::int64_t ops, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::int64_t mean_len = 500;
  const std::int64_t capacity = live_target * mean_len * 10 / 9;
  Alloc a(capacity);
  std::vector<Live> live;
  live.reserve(static_cast<std::size_t>(live_target) * 2);
  const auto draw = [&] { return 1 + static_cast<std::int64_t>(rng() % (2 * mean_len)); };
  while (static_cast<std::int64_t>(live.size()) < live_target) {
    const std::int64_t len = draw();
    if (auto off = a.allocate(len))
      live.push_back({*off, len});
    else
      break;
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < ops; ++i) {
    if (!live.empty()) {
      const std::size_t k = rng() % live.size();
      a.free(live[k].offset, live[k].length);
      live[k] = live.back();
      live.pop_back();
    }
    // Refill up to the target: a failed allocation is an op too (a refused admission).
    for (int tries = 0; tries < 2 && static_cast<std::int64_t>(live.size()) < live_target;
         ++tries) {
      const std::int64_t len = draw();
      if (auto off = a.allocate(len)) live.push_back({*off, len});
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(ops);
}

struct VectorAllocator : kvsim::ExtentAllocator {
  explicit VectorAllocator(std::int64_t capacity)
      : kvsim::ExtentAllocator(capacity, kvsim::FitPolicy::kFirstFit, 1024) {}
};

}  // namespace

int main(int argc, char** argv) {
  std::int64_t ops = 1'000'000;
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--ops") && i + 1 < argc) {
      ops = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bench_extent_allocator [--ops N] [--reps R]\n");
      return 2;
    }
  }
  if (ops < 1 || reps < 1) {
    std::fprintf(stderr, "bench_extent_allocator: --ops and --reps must be >= 1\n");
    return 2;
  }
  std::printf("%8s  %22s  %22s\n", "live", "sorted vector (ns/op)", "std::map (ns/op)");
  for (const std::int64_t live : {16, 64, 256, 1024, 4096}) {
    double best_vec = 1e300, best_map = 1e300;
    for (int r = 0; r < reps; ++r) {
      best_vec = std::min(best_vec, run<VectorAllocator>(live, ops, 1 + r));
      best_map = std::min(best_map, run<MapAllocator>(live, ops, 1 + r));
    }
    std::printf("%8lld  %22.1f  %22.1f\n", static_cast<long long>(live), best_vec, best_map);
  }
  return 0;
}
