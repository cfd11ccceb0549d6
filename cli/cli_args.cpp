#include "cli/cli_args.h"

#include <fmt/format.h>

#include <cstdio>
#include <sstream>
#include <string_view>

#include "core/common/assert.h"
#include "sim/common/csv_util.h"
#include "sim/common/yaml_util.h"

namespace kvsim::cli {
namespace {

namespace style = po::command_line_style;

/// --flag value, --flag=value, -f value, -fvalue, -qf value; never an abbreviated long flag.
constexpr int kStyle = style::default_style & ~style::allow_guessing;

/// The width of --help (that of Program_options' option list).
constexpr std::size_t kHelpColumns = 80;

/// `text` with each line longer than `columns` broken at spaces; every line ends with '\n'.
std::string wrap(std::string_view text, std::size_t columns) {
  std::string out;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    while (line.size() > columns) {
      std::size_t cut = line.rfind(' ', columns);
      if (cut == std::string_view::npos || cut == 0) cut = line.find(' ', columns);
      if (cut == std::string_view::npos) break;
      out.append(line.substr(0, cut)) += '\n';
      line.remove_prefix(cut + 1);
    }
    out.append(line) += '\n';
  }
  return out;
}

/// The hidden option that collects arguments beyond the declared positionals.
constexpr const char* kStray = "<unexpected>";

/// "--blok-size=8" -> "--blok-size".
std::string without_value(std::string token) {
  if (const auto eq = token.find('='); token.starts_with("--") && eq != std::string::npos)
    token.resize(eq);
  return token;
}

std::string range_text(std::int64_t min, std::int64_t max) {
  if (max == kIntMax) return fmt::format(">= {}", min);
  return fmt::format("in [{}, {}]", min, max);
}

std::int64_t parse_integer(const std::string& text, std::int64_t min, std::int64_t max) {
  const std::optional<std::int64_t> v = parse_int_text(text);
  if (!v || *v < min || *v > max)
    throw BadValue(fmt::format("expected an integer {}, got '{}'", range_text(min, max), text));
  return *v;
}

double parse_number(const std::string& text, double min, double max) {
  const std::optional<double> v = parse_double_text(text);
  if (!v || *v < min || *v > max)
    throw BadValue(fmt::format("expected a number in [{}, {}], got '{}'", min, max, text));
  return *v;
}

}  // namespace

CommandLine::CommandLine(std::string command, std::string synopsis, std::string about)
    : command_(std::move(command)),
      synopsis_(std::move(synopsis)),
      about_(std::move(about)),
      visible_("options") {
  visible_.add_options()("help,h", "print this help and exit");
}

void CommandLine::positional(const std::string& metavar, const po::value_semantic* value,
                             int max_count, bool required) {
  const std::string key = "<" + metavar + ">";
  hidden_.add_options()(key.c_str(), value, "");
  positionals_.push_back({key, metavar, max_count, required});
}

bool CommandLine::parse(const Args& args) {
  po::options_description all;
  all.add(visible_).add(hidden_);
  po::positional_options_description pos;
  for (const Positional& p : positionals_) pos.add(p.key.c_str(), p.max_count);
  if (positionals_.empty() || positionals_.back().max_count >= 0) {
    all.add_options()(kStray, po::value<std::vector<std::string>>(), "");
    pos.add(kStray, -1);
  }
  try {
    parsed_ = po::command_line_parser(args).options(all).positional(pos).style(kStyle).run();
    po::store(*parsed_, vm_);
  } catch (const BadValue& e) {
    throw error(fmt::format("{}: {}", e.get_option_name(), e.detail()));
  } catch (const po::unknown_option& e) {
    const std::string flag = without_value(e.get_option_name());
    const std::vector<std::string> names = flag_names();
    const std::vector<std::string_view> known(names.begin(), names.end());
    throw error(fmt::format("unknown option '{}'{}", flag, suggestion_suffix(flag, known)));
  } catch (const po::invalid_command_line_syntax& e) {
    const std::string flag = without_value(e.get_option_name());
    switch (e.kind()) {
      case po::invalid_syntax::missing_parameter:
        throw error(flag + " needs a value");
      case po::invalid_syntax::extra_parameter:
        throw error(flag + " takes no value");
      case po::invalid_syntax::empty_adjacent_parameter:
        throw error(flag + ": no value after '='");
      default:
        throw error(e.what());
    }
  } catch (const po::error& e) {
    throw error(e.what());
  }
  if (given("help")) {
    std::fputs(help().c_str(), stdout);
    return false;
  }
  if (vm_.count(kStray))
    throw error(fmt::format("unexpected argument '{}'",
                            vm_[kStray].as<std::vector<std::string>>().front()));
  for (const Positional& p : positionals_)
    if (p.required && !vm_.count(p.key)) throw error("missing " + p.metavar);
  vm_.notify();
  return true;
}

