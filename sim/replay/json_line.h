#pragma once
// A small, strict JSON parser for one line of an op trace, built for speed: the document is
// parsed into a flat array of values ("tape") that is reused from line to line, so steady-state
// parsing allocates nothing. Strings are views into the line (or into an internal buffer when
// they contain escapes). Errors carry the 1-based column.

#include <charconv>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvsim {

class JsonLine {
 public:
  enum class Type : std::uint8_t { kNull, kBool, kInt, kDouble, kString, kArray, kObject };
  struct Value {
    Type type = Type::kNull;
    bool b = false;
    std::int64_t i = 0;
    double d = 0;
    std::string_view s;      // kString (object keys are kString values too)
    std::uint32_t size = 0;  // kArray: elements, kObject: members
    std::uint32_t end = 0;   // index of the first value after this subtree
  };
  using Index = std::uint32_t;
  static constexpr Index kNone = 0xffffffffu;

  /// Parses `line` (the whole line must be one JSON value, whitespace around it allowed). Returns
  /// false and sets error() ("col N: ...") on malformed input. `line` must outlive the values.
  bool parse(std::string_view line);
  const std::string& error() const { return error_; }

  const Value& operator[](Index i) const { return values_[i]; }
  static constexpr Index root() { return 0; }
  /// The value of member `key` of object `obj`, or kNone. O(members).
  Index find(Index obj, std::string_view key) const;
  /// First element of an array (or first key of an object); next sibling of a value.
  static Index first_child(Index container) { return container + 1; }
  Index next(Index i) const { return values_[i].end; }

  /// True for an absent member (kNone) and for a JSON null.
  bool is_null_or_absent(Index i) const { return i == kNone || values_[i].type == Type::kNull; }

 private:
  // Each parser returns the position after what it read, or nullptr after fail() set error_.
  const char* parse_value(const char* p, std::uint32_t depth);
  const char* parse_string(const char* p, std::string_view& out);
  const char* parse_string_escaped(const char* p, const char* start, std::string_view& out);
  const char* parse_number(const char* p, Value& v);
  const char* fail(const char* p, const char* what);
  Index push() {
    if (count_ == values_.size()) values_.resize(values_.empty() ? 64 : 2 * values_.size());
    values_[count_] = Value{};
    return count_++;
  }
  const char* skip_ws(const char* p) const {
    while (p < end_ && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) ++p;
    return p;
  }

  const char* begin_ = nullptr;
  const char* end_ = nullptr;
  std::vector<Value> values_;  // the first count_ are this line's
  Index count_ = 0;
  std::string unescaped_;  // reserved to the line length before parsing: views stay valid
  std::string error_;
};

/// A growable output buffer with inlined appends (std::string's push_back is an out-of-line call
/// per character). Grows by doubling; clear() keeps the capacity.
class OutBuf {
 public:
  void put(char c) {
    if (size_ == cap_) grow(1);
    data_[size_++] = c;
  }
  void put(const char* p, std::size_t n) {
    if (size_ + n > cap_) grow(n);
    std::memcpy(data_.get() + size_, p, n);
    size_ += n;
  }
  void put(std::string_view s) { put(s.data(), s.size()); }
  /// Space for `n` more bytes at end(); commit them with advance().
  char* reserve_tail(std::size_t n) {
    if (size_ + n > cap_) grow(n);
    return data_.get() + size_;
  }
  void advance(std::size_t n) { size_ += n; }
  void truncate(std::size_t n) { size_ = n < size_ ? n : size_; }
  void clear() { size_ = 0; }
  std::size_t size() const { return size_; }
  const char* data() const { return data_.get(); }
  std::string_view view() const { return {data_.get(), size_}; }

 private:
  void grow(std::size_t need);
  std::unique_ptr<char[]> data_;
  std::size_t size_ = 0;
  std::size_t cap_ = 0;
};

