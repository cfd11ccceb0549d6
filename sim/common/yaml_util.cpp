#include "sim/common/yaml_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "sim/common/csv_util.h"
#include "sim/common/text_file.h"

namespace kvsim {

namespace {

std::string join(std::span<const std::string_view> items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += items[i];
  }
  return out;
}

// map[key], or an undefined node when `map` is absent or null. A scalar or a sequence where a
// mapping belongs is an error, so `cache: 16` never silently reads as "all defaults".
YAML::Node child_of(const YAML::Node& map, std::string_view key, const YamlContext& ctx) {
  require_map(map, ctx);
  if (!map.IsDefined() || map.IsNull()) return YAML::Node(YAML::NodeType::Undefined);
  return map[std::string(key)];
}

bool present(const YAML::Node& n) { return n.IsDefined() && !n.IsNull(); }

ConfigError missing_key(const YAML::Node& map, std::string_view key, const YamlContext& ctx) {
  return yaml_error(map, ctx, fmt::format("missing required key '{}' in {}", key, ctx.where()));
}

}  // namespace

ConfigError config_error(const SourceLoc& at, const std::string& message) {
  if (at.file.empty()) return ConfigError(message);
  if (at.line < 1) return ConfigError(at.file + ": " + message);
  return ConfigError(at.file, at.line, std::max<std::int64_t>(at.col, 1), message);
}

void ArgumentOrigins::add(std::string path, std::string argument) {
  records_.emplace_back(std::move(path), std::move(argument));
}

const std::string* ArgumentOrigins::find(std::string_view path) const {
  for (auto it = records_.rbegin(); it != records_.rend(); ++it) {
    const std::string& p = it->first;
    if (!path.starts_with(p)) continue;
    if (path.size() == p.size() || p.empty() || path[p.size()] == '.' || path[p.size()] == '[')
      return &it->second;
  }
  return nullptr;
}

YamlContext YamlContext::child(std::string_view key) const {
  return YamlContext{file, path.empty() ? std::string(key) : path + "." + std::string(key),
                     origins};
}

YamlContext YamlContext::element(std::size_t index) const {
  return YamlContext{file, path + "[" + std::to_string(index) + "]", origins};
}

std::string YamlContext::where() const { return path.empty() ? "top level" : path; }

namespace {
SourceLoc mark_loc(const YAML::Mark& mark, const YamlContext& ctx) {
  if (ctx.origins)
    if (const std::string* arg = ctx.origins->find(ctx.path)) return SourceLoc{*arg, 0, 0};
  if (mark.is_null() || mark.line < 0) return SourceLoc{ctx.file, 0, 0};
  return SourceLoc{ctx.file, mark.line + 1, mark.column + 1};
}
}  // namespace

SourceLoc source_loc(const YAML::Node& node, const YamlContext& ctx) {
  return mark_loc(node.IsDefined() ? node.Mark() : YAML::Mark::null_mark(), ctx);
}

ConfigError yaml_error(const YAML::Mark& mark, const YamlContext& ctx, const std::string& message) {
  return config_error(mark_loc(mark, ctx), message);
}

ConfigError yaml_error(const YAML::Node& node, const YamlContext& ctx, const std::string& message) {
  return config_error(source_loc(node, ctx), message);
}

YAML::Node load_yaml_string(const std::string& text, const std::string& file) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw yaml_error(e.mark, YamlContext{file, ""}, "YAML syntax error: " + e.msg);
  }
}

YAML::Node load_yaml_file(const std::string& path) {
  return load_yaml_string(read_text_file(path), path);
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment: Levenshtein plus adjacent transpositions. O(|a|*|b|).
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::size_t> prev2(m + 1), prev(m + 1), cur(m + 1);
  for (std::size_t j = 0; j <= m; ++j) prev[j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        cur[j] = std::min(cur[j], prev2[j - 2] + 1);
    }
    prev2.swap(prev);
    prev.swap(cur);
  }
  return prev[m];
}

std::optional<std::string> did_you_mean(std::string_view word,
                                        std::span<const std::string_view> candidates) {
  const std::size_t limit = word.size() <= 3 ? 1 : word.size() <= 6 ? 2 : 3;
  std::optional<std::string> best;
  std::size_t best_distance = limit + 1;
  for (std::string_view c : candidates) {
    std::size_t d = edit_distance(word, c);
    // A prefix of at least 3 characters ("rate" for "rate_per_s") is a plausible abbreviation.
    const std::size_t shorter = std::min(word.size(), c.size());
    if (d > limit && shorter >= 3 && (c.starts_with(word) || word.starts_with(c))) d = limit;
    if (d < best_distance) {
      best_distance = d;
      best = std::string(c);
    }
  }
  return best;
}

