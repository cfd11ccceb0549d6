#include "sim/replay/replayer.h"

#include <cmath>
#include <limits>

namespace kvsim {

namespace {
using Index = JsonLine::Index;
using Type = JsonLine::Type;
}  // namespace

bool Replayer::process_line(std::string_view line, OutBuf& out) {
  if (line.find_first_not_of(" \t\r\n") == std::string_view::npos) return false;
  const std::size_t mark = out.size();
  JsonWriter w(out);
  try {
    if (!json_.parse(line)) throw OpError{"JSONDecodeError: " + json_.error()};
    if (json_[JsonLine::root()].type != Type::kObject)
      throw OpError{"TypeError: op is not an object"};
    const Index op = json_.find(JsonLine::root(), "op");
    if (op == JsonLine::kNone || json_[op].type != Type::kString)
      throw OpError{"KeyError: missing string field 'op'"};
    dispatch(json_[op].s, w);
    if (options_.check_invariants) check_all_invariants();
  } catch (const OpError& e) {
    out.truncate(mark);
    JsonWriter ew(out);
    ew.begin_object().key("error").value(std::string_view(e.message)).end_object();
    ++num_errors_;
  }
  out.put('\n');
  return true;
}

bool Replayer::process_line(std::string_view line, std::string& out) {
  string_out_.clear();
  const bool answered = process_line(line, string_out_);
  out.append(string_out_.view());
  return answered;
}

// ---- field access -------------------------------------------------------------------------

Index Replayer::field(std::string_view key) const {
  const Index i = json_.find(JsonLine::root(), key);
  if (i == JsonLine::kNone) throw OpError{"KeyError: missing field '" + std::string(key) + "'"};
  return i;
}

std::int64_t Replayer::int_value(Index i, std::string_view what) const {
  const auto& v = json_[i];
  if (v.type == Type::kInt) return v.i;
  if (v.type == Type::kDouble && v.d == static_cast<double>(static_cast<std::int64_t>(v.d)) &&
      std::abs(v.d) < 9.0e18)
    return static_cast<std::int64_t>(v.d);
  throw OpError{"TypeError: '" + std::string(what) + "' must be an integer"};
}

std::int64_t Replayer::get_int(std::string_view key) const { return int_value(field(key), key); }

std::int64_t Replayer::get_int_or(std::string_view key, std::int64_t dflt) const {
  const Index i = json_.find(JsonLine::root(), key);
  return json_.is_null_or_absent(i) ? dflt : int_value(i, key);
}

bool Replayer::get_bool_or(std::string_view key, bool dflt) const {
  const Index i = json_.find(JsonLine::root(), key);
  if (json_.is_null_or_absent(i)) return dflt;
  if (json_[i].type != Type::kBool)
    throw OpError{"TypeError: '" + std::string(key) + "' must be a boolean"};
  return json_[i].b;
}

std::string_view Replayer::get_string(std::string_view key) const {
  const Index i = field(key);
  if (json_[i].type != Type::kString)
    throw OpError{"TypeError: '" + std::string(key) + "' must be a string"};
  return json_[i].s;
}

void Replayer::read_tokens(Index arr, std::vector<Token>& out) const {
  out.clear();
  if (json_[arr].type != Type::kArray) throw OpError{"TypeError: token list must be an array"};
  for (Index e = JsonLine::first_child(arr), k = 0; k < json_[arr].size; ++k, e = json_.next(e)) {
    const std::int64_t t = int_value(e, "token");
    if (t < std::numeric_limits<Token>::min() || t > std::numeric_limits<Token>::max())
      throw OpError{"ValueError: token id out of the 32-bit range"};
    out.push_back(static_cast<Token>(t));
  }
}

}  // namespace kvsim
