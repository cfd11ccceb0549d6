#pragma once
// The run folder of sim/OUTPUTS.md: a temporary folder renamed into place when complete, and the
// writers of its files. CSV rows are streamed through a buffered file, so memory does not grow
// with the number of requests or steps. Every number has a fixed format: same run => same bytes.

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

#include "sim/engine/observer.h"
#include "sim/metrics/metrics.h"

namespace kvsim {

// ---- exact text of numbers, for every CSV writer -------------------------------------------
/// Appends the decimal text of `v` (std::to_chars: no locale, no allocation once `out` is sized).
template <class Int>
void append_int(std::string& out, Int v) {
  char buf[24];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, res.ptr);
}
/// Integer ns as fixed-point text in `unit_ns` units with `decimals` decimals (exact, no floating
/// point; unit_ns / 10^decimals must be a whole number of ns).
void append_fixed(std::string& out, std::int64_t ns, std::int64_t unit_ns, int decimals);
/// Integer ns as seconds (9 decimals), milliseconds (6) and microseconds (3).
void append_s(std::string& out, SimTimeNs ns);
void append_ms(std::string& out, SimTimeNs ns);
void append_us(std::string& out, SimTimeNs ns);

/// `<out>/<name>.tmp-<pid>/` while the run writes; commit() renames it to `<out>/<name>/`
/// (replacing an older folder of that name). Destroyed uncommitted, it removes the temp folder.
/// Before creating its own, it removes the `<name>.tmp-<pid>/` folders that runs of the same name
/// killed outright (SIGKILL, a crash) left behind: those whose pid names no live process.
class RunFolder {
 public:
  RunFolder(const std::filesystem::path& out_dir, const std::string& name);
  ~RunFolder();
  RunFolder(const RunFolder&) = delete;
  RunFolder& operator=(const RunFolder&) = delete;

  const std::filesystem::path& tmp_path() const { return tmp_; }
  const std::filesystem::path& final_path() const { return final_; }
  std::filesystem::path file(std::string_view name) const { return tmp_ / std::string(name); }
  /// Renames the temp folder into place. Throws std::runtime_error on failure.
  void commit();
  /// Removes `<out_dir>/<name>.tmp-<pid>/` folders whose pid is not a live process (kill(pid, 0)
  /// fails with ESRCH); returns how many. A live pid's folder (a run in progress) is left alone.
  /// O(entries of out_dir).
  static int remove_stale(const std::filesystem::path& out_dir, const std::string& name);

 private:
  std::filesystem::path tmp_, final_;
  bool committed_ = false;
};

/// A buffered output file; write errors surface as std::runtime_error (at the latest in close()).
class OutFile {
 public:
  explicit OutFile(const std::filesystem::path& path);
  ~OutFile();
  OutFile(const OutFile&) = delete;
  OutFile& operator=(const OutFile&) = delete;
  void write(std::string_view s);
  void close();

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
  std::string buf_;
};

/// Writes `text` to `path` in one go; throws std::runtime_error on failure.
void write_text_file(const std::filesystem::path& path, std::string_view text);

/// A P/D cluster's columns of the request being written (requests.csv, sim/OUTPUTS.md): its
/// replicas, its KV read and its TTFT in parts that add up to ttft_ms (ns; -1 = empty).
struct PdRequestColumns {
  std::int32_t prefill_replica = -1, decode_replica = -1;
  SimTimeNs kv_transfer_ns = -1;
  std::int64_t kv_transfer_bytes = -1;
  static constexpr int kParts = 7;
  /// proxy hops, P queue, P prefill, D queue, transfer, D wait, first-token step
  SimTimeNs ttft_parts_ns[kParts] = {-1, -1, -1, -1, -1, -1, -1};
};
inline constexpr std::string_view kPdRequestColumnsHeader =
    ",prefill_replica,decode_replica,kv_transfer_ms,kv_transfer_bytes,ttft_proxy_ms,"
    "ttft_p_queue_ms,ttft_prefill_ms,ttft_d_queue_ms,ttft_transfer_ms,ttft_d_wait_ms,"
    "ttft_first_token_ms";

/// requests.csv and steps.csv, streamed (either may be disabled by passing an empty path).
/// `v0_columns` appends vLLM V0's columns to steps.csv, `num_kv_groups` > 0 each KV cache group's
/// (g0_blocks, g0_token_states, ...), `offload_columns` the CPU tier's (sim/OUTPUTS.md).
class CsvRecordWriter : public RecordSink {
 public:
  /// `replica` (a cluster run): requests.csv ends with a `replica` column holding *replica when
  /// a row is written (empty when negative: a request refused before routing).
  CsvRecordWriter(const std::filesystem::path& requests_csv, const std::filesystem::path& steps_csv,
                  bool v0_columns = false, std::int32_t num_kv_groups = 0,
                  const std::int32_t* replica = nullptr, bool offload_columns = false);
  /// A P/D cluster run: requests.csv ends with the P/D columns of *pd (kPdRequestColumnsHeader)
  /// in place of `replica`. Call before the first row.
  void set_pd_columns(const PdRequestColumns* pd);
  void on_step_record(const StepRecord& r) override;
  void on_request_record(const RequestRecord& r) override;
  void close();

 private:
  OutFile requests_, steps_;
  std::string line_;
  bool v0_columns_ = false;
  bool offload_columns_ = false;
  std::int32_t num_kv_groups_ = 0;
  const std::int32_t* replica_ = nullptr;
  const PdRequestColumns* pd_ = nullptr;
  bool header_done_ = false;
  /// requests.csv's header ends with the cluster's columns, known at the first row.
  void finish_header();
};

/// trace.json (Chrome / Perfetto trace events): one complete event per step, counters for KV
/// usage and queue lengths, an instant event per preemption. Timestamps in microseconds.
class TraceJsonWriter : public StepObserver {
 public:
  explicit TraceJsonWriter(const std::filesystem::path& path);
  void on_step_begin(const StepView& v) override;
  void close();

 private:
  void event(const std::string& json);
  OutFile file_;
  bool first_ = true;
  std::string line_, ts_, dur_;  // reused: no allocation per step
};

}  // namespace kvsim