std::string suggestion_suffix(std::string_view word, std::span<const std::string_view> candidates) {
  if (auto s = did_you_mean(word, candidates)) return fmt::format(" (did you mean '{}'?)", *s);
  return fmt::format(" (allowed: {})", join(candidates));
}

std::string describe_node(const YAML::Node& node) {
  if (!node.IsDefined()) return "nothing";
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Scalar:
      return "'" + node.Scalar() + "'";
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Map:
      return "a mapping";
    default:
      return "nothing";
  }
}

void require_map(const YAML::Node& node, const YamlContext& ctx) {
  if (!node.IsDefined() || node.IsNull() || node.IsMap()) return;
  throw yaml_error(
      node, ctx,
      fmt::format("{} must be a mapping of keys, got {}", ctx.where(), describe_node(node)));
}

void check_keys(const YAML::Node& node, std::span<const std::string_view> allowed,
                const YamlContext& ctx) {
  require_map(node, ctx);
  if (!node.IsDefined() || !node.IsMap()) return;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const YAML::Node key = it->first;
    if (!key.IsScalar())
      throw yaml_error(
          key, ctx,
          fmt::format("a key in {} must be a plain name, got {}", ctx.where(), describe_node(key)));
    const std::string& name = key.Scalar();
    if (std::find(allowed.begin(), allowed.end(), std::string_view(name)) != allowed.end())
      continue;
    throw yaml_error(key, ctx.child(name),
                     fmt::format("unknown key '{}' in {}{}", name, ctx.where(),
                                 suggestion_suffix(name, allowed)));
  }
}

void check_keys(const YAML::Node& node, std::initializer_list<std::string_view> allowed,
                const YamlContext& ctx) {
  check_keys(node, std::span<const std::string_view>(allowed.begin(), allowed.size()), ctx);
}

bool has_key(const YAML::Node& map, std::string_view key) {
  return map.IsDefined() && map.IsMap() && present(map[std::string(key)]);
}

