#include "sim/workload/trace_readers.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "sim/common/csv_util.h"

namespace kvsim {

namespace {

constexpr std::int64_t kMaxPromptTokens = 10'000'000;

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
std::int64_t days_from_civil(std::int64_t y, std::int64_t m, std::int64_t d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const std::int64_t yoe = y - era * 400;
  const std::int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const std::int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

// "2023-11-16 18:15:46.6805900" (also 'T' as separator) -> ns since the epoch.
std::optional<std::int64_t> parse_timestamp(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.remove_suffix(1);
  auto num = [&](std::size_t pos, std::size_t len) -> std::optional<std::int64_t> {
    if (pos + len > s.size()) return std::nullopt;
    std::int64_t v = 0;
    for (std::size_t i = pos; i < pos + len; ++i) {
      if (s[i] < '0' || s[i] > '9') return std::nullopt;
      v = v * 10 + (s[i] - '0');
    }
    return v;
  };
  if (s.size() < 19 || s[4] != '-' || s[7] != '-' || (s[10] != ' ' && s[10] != 'T') ||
      s[13] != ':' || s[16] != ':')
    return std::nullopt;
  auto y = num(0, 4), mo = num(5, 2), d = num(8, 2), h = num(11, 2), mi = num(14, 2),
       se = num(17, 2);
  // Years 1970..2200 keep nanoseconds since the epoch (and their differences) inside int64.
  if (!y || !mo || !d || !h || !mi || !se || *y < 1970 || *y > 2200 || *mo < 1 || *mo > 12 ||
      *d < 1 || *d > 31 || *h > 23 || *mi > 59 || *se > 60)
    return std::nullopt;
  std::int64_t frac_ns = 0;
  if (s.size() > 19) {
    if (s[19] != '.' || s.size() == 20) return std::nullopt;
    std::int64_t scale = 100'000'000;
    for (std::size_t i = 20; i < s.size(); ++i) {
      if (s[i] < '0' || s[i] > '9') return std::nullopt;
      frac_ns += (s[i] - '0') * scale;
      scale /= 10;
    }
  }
  const std::int64_t secs = days_from_civil(*y, *mo, *d) * 86400 + *h * 3600 + *mi * 60 + *se;
  return secs * 1'000'000'000 + frac_ns;
}

}  // namespace

TraceSource::TraceSource(TraceConfig config, PerRequestConfig per_request, std::uint64_t seed,
                         std::int32_t vocab_size)
    : config_(std::move(config)),
      per_request_(per_request),
      seed_(seed),
      vocab_size_(vocab_size),
      in_(config_.path, std::ios::binary) {
  if (!in_)
    throw config_error(
        config_.path_at,
        fmt::format("workload.trace.path: cannot open trace file '{}'", config_.path));
  if (config_.format != TraceConfig::Format::kAzure && config_.format != TraceConfig::Format::kCsv)
    return;
  std::string header;
  if (!std::getline(in_, header))
    throw ConfigError(config_.path, 1, 1, "empty trace: expected a CSV header row");
  line_no_ = 1;
  if (!split_csv_line(header, fields_)) fail(1, "unterminated quote in the header row");
  auto need = [&](std::string_view name) {
    auto c = csv_column(fields_, name);
    if (!c) fail(1, fmt::format("header has no column '{}' (found: {})", name, header));
    return *c;
  };
  if (config_.format == TraceConfig::Format::kAzure) {
    col_time_ = need("TIMESTAMP");
    col_prompt_ = need("ContextTokens");
    col_output_ = need("GeneratedTokens");
  } else {
    col_time_ = need("arrival_s");
    col_prompt_ = need("prompt_tokens");
    col_output_ = need("output_tokens");
    col_group_ = csv_column(fields_, "prefix_group");
    col_prefix_tokens_ = csv_column(fields_, "prefix_tokens");
    col_max_tokens_ = csv_column(fields_, "max_tokens");
    col_ignore_eos_ = csv_column(fields_, "ignore_eos");
    col_eos_ = csv_column(fields_, "eos_token_id");
  }
}

void TraceSource::fail(std::int64_t col, const std::string& message) const {
  throw ConfigError(config_.path, line_no_, col, message);
}

TraceRow TraceSource::parse_azure(const std::string& line) {
  if (!split_csv_line(line, fields_)) fail(1, "unterminated quote");
  const std::size_t need = std::max({col_time_, col_prompt_, col_output_}) + 1;
  if (fields_.size() < need)
    fail(1, fmt::format("expected {} fields, got {}", need, fields_.size()));
  TraceRow r;
  auto ts = parse_timestamp(fields_[col_time_]);
  if (!ts)
    fail(1, fmt::format("TIMESTAMP: expected 'YYYY-MM-DD HH:MM:SS.fffffff', got '{}'",
                        fields_[col_time_]));
  r.timestamp_ns = *ts;
  auto p = parse_int_text(fields_[col_prompt_]);
  auto o = parse_int_text(fields_[col_output_]);
  if (!p)
    fail(1, fmt::format("ContextTokens: expected an integer, got '{}'", fields_[col_prompt_]));
  if (!o)
    fail(1, fmt::format("GeneratedTokens: expected an integer, got '{}'", fields_[col_output_]));
  r.prompt_tokens = *p;
  r.output_tokens = *o;
  return r;
}

TraceRow TraceSource::parse_generic_csv(const std::string& line) {
  if (!split_csv_line(line, fields_)) fail(1, "unterminated quote");
  std::size_t need = std::max({col_time_, col_prompt_, col_output_}) + 1;
  for (const auto& col :
       {col_group_, col_prefix_tokens_, col_max_tokens_, col_ignore_eos_, col_eos_})
    if (col) need = std::max(need, *col + 1);
  if (fields_.size() < need)
    fail(1, fmt::format("expected {} fields, got {}", need, fields_.size()));
  TraceRow r;
  auto t = parse_double_text(fields_[col_time_]);
  if (!t || *t < 0 || *t > 1e9)
    fail(1, fmt::format("arrival_s: expected seconds in [0, 1e9], got '{}'", fields_[col_time_]));
  r.timestamp_ns = seconds_to_ns(*t);
  auto p = parse_int_text(fields_[col_prompt_]);
  auto o = parse_int_text(fields_[col_output_]);
  if (!p)
    fail(1, fmt::format("prompt_tokens: expected an integer, got '{}'", fields_[col_prompt_]));
  if (!o)
    fail(1, fmt::format("output_tokens: expected an integer, got '{}'", fields_[col_output_]));
  r.prompt_tokens = *p;
  r.output_tokens = *o;
  if (col_group_ && !fields_[*col_group_].empty()) {
    auto g = parse_int_text(fields_[*col_group_]);
    if (!g || *g < -1 || *g > std::numeric_limits<std::int32_t>::max())
      fail(1,
           fmt::format("prefix_group: expected an integer >= -1, got '{}'", fields_[*col_group_]));
    r.prefix_group = static_cast<std::int32_t>(*g);
  }
  if (col_prefix_tokens_ && !fields_[*col_prefix_tokens_].empty()) {
    auto n = parse_int_text(fields_[*col_prefix_tokens_]);
    if (!n || *n < 0)
      fail(1, fmt::format("prefix_tokens: expected an integer >= 0, got '{}'",
                          fields_[*col_prefix_tokens_]));
    r.prefix_tokens = *n;
  }
  parse_csv_limits(r);
  return r;
}

void TraceSource::parse_csv_limits(TraceRow& r) {
  auto cell = [&](const std::optional<std::size_t>& col) -> const std::string* {
    return col && !fields_[*col].empty() ? &fields_[*col] : nullptr;
  };
  if (const std::string* f = cell(col_max_tokens_)) {
    auto n = parse_int_text(*f);
    if (!n || *n < 1 || *n > std::numeric_limits<std::int32_t>::max())
      fail(1, fmt::format("max_tokens: expected an integer >= 1, got '{}'", *f));
    r.max_tokens = static_cast<std::int32_t>(*n);
  }
  if (const std::string* f = cell(col_ignore_eos_)) {
    std::string v = *f;
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
    if (v == "true" || v == "1")
      r.ignore_eos = true;
    else if (v == "false" || v == "0")
      r.ignore_eos = false;
    else
      fail(1, fmt::format("ignore_eos: expected true or false, got '{}'", *f));
  }
  if (const std::string* f = cell(col_eos_)) {
    auto n = parse_int_text(*f);
    if (!n || *n < 0 || *n >= vocab_size_)
      fail(1,
           fmt::format("eos_token_id: expected an integer in [0, {}), got '{}'", vocab_size_, *f));
    r.eos_token_id = static_cast<std::int32_t>(*n);
  }
}

TraceRow TraceSource::parse_json_row(const std::string& line) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();
    const std::size_t col = what.find("column ");
    const std::size_t colon = col == std::string::npos ? std::string::npos : what.find(": ", col);
    fail(static_cast<std::int64_t>(std::max<std::size_t>(e.byte, 1)),
         "JSON " + (colon == std::string::npos ? what : what.substr(colon + 2)));
  }
  if (!j.is_object()) fail(1, "expected a JSON object per line");
  auto col_of = [&](std::string_view key) -> std::int64_t {
    const std::size_t at = line.find("\"" + std::string(key) + "\"");
    return at == std::string::npos ? 1 : static_cast<std::int64_t>(at) + 1;
  };
  auto number = [&](std::string_view key, bool required) -> std::optional<double> {
    auto it = j.find(std::string(key));
    if (it == j.end() || it->is_null()) {
      if (required) fail(1, fmt::format("missing field '{}'", key));
      return std::nullopt;
    }
    if (!it->is_number())
      fail(col_of(key), fmt::format("field '{}' must be a number, got {}", key, it->dump()));
    const double v = it->get<double>();
    if (!std::isfinite(v) || std::fabs(v) > 1e15)
      fail(col_of(key), fmt::format("field '{}' is out of range: {}", key, it->dump()));
    return v;
  };
  auto integer = [&](std::string_view key, bool required) -> std::optional<std::int64_t> {
    auto v = number(key, required);
    if (!v) return std::nullopt;
    if (*v != std::floor(*v))
      fail(col_of(key), fmt::format("field '{}' must be an integer, got {}", key, *v));
    return static_cast<std::int64_t>(*v);
  };
  TraceRow r;
  if (config_.format == TraceConfig::Format::kMooncake) {
    const double ts_ms = *number("timestamp", true);
    if (ts_ms < 0 || ts_ms > 9e12)
      fail(col_of("timestamp"),
           fmt::format("field 'timestamp' must be in [0, 9e12] ms, got {}", ts_ms));
    r.timestamp_ns = static_cast<std::int64_t>(std::llround(ts_ms * 1e6));
    r.prompt_tokens = *integer("input_length", true);
    r.output_tokens = *integer("output_length", true);
    auto it = j.find("hash_ids");
    if (it == j.end() || !it->is_array())
      fail(col_of("hash_ids"), "missing array field 'hash_ids'");
    r.hash_ids.reserve(it->size());
    for (const auto& h : *it) {
      if (!h.is_number_integer() || h.get<std::int64_t>() < 0)
        fail(col_of("hash_ids"), fmt::format("hash_ids: expected integers >= 0, got {}", h.dump()));
      r.hash_ids.push_back(h.get<std::int64_t>());
    }
    const std::int64_t b = config_.hash_block_tokens;
    if (r.prompt_tokens >= 1 &&
        static_cast<std::int64_t>(r.hash_ids.size()) != (r.prompt_tokens + b - 1) / b)
      fail(col_of("hash_ids"),
           fmt::format("{} hash_ids for input_length {}: expected ceil({} / {}) = {}",
                       r.hash_ids.size(), r.prompt_tokens, r.prompt_tokens, b,
                       (r.prompt_tokens + b - 1) / b));
  } else {
    const double t = *number("arrival_s", true);
    if (t < 0 || t > 1e9)
      fail(col_of("arrival_s"), fmt::format("field 'arrival_s' must be in [0, 1e9] s, got {}", t));
    r.timestamp_ns = seconds_to_ns(t);
    r.prompt_tokens = *integer("prompt_tokens", true);
    r.output_tokens = *integer("output_tokens", true);
    if (auto g = integer("prefix_group", false)) {
      if (*g < -1 || *g > std::numeric_limits<std::int32_t>::max())
        fail(col_of("prefix_group"), fmt::format("field 'prefix_group' must be >= -1, got {}", *g));
      r.prefix_group = static_cast<std::int32_t>(*g);
    }
    if (auto n = integer("prefix_tokens", false)) {
      if (*n < 0)
        fail(col_of("prefix_tokens"),
             fmt::format("field 'prefix_tokens' must be >= 0, got {}", *n));
      r.prefix_tokens = *n;
    }
  }
  // Per-request limits (every JSON format).
  if (auto n = number("max_tokens", false)) {
    if (*n != std::floor(*n) || *n < 1 || *n > std::numeric_limits<std::int32_t>::max())
      fail(col_of("max_tokens"), fmt::format("field 'max_tokens' must be an integer >= 1, got {}",
                                             j["max_tokens"].dump()));
    r.max_tokens = static_cast<std::int32_t>(*n);
  }
  if (auto it = j.find("ignore_eos"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean())
      fail(col_of("ignore_eos"),
           fmt::format("field 'ignore_eos' must be true or false, got {}", it->dump()));
    r.ignore_eos = it->get<bool>();
  }
  if (auto n = number("eos_token_id", false)) {
    if (*n != std::floor(*n) || *n < 0 || *n >= vocab_size_)
      fail(col_of("eos_token_id"),
           fmt::format("field 'eos_token_id' must be an integer in [0, {}), got {}", vocab_size_,
                       j["eos_token_id"].dump()));
    r.eos_token_id = static_cast<std::int32_t>(*n);
  }
  return r;
}

