#pragma once
// The progress line of `kvsim validate`: how far the run is, and an estimate of the time left.
// Drawn on a terminal only: a log file or a pipe never receives a progress byte.

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace kvsim::validate {

/// Where a validation run stands (ValidationOptions::progress).
struct ValidationProgress {
  std::int64_t step = 0, num_steps = 0;       // steps simulated so far, steps in the run
  std::int64_t checked = 0, num_checked = 0;  // steps checked so far, steps planned
  double done_fraction = 0;                   // estimated share of the work done, [0, 1]
  double elapsed_s = 0;                       // wall clock since the run started
  bool surveying = false;  // the survey pass (sample_plan.h): only `step` and `elapsed_s` count
  bool finished = false;   // the last report of the run
};
using ProgressFn = std::function<void(const ValidationProgress&)>;

/// A ProgressFn that redraws one status line on `out` (carriage return, erase to the end of the
/// line) and erases it when the run is finished -- when `out` is a terminal (isatty). Otherwise an
/// empty function, so nothing is ever written there.
[[nodiscard]] ProgressFn terminal_progress(std::FILE* out);
/// The same drawing on `out` whatever it is (tests).
[[nodiscard]] ProgressFn line_progress(std::FILE* out);

/// The status line: "validate: step 12,345 of 373,112, checked 57 of 200, 0:42 elapsed, about
/// 1:13 left" (no estimate before 2% of the work or 1 s); while surveying, "validate: surveying
/// the run without kernels, step 12,345, 0:01 elapsed".
[[nodiscard]] std::string progress_line(const ValidationProgress& p);

}  // namespace kvsim::validate