YAML::Node key_node(const YAML::Node& map, std::string_view key) {
  if (!map.IsDefined() || !map.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  for (auto it = map.begin(); it != map.end(); ++it)
    if (it->first.IsScalar() && it->first.Scalar() == key) return it->first;
  return YAML::Node(YAML::NodeType::Undefined);
}

std::int64_t as_int(const YAML::Node& value, const YamlContext& ctx, std::int64_t min,
                    std::int64_t max) {
  std::optional<std::int64_t> v;
  if (value.IsDefined() && value.IsScalar()) v = parse_int_text(value.Scalar());
  if (!v)
    throw yaml_error(
        value, ctx, fmt::format("{}: expected an integer, got {}", ctx.path, describe_node(value)));
  if (*v < min || *v > max) {
    std::string allowed = max == kIntMax   ? fmt::format("must be >= {}", min)
                          : min == kIntMin ? fmt::format("must be <= {}", max)
                                           : fmt::format("must be in [{}, {}]", min, max);
    throw yaml_error(value, ctx, fmt::format("{}: {} is out of range ({})", ctx.path, *v, allowed));
  }
  return *v;
}

double as_double(const YAML::Node& value, const YamlContext& ctx, double min, double max) {
  std::optional<double> v;
  if (value.IsDefined() && value.IsScalar()) v = parse_double_text(value.Scalar());
  if (!v)
    throw yaml_error(value, ctx,
                     fmt::format("{}: expected a number, got {}", ctx.path, describe_node(value)));
  if (*v < min || *v > max) {
    std::string allowed = max == kDoubleMax    ? fmt::format("must be >= {}", min)
                          : min == -kDoubleMax ? fmt::format("must be <= {}", max)
                                               : fmt::format("must be in [{}, {}]", min, max);
    throw yaml_error(value, ctx,
                     fmt::format("{}: {} is out of range ({})", ctx.path, value.Scalar(), allowed));
  }
  return *v;
}

bool as_bool(const YAML::Node& value, const YamlContext& ctx) {
  if (value.IsDefined() && value.IsScalar()) {
    const std::string& s = value.Scalar();
    static constexpr std::string_view kTrue[] = {"true", "True", "TRUE", "yes", "Yes",
                                                 "YES",  "on",   "On",   "ON"};
    static constexpr std::string_view kFalse[] = {"false", "False", "FALSE", "no", "No",
                                                  "NO",    "off",   "Off",   "OFF"};
    if (std::find(std::begin(kTrue), std::end(kTrue), s) != std::end(kTrue)) return true;
    if (std::find(std::begin(kFalse), std::end(kFalse), s) != std::end(kFalse)) return false;
  }
  throw yaml_error(
      value, ctx,
      fmt::format("{}: expected true or false, got {}", ctx.path, describe_node(value)));
}

std::string as_string(const YAML::Node& value, const YamlContext& ctx) {
  if (value.IsDefined() && value.IsScalar()) return value.Scalar();
  throw yaml_error(value, ctx,
                   fmt::format("{}: expected a string, got {}", ctx.path, describe_node(value)));
}

std::int64_t get_int(const YAML::Node& map, std::string_view key, const YamlContext& ctx,
                     std::optional<std::int64_t> default_value, std::int64_t min,
                     std::int64_t max) {
  YAML::Node v = child_of(map, key, ctx);
  if (!present(v)) {
    if (!default_value) throw missing_key(map, key, ctx);
    return *default_value;
  }
  return as_int(v, ctx.child(key), min, max);
}

double get_double(const YAML::Node& map, std::string_view key, const YamlContext& ctx,
                  std::optional<double> default_value, double min, double max) {
  YAML::Node v = child_of(map, key, ctx);
  if (!present(v)) {
    if (!default_value) throw missing_key(map, key, ctx);
    return *default_value;
  }
  return as_double(v, ctx.child(key), min, max);
}

bool get_bool(const YAML::Node& map, std::string_view key, const YamlContext& ctx,
              std::optional<bool> default_value) {
  YAML::Node v = child_of(map, key, ctx);
  if (!present(v)) {
    if (!default_value) throw missing_key(map, key, ctx);
    return *default_value;
  }
  return as_bool(v, ctx.child(key));
}

std::string get_string(const YAML::Node& map, std::string_view key, const YamlContext& ctx,
                       std::optional<std::string> default_value) {
  YAML::Node v = child_of(map, key, ctx);
  if (!present(v)) {
    if (!default_value) throw missing_key(map, key, ctx);
    return *default_value;
  }
  return as_string(v, ctx.child(key));
}

std::size_t get_choice_index(const YAML::Node& map, std::string_view key, const YamlContext& ctx,
                             std::optional<std::string> default_value,
                             std::span<const std::string_view> names) {
  const std::string s = get_string(map, key, ctx, std::move(default_value));
  const auto it = std::find(names.begin(), names.end(), std::string_view(s));
  if (it != names.end()) return static_cast<std::size_t>(it - names.begin());
  std::string msg = fmt::format("{}: unknown value '{}'", ctx.child(key).path, s);
  if (auto near = did_you_mean(s, names)) msg += fmt::format(" (did you mean '{}'?)", *near);
  msg += fmt::format(" (allowed: {})", join(names));
  throw yaml_error(child_of(map, key, ctx), ctx.child(key), msg);
}

std::string get_choice(const YAML::Node& map, std::string_view key, const YamlContext& ctx,
                       std::optional<std::string> default_value,
                       std::initializer_list<std::string_view> choices) {
  const std::span<const std::string_view> c(choices.begin(), choices.size());
  return std::string(c[get_choice_index(map, key, ctx, std::move(default_value), c)]);
}

std::optional<std::int64_t> get_optional_int(const YAML::Node& map, std::string_view key,
                                             const YamlContext& ctx, std::int64_t min,
                                             std::int64_t max) {
  YAML::Node v = child_of(map, key, ctx);
  if (!present(v)) return std::nullopt;
  return as_int(v, ctx.child(key), min, max);
}

std::optional<double> get_optional_double(const YAML::Node& map, std::string_view key,
                                          const YamlContext& ctx, double min, double max) {
  YAML::Node v = child_of(map, key, ctx);
  if (!present(v)) return std::nullopt;
  return as_double(v, ctx.child(key), min, max);
}

std::vector<double> get_double_list(const YAML::Node& map, std::string_view key,
                                    const YamlContext& ctx, double min, double max) {
  YAML::Node v = child_of(map, key, ctx);
  const YamlContext c = ctx.child(key);
  if (!present(v)) throw missing_key(map, key, ctx);
  if (!v.IsSequence() || v.size() == 0)
    throw yaml_error(v, c,
                     fmt::format("{}: expected a non-empty sequence of numbers, got {}", c.path,
                                 describe_node(v)));
  std::vector<double> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out.push_back(as_double(v[i], c.element(i), min, max));
  return out;
}

std::string resolve_input_path(const YamlContext& ctx, const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  if (p.is_absolute() || ctx.file.empty()) return path;
  const fs::path beside = fs::path(ctx.file).parent_path() / p;
  std::error_code ec;
  if (fs::exists(beside, ec)) return beside.lexically_normal().string();
  return path;
}

std::string number_text(double v) { return fmt::format("{}", v); }

YAML::Node number_node(double v) { return YAML::Node(number_text(v)); }

}  // namespace kvsim
