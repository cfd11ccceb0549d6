#pragma once
// Argument checks at the kernels API boundary. kvsim_kernels does not depend on core/, so it
// carries its own: a failed check throws std::invalid_argument naming the condition.

#include <stdexcept>
#include <string>

/// Throws std::invalid_argument("<func>: <cond> (<msg>)") when `cond` is false.
#define KVSIM_KERNELS_CHECK(cond, msg)                                                     \
  do {                                                                                     \
    if (!(cond)) [[unlikely]]                                                              \
      throw std::invalid_argument(std::string(__func__) + ": " #cond " (" + (msg) + ")"); \
  } while (0)
