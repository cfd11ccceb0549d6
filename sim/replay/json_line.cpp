#include "sim/replay/json_line.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace kvsim {
namespace {
constexpr std::uint32_t kMaxDepth = 64;

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}
}  // namespace

const char* JsonLine::fail(const char* p, const char* what) {
  error_ = "col " + std::to_string(p - begin_ + 1) + ": " + what;
  return nullptr;
}

bool JsonLine::parse(std::string_view line) {
  begin_ = line.data();
  end_ = line.data() + line.size();
  count_ = 0;
  unescaped_.clear();
  unescaped_.reserve(line.size());
  error_.clear();
  const char* p = parse_value(skip_ws(begin_), 0);
  if (!p) return false;
  p = skip_ws(p);
  if (p != end_) {
    fail(p, "unexpected text after the JSON value");
    return false;
  }
  return true;
}

JsonLine::Index JsonLine::find(Index obj, std::string_view key) const {
  if (obj == kNone || values_[obj].type != Type::kObject) return kNone;
  Index k = obj + 1;
  for (std::uint32_t m = 0; m < values_[obj].size; ++m) {
    const Index v = k + 1;
    if (values_[k].s == key) return v;
    k = values_[v].end;
  }
  return kNone;
}

const char* JsonLine::parse_string(const char* p, std::string_view& out) {
  // p is at the opening quote.
  const char* start = ++p;
  while (p < end_) {
    const auto c = static_cast<unsigned char>(*p);
    if (c == '"') {
      out = std::string_view(start, static_cast<std::size_t>(p - start));
      return p + 1;
    }
    if (c == '\\') return parse_string_escaped(p, start, out);
    if (c < 0x20) return fail(p, "control character in string");
    ++p;
  }
  return fail(p, "unterminated string");
}

// Slow path: the string has escapes; decode into unescaped_ (reserved: no reallocation).
const char* JsonLine::parse_string_escaped(const char* p, const char* start,
                                           std::string_view& out) {
  const std::size_t out_start = unescaped_.size();
  unescaped_.append(start, static_cast<std::size_t>(p - start));
  while (p < end_) {
    const char c = *p;
    if (c == '"') {
      out = std::string_view(unescaped_).substr(out_start);
      return p + 1;
    }
    if (static_cast<unsigned char>(c) < 0x20) return fail(p, "control character in string");
    if (c != '\\') {
      unescaped_ += c;
      ++p;
      continue;
    }
    if (++p >= end_) break;
    const char e = *p++;
    switch (e) {
      case '"':
        unescaped_ += '"';
        break;
      case '\\':
        unescaped_ += '\\';
        break;
      case '/':
        unescaped_ += '/';
        break;
      case 'b':
        unescaped_ += '\b';
        break;
      case 'f':
        unescaped_ += '\f';
        break;
      case 'n':
        unescaped_ += '\n';
        break;
      case 'r':
        unescaped_ += '\r';
        break;
      case 't':
        unescaped_ += '\t';
        break;
      case 'u': {
        if (end_ - p < 4) return fail(p, "short \\u escape");
        std::uint32_t cp = 0;
        auto r = std::from_chars(p, p + 4, cp, 16);
        if (r.ptr != p + 4) return fail(p, "bad \\u escape");
        p += 4;
        // Surrogates are decoded leniently (the op format never needs them).
        if (unescaped_.size() + 4 > unescaped_.capacity()) return fail(p, "escape too long");
        append_utf8(unescaped_, cp);
        break;
      }
      default:
        return fail(p - 1, "bad escape in string");
    }
  }
  return fail(p, "unterminated string");
}

const char* JsonLine::parse_number(const char* p, Value& v) {
  const char* start = p;
  bool neg = false;
  if (p < end_ && *p == '-') {
    neg = true;
    ++p;
  }
  if (p >= end_ || *p < '0' || *p > '9') return fail(p, "bad number");
  if (*p == '0' && p + 1 < end_ && p[1] >= '0' && p[1] <= '9')
    return fail(p, "leading zero in number");
  // Fast path: up to 18 digits and no fraction/exponent is an exact int64.
  std::uint64_t acc = 0;
  const char* digits = p;
  while (p < end_ && *p >= '0' && *p <= '9')
    acc = acc * 10 + static_cast<std::uint64_t>(*p++ - '0');
  const bool more = p < end_ && (*p == '.' || *p == 'e' || *p == 'E');
  if (!more && p - digits <= 18) {
    v.type = Type::kInt;
    v.i = neg ? -static_cast<std::int64_t>(acc) : static_cast<std::int64_t>(acc);
    v.d = static_cast<double>(v.i);
    return p;
  }
  bool is_double = false;
  if (p < end_ && *p == '.') {
    is_double = true;
    ++p;
    if (p >= end_ || *p < '0' || *p > '9') return fail(p, "bad fraction");
    while (p < end_ && *p >= '0' && *p <= '9') ++p;
  }
  if (p < end_ && (*p == 'e' || *p == 'E')) {
    is_double = true;
    ++p;
    if (p < end_ && (*p == '+' || *p == '-')) ++p;
    if (p >= end_ || *p < '0' || *p > '9') return fail(p, "bad exponent");
    while (p < end_ && *p >= '0' && *p <= '9') ++p;
  }
  if (!is_double) {
    auto r = std::from_chars(start, p, v.i);
    if (r.ec == std::errc()) {
      v.type = Type::kInt;
      v.d = static_cast<double>(v.i);
      return p;
    }
  }
  auto r = std::from_chars(start, p, v.d);
  if (r.ec != std::errc() && r.ec != std::errc::result_out_of_range)
    return fail(start, "bad number");
  v.type = Type::kDouble;
  return p;
}

