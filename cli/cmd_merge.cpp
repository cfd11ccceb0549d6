// kvsim merge PATH... [--into SWEEP_DIR] [-o FILE]
//   Gathers the runs of one sweep from any set of run folders (each PATH a run folder or a folder
//   holding run folders: the sweep folder of `kvsim sweep`, or copies made by its emitted jobs on
//   other machines) into SWEEP_DIR and writes SWEEP_DIR/sweep.csv: one row per run (the swept
//   keys, parsed from the folder names, then the summary.json scalars, kv_breakdown flattened as
//   kv_breakdown.<part>). The same code writes `kvsim sweep`'s own sweep.csv (cli/sweep_files.h).

#include <fmt/format.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli_args.h"
#include "cli/commands.h"
#include "cli/sweep_files.h"
#include "sim/common/errors.h"
#include "sim/common/text_file.h"
#include "sim/metrics/writers.h"

namespace kvsim::cli {
namespace {
namespace fs = std::filesystem;

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

/// "a.b=1,c=[1, 2]" -> {(a.b, 1), (c, [1, 2])}: a comma starts a new pair only when the text
/// after it up to the next '=' has no comma, bracket or brace.
std::vector<std::pair<std::string, std::string>> parse_point_name(const std::string& name) {
  std::vector<std::pair<std::string, std::string>> out;
  std::vector<std::string> parts;
  std::string cur;
  int depth = 0;
  for (char c : name) {
    if (c == '[' || c == '{') ++depth;
    if (c == ']' || c == '}') --depth;
    if (c == ',' && depth == 0) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  parts.push_back(cur);
  for (const std::string& p : parts) {
    const std::size_t eq = p.find('=');
    if (eq == std::string::npos) {
      if (out.empty()) return {};
      out.back().second += "," + p;
    } else {
      out.emplace_back(p.substr(0, eq), p.substr(eq + 1));
    }
  }
  return out;
}

bool less_value(const std::string& a, const std::string& b) {
  char* ea = nullptr;
  char* eb = nullptr;
  const double da = std::strtod(a.c_str(), &ea);
  const double db = std::strtod(b.c_str(), &eb);
  const bool na = !a.empty() && *ea == '\0', nb = !b.empty() && *eb == '\0';
  if (na && nb && da != db) return da < db;
  if (na != nb) return na;
  return a < b;
}

void flatten(const nlohmann::ordered_json& j, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object()) {
      flatten(*it, key, out);
    } else if (it->is_string()) {
      out.emplace_back(key, it->get<std::string>());
    } else if (!it->is_array()) {
      out.emplace_back(key, it->dump());
    }
  }
}

/// A run folder found among the inputs: its name (the point) and where it is.
struct FoundRun {
  std::string name;
  fs::path dir;
};

struct Manifest {
  fs::path file;
  std::string text;
  std::vector<SweepPoint> points;
};

std::optional<Manifest> read_manifest(const fs::path& dir) {
  const fs::path file = dir / "sweep.json";
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return std::nullopt;
  Manifest m{file, read_text_file(file.string()), {}};
  try {
    const nlohmann::json j = nlohmann::json::parse(m.text);
    for (const auto& p : j.at("points"))
      m.points.push_back({p.at("run").get<std::string>(), p.at("config_xxh3").get<std::string>()});
  } catch (const std::exception& e) {
    throw ConfigError(fmt::format("{}: not a sweep.json of kvsim sweep: {}", file.string(),
                                  e.what()));
  }
  return m;
}

/// `p` without a trailing separator, so that filename() names the folder ("a/b/" -> "a/b").
fs::path tidy(const fs::path& p) {
  fs::path n = p.lexically_normal();
  if (n.filename().empty() && n.has_parent_path()) n = n.parent_path();
  return n;
}

bool same_place(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec);
}

/// Whether two run folders of one point hold the same run (summary and configuration).
bool same_run(const fs::path& a, const fs::path& b) {
  for (const char* f : {"summary.json", "config.resolved.yaml"}) {
    const bool ea = fs::exists(a / f), eb = fs::exists(b / f);
    if (ea != eb) return false;
    if (ea && read_text_file((a / f).string()) != read_text_file((b / f).string())) return false;
  }
  return true;
}

