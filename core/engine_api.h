#pragma once
// EngineCore: the one interface the simulator (and the validation harness, through the simulator's
// step views) drives for any engine family -- vLLM V1 releases, vLLM V0, contiguous baselines.
//
// A step is: schedule(out) -> the caller times the batch and sets, for every scheduled request
// whose tokens are all computed after this step, the token the model samples
// (Request::sampled_token; or the caller plans every output up front in
// Request::planned_outputs, which every engine reads first) -> update_from_output(outputs).
// Dispatch is virtual once per step (or per request for add/abort), never per block: families keep
// their hot loops inside.
//
// Everything here is family-neutral. A family's own state (V1's block pool, V0's CPU pool and
// swapped queue, the contiguous allocator's extents) is reached through the read-only views below,
// which each family fills from its own structures.

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/common/kv_event.h"
#include "core/common/request.h"
#include "core/common/types.h"

namespace kvsim {

// ---- profiles -------------------------------------------------------------------------------

/// What `engine.profile` names: one engine family at one release.
enum class Profile : std::uint8_t {
  kVllm072,     // vLLM v0.7.2 V1
  kVllm085,     // vLLM v0.8.5.post1 V1
  kVllm020,     // vLLM v0.20.1 V1 (the default: kDefaultProfile)
  kVllm072V0,   // vLLM v0.7.2 V0 (block space manager, swapped queue)
  kOrcaMax,     // contiguous: each request reserves max_model_len slots
  kOrcaPow2,    // contiguous: prompt + true output rounded up to a power of two
  kOrcaOracle,  // contiguous: exactly the slots the request will fill
};

/// The implementation behind a profile. Releases of one family differ by named policies of one
/// implementation; families differ by implementation.
enum class EngineFamily : std::uint8_t { kV1, kV0, kContiguous };

/// Whether the family's KV pool is paged: its requests have block tables a paged-attention kernel
/// can read (the contiguous family's one extent per request is not block-aligned).
constexpr bool is_paged(EngineFamily f) { return f != EngineFamily::kContiguous; }

struct ProfileInfo {
  Profile profile;
  const char* name;  // as written in scenarios and on the command line
  EngineFamily family;
  const char* summary;  // one line for --help and error messages
};

/// The release a scenario, `kvsim replay` and `kvsim kv-size` simulate when none is named: the
/// one people deploy (vLLM v0.20.1).
inline constexpr Profile kDefaultProfile = Profile::kVllm020;

/// Every profile, in enum order.
std::span<const ProfileInfo> profiles();
const ProfileInfo& profile_info(Profile p);
inline const char* profile_name(Profile p) { return profile_info(p).name; }
/// The profile named `name` (exact match), or nullopt.
std::optional<Profile> find_profile(std::string_view name);
/// "vllm-0.7.2, ..." : the valid names, for error messages.
std::string profile_names();

// ---- one step -------------------------------------------------------------------------------

/// One request scheduled in a step, in scheduling order.
struct ScheduledRequest {
  Request* request = nullptr;
  std::int64_t num_tokens = 0;           // tokens scheduled in this step
  std::int64_t num_computed_tokens = 0;  // before this step (the hits for new/resumed requests)
  std::int32_t num_new_blocks = 0;       // running requests: the last num_new_blocks of its table
  enum class Kind : std::uint8_t { kNew, kResumed, kRunning } kind = Kind::kRunning;
  /// The step computes none of the request's last tokens: the model samples nothing for it.
  bool prefill_chunk = false;
};

/// What schedule() decided (vLLM's SchedulerOutput, family-neutral). Reused across steps: its
/// vectors keep their capacity.
struct SchedulerOutput {
  std::vector<ScheduledRequest> scheduled;  // scheduling order (running first, then admissions)
  std::vector<Request*> preempted;          // in preemption order
  std::vector<std::int64_t> finished;       // request indices finished since the previous step
  std::int64_t total_num_scheduled_tokens = 0;
  std::int32_t num_common_prefix_blocks = 0;  // the first KV cache group's
  /// Engines with several KV cache groups (vLLM v0.20): the common prefix of every group, and the
  /// new blocks of scheduled entry i in group g at [i * groups + g] (num_new_blocks is group 0's).
  std::vector<std::int32_t> group_common_prefix_blocks;
  std::vector<std::int32_t> group_new_blocks;
  std::int64_t prefix_queries_tokens = 0;  // this step's prefix-cache lookups, in tokens
  std::int64_t prefix_hits_tokens = 0;     // hit tokens of those lookups

