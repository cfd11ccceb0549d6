#include "sim/metrics/writers.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "core/common/assert.h"

namespace kvsim {
namespace fs = std::filesystem;

/// Integer ns as fixed-point seconds / milliseconds (exact, no floating point).
void append_fixed(std::string& out, std::int64_t ns, std::int64_t unit_ns, int decimals) {
  if (ns < 0) {
    out += '-';
    ns = -ns;
  }
  std::int64_t scale = 1;
  for (int i = 0; i < decimals; ++i) scale *= 10;
  // unit_ns / scale is 1 for seconds at 9 decimals and ms at 6 decimals.
  const std::int64_t ticks = ns / (unit_ns / scale);
  append_int(out, ticks / scale);
  out += '.';
  char frac[24];
  std::int64_t f = ticks % scale;
  for (int i = decimals - 1; i >= 0; --i, f /= 10) frac[i] = static_cast<char>('0' + f % 10);
  out.append(frac, static_cast<std::size_t>(decimals));
}
void append_s(std::string& out, SimTimeNs ns) { append_fixed(out, ns, kNsPerSecond, 9); }
void append_ms(std::string& out, SimTimeNs ns) { append_fixed(out, ns, kNsPerMs, 6); }
void append_us(std::string& out, SimTimeNs ns) { append_fixed(out, ns, kNsPerUs, 3); }

RunFolder::RunFolder(const fs::path& out_dir, const std::string& name) {
  final_ = out_dir / name;
  tmp_ = out_dir / fmt::format("{}.tmp-{}", name, static_cast<long>(::getpid()));
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec)
    throw std::runtime_error(fmt::format("cannot create {}: {}", out_dir.string(), ec.message()));
  remove_stale(out_dir, name);
  fs::remove_all(tmp_, ec);
  if (!fs::create_directory(tmp_, ec) || ec)
    throw std::runtime_error(fmt::format("cannot create {}: {}", tmp_.string(), ec.message()));
}

RunFolder::~RunFolder() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

int RunFolder::remove_stale(const fs::path& out_dir, const std::string& name) {
  const std::string prefix = name + ".tmp-";
  std::vector<fs::path> stale;  // collected first: no removal while the folder is being read
  std::error_code ec;
  for (fs::directory_iterator it(out_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    std::error_code type_ec;
    if (!file.starts_with(prefix) || !it->is_directory(type_ec)) continue;
    const std::string_view digits = std::string_view(file).substr(prefix.size());
    long pid = 0;
    const auto [end_of_pid, err] =
        std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (err != std::errc() || end_of_pid != digits.data() + digits.size() || pid <= 0) continue;
    // kill(pid, 0) fails with ESRCH only when no such process exists; EPERM means alive.
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) stale.push_back(it->path());
  }
  int removed = 0;
  for (const fs::path& p : stale) {
    std::error_code rm;
    fs::remove_all(p, rm);
    if (!rm) ++removed;
  }
  return removed;
}

void RunFolder::commit() {
  std::error_code ec;
  if (fs::exists(final_, ec)) fs::remove_all(final_, ec);
  fs::rename(tmp_, final_, ec);
  if (ec)
    throw std::runtime_error(
        fmt::format("cannot rename {} to {}: {}", tmp_.string(), final_.string(), ec.message()));
  committed_ = true;
}

OutFile::OutFile(const fs::path& path) : path_(path.string()) {
  if (path.empty()) return;
  f_ = std::fopen(path_.c_str(), "wb");
  if (!f_)
    throw std::runtime_error(fmt::format("cannot write {}: {}", path_, std::strerror(errno)));
  buf_.reserve(1 << 16);
}

OutFile::~OutFile() {
  if (f_) std::fclose(f_);
}

void OutFile::write(std::string_view s) {
  if (!f_) return;
  buf_.append(s);
  if (buf_.size() >= (1 << 16)) {
    if (std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size())
      throw std::runtime_error(fmt::format("write error on {}: {}", path_, std::strerror(errno)));
    buf_.clear();
  }
}

void OutFile::close() {
  if (!f_) return;
  const bool ok = std::fwrite(buf_.data(), 1, buf_.size(), f_) == buf_.size();
  buf_.clear();
  const bool closed = std::fclose(f_) == 0;
  f_ = nullptr;
  if (!ok || !closed)
    throw std::runtime_error(fmt::format("write error on {}: {}", path_, std::strerror(errno)));
}

void write_text_file(const fs::path& path, std::string_view text) {
  OutFile f(path);
  f.write(text);
  f.close();
}

