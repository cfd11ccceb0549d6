#pragma once
// Helpers shared by the sim tests.

#include <string>

#include "sim/errors.h"

namespace kvsim::test {

/// The message of the ConfigError `fn` throws, or "" when it throws none.
inline std::string error_of(auto&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace kvsim::test