std::optional<TraceRow> TraceSource::read_row() {
  std::string line;
  while (std::getline(in_, line)) {
    ++line_no_;
    if (line.empty() || line == "\r") continue;
    TraceRow r;
    switch (config_.format) {
      case TraceConfig::Format::kAzure:
        r = parse_azure(line);
        break;
      case TraceConfig::Format::kCsv:
        r = parse_generic_csv(line);
        break;
      case TraceConfig::Format::kMooncake:
      case TraceConfig::Format::kJsonl:
        r = parse_json_row(line);
        break;
    }
    if (r.prompt_tokens < 1 || r.prompt_tokens > kMaxPromptTokens)
      fail(1, fmt::format("prompt length must be in [1, {}], got {}", kMaxPromptTokens,
                          r.prompt_tokens));
    if (r.output_tokens < 0)
      fail(1, fmt::format("output length must be >= 0, got {}", r.output_tokens));
    if (r.ignore_eos == false && !r.eos_token_id && !per_request_.eos_token_id)
      fail(1,
           "ignore_eos is false but there is no eos_token_id (give one in the row or as "
           "workload.eos_token_id)");
    return r;
  }
  return std::nullopt;
}

std::optional<RequestSpec> TraceSource::next() {
  if (config_.max_requests && emitted_ >= *config_.max_requests) return std::nullopt;
  auto row = read_row();
  if (!row) return std::nullopt;
  const bool relative = config_.format == TraceConfig::Format::kAzure ||
                        config_.format == TraceConfig::Format::kMooncake;
  if (!first_timestamp_ns_) first_timestamp_ns_ = relative ? row->timestamp_ns : 0;
  const double offset_ns = static_cast<double>(row->timestamp_ns - *first_timestamp_ns_);
  const double scaled_ns = offset_ns * config_.time_scale;
  const SimTimeNs arrival = scaled_ns >= static_cast<double>(kMaxSimTimeNs)
                                ? kMaxSimTimeNs
                                : static_cast<SimTimeNs>(std::llround(scaled_ns));
  if (arrival < last_arrival_ns_)
    fail(1, fmt::format(
                "arrival goes backwards: {:.9f} s after {:.9f} s (rows must be in time order)",
                static_cast<double>(arrival) / 1e9, static_cast<double>(last_arrival_ns_) / 1e9));
  last_arrival_ns_ = arrival;

  RequestSpec r;
  r.id = static_cast<std::uint64_t>(emitted_++);
  r.arrival_ns = arrival;
  r.output_tokens = static_cast<std::int32_t>(
      std::clamp<std::int64_t>(row->output_tokens, 1, std::numeric_limits<std::int32_t>::max()));
  r.ignore_eos = row->ignore_eos.value_or(per_request_.ignore_eos);
  r.eos_token_id = row->eos_token_id ? row->eos_token_id : per_request_.eos_token_id;
  if (row->max_tokens)
    r.max_tokens = row->max_tokens;
  else
    set_default_max_tokens(r);
  if (per_request_.client_timeout_s)
    r.client_timeout_ns = seconds_to_ns(*per_request_.client_timeout_s);
  r.output_seed = content_key(seed_, "output", r.id);
  r.prefix_group = row->prefix_group;
  // The prompt is deferred (a few segments, see RequestSpec): the simulator makes its tokens
  // when the scheduler may look at it.
  if (config_.format == TraceConfig::Format::kMooncake) {
    const std::int64_t b = config_.hash_block_tokens;
    for (std::size_t i = 0; i < row->hash_ids.size(); ++i) {
      const std::int64_t n = std::min(b, row->prompt_tokens - static_cast<std::int64_t>(i) * b);
      r.defer_tokens(content_key(0, "mooncake", static_cast<std::uint64_t>(row->hash_ids[i])), n,
                     vocab_size_);
    }
  } else {
    std::int64_t shared = 0;
    if (row->prefix_group >= 0) {
      shared = std::min(row->prompt_tokens,
                        row->prefix_tokens >= 0 ? row->prefix_tokens : config_.prefix_tokens);
      r.defer_tokens(
          content_key(seed_, "trace_prefix", static_cast<std::uint64_t>(row->prefix_group)), shared,
          vocab_size_);
    }
    r.defer_tokens(content_key(seed_, "user", r.id), row->prompt_tokens - shared, vocab_size_);
  }
  return r;
}

}  // namespace kvsim
