#include "sim/json_line.h"

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

bool JsonLine::fail(const char* what) {
  error_ = "col " + std::to_string(pos_ + 1) + ": " + what;
  return false;
}

bool JsonLine::parse(std::string_view line) {
  text_ = line;
  pos_ = 0;
  values_.clear();
  unescaped_.clear();
  unescaped_.reserve(line.size());
  error_.clear();
  skip_ws();
  if (!parse_value(0)) return false;
  skip_ws();
  if (pos_ != text_.size()) return fail("unexpected text after the JSON value");
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

bool JsonLine::parse_string(std::string_view& out) {
  // pos_ is at the opening quote.
  ++pos_;
  const std::size_t start = pos_;
  while (pos_ < text_.size()) {
    const char c = text_[pos_];
    if (c == '"') {
      out = text_.substr(start, pos_ - start);
      ++pos_;
      return true;
    }
    if (c == '\\') break;
    if (static_cast<unsigned char>(c) < 0x20) return fail("control character in string");
    ++pos_;
  }
  if (pos_ >= text_.size()) return fail("unterminated string");
  // Slow path: the string has escapes; decode into unescaped_ (reserved: no reallocation).
  const std::size_t out_start = unescaped_.size();
  unescaped_.append(text_.substr(start, pos_ - start));
  while (pos_ < text_.size()) {
    const char c = text_[pos_];
    if (c == '"') {
      out = std::string_view(unescaped_).substr(out_start);
      ++pos_;
      return true;
    }
    if (static_cast<unsigned char>(c) < 0x20) return fail("control character in string");
    if (c != '\\') {
      unescaped_ += c;
      ++pos_;
      continue;
    }
    if (++pos_ >= text_.size()) break;
    const char e = text_[pos_++];
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
        if (pos_ + 4 > text_.size()) return fail("short \\u escape");
        std::uint32_t cp = 0;
        auto r = std::from_chars(text_.data() + pos_, text_.data() + pos_ + 4, cp, 16);
        if (r.ptr != text_.data() + pos_ + 4) return fail("bad \\u escape");
        pos_ += 4;
        // A lone or paired surrogate: decoded leniently (the op format never needs them).
        if (unescaped_.size() + 4 > unescaped_.capacity()) return fail("escape too long");
        append_utf8(unescaped_, cp);
        break;
      }
      default:
        return fail("bad escape in string");
    }
  }
  return fail("unterminated string");
}

bool JsonLine::parse_number(Value& v) {
  const std::size_t start = pos_;
  if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
  if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9') return fail("bad number");
  if (text_[pos_] == '0' && pos_ + 1 < text_.size() && text_[pos_ + 1] >= '0' &&
      text_[pos_ + 1] <= '9')
    return fail("leading zero in number");
  while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
  bool is_double = false;
  if (pos_ < text_.size() && text_[pos_] == '.') {
    is_double = true;
    ++pos_;
    if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9') return fail("bad fraction");
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
  }
  if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
    is_double = true;
    ++pos_;
    if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
    if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9') return fail("bad exponent");
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
  }
  const char* first = text_.data() + start;
  const char* last = text_.data() + pos_;
  if (!is_double) {
    auto r = std::from_chars(first, last, v.i);
    if (r.ec == std::errc()) {
      v.type = Type::kInt;
      v.d = static_cast<double>(v.i);
      return true;
    }
  }
  auto r = std::from_chars(first, last, v.d);
  if (r.ec != std::errc() && r.ec != std::errc::result_out_of_range) return fail("bad number");
  v.type = Type::kDouble;
  return true;
}

