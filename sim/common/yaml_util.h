#pragma once
// Typed, validating access to scenario YAML. Every getter reports a bad value as a ConfigError
// "file:line:col: <key path>: <what is wrong>, got '<value>' (<what is allowed>)", with line and
// column 1-based from YAML::Mark. A key that is absent (or null, `key: ~`) takes the default; with
// no default (std::nullopt) it is an error naming the key. A value written by a command-line
// argument (`--set a.b=v`, see ArgumentOrigins) is reported as "--set a.b=v: <key path>: ..."
// instead.

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "sim/common/errors.h"

namespace kvsim {

/// Where a value came from, kept past parsing for errors raised later (a trace file that cannot
/// be opened when the run starts): a position in a file, or a command-line argument.
struct SourceLoc {
  std::string file;       // the file, or the argument ("--set workload.trace.path=t.csv")
  std::int64_t line = 0;  // 1-based; 0 when unknown (an argument, a node made by a --set)
  std::int64_t col = 0;   // 1-based; 0 when unknown
};
/// A ConfigError "file:line:col: message" ("file: message" without a line; the bare message
/// without a file).
[[nodiscard]] ConfigError config_error(const SourceLoc& at, const std::string& message);

/// The command-line arguments that wrote parts of a scenario tree (`--set a.b=v`, `--seed N`), by
/// dotted key path. A value at or below a path one of them wrote is reported at the argument, not
/// at a position in the file (the tree has none for it).
class ArgumentOrigins {
 public:
  /// Records that `argument` wrote the value at `path` ("cache.block_size"); later records win.
  void add(std::string path, std::string argument);
  /// The argument that last wrote `path` or a key above it ("cache" covers "cache.block_size" and
  /// "workload.arrival" covers "workload.arrival.times_s[2]"), or nullptr. O(records).
  [[nodiscard]] const std::string* find(std::string_view path) const;

 private:
  std::vector<std::pair<std::string, std::string>> records_;  // (path, argument), oldest first
};

/// Where a node comes from: the file (for messages), the dotted key path of the node ("cache",
/// "workload.arrival"; empty at the top level) and which parts command-line arguments wrote.
struct YamlContext {
  std::string file;
  std::string path;
  std::shared_ptr<const ArgumentOrigins> origins;  // null: everything came from `file`

  YamlContext() = default;
  YamlContext(std::string file_in, std::string path_in,
              std::shared_ptr<const ArgumentOrigins> origins_in = nullptr)
      : file(std::move(file_in)), path(std::move(path_in)), origins(std::move(origins_in)) {}

