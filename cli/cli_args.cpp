#include "cli/cli_args.h"

#include <fmt/format.h>

#include <cstdint>
#include <stdexcept>

#include "sim/common/errors.h"
#include "sim/common/yaml_util.h"

namespace kvsim::cli {

ArgParser::ArgParser(const Args& args, std::string command,
                     std::span<const std::string_view> known_flags)
    : args_(args), command_(std::move(command)), known_(known_flags) {}

bool ArgParser::next() {
  if (started_) ++k_;
  started_ = true;
  if (k_ >= args_.size()) return false;
  arg_ = args_[k_];
  inline_value_.reset();
  if (arg_.starts_with("--")) {
    if (const auto eq = arg_.find('='); eq != std::string::npos) {
      inline_value_ = arg_.substr(eq + 1);
      arg_.resize(eq);
    }
  }
  return true;
}

std::string ArgParser::value() {
  if (inline_value_) return *inline_value_;
  if (k_ + 1 >= args_.size())
    throw ConfigError(fmt::format("{} needs a value (kvsim {} --help)", arg_, command_));
  return args_[++k_];
}

void ArgParser::unknown() const {
  if (!is_flag())
    throw ConfigError(fmt::format("unexpected argument '{}' (kvsim {} --help)", arg_, command_));
  throw ConfigError(fmt::format("unknown option '{}'{} (kvsim {} --help)", arg_,
                                suggestion_suffix(arg_, known_), command_));
}

bool take_scenario_arg(ArgParser& p, ScenarioArgs& out) {
  if (p.is("-o", "--output")) {
    out.out_dir = p.value();
  } else if (p.is("--set")) {
    out.sets.push_back(p.value());
  } else if (p.is("--seed")) {
    out.seed = p.value();
  } else if (p.is("--quiet", "-q")) {
    out.quiet = true;
  } else if (!p.is_flag() && !out.path) {
    out.path = p.arg();
  } else if (!p.is_flag()) {
    throw ConfigError(fmt::format("unexpected argument '{}' (one scenario at a time)", p.arg()));
  } else {
    return false;
  }
  return true;
}

std::uint64_t parse_seed(const std::string& text) {
  try {
    std::size_t used = 0;
    const unsigned long long v = std::stoull(text, &used);
    if (used == text.size() && !text.empty() && text[0] != '-') return v;
  } catch (const std::exception&) {
  }
  throw ConfigError(fmt::format("--seed: expected a non-negative integer, got '{}'", text));
}

}  // namespace kvsim::cli
