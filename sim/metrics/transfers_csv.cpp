#include "sim/metrics/transfers_csv.h"

#include <charconv>

#include "sim/metrics/writers.h"

namespace kvsim {
namespace {

template <class Int>
void append_int(std::string& out, Int v) {
  char buf[24];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, res.ptr);
}

/// Non-negative integer ns as seconds with 9 decimals.
void append_seconds(std::string& out, SimTimeNs ns) {
  append_int(out, ns / 1'000'000'000);
  out += '.';
  char frac[9];
  SimTimeNs f = ns % 1'000'000'000;
  for (int i = 8; i >= 0; --i, f /= 10) frac[i] = static_cast<char>('0' + f % 10);
  out.append(frac, 9);
}

}  // namespace

void append_transfer_row(std::string& out, const TransferRow& r) {
  append_int(out, r.request_id);
  out += ',';
  append_int(out, r.prefill_replica);
  out += ',';
  append_int(out, r.decode_replica);
  out += ',';
  append_int(out, r.blocks);
  out += ',';
  append_int(out, r.bytes);
  out += ',';
  append_seconds(out, r.start_ns);
  out += ',';
  append_seconds(out, r.end_ns);
  out += ',';
  append_seconds(out, r.seen_ns);
  out += ',';
  append_int(out, r.concurrent);
  out += '\n';
}

void write_transfers_csv(const std::filesystem::path& path, std::span<const TransferRow> rows) {
  OutFile f(path);
  f.write(kTransfersCsvHeader);
  std::string line;
  line.reserve(160);
  for (const TransferRow& r : rows) {
    line.clear();
    append_transfer_row(line, r);
    f.write(line);
  }
  f.close();
}

}  // namespace kvsim
