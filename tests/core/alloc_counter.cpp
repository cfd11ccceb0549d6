// Global operator new replaced for the whole core test executable: it counts allocations while
// kvsim::test::g_counting is set (alloc_counter.h).

#include "alloc_counter.h"

#include <cstdlib>
#include <new>

namespace kvsim::test {
std::atomic<bool> g_counting{false};
std::atomic<std::int64_t> g_allocations{0};
}  // namespace kvsim::test

// The replacement pairs malloc with free on purpose; GCC cannot see that both sides are ours.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {
void* counted_alloc(std::size_t n) {
  if (kvsim::test::g_counting.load(std::memory_order_relaxed))
    kvsim::test::g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
}  // namespace

// The whole non-aligned family is replaced, so every pointer is freed by the allocator that made it
// (the aligned overloads stay the library's, paired among themselves).
void* operator new(std::size_t n) {
  if (void* p = counted_alloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  if (void* p = counted_alloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
