#pragma once
// Helpers shared by the sim tests.


#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/common/errors.h"
#include "sim/common/yaml_util.h"
#include "sim/config/scenario.h"
#include "sim/engine/simulator.h"
#include "sim/workload/workload.h"
#include "tests/common/util.h"

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

/// The scenario in `text` (as the file "s.yaml"), with `sets` applied as --set applies them.
/// Bad input throws ConfigError.
inline Scenario parse_text(const std::string& text, const std::vector<std::string>& sets = {}) {
  YAML::Node root = load_yaml_string(text, "s.yaml");
  for (const auto& a : sets) apply_set(root, a);
  return parse_scenario(root, "s.yaml");
}

/// The ConfigError message of parse_text(text, sets), or "" when the scenario parses.
inline std::string scenario_error(const std::string& text,
                                  const std::vector<std::string>& sets = {}) {
  return error_of([&] { (void)parse_text(text, sets); });
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

/// A vendored public trace of scenarios/traces; a missing one fails the test.
inline std::string vendored_trace(const std::string& name) {
  const std::filesystem::path p = std::filesystem::path(KVSIM_TRACES_DIR) / name;
  if (!std::filesystem::exists(p)) throw std::runtime_error("trace not found: " + p.string());
  return p.string();
}

/// A step-time function that makes every step last `ms` milliseconds.
inline StepTimeFn constant_ms(double ms) {
  return [ms](const StepView&) { return static_cast<SimTimeNs>(ms * 1e6); };
}

/// The parsed JSON file (a parse error fails the test).
inline nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

/// A CSV file's rows of cells (no quoting: kvsim's outputs have none); a trailing comma gives a
/// trailing empty cell.
inline std::vector<std::vector<std::string>> read_csv(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(f, line);) {
    std::vector<std::string> row;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) row.push_back(cell);
    if (!line.empty() && line.back() == ',') row.push_back("");
    rows.push_back(row);
  }
  return rows;
}

/// Writes `text` to `p`, creating its folder.
inline void write_file(const std::filesystem::path& p, const std::string& text) {
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

}  // namespace kvsim::test
