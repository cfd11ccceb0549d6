#pragma once
// KVSIM_ASSERT: programmer-error checks that stay on in RelWithDebInfo and Release builds.

#include <cstdio>
#include <cstdlib>
#include <string>

namespace kvsim::detail {
[[noreturn]] inline void assert_fail(const char* cond, const char* file, int line,
                                     const char* msg) {
  std::fprintf(stderr, "%s:%d: KVSIM_ASSERT(%s) failed%s%s\n", file, line, cond, msg[0] ? ": " : "",
               msg);
  std::abort();
}
}  // namespace kvsim::detail

/// Aborts with file:line and `msg` when `cond` is false. For broken invariants, never for user
/// input.
#define KVSIM_ASSERT(cond, ...)                                                \
  do {                                                                         \
    if (!(cond)) [[unlikely]]                                                  \
      ::kvsim::detail::assert_fail(#cond, __FILE__, __LINE__, "" __VA_ARGS__); \
  } while (0)

/// Inside a `std::string find_violation() const`-style checker: returns `msg` when `cond` fails.
#define KVSIM_CHECK(cond, msg)            \
  do {                                    \
    if (!(cond)) return std::string(msg); \
  } while (0)

/// Aborts with the message of a failed invariant walk (`violation` empty means all is well).
#define KVSIM_ASSERT_NO_VIOLATION(violation)                                            \
  do {                                                                                  \
    const std::string kvsim_v_ = (violation);                                           \
    if (!kvsim_v_.empty())                                                              \
      ::kvsim::detail::assert_fail("invariants", __FILE__, __LINE__, kvsim_v_.c_str()); \
  } while (0)
