#pragma once
// Helpers shared by the sim tests.

#include <unistd.h>

#include <filesystem>
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

/// A fresh empty folder under the system temp dir (named by `tag` and the pid), removed at scope
/// exit.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag)
      : path(std::filesystem::temp_directory_path() /
             ("kvsim-test-" + tag + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;  // a destructor must not throw; a leftover temp folder is harmless
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace kvsim::test
