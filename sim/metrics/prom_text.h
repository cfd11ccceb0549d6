#pragma once
// Prometheus text exposition of one series (metrics.prom): what MetricsCollector writes for a
// scalar and a histogram, for other writers of vLLM's families (a P/D cluster's vllm:nixl_*).

#include <string>
#include <string_view>

#include "sim/metrics/metrics.h"

namespace kvsim {

/// A number as metrics.prom writes it ("+Inf" for infinity; else fmt's shortest form).
[[nodiscard]] std::string prom_num(double v);
/// `# HELP`, `# TYPE` and one sample `name{label} v` (`type`: counter | gauge).
void append_prom_scalar(std::string& o, std::string_view name, std::string_view type,
                        std::string_view help, std::string_view label, double v);
/// `# HELP`, `# TYPE` and the cumulative buckets, sum and count of `h`, labelled `label`.
void append_prom_histogram(std::string& o, std::string_view name, std::string_view help,
                           std::string_view label, const PromHistogram& h);

}  // namespace kvsim
