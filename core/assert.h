#pragma once
// KVSIM_ASSERT: programmer-error checks that stay on in RelWithDebInfo and Release builds.

#include <cstdio>
#include <cstdlib>

namespace kvsim::detail {
[[noreturn]] inline void assert_fail(const char* cond, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "%s:%d: KVSIM_ASSERT(%s) failed%s%s\n", file, line, cond, msg[0] ? ": " : "",
               msg);
  std::abort();
}
}  // namespace kvsim::detail

/// Aborts with file:line and `msg` when `cond` is false. For broken invariants, never for user input.
#define KVSIM_ASSERT(cond, ...)                                                          \
  do {                                                                                   \
    if (!(cond)) [[unlikely]]                                                            \
      ::kvsim::detail::assert_fail(#cond, __FILE__, __LINE__, "" __VA_ARGS__);           \
  } while (0)
