// kvsim: the command-line entry point. Dispatches to the subcommands of cli/commands.h and turns
// what they throw into one line on stderr and the exit status: 2 bad input (ConfigError), 1 any
// other failure, 128 + N when signal N (SIGINT, SIGTERM) interrupted the command.

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "cli/interrupt.h"
#include "sim/common/errors.h"
#include "sim/common/yaml_util.h"

namespace {

struct Command {
  const char* name;
  int (*fn)(const kvsim::cli::Args&);
  const char* help;
};

constexpr Command kCommands[] = {
    {"run", kvsim::cli::run, "SCENARIO.yaml: simulate a scenario into DIR/<name>/"},
    {"sweep", kvsim::cli::sweep, "SCENARIO.yaml: one run per point of its sweep: grid"},
    {"merge", kvsim::cli::merge, "PATH...: gather a sweep's runs from anywhere into sweep.csv"},
    {"replay", kvsim::cli::replay, "[FILE|-]: replay an op trace (kvm and sched modes)"},
    {"kv-size", kvsim::cli::kv_size, "--model CONFIG: vLLM V1 KV cache sizing"},
    {"calibrate", kvsim::cli::calibrate, "MEASUREMENTS.csv -o model.yaml: fit a latency model"},
    {"validate", kvsim::cli::validate, "SCENARIO.yaml: run real attention kernels on its steps"},
    {"plot", kvsim::cli::plot, "RUN_DIR...: figures and an index.html"},
    {"check", kvsim::cli::check, "RUN_DIR --baseline FILE: the regression gate"},
};

void print_usage(std::FILE* out) {
  std::fprintf(out, "usage: kvsim COMMAND [ARGS...]\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.help);
  std::fprintf(out, "\n'kvsim COMMAND --help' describes a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return kvsim::kExitUsage;
  }
  const std::string_view name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") {
    print_usage(stdout);
    return 0;
  }
  for (const Command& c : kCommands) {
    if (name != c.name) continue;
    kvsim::cli::Args args(argv + 2, argv + argc);
    try {
      return c.fn(args);
    } catch (const kvsim::ConfigError& e) {
      std::fprintf(stderr, "kvsim %s: error: %s\n", c.name, e.what());
      return kvsim::kExitUsage;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kvsim %s: error: %s\n", c.name, e.what());
      if (const int sig = kvsim::cli::interrupt_signal(); sig != 0) return 128 + sig;
      return 1;
    }
  }
  std::vector<std::string_view> names;
  for (const Command& c : kCommands) names.emplace_back(c.name);
  std::fprintf(stderr, "kvsim: error: unknown command '%s'%s (kvsim --help)\n", argv[1],
               kvsim::suggestion_suffix(name, names).c_str());
  return kvsim::kExitUsage;
}