/// Appends JSON text to an OutBuf. Keys and strings are escaped as JSON requires.
class JsonWriter {
 public:
  explicit JsonWriter(OutBuf& out) : out_(out) {}
  JsonWriter& begin_object() {
    sep();
    out_.put('{');
    first_ = true;
    return *this;
  }
  JsonWriter& end_object() {
    out_.put('}');
    first_ = false;
    return *this;
  }
  JsonWriter& begin_array() {
    sep();
    out_.put('[');
    first_ = true;
    return *this;
  }
  JsonWriter& end_array() {
    out_.put(']');
    first_ = false;
    return *this;
  }
  JsonWriter& key(std::string_view k) {
    sep();
    string_raw(k);
    out_.put(':');
    first_ = true;
    return *this;
  }
  /// A key spelled as a string literal: written as `"k":` in one copy (the escape check folds
  /// away for a literal; one that needs escaping takes key(std::string_view)).
  template <std::size_t N>
  JsonWriter& key(const char (&k)[N]) {
    constexpr std::size_t n = N - 1;  // without the terminating NUL
    for (std::size_t i = 0; i < n; ++i)
      if (k[i] == '"' || k[i] == '\\' || static_cast<unsigned char>(k[i]) < 0x20)
        return key(std::string_view(k, n));
    sep();
    char* p = out_.reserve_tail(n + 3);
    p[0] = '"';
    std::memcpy(p + 1, k, n);
    p[n + 1] = '"';
    p[n + 2] = ':';
    out_.advance(n + 3);
    first_ = true;
    return *this;
  }
  /// `[a,b,...]` of the integers `to_int(x)` for x in `items` (each fits 64 bits), with one
  /// capacity check for the whole array: the same text as begin_array, value(...), end_array.
  template <class Range, class ToInt>
  JsonWriter& int_array(const Range& items, ToInt to_int) {
    sep();
    char* const start = out_.reserve_tail(2 + 21 * static_cast<std::size_t>(std::size(items)));
    char* p = start;
    *p++ = '[';
    bool first = true;
    for (const auto& x : items) {
      if (!first) *p++ = ',';
      first = false;
      p = std::to_chars(p, p + 20, static_cast<std::int64_t>(to_int(x))).ptr;
    }
    *p++ = ']';
    out_.advance(static_cast<std::size_t>(p - start));
    first_ = false;
    return *this;
  }
  JsonWriter& value(std::int64_t v) {
    sep();
    char* p = out_.reserve_tail(24);
    out_.advance(static_cast<std::size_t>(std::to_chars(p, p + 24, v).ptr - p));
    return *this;
  }
  JsonWriter& value(double v);
  JsonWriter& value(bool v) {
    sep();
    if (v)
      out_.put("true", 4);
    else
      out_.put("false", 5);
    return *this;
  }
  JsonWriter& value(std::string_view v) {
    sep();
    string_raw(v);
    return *this;
  }
  /// `["a","b",...]` of the strings `view(x)` for x in `items`: the same text as begin_array,
  /// value(...), end_array, copying each string that needs no escaping in one pass.
  template <class Range, class ToView>
  JsonWriter& string_array(const Range& items, ToView view) {
    sep();
    out_.put('[');
    bool first = true;
    for (const auto& x : items) {
      const std::string_view s = view(x);
      char* const start = out_.reserve_tail(s.size() + 3);
      char* p = start;
      const std::size_t comma = first ? 0 : 1;
      if (!first) *p++ = ',';
      first = false;
      *p++ = '"';
      for (char c : s) {
        if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) {
          out_.advance(comma);  // keep the comma; the escaped string writes its own quotes
          string_escaped(s);
          p = nullptr;
          break;
        }
        *p++ = c;
      }
      if (!p) continue;
      *p++ = '"';
      out_.advance(static_cast<std::size_t>(p - start));
    }
    out_.put(']');
    first_ = false;
    return *this;
  }
  JsonWriter& value(const char* v) { return value(std::string_view(v)); }
  /// Writes `json`, one complete JSON value, as it is.
  JsonWriter& raw(std::string_view json) {
    sep();
    out_.put(json);
    return *this;
  }
  JsonWriter& null() {
    sep();
    out_.put("null", 4);
    return *this;
  }

 private:
  void sep() {
    if (!first_) out_.put(',');
    first_ = false;
  }
  void string_raw(std::string_view s) {
    for (char c : s)
      if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) return string_escaped(s);
    char* p = out_.reserve_tail(s.size() + 2);
    p[0] = '"';
    std::memcpy(p + 1, s.data(), s.size());
    p[s.size() + 1] = '"';
    out_.advance(s.size() + 2);
  }
  void string_escaped(std::string_view s);
  OutBuf& out_;
  bool first_ = true;
};

}  // namespace kvsim
