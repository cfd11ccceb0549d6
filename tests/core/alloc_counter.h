#pragma once
// Heap allocations counted inside a window: this test executable replaces global operator new
// (alloc_counter.cpp) with one that counts while g_counting is set. Used by the no-allocation
// tests of the engine families' step loops.

#include <atomic>
#include <cstdint>

namespace kvsim::test {

extern std::atomic<bool> g_counting;
extern std::atomic<std::int64_t> g_allocations;

/// Counts the allocations made while it lives.
class AllocationWindow {
 public:
  AllocationWindow() {
    g_allocations = 0;
    g_counting = true;
  }
  ~AllocationWindow() { g_counting = false; }
  AllocationWindow(const AllocationWindow&) = delete;
  AllocationWindow& operator=(const AllocationWindow&) = delete;
  std::int64_t count() const { return g_allocations.load(); }
};

}  // namespace kvsim::test
