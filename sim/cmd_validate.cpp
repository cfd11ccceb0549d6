// PLACEHOLDER until its owner lands the real command: says so and exits 2.
#include <cstdio>
#include "sim/commands.h"
namespace kvsim::cli {
int validate(const Args&) { std::fprintf(stderr, "kvsim: 'validate' is not built yet\n"); return 2; }
}  // namespace kvsim::cli
