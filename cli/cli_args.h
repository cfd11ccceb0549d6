#pragma once
// Argument parsing shared by the kvsim subcommands: flags with values (`--flag V` or `--flag=V`),
// switches and positionals, with one-line ConfigErrors (exit 2) for a missing value, an unknown
// option (with a did-you-mean suggestion) or a stray argument; and the flags every
// scenario-running command (run, sweep, validate) takes.

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"

namespace kvsim::cli {

class ArgParser {
 public:
  /// `known_flags` (long forms) feed the did-you-mean suggestion of unknown().
  ArgParser(const Args& args, std::string command, std::span<const std::string_view> known_flags);

  /// Moves to the next argument; false at the end.
  bool next();
  /// The current argument, without an inline "=value".
  const std::string& arg() const { return arg_; }
  bool is(std::string_view a, std::string_view b = {}) const {
    return arg_ == a || (!b.empty() && arg_ == b);
  }
  bool is_flag() const { return arg_.size() > 1 && arg_[0] == '-'; }
  /// The current flag's value: the inline "=value", else the next argument.
  std::string value();
  /// The inline "=value" of the current argument, if any (for switches such as --flag=false).
  const std::optional<std::string>& inline_value() const { return inline_value_; }
  /// Throws "unknown option '<arg>' (did you mean ...?) (kvsim <command> --help)".
  [[noreturn]] void unknown() const;

 private:
  const Args& args_;
  std::string command_;
  std::span<const std::string_view> known_;
  std::size_t k_ = 0;
  bool started_ = false;
  std::string arg_;
  std::optional<std::string> inline_value_;
};

/// The flags of a command that runs one scenario.
struct ScenarioArgs {
  std::optional<std::string> path;  // the SCENARIO.yaml positional
  std::string out_dir = "results";  // -o / --output
  std::vector<std::string> sets;    // --set key.path=value (repeatable)
  std::optional<std::string> seed;  // --seed N, validated by the command
  bool quiet = false;               // --quiet / -q
};

/// Consumes the parser's current argument if it is one of ScenarioArgs' flags or the scenario
/// path (a second positional is an error); false when it is something else.
bool take_scenario_arg(ArgParser& p, ScenarioArgs& out);

/// A non-negative integer seed, or a ConfigError naming `--seed`.
std::uint64_t parse_seed(const std::string& text);

}  // namespace kvsim::cli
