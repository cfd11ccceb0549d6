#pragma once
// The dense references of a checked step, one request per task, on worker threads: the
// reference (K/V regenerated from the request's keys, attention in double) costs
// O(context x heads x head size) per request and dominates a check of a large batch, while the
// kernel call takes microseconds on a GPU.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvsim::validate::detail {

/// One worker's reusable buffers.
struct ReferenceScratch {
  std::vector<float> k, v;
};

class ReferenceWorkers {
 public:
  /// Below this many regenerated K/V elements a step's tasks run on the calling thread: starting
  /// threads would cost more than they save.
  static constexpr std::int64_t kMinParallelElements = std::int64_t{1} << 20;

  /// `threads` workers at most; 0: one per hardware thread.
  explicit ReferenceWorkers(std::int32_t threads = 0) { set_threads(threads); }

  void set_threads(std::int32_t threads) {
    const auto hw = static_cast<std::int32_t>(std::thread::hardware_concurrency());
    threads_ = threads > 0 ? threads : std::max(hw, 1);
    scratch_.resize(static_cast<std::size_t>(threads_));
  }
  std::int32_t threads() const { return threads_; }

  /// Calls task(i, scratch) once for every i in [0, n), with `elements` the step's regenerated
  /// K/V elements in all. Tasks must write disjoint outputs: which worker runs a task, and in
  /// which order, is not fixed. The first exception a task throws is rethrown here, after every
  /// worker stopped.
  template <typename Task>
  void run(std::size_t n, std::int64_t elements, Task&& task) {
    const std::size_t workers = std::min(
        n, elements < kMinParallelElements ? std::size_t{1} : static_cast<std::size_t>(threads_));
    if (workers <= 1) {
      for (std::size_t i = 0; i < n; ++i) task(i, scratch_[0]);
      return;
    }
    std::atomic<std::size_t> next{0};
    std::exception_ptr error;
    std::mutex error_mutex;
    auto work = [&](ReferenceScratch& scratch) {
      for (std::size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
        try {
          task(i, scratch);
        } catch (...) {
          const std::lock_guard<std::mutex> lock(error_mutex);
          if (!error) error = std::current_exception();
          next.store(n);  // the other workers stop at their next task
        }
      }
    };
    {
      std::vector<std::jthread> pool;
      pool.reserve(workers - 1);
      for (std::size_t w = 1; w < workers; ++w) pool.emplace_back(work, std::ref(scratch_[w]));
      work(scratch_[0]);
    }  // joined
    if (error) std::rethrow_exception(error);
  }

 private:
  std::int32_t threads_ = 1;
  std::vector<ReferenceScratch> scratch_;
};

}  // namespace kvsim::validate::detail
