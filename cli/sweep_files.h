#pragma once
// A sweep folder's own files (sim/OUTPUTS.md, "Sweeps"): sweep.json, the sweep's points (each
// run folder's name and the hash of the config.resolved.yaml its run writes), written by
// `kvsim sweep` before anything runs (and by --emit-jobs); sweep.csv, one row per run, written by
// `kvsim sweep` after its runs and by `kvsim merge` from any set of run folders. Both commands
// gather through gather_sweep(), so a sweep merged from folders run anywhere, in any order, is
// byte for byte the folder `kvsim sweep` writes.

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kvsim::cli {

/// One point of a sweep: its run folder's name and the xxh3-64 (16 hex digits) of its
/// config.resolved.yaml text.
struct SweepPoint {
  std::string run;
  std::string config_xxh3;
  bool operator==(const SweepPoint&) const = default;
};

/// xxh3-64 of `text` as 16 lowercase hex digits.
[[nodiscard]] std::string xxh3_hex(const std::string& text);

/// sweep.json's text: the scenario path and --set values as given (for people), then the points.
[[nodiscard]] std::string sweep_manifest_json(const std::string& scenario_path,
                                              const std::string& name,
                                              const std::vector<std::string>& sets,
                                              const std::vector<SweepPoint>& points);

/// The run folders of `dir` (subfolders holding a summary.json; `.tmp-` folders skipped), sorted
/// by name.
[[nodiscard]] std::vector<std::filesystem::path> run_subfolders(const std::filesystem::path& dir);

struct GatherResult {
  std::size_t rows = 0;                // rows of the table
  std::vector<std::string> missing;    // points of sweep.json with no run
  std::vector<std::string> copied;     // run folders copied into the sweep folder
  std::filesystem::path table;         // where the table went
};

/// Gathers the runs of one sweep from `inputs` (each a run folder or a folder holding run folders;
/// `into`, when it exists, is read as one more input), checks them and writes the table.
/// Checks (each a one-line ConfigError naming the path; nothing written when one fails): every
/// input is a run folder or holds some; every sweep.json found lists the same points; with a
/// sweep.json, every run is one of its points and its config.resolved.yaml hashes to that
/// point's; a point found twice has the same summary.json and config.resolved.yaml both times.
/// With `into`: run folders not already there are copied in (each as `<name>.tmp-PID`, renamed
/// when complete), and sweep.json too when it has none. The table goes to `table` (default
/// `into`/sweep.csv).
GatherResult gather_sweep(const std::vector<std::filesystem::path>& inputs,
                          const std::optional<std::filesystem::path>& into,
                          const std::optional<std::filesystem::path>& table);

}  // namespace kvsim::cli