/// Writes the table of `runs` to `out_file` (through a temporary file); returns the row count.
std::size_t write_table(const std::vector<FoundRun>& runs, const fs::path& out_file) {
  struct Row {
    std::vector<std::pair<std::string, std::string>> params, values;
  };
  std::vector<Row> rows;
  for (const FoundRun& run : runs) {
    const fs::path summary = run.dir / "summary.json";
    nlohmann::ordered_json j;
    try {
      j = nlohmann::ordered_json::parse(read_text_file(summary.string()));
    } catch (const nlohmann::json::exception& e) {
      throw ConfigError(fmt::format("{}: not valid JSON: {}", summary.string(), e.what()));
    }
    Row r;
    r.params = parse_point_name(run.name);
    flatten(j, "", r.values);
    rows.push_back(std::move(r));
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    const std::size_t n = std::min(a.params.size(), b.params.size());
    for (std::size_t i = 0; i < n; ++i) {
      if (a.params[i].first != b.params[i].first) return a.params[i].first < b.params[i].first;
      if (a.params[i].second != b.params[i].second)
        return less_value(a.params[i].second, b.params[i].second);
    }
    return a.params.size() < b.params.size();
  });
  std::vector<std::string> keys, cols;
  for (const Row& r : rows) {
    for (const auto& [k, v] : r.params)
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    for (const auto& [k, v] : r.values)
      if (std::find(cols.begin(), cols.end(), k) == cols.end()) cols.push_back(k);
  }
  std::string text;
  for (std::size_t i = 0; i < keys.size() + cols.size(); ++i)
    text += (i ? "," : "") + csv_field(i < keys.size() ? keys[i] : cols[i - keys.size()]);
  text += '\n';
  for (const Row& r : rows) {
    std::map<std::string, std::string> p(r.params.begin(), r.params.end());
    std::map<std::string, std::string> v(r.values.begin(), r.values.end());
    for (std::size_t i = 0; i < keys.size() + cols.size(); ++i) {
      const std::string& k = i < keys.size() ? keys[i] : cols[i - keys.size()];
      const auto& m = i < keys.size() ? p : v;
      const auto it = m.find(k);
      text += (i ? "," : "") + (it == m.end() ? std::string() : csv_field(it->second));
    }
    text += '\n';
  }
  const fs::path tmp = out_file.string() + fmt::format(".tmp-{}", static_cast<long>(::getpid()));
  write_text_file(tmp, text);
  fs::rename(tmp, out_file);
  return rows.size();
}

}  // namespace

std::string xxh3_hex(const std::string& text) {
  return fmt::format("{:016x}", XXH3_64bits(text.data(), text.size()));
}

std::string sweep_manifest_json(const std::string& scenario_path, const std::string& name,
                                const std::vector<std::string>& sets,
                                const std::vector<SweepPoint>& points) {
  nlohmann::ordered_json j;
  j["scenario"] = scenario_path;
  j["name"] = name;
  j["sets"] = sets;
  j["points"] = nlohmann::ordered_json::array();
  for (const SweepPoint& p : points)
    j["points"].push_back({{"run", p.run}, {"config_xxh3", p.config_xxh3}});
  return j.dump(2) + "\n";
}

std::vector<fs::path> run_subfolders(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.find(".tmp-") != std::string::npos) continue;
    if (fs::is_regular_file(entry.path() / "summary.json")) out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

GatherResult gather_sweep(const std::vector<fs::path>& inputs, const std::optional<fs::path>& into,
                          const std::optional<fs::path>& table) {
  std::error_code ec;
  std::vector<fs::path> sources;
  if (into && fs::is_directory(*into, ec)) sources.push_back(tidy(*into));
  for (const fs::path& p : inputs) {
    const fs::path t = tidy(p);
    if (std::none_of(sources.begin(), sources.end(),
                     [&](const fs::path& s) { return same_place(s, t); }))
      sources.push_back(t);
  }
  std::vector<FoundRun> found;
  std::optional<Manifest> manifest;
  for (const fs::path& src : sources) {
    if (!fs::is_directory(src, ec)) throw ConfigError(src.string() + ": not a folder");
    const std::vector<fs::path> subs = run_subfolders(src);
    if (!subs.empty() || fs::is_regular_file(src / "sweep.json")) {
      // A sweep folder (possibly with nothing run yet: its sweep.json only).
      for (const fs::path& s : subs) found.push_back({s.filename().string(), s});
      if (auto m = read_manifest(src)) {
        if (manifest && manifest->points != m->points)
          throw ConfigError(fmt::format("{}: the points of another sweep than {}'s",
                                        m->file.string(), manifest->file.string()));
        if (!manifest) manifest = std::move(m);
      }
    } else if (fs::is_regular_file(src / "summary.json")) {
      found.push_back({fs::weakly_canonical(src).filename().string(), src});
    } else if (!(into && same_place(src, *into))) {
      throw ConfigError(src.string() +
                        ": not a run folder (no summary.json) and holds no run folders");
    }
  }
  if (found.empty())
    throw ConfigError((inputs.empty() ? into->string() : inputs.front().string()) +
                      ": no run folders (with a summary.json) to merge");

  // Every run a point of the sweep, as the sweep planned it.
  if (manifest) {
    std::map<std::string, std::string> hash_of;
    for (const SweepPoint& p : manifest->points) hash_of[p.run] = p.config_xxh3;
    for (const FoundRun& r : found) {
      const auto it = hash_of.find(r.name);
      if (it == hash_of.end())
        throw ConfigError(fmt::format("{}: not a point of the sweep of {}", r.dir.string(),
                                      manifest->file.string()));
      const fs::path cfg = r.dir / "config.resolved.yaml";
      if (!fs::is_regular_file(cfg))
        throw ConfigError(cfg.string() + ": missing (a run folder of kvsim run has one)");
      if (xxh3_hex(read_text_file(cfg.string())) != it->second)
        throw ConfigError(fmt::format(
            "{}: not the configuration of this point in {} (a run of another sweep, or of other "
            "--set / --seed values)",
            cfg.string(), manifest->file.string()));
    }
  }
  // One run per point: a second copy must be the same run.
  std::vector<FoundRun> runs;
  std::map<std::string, std::size_t> first_of;
  for (const FoundRun& r : found) {
    const auto [it, fresh] = first_of.emplace(r.name, runs.size());
    if (fresh) {
      runs.push_back(r);
      continue;
    }
    const fs::path& other = runs[it->second].dir;
    if (!same_place(other, r.dir) && !same_run(other, r.dir))
      throw ConfigError(fmt::format(
          "{}: a second run of point {} (also in {}) with a different summary.json or "
          "config.resolved.yaml",
          r.dir.string(), r.name, other.string()));
  }

  GatherResult res;
  if (!table && !into)
    throw ConfigError("several folders: name the sweep folder to gather them in (--into DIR) or "
                      "the table (-o FILE)");
  if (into) {
    for (const FoundRun& r : runs) {
      const fs::path dest = *into / r.name;
      if (fs::exists(dest) && !fs::is_regular_file(dest / "summary.json"))
        throw ConfigError(dest.string() + ": in the way of run folder " + r.dir.string() +
                          " (not a run folder)");
    }
    fs::create_directories(*into);
    for (FoundRun& r : runs) {
      const fs::path dest = *into / r.name;
      if (fs::exists(dest)) continue;  // there already (the same run, checked above)
      const fs::path tmp = dest.string() + fmt::format(".tmp-{}", static_cast<long>(::getpid()));
      fs::remove_all(tmp);
      fs::copy(r.dir, tmp, fs::copy_options::recursive);
      fs::rename(tmp, dest);
      res.copied.push_back(r.name);
      r.dir = dest;
    }
    if (manifest && !fs::exists(*into / "sweep.json"))
      write_text_file(*into / "sweep.json", manifest->text);
  }
  res.table = table ? *table : *into / "sweep.csv";
  res.rows = write_table(runs, res.table);
  if (manifest)
    for (const SweepPoint& p : manifest->points)
      if (!first_of.contains(p.run)) res.missing.push_back(p.run);
  return res;
}