bool JsonLine::parse_value(std::uint32_t depth) {
  if (depth > kMaxDepth) return fail("nesting too deep");
  if (pos_ >= text_.size()) return fail("unexpected end of line");
  const Index self = static_cast<Index>(values_.size());
  values_.emplace_back();
  const char c = text_[pos_];
  switch (c) {
    case '{': {
      values_[self].type = Type::kObject;
      ++pos_;
      skip_ws();
      std::uint32_t n = 0;
      if (pos_ < text_.size() && text_[pos_] == '}') {
        ++pos_;
      } else {
        while (true) {
          skip_ws();
          if (pos_ >= text_.size() || text_[pos_] != '"') return fail("expected a key string");
          const Index k = static_cast<Index>(values_.size());
          values_.emplace_back();
          std::string_view key;
          if (!parse_string(key)) return false;
          values_[k].type = Type::kString;
          values_[k].s = key;
          values_[k].end = k + 1;
          skip_ws();
          if (pos_ >= text_.size() || text_[pos_] != ':') return fail("expected ':'");
          ++pos_;
          skip_ws();
          if (!parse_value(depth + 1)) return false;
          ++n;
          skip_ws();
          if (pos_ < text_.size() && text_[pos_] == ',') {
            ++pos_;
            continue;
          }
          if (pos_ < text_.size() && text_[pos_] == '}') {
            ++pos_;
            break;
          }
          return fail("expected ',' or '}'");
        }
      }
      values_[self].size = n;
      break;
    }
    case '[': {
      values_[self].type = Type::kArray;
      ++pos_;
      skip_ws();
      std::uint32_t n = 0;
      if (pos_ < text_.size() && text_[pos_] == ']') {
        ++pos_;
      } else {
        while (true) {
          skip_ws();
          if (!parse_value(depth + 1)) return false;
          ++n;
          skip_ws();
          if (pos_ < text_.size() && text_[pos_] == ',') {
            ++pos_;
            continue;
          }
          if (pos_ < text_.size() && text_[pos_] == ']') {
            ++pos_;
            break;
          }
          return fail("expected ',' or ']'");
        }
      }
      values_[self].size = n;
      break;
    }
    case '"': {
      std::string_view s;
      if (!parse_string(s)) return false;
      values_[self].type = Type::kString;
      values_[self].s = s;
      break;
    }
    case 't':
      if (text_.substr(pos_, 4) != "true") return fail("bad literal");
      pos_ += 4;
      values_[self].type = Type::kBool;
      values_[self].b = true;
      break;
    case 'f':
      if (text_.substr(pos_, 5) != "false") return fail("bad literal");
      pos_ += 5;
      values_[self].type = Type::kBool;
      break;
    case 'n':
      if (text_.substr(pos_, 4) != "null") return fail("bad literal");
      pos_ += 4;
      break;
    default: {
      Value v;
      if (!parse_number(v)) return false;
      values_[self].type = v.type;
      values_[self].i = v.i;
      values_[self].d = v.d;
      break;
    }
  }
  values_[self].end = static_cast<Index>(values_.size());
  return true;
}

JsonWriter& JsonWriter::value(std::int64_t v) {
  sep();
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out_.append(buf, r.ptr);
  return *this;
}

JsonWriter& JsonWriter::value(double v) {
  sep();
  if (!std::isfinite(v)) {
    out_ += "null";
    return *this;
  }
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip form
  out_.append(buf, r.ptr);
  // Keep a float recognisable as a float (Python prints 0.0, not 0).
  std::string_view s(buf, static_cast<std::size_t>(r.ptr - buf));
  if (s.find_first_of(".eE") == std::string_view::npos) out_ += ".0";
  return *this;
}

void JsonWriter::string_raw(std::string_view s) {
  out_ += '"';
  for (char c : s) {
    switch (c) {
      case '"':
        out_ += "\\\"";
        break;
      case '\\':
        out_ += "\\\\";
        break;
      case '\n':
        out_ += "\\n";
        break;
      case '\r':
        out_ += "\\r";
        break;
      case '\t':
        out_ += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out_ += buf;
        } else {
          out_ += c;
        }
    }
  }
  out_ += '"';
}

}  // namespace kvsim
