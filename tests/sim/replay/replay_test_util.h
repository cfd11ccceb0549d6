#pragma once
// Helpers shared by the replay tests: reading JSON Lines and comparing them with vLLM's expected
// outputs under the structural comparison of the cases' README.

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/common/util.h"

namespace kvsim::test {

/// Structural equality: key order irrelevant, list order significant, integers exact, floats
/// within 1e-9, any {"error": ...} equals any other error object.
inline bool same_json(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.is_object() && b.is_object() && a.contains("error") && b.contains("error")) return true;
  if (a.is_number() && b.is_number()) {
    if (a.is_number_float() || b.is_number_float())
      return std::abs(a.get<double>() - b.get<double>()) <= 1e-9;
    return a.get<std::int64_t>() == b.get<std::int64_t>();
  }
  if (a.type() != b.type()) return false;
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it)
      if (!b.contains(it.key()) || !same_json(it.value(), b.at(it.key()))) return false;
    return true;
  }
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (!same_json(a[i], b[i])) return false;
    return true;
  }
  return a == b;
}

/// "" when `got` equals `want` line for line (same_json), else the first difference.
inline std::string compare_lines(const std::vector<std::string>& got,
                                 const std::vector<std::string>& want) {
  if (got.size() != want.size())
    return "line count " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!same_json(nlohmann::json::parse(got[i]), nlohmann::json::parse(want[i])))
      return "line " + std::to_string(i + 1) + ": got " + got[i] + "\nexpected " + want[i];
  return {};
}

}  // namespace kvsim::test
