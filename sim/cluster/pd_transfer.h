#pragma once
// P/D's KV transfer-time model (shared/spec/cluster-routing.md §7.5): how long a decode replica's
// read of a request's KV from a prefill replica takes. Pure: no I/O, no engine; the cluster
// starts reads and pops their completions at its own instants.
//
// The model, in integer nanoseconds:
//  - A read of B bytes (pd_block_bytes * blocks) from P by D, started at `now`, waits for the
//    (P, D) pair's handshake (the first read of D from P starts it: handshake_ns; later reads
//    wait for its end), then for setup_ns, then moves its bytes from `move = max(now, handshake
//    end) + setup`.
//  - While bytes move, a read's rate is the smallest of its fair shares (processor sharing) of
//    the resources it uses: its P->D link, capacity gpu_bytes_per_s * min(tp_P, tp_D) (with
//    TP, rank pairs move B / tp each in parallel, one link per GPU), shared by the n reads
//    moving on that link; with shared_nic, also P's NICs' sending side (gpu_bytes_per_s *
//    tp_P, shared by every read moving out of P) and D's NICs' receiving side (likewise into
//    D; NICs are full duplex, so a replica's reads in and out do not share).
//    Rate = min over those resources of capacity / n (not max-min water filling: a share left
//    unused by a read is not given to the others).
//  - Rates change only when a read starts or stops moving; then, and only for the reads whose
//    rate changed, the bytes moved since the last change are taken off (in nanobytes, 1e-9
//    byte: elapsed_ns * bytes_per_s / n exactly, rounded down) and the end is recomputed as
//    since + ceil(remaining / rate): ends are rounded up to whole ns, once per rate change.
//    A read whose rate never changes ends at move + ceil(B * 1e9 * n / capacity) exactly.
//  - A read of 0 bytes (all of D's blocks were local hits: it only notifies P) ends at `move`
//    and shares nothing.
//  - At one instant: the reads ending there end first, then those whose bytes start moving
//    (so a read ending at t and one starting at t never share), then a read started at t.
//  - Completions come out ordered by (end, id).
// Cost: a rate change is O(A^2) for A reads moving (A is small: the reads in flight).

#include <cstdint>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "sim/common/sim_types.h"
#include "sim/config/cluster_config.h"

namespace kvsim {

struct Scenario;

namespace detail {
__extension__ typedef __int128 PdInt128;  // exact nanobyte arithmetic (GCC/Clang)
}  // namespace detail

/// Bytes one block of a request occupies on a replica of `s`, over all its layers and KV cache
/// groups and summed over TP ranks: tp * sum over groups of (layers * page), with the pages
/// `kvsim kv-size` prints (a uniform-type group's page is already its layers' sum). 0 without
/// a sized pool (no model). A read of n blocks moves n * this.
[[nodiscard]] std::int64_t pd_block_bytes(const Scenario& s);

/// One read, as recorded (a transfers.csv row but seen_s).
struct PdTransferRecord {
  std::uint64_t id = 0;  // the caller's: the request's id
  std::int32_t prefill_replica = 0;
  std::int32_t decode_replica = 0;
  std::int64_t blocks = 0;
  std::int64_t bytes = 0;
  SimTimeNs start_ns = 0;       // the read was started (D began the step that allocated its blocks)
  SimTimeNs move_ns = 0;        // its bytes began to move (after the handshake, if any, and setup)
  SimTimeNs end_ns = 0;         // its last byte landed
  std::int32_t concurrent = 0;  // most reads moving on its P->D link while it moved, itself
                                // included; 0 for a read of 0 bytes
  bool handshake = false;       // it started the pair's handshake
};

/// The transfer model of one P/D cluster.
class PdTransferModel {
 public:
  static constexpr SimTimeNs kNever = std::numeric_limits<SimTimeNs>::max();

  /// `tp[r]`: replica r's tensor-parallel size (GPUs, one link each), >= 1.
  PdTransferModel(const PdConfig& config, std::vector<std::int32_t> tp);

  /// Starts read `id` of `bytes` (= blocks * block bytes) from prefill replica p by decode
  /// replica d at `now`. Preconditions: now >= every earlier call's time; id not in flight;
  /// p != d, both replicas; bytes >= 0. Amortised O(A^2) (the rate change at now, if any).
  void start(std::uint64_t id, std::int32_t p, std::int32_t d, std::int64_t blocks,
             std::int64_t bytes, SimTimeNs now);

  /// When the next read will end if no other read starts; kNever when none is in flight.
  /// Exact (it plays the pending rate changes forward on a scratch copy); allocates nothing
  /// once the scratch has grown.
  [[nodiscard]] SimTimeNs next_completion_ns() const;
  /// The next instant the state changes (a read ends or its bytes start moving); kNever when
  /// none. O(A).
  [[nodiscard]] SimTimeNs next_event_ns() const;

  /// Advances to t (>= every earlier call's time) and appends to `out` the reads ended at or
  /// before t, by (end, id): every decode replica's, or only `decode`'s (the others stay until
  /// popped). Leaves `out`'s earlier contents.
  void pop_completions(SimTimeNs t, std::vector<PdTransferRecord>& out, std::int32_t decode = -1);

  /// Reads started and not yet popped.
  [[nodiscard]] std::size_t num_in_flight() const {
    return state_.reads.size() + state_.done.size();
  }
  /// Whether D's handshake with P has been started.
  [[nodiscard]] bool handshake_started(std::int32_t p, std::int32_t d) const {
    return handshake_end_.count({p, d}) != 0;
  }

 private:
  struct Read {
    PdTransferRecord rec;
    bool moving = false;
    detail::PdInt128 remaining_nb = 0;  // nanobytes left at since_ns
    SimTimeNs since_ns = 0;             // the last rate change
    std::int64_t rate_num = 0;          // rate = rate_num / rate_den bytes per second
    std::int64_t rate_den = 1;
  };
  struct State {
    SimTimeNs now_ns = 0;
    std::vector<Read> reads;             // waiting or moving, in start order
    std::vector<PdTransferRecord> done;  // ended, not popped
    std::vector<std::int32_t>
        nic_out;  // per replica: reads moving out of it (its NICs' sending side)
    std::vector<std::int32_t> nic_in;  // per replica: reads moving into it (receiving side)
  };

  /// Processes every instant with an end or a move start at or before t, in time order.
  void advance(State& s, SimTimeNs t) const;
  /// Ends, then move starts, at instant t; then re-rates the moving reads.
  void step_instant(State& s, SimTimeNs t) const;
  /// Sets each moving read's rate at t, re-basing those whose rate changed.
  void rerate(State& s, SimTimeNs t) const;
  [[nodiscard]] static SimTimeNs next_instant(const State& s);

  std::int64_t gpu_bytes_per_s_;
  SimTimeNs setup_ns_, handshake_ns_;
  bool shared_nic_;
  std::vector<std::int32_t> tp_;
  std::map<std::pair<std::int32_t, std::int32_t>, SimTimeNs> handshake_end_;
  State state_;
  mutable State scratch_;
};

}  // namespace kvsim
