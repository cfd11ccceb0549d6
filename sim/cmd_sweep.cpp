// PLACEHOLDER until its owner lands the real command: says so and exits 2.
#include <cstdio>
#include "sim/commands.h"
namespace kvsim::cli {
int sweep(const Args&) { std::fprintf(stderr, "kvsim: 'sweep' is not built yet\n"); return 2; }
int merge(const Args&) { std::fprintf(stderr, "kvsim: merge is not built yet\n"); return 2; }
}  // namespace kvsim::cli
