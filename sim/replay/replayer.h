#pragma once
// Replayer: the line protocol every op-trace replayer shares (shared/spec/ops-format*.md): one JSON
// op per line in, exactly one JSON result line per op out; a malformed or misused op answers
// {"error": "..."} and the replay goes on. A family's replayer implements dispatch() (its ops)
// and check_all_invariants(); make_replayer picks the one of a profile.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/common/types.h"
#include "core/engine_api.h"
#include "sim/replay/json_line.h"

namespace kvsim {

struct ReplayOptions {
  bool check_invariants = false;  // run check_all_invariants() after every op (aborts on failure)
};

class Replayer {
 public:
  explicit Replayer(ReplayOptions options) : options_(options) {}
  virtual ~Replayer() = default;
  Replayer(const Replayer&) = delete;
  Replayer& operator=(const Replayer&) = delete;

  /// Processes one line. Blank lines produce nothing and return false; any other line appends
  /// exactly one JSON line (with '\n') to `out` and returns true.
  bool process_line(std::string_view line, OutBuf& out);
  /// The same, appending to a string (convenient in tests; slower).
  bool process_line(std::string_view line, std::string& out);

  /// Number of ops that produced an error line.
  std::int64_t num_errors() const { return num_errors_; }

 protected:
  /// An op that fails: its message becomes the op's {"error": message} line.
  struct OpError {
    std::string message;
  };

  /// Runs the op named `op` (the current line is json_), writing its result object to `w`.
  virtual void dispatch(std::string_view op, JsonWriter& w) = 0;
  /// Aborts with a message when the replayed state breaks an invariant.
  virtual void check_all_invariants() const = 0;

  // Field access on the current op; throw OpError on a missing field or a wrong type.
  JsonLine::Index field(std::string_view key) const;
  std::int64_t get_int(std::string_view key) const;
  std::int64_t get_int_or(std::string_view key, std::int64_t dflt) const;
  bool get_bool_or(std::string_view key, bool dflt) const;
  std::string_view get_string(std::string_view key) const;
  void read_tokens(JsonLine::Index arr, std::vector<Token>& out) const;
  std::int64_t int_value(JsonLine::Index i, std::string_view what) const;

  ReplayOptions options_;
  JsonLine json_;

 private:
  OutBuf string_out_;
  std::int64_t num_errors_ = 0;
};

/// The replayer of `profile`'s op protocol; nullptr for a family without one (contiguous).
[[nodiscard]] std::unique_ptr<Replayer> make_replayer(Profile profile, ReplayOptions options = {});

}  // namespace kvsim
