#pragma once
// The command line of every kvsim subcommand, over Boost.Program_options: a command declares its
// options once in an options_description (whose generated list is its `--help`) plus its
// positionals, and CommandLine::parse() stores the values or throws one-line ConfigErrors (exit 2):
//   unknown option '--blok-size' (did you mean '--block-size'?) (kvsim kv-size --help)
//   --seed needs a value (kvsim run --help)
//   --jobs: expected an integer in [1, 4096], got 'x' (kvsim sweep --help)
//   unexpected argument 'b.yaml' (kvsim run --help)
// `--flag value` and `--flag=value` both work; abbreviations are never guessed; a value flag given
// twice keeps the last value; a repeatable flag (texts()) collects every value in order.
//
// Declaring a command (one line per flag; the value helpers below check and convert):
//   CommandLine cl("sweep", "SCENARIO.yaml [options]", "Expands the scenario's sweep: grid ...");
//   ScenarioArgs in;
//   add_scenario_args(cl, in);  // SCENARIO.yaml, -o/--output, --set, --seed, -q/--quiet
//   cl.options()("jobs,j", integer(&jobs, 1, 4096, "N"), "local processes")(...);
//   if (!cl.parse(args)) return 0;  // -h/--help: the help is printed
//   if (cl.given("emit-jobs")) ...

#include <boost/program_options.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/engine_api.h"
#include "cli/commands.h"
#include "sim/common/errors.h"

namespace kvsim::cli {
namespace po = boost::program_options;

/// A bad value of a flag: value parsers throw it with what was expected ("expected an integer
/// >= 1, got 'x'"); CommandLine::parse() puts the flag's name in front.
class BadValue : public po::error_with_option_name {
 public:
  explicit BadValue(std::string detail)
      : po::error_with_option_name("%canonical_option%"), detail_(std::move(detail)) {}
  const std::string& detail() const { return detail_; }

 private:
  std::string detail_;
};

/// One command's options, positionals and help. Not copyable (the descriptions own the values).
class CommandLine {
 public:
  /// `command` as typed after kvsim ("kv-size"); `synopsis` follows it on the usage line
  /// ("SCENARIO.yaml [options]"); `about` (may be empty) comes between usage and options.
  CommandLine(std::string command, std::string synopsis, std::string about = {});
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  /// Adds options to the list --help shows: options()("name,n", value, "help")(...).
  po::options_description_easy_init options() { return visible_.add_options(); }
  /// Adds a group of options declared elsewhere (add_scenario_args()).
  void add(const po::options_description& group) { visible_.add(group); }
  /// Declares the next positional: `metavar` names it in messages ("RUN_DIR"), `max_count` is
  /// how many values it takes (-1: any number), `required` whether at least one must be given.
  void positional(const std::string& metavar, const po::value_semantic* value, int max_count = 1,
                  bool required = true);

  /// Parses `args` and stores every value given into its target (targets of absent options keep
  /// their value). Returns false when -h/--help was given: the help is then on stdout. Throws a
  /// one-line ConfigError naming the flag for bad input. Call once.
  [[nodiscard]] bool parse(const Args& args);
  /// Whether the option with long name `name` ("emit-jobs") or positional `metavar` was given.
  [[nodiscard]] bool given(const std::string& name) const;
  /// What parse() read, in command-line order (for a command that passes options on).
  [[nodiscard]] const po::parsed_options& parsed() const;
  /// "usage: kvsim <command> <synopsis>", the about text and the generated option list.
  [[nodiscard]] std::string help() const;
  /// The visible options' long names as typed ("--output"), in declaration order.
  [[nodiscard]] std::vector<std::string> flag_names() const;
  /// ConfigError("<message> (kvsim <command> --help)").
  [[nodiscard]] ConfigError error(const std::string& message) const;

 private:
  struct Positional {
    std::string key, metavar;
    int max_count;
    bool required;
  };
  std::string command_, synopsis_, about_;
  po::options_description visible_, hidden_;
  std::vector<Positional> positionals_;
  po::variables_map vm_;
  std::optional<po::parsed_options> parsed_;
};

namespace detail {
/// A flag's value: `parse` turns the (last) token into a T stored into *target at the end of
/// CommandLine::parse(); a flag given again overwrites (last wins). No token: a switch.
template <class T, class Target = T>
class Value final : public po::value_semantic_codecvt_helper<char> {
 public:
  Value(Target* target, std::string metavar, std::function<T(const std::string&)> parse,
        bool takes_value = true)
      : target_(target),
        metavar_(std::move(metavar)),
        parse_(std::move(parse)),
        takes_value_(takes_value) {}
  std::string name() const override { return takes_value_ ? metavar_ : std::string(); }
  unsigned min_tokens() const override { return takes_value_ ? 1 : 0; }
  unsigned max_tokens() const override { return takes_value_ ? 1 : 0; }
  bool is_composing() const override { return false; }
  bool is_required() const override { return false; }
  bool apply_default(boost::any&) const override { return false; }
  void notify(const boost::any& v) const override {
    if (!v.empty()) *target_ = boost::any_cast<const T&>(v);
  }

 protected:
  void xparse(boost::any& store, const std::vector<std::string>& tokens) const override {
    try {
      store = parse_(tokens.empty() ? std::string() : tokens.back());
    } catch (const ConfigError& e) {
      throw BadValue(e.what());
    }
  }

 private:
  Target* target_;
  std::string metavar_;
  std::function<T(const std::string&)> parse_;
  bool takes_value_;
};
}  // namespace detail

// Value semantics for CommandLine::options() and positional(); `metavar` is the value's name in
// --help. Each stores into its target when parse() succeeds; a bad value is a BadValue.

/// Any text (a path, a name).
po::value_semantic* text(std::string* target, const char* metavar);
po::value_semantic* text(std::optional<std::string>* target, const char* metavar);
/// A repeatable flag, or a positional taking several values: every value, in order.
po::value_semantic* texts(std::vector<std::string>* target, const char* metavar);
/// A switch (no value): true when given.
po::value_semantic* flag(bool* target);
/// An integer in [min, max] (decimal, or a number text with an integral value such as 4e9).
po::value_semantic* integer(std::int64_t* target, std::int64_t min, std::int64_t max,
                            const char* metavar);
po::value_semantic* integer(std::optional<std::int64_t>* target, std::int64_t min, std::int64_t max,
                            const char* metavar);
/// A finite number in [min, max].
po::value_semantic* number(double* target, double min, double max, const char* metavar);
po::value_semantic* number(std::optional<double>* target, double min, double max,
                           const char* metavar);
/// A value checked and converted by `parse`, which throws BadValue or ConfigError for a bad one.
template <class T, class Target>
po::value_semantic* checked(Target* target, const char* metavar,
                            std::function<T(const std::string&)> parse) {
  return new detail::Value<T, Target>(target, metavar, std::move(parse));
}

/// An engine profile named as in core/engine_api.h's table; a typo names the valid ones.
po::value_semantic* profile(Profile* target);

/// The flags of a command that runs one scenario (run, sweep, validate).
struct ScenarioArgs {
  std::string path;                   // the SCENARIO.yaml positional
  std::string out_dir = "results";    // -o / --output
  std::vector<std::string> sets;      // --set key.path=value (repeatable)
  std::optional<std::uint64_t> seed;  // --seed N
  bool quiet = false;                 // --quiet / -q
};

/// Adds the SCENARIO.yaml positional and the group of ScenarioArgs' flags to `cl`.
void add_scenario_args(CommandLine& cl, ScenarioArgs& out);

}  // namespace kvsim::cli