CsvRecordWriter::CsvRecordWriter(const fs::path& requests_csv, const fs::path& steps_csv,
                                 bool v0_columns, std::int32_t num_kv_groups,
                                 const std::int32_t* replica, bool offload_columns)
    : requests_(requests_csv),
      steps_(steps_csv),
      v0_columns_(v0_columns),
      offload_columns_(offload_columns),
      num_kv_groups_(num_kv_groups),
      replica_(replica) {
  requests_.write(
      "request_id,arrival_s,prompt_tokens,output_tokens,first_scheduled_s,first_token_s,finish_s,"
      "ttft_ms,tpot_ms,e2el_ms,queue_ms,first_lookup_hit_tokens,num_preemptions,finish_reason");
  steps_.write(
      "step,time_s,duration_ms,num_running,num_waiting,num_scheduled,prefill_tokens,decode_tokens,"
      "batch_tokens,kv_cache_usage_perc,num_free_blocks,slots_token_states,slots_reservation,"
      "slots_internal_fragmentation,slots_external_fragmentation,slots_cached_free,slots_free,"
      "prefix_queries,prefix_hits,preemptions,evictions,blocks_allocated");
  if (v0_columns_)
    steps_.write(
        ",num_swapped,cpu_cache_usage_perc,blocks_without_sharing,blocks_used,swapped_in_blocks,"
        "swapped_out_blocks,cow_copies,preemptions_swap,preemptions_recompute");
  static constexpr char kGroupColumns[] =
      ",g{0}_blocks,g{0}_token_states,g{0}_reservation,g{0}_internal_fragmentation,"
      "g{0}_cached_free";
  for (std::int32_t g = 0; g < num_kv_groups_; ++g) steps_.write(fmt::format(kGroupColumns, g));
  if (offload_columns_)
    steps_.write(
        ",cpu_tier_blocks_used,cpu_tier_hit_tokens,cpu_tier_loaded_blocks,cpu_tier_stored_blocks,"
        "cpu_tier_evicted_blocks,bytes_gpu_to_cpu,bytes_cpu_to_gpu");
  steps_.write("\n");
  line_.reserve(512);
}

void CsvRecordWriter::set_pd_columns(const PdRequestColumns* pd) {
  KVSIM_ASSERT(!header_done_, "set_pd_columns after the first row");
  pd_ = pd;
}

void CsvRecordWriter::on_request_record(const RequestRecord& r) {
  std::string& l = line_;
  finish_header();
  l.clear();
  append_int(l, r.request_id);
  l += ',';
  append_s(l, r.arrival_ns);
  l += ',';
  append_int(l, r.prompt_tokens);
  l += ',';
  append_int(l, r.output_tokens);
  l += ',';
  const bool timed = r.first_token_ns >= 0;
  if (r.first_scheduled_ns >= 0) append_s(l, r.first_scheduled_ns);
  l += ',';
  if (timed) append_s(l, r.first_token_ns);
  l += ',';
  if (r.finish_ns >= 0 && r.reason != FinishReason::kRejected) append_s(l, r.finish_ns);
  l += ',';
  if (timed) append_ms(l, r.first_token_ns - r.arrival_ns);
  l += ',';
  // An aborted request: e2el and queue up to the abort, no TPOT (its last token is not its end).
  const bool aborted = r.reason == FinishReason::kAbort;
  if (timed && !aborted && r.output_tokens > 1 && r.finish_ns >= 0)
    append_ms(l, (r.finish_ns - r.first_token_ns) / (r.output_tokens - 1));
  l += ',';
  if ((timed || aborted) && r.finish_ns >= 0) append_ms(l, r.finish_ns - r.arrival_ns);
  l += ',';
  if (r.first_scheduled_ns >= 0 && (timed || aborted))
    append_ms(l, r.first_scheduled_ns - r.arrival_ns);
  l += ',';
  append_int(l, r.first_lookup_hit_tokens);
  l += ',';
  append_int(l, r.num_preemptions);
  l += ',';
  l += finish_reason_name(r.reason);
  if (pd_) {
    const auto id = [&](std::int32_t v) {
      l += ',';
      if (v >= 0) append_int(l, v);
    };
    const auto ms = [&](SimTimeNs v) {
      l += ',';
      if (v >= 0) append_ms(l, v);
    };
    id(pd_->prefill_replica);
    id(pd_->decode_replica);
    ms(pd_->kv_transfer_ns);
    l += ',';
    if (pd_->kv_transfer_bytes >= 0) append_int(l, pd_->kv_transfer_bytes);
    for (const SimTimeNs p : pd_->ttft_parts_ns) ms(p);
  } else if (replica_) {
    l += ',';
    if (*replica_ >= 0) append_int(l, *replica_);
  }
  l += '\n';
  requests_.write(l);
}