int merge(const Args& args) {
  CommandLine cl(
      "merge", "PATH... [--into SWEEP_DIR] [-o FILE]",
      "Gathers the runs of one sweep from run folders anywhere (each PATH a run folder or a "
      "folder holding run folders: a sweep folder, or the folders its emitted jobs wrote on "
      "other machines) into SWEEP_DIR, and writes SWEEP_DIR/sweep.csv: one row per run (the "
      "swept keys from the folder names, then the summary.json scalars), as `kvsim sweep` "
      "does. With one folder of runs and no --into, that folder is the sweep folder.\n"
      "Checks: with a sweep.json (written by kvsim sweep and --emit-jobs), every run is one of "
      "its points with that point's configuration; a point found twice is the same run.\n"
      "Exit status: 0 done, 1 points of sweep.json have no run (the table has the others), "
      "2 bad input (a folder that is not a run and holds none, runs of another sweep, two "
      "different runs of one point: one line naming the path, nothing written).");
  std::vector<std::string> paths;
  std::optional<std::string> into, out;
  cl.positional("PATH", texts(&paths, "PATH"), -1, true);
  cl.options()  //
      ("into", text(&into, "SWEEP_DIR"),
       "the sweep folder: run folders not yet there are copied in, then SWEEP_DIR/sweep.csv")  //
      ("output,o", text(&out, "FILE"), "the table's file (default: SWEEP_DIR/sweep.csv)");
  if (!cl.parse(args)) return 0;
  std::vector<fs::path> inputs(paths.begin(), paths.end());
  std::optional<fs::path> into_dir;
  if (into) {
    into_dir = fs::path(*into);
  } else if (inputs.size() == 1) {
    std::error_code ec;
    if (fs::is_directory(inputs[0], ec) && !run_subfolders(inputs[0]).empty())
      into_dir = inputs[0];
  }
  const std::optional<fs::path> table = out ? std::optional<fs::path>(*out) : std::nullopt;
  const GatherResult res = gather_sweep(inputs, into_dir, table);
  std::printf("%zu rows in %s", res.rows, res.table.c_str());
  if (!res.copied.empty())
    std::printf("; %zu run folders copied into %s", res.copied.size(), into_dir->c_str());
  std::printf("\n");
  if (!res.missing.empty()) {
    std::string list;
    for (std::size_t i = 0; i < res.missing.size() && i < 5; ++i)
      list += (i ? " " : "") + res.missing[i];
    if (res.missing.size() > 5) list += fmt::format(" (and {} more)", res.missing.size() - 5);
    std::fprintf(stderr, "kvsim merge: %zu points of the sweep have no run: %s\n",
                 res.missing.size(), list.c_str());
    return 1;
  }
  return 0;
}

}  // namespace kvsim::cli