  /// The context of `key` below this node: path "cache" + "block_size" -> "cache.block_size".
  [[nodiscard]] YamlContext child(std::string_view key) const;
  /// The context of element `index` of a sequence: "workload.timestamps[3]".
  [[nodiscard]] YamlContext element(std::size_t index) const;
  /// The path for messages: the dotted path, or "top level" when empty.
  [[nodiscard]] std::string where() const;
};

/// Where the value at `node` (whose key path is ctx.path) came from: the argument that wrote it,
/// else file:line:col of the node's mark (1-based), else the file alone.
[[nodiscard]] SourceLoc source_loc(const YAML::Node& node, const YamlContext& ctx);
/// A ConfigError positioned at `node`: config_error(source_loc(node, ctx), message).
[[nodiscard]] ConfigError yaml_error(const YAML::Node& node, const YamlContext& ctx,
                                     const std::string& message);
/// A ConfigError positioned at `mark` (1-based line:col derived from the 0-based mark), or at the
/// argument that wrote ctx.path.
[[nodiscard]] ConfigError yaml_error(const YAML::Mark& mark, const YamlContext& ctx,
                                     const std::string& message);

/// Parses a YAML file; a syntax error or an unreadable file becomes a ConfigError with position.
[[nodiscard]] YAML::Node load_yaml_file(const std::string& path);
/// Parses YAML text; `file` names it in messages.
[[nodiscard]] YAML::Node load_yaml_string(const std::string& text, const std::string& file);

/// Optimal-string-alignment edit distance (insertions, deletions, substitutions, transpositions).
[[nodiscard]] std::size_t edit_distance(std::string_view a, std::string_view b);
/// The candidate closest to `word` when it is close enough to be a plausible typo, else nullopt.
/// Ties go to the earliest candidate, so the answer is deterministic.
[[nodiscard]] std::optional<std::string> did_you_mean(std::string_view word,
                                                      std::span<const std::string_view> candidates);
/// " (did you mean 'x'?)" or " (allowed: a, b, c)" for messages.
[[nodiscard]] std::string suggestion_suffix(std::string_view word,
                                            std::span<const std::string_view> candidates);

/// Requires `node` to be a mapping (an absent node passes: it reads as an empty mapping).
void require_map(const YAML::Node& node, const YamlContext& ctx);
/// Requires `node` to be a mapping whose keys are all in `allowed`; an unknown key throws
/// "unknown key 'blok_size' in cache (did you mean 'block_size'?)" at the key's position.
void check_keys(const YAML::Node& node, std::initializer_list<std::string_view> allowed,
                const YamlContext& ctx);
/// Same, with the allowed keys as a span.
void check_keys(const YAML::Node& node, std::span<const std::string_view> allowed,
                const YamlContext& ctx);

/// True when `map` has `key` with a non-null value.
[[nodiscard]] bool has_key(const YAML::Node& map, std::string_view key);
/// The key node of `key` in `map` (whose mark is the key's position; map[key] gives the value's),
/// or an undefined node when `map` is not a mapping or lacks the key. O(keys).
[[nodiscard]] YAML::Node key_node(const YAML::Node& map, std::string_view key);

inline constexpr std::int64_t kIntMin = std::numeric_limits<std::int64_t>::min();
inline constexpr std::int64_t kIntMax = std::numeric_limits<std::int64_t>::max();
inline constexpr double kDoubleMax = std::numeric_limits<double>::max();

/// The scalar `value` as an integer in [min, max]. Accepts 1000, -3 and integral floats (4e9).
[[nodiscard]] std::int64_t as_int(const YAML::Node& value, const YamlContext& ctx,
                                  std::int64_t min = kIntMin, std::int64_t max = kIntMax);
/// The scalar `value` as a finite double in [min, max].
[[nodiscard]] double as_double(const YAML::Node& value, const YamlContext& ctx,
                               double min = -kDoubleMax, double max = kDoubleMax);
/// The scalar `value` as a bool (true/false, yes/no, on/off in yaml-cpp's spellings).
[[nodiscard]] bool as_bool(const YAML::Node& value, const YamlContext& ctx);
/// The scalar `value` as a string.
[[nodiscard]] std::string as_string(const YAML::Node& value, const YamlContext& ctx);

/// `map[key]` as an integer in [min, max]; `default_value` when absent (nullopt: required).
[[nodiscard]] std::int64_t get_int(const YAML::Node& map, std::string_view key,
                                   const YamlContext& ctx,
                                   std::optional<std::int64_t> default_value,
                                   std::int64_t min = kIntMin, std::int64_t max = kIntMax);
/// `map[key]` as a finite double in [min, max]; `default_value` when absent (nullopt: required).
[[nodiscard]] double get_double(const YAML::Node& map, std::string_view key, const YamlContext& ctx,
                                std::optional<double> default_value, double min = -kDoubleMax,
                                double max = kDoubleMax);
/// `map[key]` as a bool; `default_value` when absent (nullopt: required).
[[nodiscard]] bool get_bool(const YAML::Node& map, std::string_view key, const YamlContext& ctx,
                            std::optional<bool> default_value);
/// `map[key]` as a string; `default_value` when absent (nullopt: required).
[[nodiscard]] std::string get_string(const YAML::Node& map, std::string_view key,
                                     const YamlContext& ctx,
                                     std::optional<std::string> default_value);
/// `map[key]` as one of `choices` (with a did-you-mean on a typo); `default_value` when absent.
[[nodiscard]] std::string get_choice(const YAML::Node& map, std::string_view key,
                                     const YamlContext& ctx,
                                     std::optional<std::string> default_value,
                                     std::initializer_list<std::string_view> choices);
/// get_choice for an enum whose enumerators are named by `names`, in order: the index of the
/// value's name.
[[nodiscard]] std::size_t get_choice_index(const YAML::Node& map, std::string_view key,
                                           const YamlContext& ctx,
                                           std::optional<std::string> default_value,
                                           std::span<const std::string_view> names);
/// `map[key]` as an integer when present, nullopt when absent.
[[nodiscard]] std::optional<std::int64_t> get_optional_int(const YAML::Node& map,
                                                           std::string_view key,
                                                           const YamlContext& ctx,
                                                           std::int64_t min = kIntMin,
                                                           std::int64_t max = kIntMax);
/// `map[key]` as a double when present, nullopt when absent.
[[nodiscard]] std::optional<double> get_optional_double(const YAML::Node& map, std::string_view key,
                                                        const YamlContext& ctx,
                                                        double min = -kDoubleMax,
                                                        double max = kDoubleMax);
/// `map[key]` as a sequence of doubles in [min, max] (required: a non-empty sequence).
[[nodiscard]] std::vector<double> get_double_list(const YAML::Node& map, std::string_view key,
                                                  const YamlContext& ctx, double min = -kDoubleMax,
                                                  double max = kDoubleMax);

/// Resolves a file named in a scenario: an absolute path as is; a relative path against the
/// scenario file's folder when the file exists there, else against the working directory.
[[nodiscard]] std::string resolve_input_path(const YamlContext& ctx, const std::string& path);

/// A short human description of a node's value for messages: the scalar text, "a mapping", ...
[[nodiscard]] std::string describe_node(const YAML::Node& node);

/// The shortest text that as_double() reads back as exactly `v` ("0.9", "1e-06", "450000000000"),
/// for YAML that must reproduce the value bit for bit.
[[nodiscard]] std::string number_text(double v);
/// A scalar node holding number_text(v).
[[nodiscard]] YAML::Node number_node(double v);
/// A new null node (`~`: an absent optional in a resolved file). Each call gives a distinct node:
/// one node written twice would be emitted as an anchor and an alias.
[[nodiscard]] inline YAML::Node null_node() { return YAML::Node(YAML::NodeType::Null); }
/// The value (a double as number_node) or, when absent, null_node().
template <typename T>
[[nodiscard]] YAML::Node optional_node(const std::optional<T>& v) {
  if (!v) return null_node();
  if constexpr (std::is_floating_point_v<T>)
    return number_node(*v);
  else
    return YAML::Node(*v);
}

}  // namespace kvsim