bool CommandLine::given(const std::string& name) const {
  const auto it = vm_.find(name);
  if (it == vm_.end()) {
    const auto pit = vm_.find("<" + name + ">");
    return pit != vm_.end() && !pit->second.defaulted();
  }
  return !it->second.defaulted();
}

const po::parsed_options& CommandLine::parsed() const {
  KVSIM_ASSERT(parsed_.has_value());
  return *parsed_;
}

std::string CommandLine::help() const {
  std::ostringstream s;
  s << "usage: kvsim " << command_ << ' ' << synopsis_ << '\n';
  s << wrap(about_, kHelpColumns) << '\n' << visible_;
  return s.str();
}

std::vector<std::string> CommandLine::flag_names() const {
  std::vector<std::string> out;
  for (const auto& o : visible_.options())
    out.push_back(o->canonical_display_name(style::allow_long));
  return out;
}

ConfigError CommandLine::error(const std::string& message) const {
  return ConfigError(fmt::format("{} (kvsim {} --help)", message, command_));
}

po::value_semantic* text(std::string* target, const char* metavar) {
  return checked<std::string>(target, metavar, [](const std::string& s) { return s; });
}

po::value_semantic* text(std::optional<std::string>* target, const char* metavar) {
  return checked<std::string>(target, metavar, [](const std::string& s) { return s; });
}

po::value_semantic* texts(std::vector<std::string>* target, const char* metavar) {
  return po::value<std::vector<std::string>>(target)->value_name(metavar);
}

po::value_semantic* flag(bool* target) {
  return new detail::Value<bool>(
      target, "", [](const std::string&) { return true; }, /*takes_value=*/false);
}

po::value_semantic* integer(std::int64_t* target, std::int64_t min, std::int64_t max,
                            const char* metavar) {
  return checked<std::int64_t>(target, metavar,
                               [=](const std::string& s) { return parse_integer(s, min, max); });
}

po::value_semantic* integer(std::optional<std::int64_t>* target, std::int64_t min, std::int64_t max,
                            const char* metavar) {
  return checked<std::int64_t>(target, metavar,
                               [=](const std::string& s) { return parse_integer(s, min, max); });
}

po::value_semantic* profile(Profile* target) {
  return checked<Profile>(target, "NAME", [](const std::string& s) {
    if (const auto p = find_profile(s)) return *p;
    std::vector<std::string_view> names;
    for (const ProfileInfo& info : profiles()) names.emplace_back(info.name);
    throw BadValue("unknown profile '" + s + "'" + suggestion_suffix(s, names) +
                   " (valid: " + profile_names() + ")");
  });
}

po::value_semantic* number(double* target, double min, double max, const char* metavar) {
  return checked<double>(target, metavar,
                         [=](const std::string& s) { return parse_number(s, min, max); });
}

po::value_semantic* number(std::optional<double>* target, double min, double max,
                           const char* metavar) {
  return checked<double>(target, metavar,
                         [=](const std::string& s) { return parse_number(s, min, max); });
}

void add_scenario_args(CommandLine& cl, ScenarioArgs& out) {
  const auto seed = [](const std::string& s) -> std::uint64_t {
    try {
      std::size_t used = 0;
      const unsigned long long v = std::stoull(s, &used);
      if (used == s.size() && !s.empty() && s[0] != '-') return v;
    } catch (const std::exception&) {
    }
    throw BadValue(fmt::format("expected a non-negative integer, got '{}'", s));
  };
  po::options_description g("scenario options");
  g.add_options()  //
      ("output,o", text(&out.out_dir, "DIR"),
       "parent folder of the results: DIR/<name>/ (default: results)")  //
      ("set", texts(&out.sets, "KEY.PATH=VALUE"),
       "override a scenario key (the value is parsed as YAML); repeatable")                   //
      ("seed", checked<std::uint64_t>(&out.seed, "N", seed), "override the scenario's seed")  //
      ("quiet,q", flag(&out.quiet), "no progress and no summary on the terminal");
  cl.add(g);
  cl.positional("SCENARIO.yaml", text(&out.path, "SCENARIO.yaml"));
}

}  // namespace kvsim::cli
