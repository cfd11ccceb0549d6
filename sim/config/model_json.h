#pragma once
// Field readers for model configs held as JSON (a config.json, or a YAML model section converted
// to JSON), shared by model_config.cpp, layer_specs.cpp and weights.cpp. Every reader throws the
// ConfigError `err(key, message)` builds, which points at the key in the file it came from.

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sim/common/errors.h"

namespace kvsim::detail {

/// Builds the error for a bad field: "file:line:col: message" at the key when it can be found.
using ErrorAt = std::function<ConfigError(std::string_view key, const std::string& message)>;

/// The value of `key`, or nullptr when absent or null.
[[nodiscard]] const nlohmann::json* field(const nlohmann::json& obj, std::string_view key);
/// An integer field (an integral float such as 4096.0 counts).
[[nodiscard]] std::optional<std::int64_t> opt_int(const nlohmann::json& obj, std::string_view key,
                                                  const ErrorAt& err);
/// Upper bound of a size field (keeps every product of sizes inside int64).
[[nodiscard]] std::int64_t limit_of(std::string_view key);
/// A required field in [1, limit_of(key)].
[[nodiscard]] std::int64_t req_positive(const nlohmann::json& obj, std::string_view key,
                                        const ErrorAt& err);
/// An optional field in [0, limit_of(key)], `def` when absent.
[[nodiscard]] std::int64_t opt_nonneg(const nlohmann::json& obj, std::string_view key,
                                      std::int64_t def, const ErrorAt& err);
/// A finite number field.
[[nodiscard]] std::optional<double> opt_number(const nlohmann::json& obj, std::string_view key,
                                               const ErrorAt& err);
[[nodiscard]] std::optional<std::string> opt_string(const nlohmann::json& obj, std::string_view key,
                                                    const ErrorAt& err);
[[nodiscard]] std::optional<bool> opt_bool(const nlohmann::json& obj, std::string_view key,
                                           const ErrorAt& err);
/// A list of integers, each in [min, max].
[[nodiscard]] std::optional<std::vector<std::int64_t>> opt_int_list(const nlohmann::json& obj,
                                                                    std::string_view key,
                                                                    std::int64_t min,
                                                                    std::int64_t max,
                                                                    const ErrorAt& err);
/// A list of strings.
[[nodiscard]] std::optional<std::vector<std::string>> opt_string_list(const nlohmann::json& obj,
                                                                      std::string_view key,
                                                                      const ErrorAt& err);

}  // namespace kvsim::detail
