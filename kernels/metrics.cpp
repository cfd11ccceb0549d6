#include "kernels/metrics.h"

#include <cmath>
#include <cstdio>

namespace kvsim::kernels {

tolerance default_tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF32: return {2e-5, 2e-5, 1e-5};
    case DType::kF16: return {1e-3, 1e-3, 1e-3};
    case DType::kBF16: return {1.5e-2, 1e-2, 1e-2};
  }
  return {};
}

error_stats compare_outputs(const float* out, const float* ref, std::int64_t n,
                            const tolerance& tol) {
  error_stats st;
  st.count = n;
  double diff2 = 0.0;
  double ref2 = 0.0;
  double sum_abs = 0.0;
  double worst_ratio = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double r = ref[i];
    ref2 += r * r;
    if (!std::isfinite(out[i])) {
      ++st.num_nonfinite;
      ++st.num_violations;
      if (worst_ratio != INFINITY) st.worst_index = i;
      worst_ratio = INFINITY;
      continue;
    }
    const double e = std::fabs(static_cast<double>(out[i]) - r);
    diff2 += e * e;
    sum_abs += e;
    if (e > st.max_abs) st.max_abs = e;
    const double bound = tol.atol + tol.rtol * std::fabs(r);
    if (e > bound) {
      ++st.num_violations;
      const double ratio = bound > 0 ? e / bound : INFINITY;
      if (ratio > worst_ratio) {
        worst_ratio = ratio;
        st.worst_index = i;
      }
    }
  }
  const std::int64_t finite = n - st.num_nonfinite;
  st.mean_abs = finite > 0 ? sum_abs / static_cast<double>(finite) : 0.0;
  if (ref2 > 0) {
    st.nmse = diff2 / ref2;
    st.rel_fro = std::sqrt(st.nmse);
  } else {
    st.nmse = diff2 > 0 ? INFINITY : 0.0;
    st.rel_fro = st.nmse;
  }
  return st;
}

bool passes(const error_stats& stats, const tolerance& tol) {
  return stats.num_nonfinite == 0 && stats.num_violations == 0 && stats.rel_fro <= tol.max_rel_fro;
}

bool passes_against_baseline(const error_stats& kernel, const error_stats& baseline) {
  return kernel.num_nonfinite == 0 && kernel.max_abs <= 2.0 * baseline.max_abs + 1e-5 &&
         kernel.mean_abs <= 1.5 * baseline.mean_abs + 1e-6;
}

std::string to_string(const error_stats& st) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "max_abs=%.3g mean_abs=%.3g rel_fro=%.3g nmse=%.3g nonfinite=%lld "
                "violations=%lld/%lld worst_index=%lld",
                st.max_abs, st.mean_abs, st.rel_fro, st.nmse,
                static_cast<long long>(st.num_nonfinite), static_cast<long long>(st.num_violations),
                static_cast<long long>(st.count), static_cast<long long>(st.worst_index));
  return buf;
}

}  // namespace kvsim::kernels