  // ---- vLLM V0 only (empty for the other families) ----
  // Block moves the model runner performs before the step, as vLLM V0's SchedulerOutputs lists
  // them: swap pairs in per-device (physical) ids, copy-on-write pairs in GPU ids.
  std::vector<std::pair<std::int32_t, std::int32_t>> blocks_to_swap_in;   // [cpu, gpu]
  std::vector<std::pair<std::int32_t, std::int32_t>> blocks_to_swap_out;  // [gpu, cpu]
  std::vector<std::pair<std::int32_t, std::int32_t>> blocks_to_copy;      // [src, dst]
  /// Requests finished without running (FINISHED_IGNORED: prompt over the limit, or a prompt or
  /// swapped request that can never fit the pool), in vLLM's order. Not in `finished` (vLLM does
  /// not list them there); their status is kFinishedLengthCapped (vLLM's finish reason "length").
  /// (Requests that forked from it, or were to, are listed too.)
  std::vector<Request*> ignored;
  /// Of `preempted`, how many went to the CPU (the rest recompute). A forked group of several
  /// sequences is preempted as one: it is listed once, by its first request, as vLLM counts
  /// preemptions by group (the other requests of the group are preempted with it).
  std::int32_t num_swapped_out = 0;

  /// Starts a step's output: everything the previous step listed or counted is cleared, and
  /// `finished_ids` (the request indices finished since then) are listed. The vectors keep their
  /// capacity.
  void begin_step(std::span<const std::int64_t> finished_ids) {
    scheduled.clear();
    preempted.clear();
    finished.assign(finished_ids.begin(), finished_ids.end());
    total_num_scheduled_tokens = 0;
    num_common_prefix_blocks = 0;
    group_common_prefix_blocks.clear();
    group_new_blocks.clear();
    prefix_queries_tokens = prefix_hits_tokens = 0;
    blocks_to_swap_in.clear();
    blocks_to_swap_out.clear();
    blocks_to_copy.clear();
    ignored.clear();
    num_swapped_out = 0;
  }
  /// Appends a scheduled entry, filled in place: a temporary built field by field and then copied
  /// with wide loads stalls on store-to-load forwarding, once per scheduled request and step.
  ScheduledRequest& add_scheduled(Request& req, std::int64_t num_tokens, std::int64_t num_computed,
                                  std::int32_t num_new_blocks, ScheduledRequest::Kind kind) {
    ScheduledRequest& s = scheduled.emplace_back();
    s.request = &req;
    s.num_tokens = num_tokens;
    s.num_computed_tokens = num_computed;
    s.num_new_blocks = num_new_blocks;
    s.kind = kind;
    return s;
  }
};

/// One generated token (vLLM's EngineCoreOutput), produced by update_from_output.
struct RequestOutput {
  Request* request = nullptr;
  Token token = 0;
  bool finished = false;
};

// ---- read-only views ------------------------------------------------------------------------

/// The KV memory breakdown of one step in token slots of the pool (they sum to the pool's slots):
/// the PagedAttention paper's taxonomy (sim/OUTPUTS.md defines each category exactly).
struct KVBreakdown {
  std::int64_t token_states = 0;            // slots holding K/V of computed tokens (shared once)
  std::int64_t reservation = 0;             // allocated slots a running request will still fill
  std::int64_t internal_fragmentation = 0;  // allocated slots that will never be filled
  std::int64_t external_fragmentation = 0;  // free slots no allocation can use (0 when paged)
  std::int64_t cached_free = 0;             // free blocks that still hold a cached prefix
  std::int64_t free = 0;
  std::int64_t total() const {
    return token_states + reservation + internal_fragmentation + external_fragmentation +
           cached_free + free;
  }
};

/// One KV cache group's share of the pool at a step (vLLM v0.20's hybrid pool, where the groups of
/// a model -- full attention, sliding window, ... -- draw blocks from one pool). The slots are the
/// pool's (a block is `block_size` slots whatever the group's own block size); the shares of every
/// group, the null block and the free slots of the pool add up to KVBreakdown::total().
struct KVGroupShare {
  std::int64_t blocks = 0;                  // pool blocks the group's tables hold (shared: once)
  std::int64_t token_states = 0;            // slots of those blocks, as in KVBreakdown
  std::int64_t reservation = 0;             // the same
  std::int64_t internal_fragmentation = 0;  // the same
  std::int64_t cached_free = 0;             // free slots still cached under the group's key
};

/// The pool as vLLM reports it. Counters are running totals since construction.
struct KVPoolStats {
  std::int32_t block_size = 0;        // token slots per block
  std::int64_t num_blocks = 0;        // blocks of the GPU pool
  std::int64_t num_free_blocks = 0;   // vLLM's free count (cached-but-free blocks included)
  double usage = 0;                   // vLLM's kv_cache_usage_perc, in [0, 1]
  std::int64_t evictions = 0;         // cached blocks reused for other content
  std::int64_t blocks_allocated = 0;  // blocks handed out
  // ---- vLLM V0 only (0 for the other families): the CPU swap space ----
  std::int64_t num_cpu_blocks = 0;
  std::int64_t num_free_cpu_blocks = 0;
  /// The GPU blocks the running sequences' block tables hold, a block shared by k tables counted
  /// k times: what the pool would need without sharing (forks, prefix hits). The blocks in use
  /// are num_blocks - num_free_blocks.
  std::int64_t num_table_blocks = 0;
};

/// The engine stopped as the real one does on a condition it cannot recover from (vLLM V0: a
/// preemption by swap that the CPU swap space cannot hold, "Aborted due to the lack of CPU swap
/// space"). The engine must not be used afterwards.
class EngineAborted : public std::runtime_error {
 public:
  EngineAborted(const std::string& message, const Request* request)
      : std::runtime_error(message), request_(request) {}
  /// The request being handled when it failed (a preemption's victim), or nullptr.
  const Request* request() const { return request_; }

