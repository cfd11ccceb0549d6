#pragma once
// The offm mode of shared/spec/ops-format-offload.md §2: vLLM v0.20.1's CPU offloading manager
// alone (OffloadingManager), as vLLM's tests/v1/kv_offload/test_cpu_manager.py drives it. Keys
// are the trace's own values (ints or strings), interned by vLLM's identity str(value); results
// give each key back as the trace first wrote it.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/offload/offloading_manager.h"
#include "sim/replay/json_line.h"

namespace kvsim {

class OffmReplay {
 public:
  explicit OffmReplay(const OffloadManagerConfig& config) : manager_(config) {}

  /// The key of a trace value (int or string), interned; false for another JSON type.
  bool intern(const JsonLine& json, JsonLine::Index value, OffloadKey& key);
  /// Writes `key` as the trace first spelled it.
  void write_key(JsonWriter& w, OffloadKey key) const;
  /// The tier (§3 with keys) and, with a filter, its tracker.
  void write_snapshot(JsonWriter& w) const;
  /// {"events": [...]} since the last call (the events are taken).
  void write_take_events(JsonWriter& w);

  OffloadingManager& manager() { return manager_; }
  const OffloadingManager& manager() const { return manager_; }
  PrepareStoreOutput& store_out() { return store_out_; }
  std::vector<OffloadKey>& scratch_keys() { return scratch_keys_; }
  std::vector<std::int64_t>& scratch_blocks() { return scratch_blocks_; }

 private:
  struct Spelling {
    bool is_int = false;
    std::int64_t i = 0;
    std::string s;
  };
  OffloadingManager manager_;
  std::unordered_map<std::string, std::int64_t> ids_;  // str(value) -> key
  std::vector<Spelling> spellings_;                    // by key
  PrepareStoreOutput store_out_;
  std::vector<OffloadKey> scratch_keys_;
  std::vector<std::int64_t> scratch_blocks_;
};

}  // namespace kvsim
