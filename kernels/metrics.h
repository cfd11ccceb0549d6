#pragma once
// Error metrics and per-dtype tolerances for comparing a kernel's output with a reference.

#include <cstdint>
#include <string>

#include "kernels/dtype.h"

namespace kvsim::kernels {

/// Error statistics of `out` against `ref` over n elements. NaN/inf in `out` are counted, not
/// folded into the norms.
struct error_stats {
  double max_abs = 0.0;        // max_i |out_i - ref_i| over finite out_i
  double mean_abs = 0.0;       // mean_i |out_i - ref_i| over finite out_i
  double rel_fro = 0.0;        // ||out - ref||_2 / ||ref||_2 (0 when both are 0)
  double nmse = 0.0;           // ||out - ref||_2^2 / ||ref||_2^2 (= rel_fro^2)
  std::int64_t num_nonfinite = 0;  // elements of out that are NaN or inf
  std::int64_t num_violations = 0; // elements with |out - ref| > atol + rtol * |ref| (or non-finite)
  std::int64_t worst_index = -1;   // index of the largest violation ratio (-1 when none)
  std::int64_t count = 0;
};

/// Pass rule: every element within atol + rtol * |ref| (allclose) and rel_fro <= max_rel_fro.
struct tolerance {
  double atol = 0.0;
  double rtol = 0.0;
  double max_rel_fro = 0.0;
};

/// Guard-rail tolerances of kernels.md §8 for outputs stored in `dtype` (fp32 math):
/// f16 atol = rtol = 1e-3, rel_fro 1e-3; bf16 atol 1.5e-2, rtol 1e-2, rel_fro 1e-2;
/// f32 atol = rtol = 2e-5, rel_fro 1e-5.
tolerance default_tolerance(DType dtype);

/// Computes the statistics; `tol` defines num_violations. O(n).
error_stats compare_outputs(const float* out, const float* ref, std::int64_t n,
                            const tolerance& tol);

/// True when there is no violation, nothing non-finite and rel_fro <= tol.max_rel_fro.
/// Pass the same `tol` that compare_outputs counted the violations against.
bool passes(const error_stats& stats, const tolerance& tol);

/// Primary rule of kernels.md §8 (FA3 style): the kernel's error against the high-precision
/// reference may be at most twice a same-dtype baseline's max error (+1e-5) and 1.5x its mean
/// error (+1e-6), e.g. the CPU backend (fp32 math, output rounded to the dtype). Non-finite fails.
bool passes_against_baseline(const error_stats& kernel, const error_stats& baseline);

/// One line: "max_abs=... mean_abs=... rel_fro=... nmse=... nonfinite=... violations=.../n".
std::string to_string(const error_stats& stats);

}  // namespace kvsim::kernels
