#pragma once
// The kvsim subcommands. Each takes the arguments after the subcommand name (args[0] is the first
// argument, not the subcommand) and returns the process exit status: 0 success, 1 a failed check or
// run, 2 bad input (ConfigError). main.cpp dispatches; each lives in its own .cpp.

#include <string>
#include <vector>

namespace kvsim::cli {
using Args = std::vector<std::string>;
int replay(const Args& args);     // cli/cmd_replay.cpp
int run(const Args& args);        // cli/cmd_run.cpp
int sweep(const Args& args);      // cli/cmd_sweep.cpp
int merge(const Args& args);      // cli/cmd_merge.cpp
int kv_size(const Args& args);    // cli/cmd_kv_size.cpp
int calibrate(const Args& args);  // cli/cmd_calibrate.cpp
int validate(const Args& args);   // cli/cmd_validate.cpp
int plot(const Args& args);       // cli/cmd_plot.cpp
int check(const Args& args);      // cli/cmd_check.cpp
}  // namespace kvsim::cli