 private:
  const Request* request_;
};

class EngineCore {
 public:
  virtual ~EngineCore() = default;

  virtual Profile profile() const = 0;

  /// Queues a new request (WAITING) behind the waiting ones. The caller owns `request` and keeps
  /// it alive until it is reported finished (update_from_output or abort_request).
  virtual void add_request(Request& request) = 0;
  /// One scheduling step into `out` (cleared first). Allocates nothing once warm.
  virtual void schedule(SchedulerOutput& out) = 0;
  /// Applies the step scheduled last: advances the scheduled requests, appends the sampled token
  /// of each that caught up, checks stops, frees finished requests. Replaces `outputs`.
  virtual void update_from_output(std::vector<RequestOutput>& outputs) = 0;
  /// "" normally, else the exception the real engine raises out of the last schedule() or
  /// update_from_output (vLLM v0.20.1's admission-cap defect: its engine dies there). The engine
  /// must not be used after one.
  virtual const char* step_error() const { return ""; }
  /// vLLM's finish_requests(id, FINISHED_ABORTED) for one live request; false if it is not live.
  virtual bool abort_request(Request& request) = 0;

  /// Whether add_forking_request is available (vLLM V0).
  virtual bool supports_forking() const { return false; }
  /// Parallel sampling by forking, as vLLM V0 engines before v0.7 did it: queues `parent` as
  /// add_request does, as a group that holds seats for 1 + children.size() sequences; when the
  /// parent samples its first token, each child (a Request with the parent's prompt and no
  /// output, owned by the caller like the parent) joins the group as a fork sharing the parent's
  /// blocks (copy-on-write), with its next_sampled_token() (its first planned output, or its
  /// `sampled_token` set by the caller beforehand) as its first token. From then on each child is
  /// scheduled, reported and finished as a request of its own; aborting the parent aborts them all.
  /// Precondition: supports_forking().
  virtual void add_forking_request(Request& parent, std::span<Request* const> children);

  /// cache_only studies (no scheduler, no time): looks the prompt up in the prefix cache with the
  /// scheduler's rules, allocates and caches the rest (as much as fits), then frees it all.
  /// Returns the hit tokens (0 for a family without a prefix cache).
  virtual std::int64_t cache_only_request(Request& request) = 0;

  /// Sizes a request's per-request tables once for `max_total_tokens` tokens, so that the step
  /// loop never grows them. Optional; the default does nothing.
  virtual void reserve_request(Request& /*request*/, std::int64_t /*max_total_tokens*/) {}
  /// Why this engine can never serve a request of `prompt_tokens` that will end with
  /// `final_num_tokens` tokens (prompt + outputs), or nullptr when it can. The caller rejects
  /// such a request (and counts it) instead of adding it. The default: nullptr (a paged family
  /// admits any request that fits max_model_len, which the caller checks).
  virtual const char* admission_error(std::int64_t /*prompt_tokens*/,
                                      std::int64_t /*final_num_tokens*/) const {
    return nullptr;
  }

