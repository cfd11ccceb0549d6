#include "sim/workload/workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "core/common/assert.h"
#include "sim/common/rng.h"
#include "sim/workload/synthetic_workload.h"
#include "sim/workload/trace_readers.h"

namespace kvsim {

namespace {
constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// Token of one 32-bit half of a mixed word: multiply-high maps it onto [0, vocab) (bias below
// vocab / 2^32).
inline std::int32_t scale_to_vocab(std::uint32_t bits, std::int32_t vocab_size) {
  return static_cast<std::int32_t>(
      (static_cast<std::uint64_t>(bits) * static_cast<std::uint64_t>(vocab_size)) >> 32);
}
}  // namespace

std::int32_t output_token(std::uint64_t output_seed, std::int64_t i, std::int32_t vocab_size,
                          std::int32_t avoid) {
  const std::int32_t t =
      scale_to_vocab(static_cast<std::uint32_t>(
                         splitmix64(output_seed + static_cast<std::uint64_t>(i) * kGolden) >> 32),
                     vocab_size);
  return t == avoid && vocab_size > 1 ? (t + 1) % vocab_size : t;
}

std::int32_t pseudo_token(std::uint64_t key, std::int64_t j, std::int32_t vocab_size) {
  const std::uint64_t x = splitmix64(key + static_cast<std::uint64_t>(j >> 1) * kGolden);
  return scale_to_vocab(static_cast<std::uint32_t>((j & 1) ? x >> 32 : x), vocab_size);
}

namespace {
// Pairs of tokens [0, 2 * pairs) of stream `key` into dst. Integer arithmetic only, so every
// clone (the x86-64-v4 one uses 8-lane 64-bit multiplies) writes the same tokens.
__attribute__((target_clones("arch=x86-64-v4", "default"), optimize("O3"))) void fill_token_pairs(
    std::int32_t* dst, std::uint64_t key, std::int64_t pairs, std::int32_t vocab_size) {
  for (std::int64_t i = 0; i < pairs; ++i) {
    const std::uint64_t x = splitmix64(key + static_cast<std::uint64_t>(i) * kGolden);
    dst[2 * i] = scale_to_vocab(static_cast<std::uint32_t>(x), vocab_size);
    dst[2 * i + 1] = scale_to_vocab(static_cast<std::uint32_t>(x >> 32), vocab_size);
  }
}

// The loop of output_token (same arithmetic, one token per word), in the same clones.
__attribute__((target_clones("arch=x86-64-v4", "default"), optimize("O3"))) void fill_outputs(
    std::int32_t* dst, std::uint64_t seed, std::int64_t count, std::int32_t vocab_size,
    std::int32_t avoid) {
  const std::int32_t bump = vocab_size > 1 ? avoid : -1;  // vocab 1: the only token stays
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int32_t t =
        scale_to_vocab(static_cast<std::uint32_t>(
                           splitmix64(seed + static_cast<std::uint64_t>(i) * kGolden) >> 32),
                       vocab_size);
    dst[i] = t == bump ? (t + 1 == vocab_size ? 0 : t + 1) : t;
  }
}
}  // namespace

void fill_output_tokens(std::int32_t* dst, std::uint64_t output_seed, std::int64_t count,
                        std::int32_t vocab_size, std::int32_t avoid) {
  fill_outputs(dst, output_seed, count, vocab_size, avoid);
}

void append_pseudo_tokens(std::vector<std::int32_t>& out, std::uint64_t key, std::int64_t count,
                          std::int32_t vocab_size) {
  // One mixed word gives tokens 2i and 2i + 1 (its low and high halves); word i of the stream is
  // splitmix64(key + i * golden), so chunk c starts at key + (first word) * golden. Chunks go
  // through a buffer that stays in L1, so `out` is written once (resize would zero it first).
  constexpr std::int64_t kChunk = 2048;  // tokens, even
  std::array<std::int32_t, kChunk> buf;
  for (std::int64_t done = 0; done < count; done += kChunk) {
    const std::int64_t n = std::min(kChunk, count - done);
    fill_token_pairs(buf.data(), key + static_cast<std::uint64_t>(done / 2) * kGolden, n / 2,
                     vocab_size);
    if (n % 2) buf[static_cast<std::size_t>(n - 1)] = pseudo_token(key, done + n - 1, vocab_size);
    out.insert(out.end(), buf.begin(), buf.begin() + n);
  }
}

void RequestSpec::materialize_prompt(std::int64_t output_room_tokens) {
  if (deferred.empty()) return;
  // Room for the outputs too: the Request decodes into this buffer without reallocating it.
  prompt.reserve(prompt.size() + static_cast<std::size_t>(deferred_tokens) +
                 static_cast<std::size_t>(std::max<std::int64_t>(output_room_tokens, 0)));
  for (const PromptSegment& seg : deferred)
    append_pseudo_tokens(prompt, seg.key, seg.count, deferred_vocab);
  deferred.clear();
  deferred_tokens = 0;
}

void RequestSpec::defer_tokens(std::uint64_t key, std::int64_t count, std::int32_t vocab_size) {
  if (count <= 0) return;
  KVSIM_ASSERT(deferred.empty() || deferred_vocab == vocab_size);
  deferred.push_back({key, count});
  deferred_vocab = vocab_size;
  deferred_tokens += count;
}

void set_default_max_tokens(RequestSpec& r) {
  if (r.stops_at_eos())
    r.max_tokens.reset();
  else
    r.max_tokens = r.output_tokens;
}

std::uint64_t content_key(std::uint64_t seed, std::string_view kind, std::uint64_t index) {
  return splitmix64(stream_seed(seed, kind) ^ splitmix64(index));
}

std::unique_ptr<RequestSource> make_request_source(const WorkloadConfig& workload,
                                                   std::uint64_t seed, std::int32_t vocab_size) {
  if (vocab_size < 1) throw ConfigError(fmt::format("vocab_size must be >= 1, got {}", vocab_size));
  if (const TraceConfig* t = workload.trace())
    return std::make_unique<TraceSource>(*t, workload.per_request, seed, vocab_size);
  return std::make_unique<SyntheticSource>(*workload.synthetic(), workload.per_request, seed,
                                           vocab_size);
}

}  // namespace kvsim
