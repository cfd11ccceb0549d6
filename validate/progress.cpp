#include "validate/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>

#include "validate/sample_plan.h"

namespace kvsim::validate {
namespace {

/// 75 -> "1:15", 3725 -> "1:02:05".
std::string clock_text(double seconds) {
  const auto s = static_cast<std::int64_t>(std::llround(std::max(seconds, 0.0)));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

}  // namespace

std::string progress_line(const ValidationProgress& p) {
  if (p.surveying)
    return fmt::format("validate: surveying the run without kernels, step {}, {} elapsed",
                       group_thousands(p.step), clock_text(p.elapsed_s));
  std::string line =
      fmt::format("validate: step {} of {}, checked {} of {}, {} elapsed", group_thousands(p.step),
                  group_thousands(p.num_steps), group_thousands(p.checked),
                  group_thousands(p.num_checked), clock_text(p.elapsed_s));
  if (p.done_fraction >= 0.02 || (p.elapsed_s >= 1 && p.done_fraction > 0))
    line +=
        ", about " + clock_text(p.elapsed_s * (1 - p.done_fraction) / p.done_fraction) + " left";
  return line;
}

ProgressFn line_progress(std::FILE* out) {
  return [out](const ValidationProgress& p) {
    if (p.finished)
      std::fputs("\r\x1b[K", out);
    else
      std::fprintf(out, "\r%s\x1b[K", progress_line(p).c_str());
    std::fflush(out);
  };
}

ProgressFn terminal_progress(std::FILE* out) {
  if (out == nullptr || ::isatty(::fileno(out)) != 1) return {};
  return line_progress(out);
}

}  // namespace kvsim::validate
