#include "sim/workload.h"

#include <fmt/format.h>

#include "sim/rng.h"
#include "sim/synthetic_workload.h"
#include "sim/trace_readers.h"

namespace kvsim {

namespace {
constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
}  // namespace

std::int32_t output_token(std::uint64_t output_seed, std::int64_t i) {
  return static_cast<std::int32_t>(
      splitmix64(output_seed + static_cast<std::uint64_t>(i) * kGolden) >> 33);
}

std::int32_t pseudo_token(std::uint64_t key, std::int64_t j, std::int32_t vocab_size) {
  const std::uint64_t x = splitmix64(key + static_cast<std::uint64_t>(j) * kGolden);
  // Multiply-high maps 64 random bits onto [0, vocab) (bias < vocab / 2^64).
  __extension__ typedef unsigned __int128 U128;
  return static_cast<std::int32_t>(
      (static_cast<U128>(x) * static_cast<std::uint64_t>(vocab_size)) >> 64);
}

void append_pseudo_tokens(std::vector<std::int32_t>& out, std::uint64_t key, std::int64_t count,
                          std::int32_t vocab_size) {
  out.reserve(out.size() + static_cast<std::size_t>(count));
  for (std::int64_t j = 0; j < count; ++j) out.push_back(pseudo_token(key, j, vocab_size));
}

std::uint64_t content_key(std::uint64_t seed, std::string_view kind, std::uint64_t index) {
  return splitmix64(stream_seed(seed, kind) ^ splitmix64(index));
}

std::unique_ptr<RequestSource> make_request_source(const YAML::Node& workload,
                                                   const YamlContext& ctx, std::uint64_t seed,
                                                   std::int32_t vocab_size) {
  if (vocab_size < 1)
    throw ConfigError(fmt::format("{}: vocab_size must be >= 1, got {}", ctx.file, vocab_size));
  if (!workload.IsDefined() || workload.IsNull())
    throw ConfigError(ctx.file + ": missing section 'workload'");
  check_keys(workload, std::span<const std::string_view>(kWorkloadKeys), ctx);
  if (has_key(workload, "trace"))
    return std::make_unique<TraceSource>(parse_trace_config(workload, ctx), seed, vocab_size);
  return std::make_unique<SyntheticSource>(parse_synthetic_workload(workload, ctx), seed,
                                           vocab_size);
}

}  // namespace kvsim