const char* JsonLine::parse_value(const char* p, std::uint32_t depth) {
  if (depth > kMaxDepth) return fail(p, "nesting too deep");
  if (p >= end_) return fail(p, "unexpected end of line");
  const Index self = push();
  switch (*p) {
    case '{': {
      values_[self].type = Type::kObject;
      p = skip_ws(p + 1);
      std::uint32_t n = 0;
      if (p < end_ && *p == '}') {
        ++p;
      } else {
        while (true) {
          p = skip_ws(p);
          if (p >= end_ || *p != '"') return fail(p, "expected a key string");
          const Index k = push();
          std::string_view key;
          if (!(p = parse_string(p, key))) return nullptr;
          values_[k].type = Type::kString;
          values_[k].s = key;
          values_[k].end = k + 1;
          p = skip_ws(p);
          if (p >= end_ || *p != ':') return fail(p, "expected ':'");
          if (!(p = parse_value(skip_ws(p + 1), depth + 1))) return nullptr;
          ++n;
          p = skip_ws(p);
          if (p < end_ && *p == ',') {
            ++p;
            continue;
          }
          if (p < end_ && *p == '}') {
            ++p;
            break;
          }
          return fail(p, "expected ',' or '}'");
        }
      }
      values_[self].size = n;
      break;
    }
    case '[': {
      values_[self].type = Type::kArray;
      p = skip_ws(p + 1);
      std::uint32_t n = 0;
      if (p < end_ && *p == ']') {
        ++p;
      } else {
        while (true) {
          if (!(p = parse_value(skip_ws(p), depth + 1))) return nullptr;
          ++n;
          p = skip_ws(p);
          if (p < end_ && *p == ',') {
            ++p;
            continue;
          }
          if (p < end_ && *p == ']') {
            ++p;
            break;
          }
          return fail(p, "expected ',' or ']'");
        }
      }
      values_[self].size = n;
      break;
    }
    case '"': {
      std::string_view str;
      if (!(p = parse_string(p, str))) return nullptr;
      values_[self].type = Type::kString;
      values_[self].s = str;
      break;
    }
    case 't':
      if (!std::string_view(p, static_cast<std::size_t>(end_ - p)).starts_with("true"))
        return fail(p, "bad literal");
      p += 4;
      values_[self].type = Type::kBool;
      values_[self].b = true;
      break;
    case 'f':
      if (!std::string_view(p, static_cast<std::size_t>(end_ - p)).starts_with("false"))
        return fail(p, "bad literal");
      p += 5;
      values_[self].type = Type::kBool;
      break;
    case 'n':
      if (!std::string_view(p, static_cast<std::size_t>(end_ - p)).starts_with("null"))
        return fail(p, "bad literal");
      p += 4;
      break;
    default: {
      Value v;
      if (!(p = parse_number(p, v))) return nullptr;
      values_[self].type = v.type;
      values_[self].i = v.i;
      values_[self].d = v.d;
      break;
    }
  }
  values_[self].end = count_;
  return p;
}

void OutBuf::grow(std::size_t need) {
  std::size_t cap = cap_ ? cap_ * 2 : 4096;
  while (cap < size_ + need) cap *= 2;
  std::unique_ptr<char[]> d(new char[cap]);
  if (size_) std::memcpy(d.get(), data_.get(), size_);
  data_ = std::move(d);
  cap_ = cap;
}

JsonWriter& JsonWriter::value(double v) {
  sep();
  if (!std::isfinite(v)) {
    out_.put("null", 4);
    return *this;
  }
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip form
  const std::string_view s(buf, static_cast<std::size_t>(r.ptr - buf));
  out_.put(s);
  // Keep a float recognisable as a float (Python prints 0.0, not 0).
  if (s.find_first_of(".eE") == std::string_view::npos) out_.put(".0", 2);
  return *this;
}

void JsonWriter::string_escaped(std::string_view s) {
  out_.put('"');
  for (char c : s) {
    switch (c) {
      case '"':
        out_.put("\\\"", 2);
        break;
      case '\\':
        out_.put("\\\\", 2);
        break;
      case '\n':
        out_.put("\\n", 2);
        break;
      case '\r':
        out_.put("\\r", 2);
        break;
      case '\t':
        out_.put("\\t", 2);
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out_.put(buf, 6);
        } else {
          out_.put(c);
        }
    }
  }
  out_.put('"');
}

}  // namespace kvsim
