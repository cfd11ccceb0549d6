#include "sim/common/csv_util.h"

#include <charconv>
#include <cmath>

namespace kvsim {

namespace {
std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}
}  // namespace

bool split_csv_line(std::string_view line, std::vector<std::string>& fields) {
  fields.clear();
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::string field;
  bool in_quotes = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_quotes) {
      if (c == '"') {
        if (i + 1 < line.size() && line[i + 1] == '"') {
          field += '"';
          ++i;
        } else {
          in_quotes = false;
        }
      } else {
        field += c;
      }
    } else if (c == '"') {
      in_quotes = true;
    } else if (c == ',') {
      fields.push_back(std::move(field));
      field.clear();
    } else {
      field += c;
    }
  }
  fields.push_back(std::move(field));
  return !in_quotes;
}

std::optional<std::size_t> csv_column(const std::vector<std::string>& header,
                                      std::string_view name) {
  for (std::size_t i = 0; i < header.size(); ++i) {
    std::string_view h = trim(header[i]);
    // A UTF-8 byte order mark may precede the first name.
    if (i == 0 && h.starts_with("\xEF\xBB\xBF")) h.remove_prefix(3);
    if (h == name) return i;
  }
  return std::nullopt;
}

std::optional<double> parse_double_text(std::string_view field) {
  field = trim(field);
  if (!field.empty() && field.front() == '+') field.remove_prefix(1);
  if (field.empty()) return std::nullopt;
  double v = 0;
  auto [p, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
  if (ec != std::errc() || p != field.data() + field.size() || !std::isfinite(v))
    return std::nullopt;
  return v;
}

std::optional<std::int64_t> parse_int_text(std::string_view field) {
  field = trim(field);
  if (!field.empty() && field.front() == '+') field.remove_prefix(1);
  if (field.empty()) return std::nullopt;
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
  if (ec == std::errc() && p == field.data() + field.size()) return v;
  auto d = parse_double_text(field);
  if (!d || *d != std::floor(*d) || std::fabs(*d) > 9.0e18) return std::nullopt;
  return static_cast<std::int64_t>(*d);
}

}  // namespace kvsim