  virtual std::span<Request* const> running() const = 0;
  virtual std::int64_t num_waiting() const = 0;
  /// The request at the head of the waiting queue (the next to admit), or nullptr.
  virtual const Request* first_waiting() const = 0;
  /// Requests preempted to CPU memory (vLLM V0's swapped queue); 0 for families without one.
  virtual std::int64_t num_swapped() const { return 0; }
  std::int64_t num_unfinished_requests() const {
    return static_cast<std::int64_t>(running().size()) + num_waiting() + num_swapped();
  }

  virtual KVPoolStats pool_stats() const = 0;
  /// The breakdown of the pool now. `final_kv_tokens[Request::index()]` is the number of positions
  /// the request will ever hold K/V for (prompt + outputs - 1). O(running + shared blocks).
  virtual KVBreakdown kv_breakdown(std::span<const std::int64_t> final_kv_tokens) const = 0;
  /// kv_breakdown, and each KV cache group's share of it into `by_group` (one entry per group,
  /// num_kv_cache_groups(), replaced). The default is for an engine of one group: every block in
  /// use is the group's.
  virtual KVBreakdown kv_breakdown_by_group(std::span<const std::int64_t> final_kv_tokens,
                                            std::span<KVGroupShare> by_group) const;
  /// The block table a scheduled request's kernels read (ids into the GPU pool): the first KV
  /// cache group's.
  virtual std::span<const BlockId> block_table(const Request& request) const = 0;
  /// KV cache groups: sets of layers with one block table per request each (1 for every family
  /// but an engine of several groups, vLLM v0.20 with a hybrid model).
  virtual std::int32_t num_kv_cache_groups() const { return 1; }
  /// The block table of KV cache group `group` (0 <= group < num_kv_cache_groups()); block 0 is
  /// the null block where a window skipped positions.
  virtual std::span<const BlockId> group_block_table(const Request& request,
                                                     std::int32_t group) const {
    return group == 0 ? block_table(request) : std::span<const BlockId>{};
  }
  /// The GPU blocks that hold a cached prefix, into `out` (replaced): the free ones in eviction
  /// order first, then those in use, by id. Empty for a family without a prefix cache.
  virtual void cached_blocks(std::vector<BlockId>& out) const { out.clear(); }
  /// KV events (vLLM v0.20's `--kv-events-config enable_kv_cache_events`): from now on the GPU
  /// prefix cache appends its events to `*log` (core/common/kv_event.h) as they happen in
  /// schedule() and update_from_output(); the caller takes them after update_from_output, as
  /// vLLM's scheduler publishes one batch per step. nullptr stops. Returns false (and does
  /// nothing) for a family that publishes none (vLLM V0, the contiguous baselines).
  virtual bool set_kv_event_log(std::vector<KvEvent>* log) {
    (void)log;
    return false;
  }

  // ---- fast-forward (several decode steps at once; sim/engine/fast_forward.cpp) ----------
  /// How many of the next steps, at most `max_steps`, are pure decodes that advance_decode can
  /// take at once: each schedules every running request, in running order, for exactly one
  /// token (its next output), admits, preempts and finishes nothing, and leaves the engine as
  /// that schedule() / update_from_output() pair would. 0 when the next step is not one, or when
  /// the family cannot say (the caller then steps one by one). O(running * max_steps) at worst
  /// (a stop-token scan of each request's planned outputs), O(running) typically.
  virtual std::int64_t decode_horizon(std::int64_t /*max_steps*/) const { return 0; }
  /// Advances `k` (1 <= k <= decode_horizon(k)) such steps: block allocations, caching and
  /// evictions happen in exactly the order and with exactly the ids of k schedule() /
  /// update_from_output() pairs; every running request gets its next k planned outputs. The
  /// pool after step j (its counters included) goes to pool_after[j] (k entries). O(running +
  /// blocks allocated or cached + k).
  virtual void advance_decode(std::int64_t /*k*/, std::span<KVPoolStats> /*pool_after*/) {}

  /// The first broken invariant of the whole engine ("" if none).
  virtual std::string find_violation() const = 0;
  /// Aborts with the violation's message if find_violation() finds one.
  void check_invariants() const;
};

}  // namespace kvsim
