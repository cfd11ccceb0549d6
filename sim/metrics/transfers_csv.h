#pragma once
// transfers.csv of a P/D run (shared/spec/cluster-routing.md §10): one row per KV read, in the
// order the caller gives (the cluster: completion order, by (end, id)).
//   request_id,prefill_replica,decode_replica,blocks,bytes,start_s,end_s,seen_s,concurrent
// Times are integer ns written as seconds with 9 decimals (exact). seen_s is when the decode
// replica saw the read complete (the end of its step whose get_finished reported it); the
// transfer model does not know it, the caller supplies it.

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "sim/common/sim_types.h"

namespace kvsim {

/// One transfers.csv row.
struct TransferRow {
  std::uint64_t request_id = 0;
  std::int32_t prefill_replica = 0;
  std::int32_t decode_replica = 0;
  std::int64_t blocks = 0;
  std::int64_t bytes = 0;
  SimTimeNs start_ns = 0;       // the read started
  SimTimeNs end_ns = 0;         // its last byte landed
  SimTimeNs seen_ns = 0;        // the decode replica saw it (>= end_ns)
  std::int32_t concurrent = 0;  // most reads on its P->D link while it moved, itself included
};

inline constexpr std::string_view kTransfersCsvHeader =
    "request_id,prefill_replica,decode_replica,blocks,bytes,start_s,end_s,seen_s,concurrent\n";

/// Appends one row (newline-terminated) to `out`; allocates nothing once `out` has room.
void append_transfer_row(std::string& out, const TransferRow& r);

/// transfers.csv: the header and `rows` in their order. Throws std::runtime_error on a write
/// failure.
void write_transfers_csv(const std::filesystem::path& path, std::span<const TransferRow> rows);

}  // namespace kvsim
