// kvsim: the command-line entry point. Dispatches to the subcommands of sim/commands.h.

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>

#include "cli/commands.h"
#include "sim/common/errors.h"

namespace {

struct Command {
  const char* name;
  int (*fn)(const kvsim::cli::Args&);
  const char* help;
};

constexpr Command kCommands[] = {
    {"run", kvsim::cli::run, "run SCENARIO.yaml [-o DIR] [--set k=v ...] [--seed N] [--quiet]"},
    {"sweep", kvsim::cli::sweep, "sweep SCENARIO.yaml [-o DIR] [--jobs N | --emit-jobs FILE]"},
    {"merge", kvsim::cli::merge, "merge SWEEP_DIR [-o FILE]: one table of a sweep's summaries"},
    {"replay", kvsim::cli::replay, "replay [FILE|-]: op-trace replay (kvm and sched modes)"},
    {"kv-size", kvsim::cli::kv_size,
     "kv-size --model CONFIG [--gpu NAME | --kv-cache-memory-bytes N]"},
    {"calibrate", kvsim::cli::calibrate, "calibrate MEASUREMENTS.csv -o model.yaml"},
    {"validate", kvsim::cli::validate, "validate SCENARIO.yaml [--backend cpu|cuda] ..."},
    {"plot", kvsim::cli::plot, "plot RUN_DIR... [-o OUT_DIR]"},
    {"check", kvsim::cli::check, "check RUN_DIR --baseline FILE [--update-baseline]"},
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
      return 1;
    }
  }
  std::fprintf(stderr, "kvsim: unknown command '%s'\n", argv[1]);
  print_usage(stderr);
  return kvsim::kExitUsage;
}
