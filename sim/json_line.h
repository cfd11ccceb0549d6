#pragma once
// A small, strict JSON parser for one line of an op trace, built for speed: the document is
// parsed into a flat array of values ("tape") that is reused from line to line, so steady-state
// parsing allocates nothing. Strings are views into the line (or into an internal buffer when
// they contain escapes). Errors carry the 1-based column.

#include <cstdint>
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

  /// Convenience typed access: kNone when absent; `ok` set false on a type mismatch.
  bool is_null_or_absent(Index i) const { return i == kNone || values_[i].type == Type::kNull; }

 private:
  bool parse_value(std::uint32_t depth);
  bool parse_string(std::string_view& out);
  bool parse_number(Value& v);
  bool fail(const char* what);
  void skip_ws() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\r' || text_[pos_] == '\n'))
      ++pos_;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  std::vector<Value> values_;
  std::string unescaped_;  // reserved to the line length before parsing: views stay valid
  std::string error_;
};

/// Appends JSON text to a string. Keys and strings are escaped as JSON requires.
class JsonWriter {
 public:
  explicit JsonWriter(std::string& out) : out_(out) {}
  JsonWriter& begin_object() {
    sep();
    out_ += '{';
    first_ = true;
    return *this;
  }
  JsonWriter& end_object() {
    out_ += '}';
    first_ = false;
    return *this;
  }
  JsonWriter& begin_array() {
    sep();
    out_ += '[';
    first_ = true;
    return *this;
  }
  JsonWriter& end_array() {
    out_ += ']';
    first_ = false;
    return *this;
  }
  JsonWriter& key(std::string_view k) {
    sep();
    string_raw(k);
    out_ += ':';
    first_ = true;
    return *this;
  }
  JsonWriter& value(std::int64_t v);
  JsonWriter& value(double v);
  JsonWriter& value(bool v) {
    sep();
    out_ += v ? "true" : "false";
    return *this;
  }
  JsonWriter& value(std::string_view v) {
    sep();
    string_raw(v);
    return *this;
  }
  JsonWriter& value(const char* v) { return value(std::string_view(v)); }
  JsonWriter& null() {
    sep();
    out_ += "null";
    return *this;
  }
  /// Pastes pre-rendered JSON as one value.
  JsonWriter& raw(std::string_view json) {
    sep();
    out_ += json;
    return *this;
  }

 private:
  void sep() {
    if (!first_) out_ += ',';
    first_ = false;
  }
  void string_raw(std::string_view s);
  std::string& out_;
  bool first_ = true;
};

}  // namespace kvsim
