#pragma once
// Helpers shared by the sim tests.

#include <unistd.h>

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

#include "sim/errors.h"
#include "sim/workload.h"

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

/// The source's next request with its prompt's tokens made (trace readers defer them).
inline std::optional<RequestSpec> next_made(RequestSource& src) {
  std::optional<RequestSpec> r = src.next();
  if (r) {
    const std::int64_t n = r->num_prompt_tokens();
    r->materialize_prompt();
    if (static_cast<std::int64_t>(r->prompt.size()) != n) throw std::logic_error("prompt length");
    if (!r->deferred.empty() || r->deferred_tokens != 0) throw std::logic_error("still deferred");
  }
  return r;
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