void CsvRecordWriter::on_step_record(const StepRecord& r) {
  std::string& l = line_;
  l.clear();
  append_int(l, r.step);
  l += ',';
  append_s(l, r.time_ns);
  l += ',';
  append_ms(l, r.duration_ns);
  for (std::int64_t v : {r.num_running, r.num_waiting, r.num_scheduled, r.prefill_tokens,
                         r.decode_tokens, r.batch_tokens}) {
    l += ',';
    append_int(l, v);
  }
  // Usage as a fixed 6-decimal fraction (micro-units, rounded half up).
  l += ',';
  append_fixed(l, static_cast<std::int64_t>(r.kv_cache_usage_perc * 1e6 + 0.5), 1'000'000, 6);
  for (std::int64_t v : {std::int64_t{r.num_free_blocks}, r.slots.token_states, r.slots.reservation,
                         r.slots.internal_fragmentation, r.slots.external_fragmentation,
                         r.slots.cached_free, r.slots.free, r.prefix_queries, r.prefix_hits,
                         r.preemptions, r.evictions, r.blocks_allocated}) {
    l += ',';
    append_int(l, v);
  }
  if (v0_columns_) {
    l += ',';
    append_int(l, r.num_swapped);
    l += ',';
    append_fixed(l, static_cast<std::int64_t>(r.cpu_cache_usage_perc * 1e6 + 0.5), 1'000'000, 6);
    for (std::int64_t v :
         {r.blocks_without_sharing, r.blocks_used, r.swapped_in_blocks, r.swapped_out_blocks,
          r.cow_copies, r.preemptions_swap, r.preemptions_recompute}) {
      l += ',';
      append_int(l, v);
    }
  }
  KVSIM_ASSERT(r.groups.size() == static_cast<std::size_t>(num_kv_groups_),
               "steps.csv: one share per KV cache group column set");
  for (const KVGroupShare& g : r.groups) {
    for (std::int64_t v :
         {g.blocks, g.token_states, g.reservation, g.internal_fragmentation, g.cached_free}) {
      l += ',';
      append_int(l, v);
    }
  }
  if (offload_columns_)
    for (std::int64_t v : {r.cpu_tier_blocks_used, r.cpu_tier_hit_tokens, r.cpu_tier_loaded_blocks,
                           r.cpu_tier_stored_blocks, r.cpu_tier_evicted_blocks, r.bytes_gpu_to_cpu,
                           r.bytes_cpu_to_gpu}) {
      l += ',';
      append_int(l, v);
    }
  l += '\n';
  steps_.write(l);
}

void CsvRecordWriter::finish_header() {
  if (header_done_) return;
  header_done_ = true;  // the header's tail: the cluster's columns
  requests_.write(pd_ ? kPdRequestColumnsHeader : replica_ ? ",replica" : "");
  requests_.write("\n");
}

void CsvRecordWriter::close() {
  finish_header();
  requests_.close();
  steps_.close();
}

TraceJsonWriter::TraceJsonWriter(const fs::path& path) : file_(path) {
  file_.write("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
  event(R"({"name":"process_name","ph":"M","pid":1,"args":{"name":"kvsim engine"}})");
  event(R"({"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"steps"}})");
}

void TraceJsonWriter::event(const std::string& json) {
  if (!first_) file_.write(",\n");
  first_ = false;
  file_.write(json);
}

void TraceJsonWriter::on_step_begin(const StepView& v) {
  const SchedulerOutput& out = *v.out;
  const EngineCore& eng = *v.engine;
  ts_.clear();
  append_us(ts_, v.start_ns);
  dur_.clear();
  append_us(dur_, v.end_ns - v.start_ns);
  auto put = [this]<class... A>(fmt::format_string<A...> f, A&&... args) {
    line_.clear();
    fmt::format_to(std::back_inserter(line_), f, std::forward<A>(args)...);
    event(line_);
  };
  put(R"({{"name":"step","ph":"X","pid":1,"tid":1,"ts":{},"dur":{},"args":{{"step":{},"num_scheduled":{},"prefill_tokens":{},"decode_tokens":{},"preempted":{}}}}})",
      ts_, dur_, v.step, out.scheduled.size(), v.prefill_tokens, v.decode_tokens,
      out.preempted.size());
  put(R"({{"name":"kv_cache_usage_perc","ph":"C","pid":1,"ts":{},"args":{{"usage":{:.6f}}}}})", ts_,
      eng.pool_stats().usage);
  put(R"({{"name":"queues","ph":"C","pid":1,"ts":{},"args":{{"running":{},"waiting":{}}}}})", ts_,
      eng.running().size(), v.num_waiting);
  for (const Request* r : out.preempted) {
    const auto idx = static_cast<std::size_t>(r->index());
    const std::uint64_t id = idx < v.request_id_of_index.size() ? v.request_id_of_index[idx] : 0;
    put(R"({{"name":"preemption","ph":"i","s":"t","pid":1,"tid":1,"ts":{},"args":{{"request_id":{}}}}})",
        ts_, id);
  }
}

void TraceJsonWriter::close() {
  file_.write("\n]}\n");
  file_.close();
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kRejected:
      return "rejected";
    case FinishReason::kIgnored:
      return "ignored";
  }
  return "?";
}

}  // namespace kvsim
