#pragma once
// Helpers shared by the CPU and GPU validation tests.

#include <unistd.h>

#include <filesystem>
#include <string>

namespace kvsim::validate::test {

/// The small CI scenario.
inline const std::string kSmall = std::string(KVSIM_SOURCE_DIR) + "/scenarios/validate-small.yaml";

/// A fresh, empty output folder for one test (per process, so parallel ctest runs do not clash).
inline std::filesystem::path out_dir(const std::string& name) {
  const std::filesystem::path p = std::filesystem::path(KVSIM_BINARY_DIR) / "validate-test-out" /
                                  (name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p;
}

}  // namespace kvsim::validate::test
