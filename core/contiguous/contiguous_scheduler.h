#pragma once
// ContiguousScheduler: Orca-style serving on contiguous KV reservations, the baselines of the
// PagedAttention paper (SOSP'23, §3 and §6): iteration-level scheduling (every running request
// decodes one token per step and a request joins or leaves the batch between steps), FCFS
// admission, and a whole prompt prefilled in one step. The KV pool is one linear space of token
// slots managed by a SlotAllocator; a request is admitted only when the allocator can place its
// whole reservation, which covers every token it will produce, so nothing is ever preempted.
//
// Reservations (ContiguousPolicy), in token slots. A request that ends with F tokens (prompt +
// outputs) writes K/V for F - 1 positions: the last token it samples is never fed back.
//   orca-max     max_model_len (what the engine must assume without knowing the output length)
//   orca-pow2    F - 1 rounded up to a power of two, at most max_model_len
//   orca-oracle  exactly F - 1
// pow2 and oracle read Request::oracle_final_num_tokens, which only a simulator can know.
//
// Placement (ContiguousPolicy::fit, scenario key engine.contiguous_fit): first_fit or best_fit
// hand out exactly the reservation from a hole (ExtentAllocator); buddy rounds it up to a power
// of two and takes a buddy block (BuddyAllocator, the paper's setting). A request's extent is
// the region granted; its slots past the final length (the reservation's excess and, under buddy,
// the rounding) are internal fragmentation in kv_breakdown().
//
// Step rules: running requests first, in admission order, one token each under the
// max_num_batched_tokens budget; then waiting requests in FCFS order while fewer than
// max_num_seqs run, the head's whole prompt fits the rest of the budget and a hole fits its
// reservation; the first that does not stops admission. A request whose prompt exceeds
// max_num_batched_tokens or whose reservation exceeds the pool can never be admitted:
// admission_error() says so and the caller rejects it instead of adding it.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/common/engine_config.h"
#include "core/common/request.h"
#include "core/common/ring_deque.h"
#include "core/contiguous/slot_allocator.h"
#include "core/engine_api.h"

namespace kvsim {

/// The named behaviour of a contiguous profile.
struct ContiguousPolicy {
  enum class Reservation : std::uint8_t { kMaxModelLen, kPow2, kOracle };
  Reservation reservation = Reservation::kMaxModelLen;
  FitPolicy fit = FitPolicy::kFirstFit;
};

/// The policy of a contiguous-family profile (first fit). Precondition: p is one.
ContiguousPolicy contiguous_policy(Profile p);

class ContiguousScheduler final : public EngineCore {
 public:
  /// The pool holds kv_config.num_gpu_blocks * kv_config.block_size token slots: the paged
  /// profiles' pool of the same KV budget, in slots of one token.
  ContiguousScheduler(Profile profile, ContiguousPolicy policy, const SchedulerConfig& config,
                      const KVCacheConfig& kv_config);

  Profile profile() const override { return profile_; }
  /// Queues a request behind the waiting ones. Precondition: admission_error() of its shape is
  /// nullptr, and oracle_final_num_tokens is set for the pow2 and oracle policies.
  void add_request(Request& request) override;
  /// One step: decodes of the running requests, then FCFS admissions with whole-prompt prefill
  /// (see the file comment). O(running + admitted * holes); allocates nothing once warm.
  void schedule(SchedulerOutput& out) override;
  /// Advances the scheduled requests, appends sampled tokens, checks vLLM's stop conditions and
  /// releases the reservation of each finished request (it is reported by the next schedule()).
  void update_from_output(std::vector<RequestOutput>& outputs) override;
  bool abort_request(Request& request) override;
  /// No prefix cache: returns 0 and changes nothing.
  std::int64_t cache_only_request(Request& request) override;
  const char* admission_error(std::int64_t prompt_tokens,
                              std::int64_t final_num_tokens) const override;

  std::span<Request* const> running() const override { return running_; }
  std::int64_t num_waiting() const override { return static_cast<std::int64_t>(waiting_.size()); }
  const Request* first_waiting() const override {
    return waiting_.empty() ? nullptr : waiting_.front();
  }
  /// In token slots: block_size 1, num_blocks = pool slots, num_free_blocks = free slots,
  /// usage = reserved / pool, blocks_allocated = slots reserved so far, evictions 0.
  KVPoolStats pool_stats() const override;
  /// Token states, reservation and internal fragmentation from each running request's extent;
  /// the free slots are external fragmentation when free_slots_are_external() says so.
  KVBreakdown kv_breakdown(std::span<const std::int64_t> final_kv_tokens) const override;
  /// Whether the free slots are all external fragmentation now: a request waits at the head of
  /// the queue, fewer than max_num_seqs run, and the allocator cannot place the head's
  /// reservation (no hole, or no free buddy block, is long enough; sim/OUTPUTS.md gives the
  /// definition and why).
  bool free_slots_are_external() const;
  /// Empty: an extent is not block-aligned, so there is no table a paged kernel could read.
  std::span<const BlockId> block_table(const Request&) const override { return {}; }

  /// Fast-forward: every running request decodes one token within the budget, the waiting loop
  /// admits nothing (no seat, the head's prompt over the rest of the budget, or no hole for its
  /// reservation: none of which a step without finishes changes) and no step of the run stops a
  /// request. A reservation covers every token, so a decode step allocates nothing.
  std::int64_t decode_horizon(std::int64_t max_steps) const override;
  /// Appends each running request's next k outputs; the pool is the same after every step.
  void advance_decode(std::int64_t k, std::span<KVPoolStats> pool_after) override;

  /// The slots a request that ends with `final_num_tokens` tokens reserves under this policy.
  std::int64_t reservation_slots(std::int64_t final_num_tokens) const;
  /// The extent of a running request (by its position in running()): the region granted for
  /// its reservation, allocator().granted_length(reservation) slots.
  const Extent& extent(std::size_t running_index) const { return extents_[running_index]; }
  const SlotAllocator& allocator() const { return *alloc_; }
  const ContiguousPolicy& policy() const { return policy_; }

  /// The allocator's invariants, plus: the running requests' extents and the free regions tile
  /// the pool exactly (no overlap, no slot lost), each running request's K/V fits its extent,
  /// waiting requests hold nothing, no request is queued twice, at most max_num_seqs run.
  std::string find_violation() const override;

 private:
  friend struct ContiguousSchedulerTestPeer;  // tests plant faults through it
  std::int64_t reservation_of(const Request& request) const;
  bool check_stop(Request& request);
  /// check_stop's verdict on a request of `num_tokens` tokens, `num_outputs` of them outputs,
  /// whose last is `last`.
  bool stops(const Request& request, std::int64_t num_tokens, std::int64_t num_outputs,
             Token last) const;
  void finish(Request& request, RequestStatus status);

  Profile profile_;
  ContiguousPolicy policy_;
  SchedulerConfig config_;
  std::unique_ptr<SlotAllocator> alloc_;  // created once, by make_slot_allocator
  std::vector<Request*> running_;
  std::vector<Extent> extents_;  // extents_[i] is running_[i]'s reservation
  RingDeque<Request*> waiting_;
  std::vector<Request*> next_running_;  // scratch for update_from_output
  std::vector<Extent> next_extents_;
  std::vector<std::int64_t> finished_ids_;  // since the last schedule()
  std::int64_t slots_reserved_total_ = 0;
  bool scheduled_unconsumed_ = false;
};

}  // namespace kvsim
