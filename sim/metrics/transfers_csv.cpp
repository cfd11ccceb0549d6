#include "sim/metrics/transfers_csv.h"

#include "sim/metrics/writers.h"

namespace kvsim {

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
  append_s(out, r.start_ns);
  out += ',';
  append_s(out, r.end_ns);
  out += ',';
  append_s(out, r.seen_ns);
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
