#pragma once
// User-facing errors: bad YAML, bad traces, bad flags, bad model configs. main() prints what() as one
// line and exits with status 2.

#include <cstdint>
#include <stdexcept>
#include <string>

namespace kvsim {

/// A user or configuration error. what() is a complete one-line message, starting with
/// "file:line:col: " when a position is known (line and column are 1-based).
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(const std::string& message) : std::runtime_error(message) {}
  ConfigError(const std::string& file, std::int64_t line, std::int64_t col, const std::string& message)
      : std::runtime_error(file + ":" + std::to_string(line) + ":" + std::to_string(col) + ": " +
                           message) {}
};

/// Exit status for user/config errors.
inline constexpr int kExitUsage = 2;

}  // namespace kvsim
