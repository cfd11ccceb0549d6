// ContiguousScheduler (orca-max / orca-pow2 / orca-oracle): reservations, whole-prompt prefill,
// FCFS admission, the KV breakdown and its external fragmentation on hand-built pools, per-request
// refusals, planted faults the invariant walk must catch, buddy placement (power-of-two regions,
// rounding as internal fragmentation, aligned blocks as external fragmentation), and random runs
// under every placement checked step by step against a naive model (a byte map of slots) with
// the invariant walk after every step.

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <deque>
#include <memory>
#include <random>
#include <vector>

#include "core/contiguous/contiguous_scheduler.h"
#include "core/engine_factory.h"
#include "test_util.h"

namespace kvsim {
/// Reaches into an engine to plant faults.
struct ContiguousSchedulerTestPeer {
  static std::vector<Request*>& running(ContiguousScheduler& s) { return s.running_; }
  static std::vector<Extent>& extents(ContiguousScheduler& s) { return s.extents_; }
  static SlotAllocator& allocator(ContiguousScheduler& s) { return *s.alloc_; }
};
}  // namespace kvsim

using namespace kvsim;
using namespace kvsim::test;

namespace {

using Res = ContiguousPolicy::Reservation;

/// The allocator's free regions (holes or free buddy blocks), sorted by offset.
std::vector<Extent> free_regions(const SlotAllocator& a) {
  std::vector<Extent> out;
  a.append_free_regions(out);
  return out;
}

/// An engine plus the requests it serves; every request's final length is known (the oracle).
struct Bench {
  Bench(Res res, std::int64_t pool_slots, std::int64_t max_num_seqs = 64,
        std::int64_t max_batched = 4096, std::int64_t max_model_len = 2048,
        FitPolicy fit = FitPolicy::kFirstFit)
      : engine(Profile::kOrcaOracle, ContiguousPolicy{res, fit},
               SchedulerConfig{max_num_seqs, max_batched, max_model_len},
               KVCacheConfig{1, static_cast<std::int32_t>(pool_slots), max_model_len, false, 0}) {}

  /// A request of `prompt` tokens that will generate `outputs` tokens.
  Request& add(std::int64_t prompt, std::int64_t num_outputs) {
    const auto index = static_cast<std::int64_t>(reqs.size());
    reqs.push_back(std::make_unique<Request>(
        make_request(index, iota_tokens(static_cast<std::int32_t>(prompt)), num_outputs)));
    Request& r = *reqs.back();
    r.oracle_final_num_tokens = prompt + num_outputs;
    final_kv.push_back(prompt + num_outputs - 1);
    engine.add_request(r);
    return r;
  }
  /// One step; returns the indices scheduled, in order.
  std::vector<std::int64_t> step() {
    engine.schedule(out);
    std::vector<std::int64_t> ids;
    for (const ScheduledRequest& sr : out.scheduled) {
      ids.push_back(sr.request->index());
      sr.request->sampled_token = 7;
    }
    engine.update_from_output(outputs);
    REQUIRE(engine.find_violation().empty());
    return ids;
  }
  KVBreakdown breakdown() const { return engine.kv_breakdown(final_kv); }
  Extent extent_of(const Request& r) const {
    const auto run = engine.running();
    for (std::size_t i = 0; i < run.size(); ++i)
      if (run[i] == &r) return engine.extent(i);
    FAIL("not running");
    return {};
  }

  ContiguousScheduler engine;
  std::vector<std::unique_ptr<Request>> reqs;
  std::vector<std::int64_t> final_kv;
  SchedulerOutput out;
  std::vector<RequestOutput> outputs;
};

}  // namespace

TEST_CASE("the three profiles reserve max_model_len, a power of two, and the exact length",
          "[core]") {
  const SchedulerConfig sc{256, 8192, 2048};
  const KVCacheConfig kc{16, 1000, 2048, false, 0};
  const auto slots = [&](Profile p, std::int64_t final_tokens) {
    return ContiguousScheduler(p, contiguous_policy(p), sc, kc).reservation_slots(final_tokens);
  };
  // A request ending with 301 tokens writes K/V for 300 positions.
  CHECK(slots(Profile::kOrcaMax, 301) == 2048);
  CHECK(slots(Profile::kOrcaPow2, 301) == 512);
  CHECK(slots(Profile::kOrcaOracle, 301) == 300);
  CHECK(slots(Profile::kOrcaPow2, 257) == 256);  // 256 positions: already a power of two
  CHECK(slots(Profile::kOrcaPow2, 258) == 512);
  CHECK(slots(Profile::kOrcaPow2, 2048) == 2048);
  // max_model_len not a power of two: pow2 never reserves more than orca-max would.
  const SchedulerConfig odd{256, 8192, 3000};
  CHECK(ContiguousScheduler(Profile::kOrcaPow2, contiguous_policy(Profile::kOrcaPow2), odd,
                            KVCacheConfig{16, 1000, 3000, false, 0})
            .reservation_slots(2100) == 3000);
  // make_engine builds them with the paged profiles' pool, in slots.
  EngineParams p;
  p.profile = Profile::kOrcaPow2;
  p.scheduler = sc;
  p.cache = kc;
  const auto e = make_engine(p);
  CHECK(e->profile() == Profile::kOrcaPow2);
  CHECK(e->pool_stats().num_blocks == 16000);
  CHECK(e->pool_stats().block_size == 1);
  CHECK(find_profile("orca-oracle") == Profile::kOrcaOracle);
  CHECK(profile_info(Profile::kOrcaMax).family == EngineFamily::kContiguous);
  CHECK(!is_paged(EngineFamily::kContiguous));
}

TEST_CASE("a prompt is prefilled whole, then each running request decodes one token a step",
          "[core]") {
  Bench b(Res::kOracle, 1000);
  Request& a = b.add(100, 3);
  Request& c = b.add(50, 1);
  b.engine.schedule(b.out);
  REQUIRE(b.out.scheduled.size() == 2);
  CHECK(b.out.scheduled[0].num_tokens == 100);
  CHECK(b.out.scheduled[0].kind == ScheduledRequest::Kind::kNew);
  CHECK(b.out.scheduled[1].num_tokens == 50);
  CHECK(b.out.total_num_scheduled_tokens == 150);
  for (const auto& sr : b.out.scheduled) sr.request->sampled_token = 7;
  b.engine.update_from_output(b.outputs);
  REQUIRE(b.outputs.size() == 2);
  CHECK(!b.outputs[0].finished);
  CHECK(b.outputs[1].finished);  // one output token: done after its prefill
  CHECK(c.status == RequestStatus::kFinishedLengthCapped);
  CHECK(b.extent_of(a) == Extent{0, 102});
  CHECK(b.engine.allocator().num_reserved_slots() == 102);  // c's 50 slots are back
  b.engine.schedule(b.out);
  REQUIRE(b.out.scheduled.size() == 1);
  CHECK(b.out.scheduled[0].num_tokens == 1);
  CHECK(b.out.scheduled[0].num_computed_tokens == 100);
  CHECK(b.out.finished == std::vector<std::int64_t>{1});  // c, reported once
  for (const auto& sr : b.out.scheduled) sr.request->sampled_token = 7;
  b.engine.update_from_output(b.outputs);
  CHECK(b.step() == std::vector<std::int64_t>{0});
  CHECK(a.status == RequestStatus::kFinishedLengthCapped);
  CHECK(a.num_output_tokens() == 3);
  CHECK(b.engine.allocator().num_free_slots() == 1000);
}

TEST_CASE("admission is first come first served: a head that does not fit blocks the queue",
          "[core]") {
  Bench b(Res::kOracle, 100);
  Request& big = b.add(60, 11);   // 70 slots
  Request& huge = b.add(40, 21);  // 60 slots: only 30 left
  Request& tiny = b.add(5, 1);    // would fit, but waits behind `huge`
  CHECK(b.step() == std::vector<std::int64_t>{0});
  CHECK(b.engine.first_waiting() == &huge);
  CHECK(b.engine.num_waiting() == 2);
  for (int i = 0; i < 9; ++i) CHECK(b.step() == std::vector<std::int64_t>{0});
  CHECK(b.step() == std::vector<std::int64_t>{0});  // big's last token: it finishes
  CHECK(big.status == RequestStatus::kFinishedLengthCapped);
  CHECK(b.step() == std::vector<std::int64_t>{1, 2});
  CHECK(b.extent_of(huge) == Extent{0, 60});
  CHECK(tiny.status == RequestStatus::kFinishedLengthCapped);
}

TEST_CASE("max_num_seqs and the token budget limit admissions as vLLM's do", "[core]") {
  SECTION("max_num_seqs") {
    Bench b(Res::kOracle, 1000, /*max_num_seqs=*/2);
    b.add(10, 5);
    b.add(10, 5);
    b.add(10, 5);
    CHECK(b.step() == std::vector<std::int64_t>{0, 1});
    CHECK(b.engine.num_waiting() == 1);
  }
  SECTION("a whole prompt must fit what the running decodes leave of the budget") {
    Bench b(Res::kOracle, 1000, 64, /*max_batched=*/100);
    b.add(60, 5);
    b.add(50, 5);  // 60 + 50 > 100: waits a step
    CHECK(b.step() == std::vector<std::int64_t>{0});
    CHECK(b.step() == std::vector<std::int64_t>{0, 1});  // 1 + 50 <= 100
  }
}

TEST_CASE("a request the engine can never admit is refused by admission_error", "[core]") {
  Bench b(Res::kMaxModelLen, 1000, 64, /*max_batched=*/512, /*max_model_len=*/2048);
  CHECK(std::string(b.engine.admission_error(100, 200)) ==
        "its reservation is larger than the whole KV pool");  // 2048 slots each
  Bench o(Res::kOracle, 1000, 64, 512, 2048);
  CHECK(o.engine.admission_error(100, 200) == nullptr);
  CHECK(std::string(o.engine.admission_error(600, 700)) ==
        "the prompt is longer than max_num_batched_tokens (a contiguous engine prefills a whole "
        "prompt in one step)");
  CHECK(std::string(o.engine.admission_error(400, 1002)) ==
        "its reservation is larger than the whole KV pool");
  CHECK(o.engine.admission_error(400, 1001) == nullptr);  // 1,000 K/V slots: fits exactly
  CHECK(std::string(o.engine.admission_error(100, 2049)) ==
        "prompt + outputs exceed max_model_len");
  CHECK(o.engine.admission_error(0, 5) != nullptr);
  CHECK(o.engine.admission_error(5, 5) != nullptr);
  // The paged family admits anything that fits max_model_len (the default).
  EngineParams p;
  p.cache.num_gpu_blocks = 64;
  CHECK(make_engine(p)->admission_error(100000, 200000) == nullptr);
}

TEST_CASE(
    "the breakdown splits each extent into token states, reservation and internal "
    "fragmentation",
    "[core]") {
  SECTION("oracle: never internal fragmentation") {
    Bench b(Res::kOracle, 100);
    b.add(10, 21);  // 30 slots
    b.step();       // prefill: 10 computed, 20 to come
    const KVBreakdown k = b.breakdown();
    CHECK(k.token_states == 10);
    CHECK(k.reservation == 20);
    CHECK(k.internal_fragmentation == 0);
    CHECK(k.free == 70);
    CHECK(k.external_fragmentation == 0);
    CHECK(k.total() == 100);
  }
  SECTION("pow2 and max: the slots past the final length") {
    Bench p(Res::kPow2, 100, 64, 4096, 64);
    p.add(10, 21);  // 30 K/V slots -> 32
    p.step();
    p.step();  // 11 computed
    KVBreakdown k = p.breakdown();
    CHECK(k.token_states == 11);
    CHECK(k.reservation == 19);
    CHECK(k.internal_fragmentation == 2);
    CHECK(k.free == 68);
    Bench m(Res::kMaxModelLen, 100, 64, 4096, 64);
    m.add(10, 21);
    m.step();
    k = m.breakdown();
    CHECK(k.token_states == 10);
    CHECK(k.reservation == 20);
    CHECK(k.internal_fragmentation == 34);
    CHECK(k.free == 36);
    CHECK(k.total() == 100);
  }
}

TEST_CASE(
    "free slots are external fragmentation exactly when the head's reservation fits no "
    "hole",
    "[core]") {
  // Pool of 100 slots: A [0,40) B [40,50) C [50,90), one hole [90,100).
  Bench e(Res::kOracle, 100);
  Request& ra = e.add(20, 21);  // 40 slots
  Request& rb = e.add(5, 6);    // 10 slots
  e.add(10, 31);                // 40 slots
  e.step();
  REQUIRE(e.engine.allocator().num_free_slots() == 10);
  CHECK(e.breakdown().free == 10);  // nobody waits: free, not fragmentation
  CHECK(e.breakdown().external_fragmentation == 0);

  Request& head = e.add(5, 11);  // needs 15 slots, more than the one 10-slot hole
  CHECK(e.engine.free_slots_are_external());
  KVBreakdown k = e.breakdown();
  CHECK(k.external_fragmentation == 10);
  CHECK(k.free == 0);
  CHECK(k.total() == 100);

  // Abort B: holes [40,50) and [90,100), 20 free slots in all, still no 15 contiguous ones.
  REQUIRE(e.engine.abort_request(rb));
  REQUIRE(free_regions(e.engine.allocator()).size() == 2);
  k = e.breakdown();
  CHECK(k.external_fragmentation == 20);
  CHECK(k.free == 0);
  CHECK(e.step() == std::vector<std::int64_t>{0, 2});  // the head still cannot be admitted

  // Abort A: [0,50) is one hole; the head fits it: all free, none external.
  REQUIRE(e.engine.abort_request(ra));
  CHECK(!e.engine.free_slots_are_external());
  k = e.breakdown();
  CHECK(k.external_fragmentation == 0);
  CHECK(k.free == 60);
  CHECK(e.step() == std::vector<std::int64_t>{2, 3});
  CHECK(e.extent_of(head) == Extent{0, 15});  // first fit

  SECTION("a full batch: waiting requests are held by max_num_seqs, not by fragmentation") {
    Bench g(Res::kOracle, 100, /*max_num_seqs=*/1);
    g.add(10, 71);  // 80 slots
    g.add(5, 31);   // 35 slots: fits no hole, but the batch is full anyway
    g.step();
    CHECK(!g.engine.free_slots_are_external());
    CHECK(g.breakdown().free == 20);
    CHECK(g.breakdown().external_fragmentation == 0);
  }
  SECTION("orca-max: the tail shorter than max_model_len is external while requests wait") {
    Bench m(Res::kMaxModelLen, 100, 64, 4096, /*max_model_len=*/30);
    for (int i = 0; i < 4; ++i) m.add(5, 10);
    m.step();  // three reservations of 30; 10 slots left, the fourth waits
    KVBreakdown x = m.breakdown();
    CHECK(x.external_fragmentation == 10);
    CHECK(x.token_states == 15);
    CHECK(x.reservation == 3 * 9);
    CHECK(x.internal_fragmentation == 3 * 16);
  }
}

TEST_CASE("the invariant walk catches an overlapping extent and a reservation never freed",
          "[core]") {
  Bench b(Res::kOracle, 100);
  b.add(10, 21);  // [0, 30)
  b.add(10, 11);  // [30, 50)
  b.step();
  REQUIRE(b.engine.find_violation().empty());
  auto& extents = ContiguousSchedulerTestPeer::extents(b.engine);
  auto& running = ContiguousSchedulerTestPeer::running(b.engine);

  SECTION("two requests given overlapping slots") {
    extents[1].offset = 25;  // [25, 45) overlaps [0, 30)
    CHECK(b.engine.find_violation() ==
          "two extents overlap (a slot reserved twice or reserved and free)");
  }
  SECTION("a reservation that overlaps a hole") {
    extents[1].length = 25;  // [30, 55) runs into the hole [50, 100)
    CHECK(b.engine.find_violation() ==
          "two extents overlap (a slot reserved twice or reserved and free)");
  }
  SECTION("a lost free: a request dropped without returning its extent") {
    running.erase(running.begin());
    extents.erase(extents.begin());
    CHECK(b.engine.find_violation() ==
          "slots neither reserved nor free (a reservation never freed)");
  }
  SECTION("a lost free at the end of the pool") {
    SlotAllocator& a = ContiguousSchedulerTestPeer::allocator(b.engine);
    REQUIRE(a.allocate(50) == 50);  // reserved by nobody
    CHECK(b.engine.find_violation() ==
          "slots neither reserved nor free (a reservation never freed)");
  }
  SECTION("running requests and extents out of step") {
    extents.pop_back();
    CHECK(b.engine.find_violation() == "running requests and extents out of step");
  }
}

namespace {

/// The naive Orca model: the same step rules over a byte map of slots.
class NaiveOrca {
 public:
  struct Req {
    std::int64_t prompt = 0, final_tokens = 0, tokens = 0, computed = 0;
    std::int64_t offset = -1, slots = 0;
    bool done = false;
  };

  NaiveOrca(Res res, FitPolicy fit, std::int64_t pool, std::int64_t max_seqs, std::int64_t budget,
            std::int64_t max_len)
      : res_(res),
        fit_(fit),
        used_(static_cast<std::size_t>(pool), 0),
        max_seqs_(max_seqs),
        budget_(budget),
        max_len_(max_len) {}

  void add(std::int64_t prompt, std::int64_t outputs) {
    Req r;
    r.prompt = r.tokens = prompt;
    r.final_tokens = prompt + outputs;
    reqs.push_back(r);
    waiting_.push_back(static_cast<std::int64_t>(reqs.size()) - 1);
  }
  std::int64_t slots_for(const Req& r) const {
    const std::int64_t kv = r.final_tokens - 1;
    if (res_ == Res::kMaxModelLen) return max_len_;
    if (res_ == Res::kOracle) return kv;
    std::int64_t p = 1;
    while (p < kv) p *= 2;
    return std::min(p, max_len_);
  }
  std::int64_t pool() const { return static_cast<std::int64_t>(used_.size()); }
  bool all_free(std::int64_t off, std::int64_t len) const {
    if (off + len > pool()) return false;
    for (std::int64_t k = off; k < off + len; ++k)
      if (used_[static_cast<std::size_t>(k)]) return false;
    return true;
  }
  /// Whether [off, off + size) is a free buddy block: aligned, inside the pool, every slot free,
  /// and its parent block not wholly free (else the two halves would have coalesced). With
  /// coalescing on every free, the buddy system's free blocks are exactly these.
  bool is_free_buddy_block(std::int64_t off, std::int64_t size) const {
    return off % size == 0 && all_free(off, size) && !all_free(off - off % (2 * size), 2 * size);
  }
  /// The free buddy blocks, sorted by offset.
  std::vector<Extent> buddy_blocks() const {
    std::vector<Extent> out;
    for (std::int64_t s = 1; s <= pool(); s *= 2)
      for (std::int64_t off = 0; off + s <= pool(); off += s)
        if (is_free_buddy_block(off, s)) out.push_back({off, s});
    std::sort(out.begin(), out.end(),
              [](const Extent& a, const Extent& b) { return a.offset < b.offset; });
    return out;
  }
  /// The free regions the engine's allocator should have: maximal free runs, or buddy blocks.
  std::vector<Extent> free_regions() const {
    return fit_ == FitPolicy::kBuddy ? buddy_blocks() : holes();
  }
  /// The slots a region of `need` takes: a power of two under buddy.
  std::int64_t granted(std::int64_t need) const {
    if (fit_ != FitPolicy::kBuddy) return need;
    std::int64_t p = 1;
    while (p < need) p *= 2;
    return p;
  }
  /// Where a region of `need` slots goes, by the placement, or nullopt.
  std::optional<Extent> place(std::int64_t need) const {
    std::optional<Extent> pick;
    if (fit_ == FitPolicy::kBuddy) {  // the smallest free block that holds it, lowest first
      for (const Extent& b : buddy_blocks())
        if (b.length >= granted(need) && (!pick || b.length < pick->length)) pick = b;
      return pick;
    }
    for (const Extent& h : holes()) {
      if (h.length < need) continue;
      if (fit_ == FitPolicy::kFirstFit) return h;
      if (!pick || h.length < pick->length) pick = h;
    }
    return pick;
  }
  /// Maximal free runs.
  std::vector<Extent> holes() const {
    std::vector<Extent> out;
    const auto n = static_cast<std::int64_t>(used_.size());
    for (std::int64_t i = 0; i < n;) {
      if (used_[static_cast<std::size_t>(i)]) {
        ++i;
        continue;
      }
      std::int64_t j = i;
      while (j < n && !used_[static_cast<std::size_t>(j)]) ++j;
      out.push_back({i, j - i});
      i = j;
    }
    return out;
  }
  /// (index, tokens) scheduled.
  std::vector<std::pair<std::int64_t, std::int64_t>> schedule() {
    std::vector<std::pair<std::int64_t, std::int64_t>> s;
    std::int64_t budget = budget_;
    for (std::int64_t i : running_) {
      Req& r = reqs[static_cast<std::size_t>(i)];
      const std::int64_t n = r.tokens - r.computed;
      if (n > budget) break;
      s.push_back({i, n});
      budget -= n;
    }
    while (!waiting_.empty() && static_cast<std::int64_t>(running_.size()) < max_seqs_) {
      const std::int64_t i = waiting_.front();
      Req& r = reqs[static_cast<std::size_t>(i)];
      if (r.tokens > budget) break;
      const std::int64_t need = granted(slots_for(r));
      const std::optional<Extent> pick = place(slots_for(r));
      if (!pick) break;
      for (std::int64_t k = pick->offset; k < pick->offset + need; ++k)
        used_[static_cast<std::size_t>(k)] = 1;
      r.offset = pick->offset;
      r.slots = need;
      waiting_.pop_front();
      running_.push_back(i);
      s.push_back({i, r.tokens});
      budget -= r.tokens;
    }
    scheduled_ = s;
    return s;
  }
  void update() {
    for (auto [i, n] : scheduled_) {
      Req& r = reqs[static_cast<std::size_t>(i)];
      r.computed += n;
      if (r.computed == r.tokens) {
        ++r.tokens;
        if (r.tokens >= r.final_tokens) finish(i);
      }
    }
    scheduled_.clear();
  }
  void abort(std::int64_t i) {
    Req& r = reqs[static_cast<std::size_t>(i)];
    auto w = std::find(waiting_.begin(), waiting_.end(), i);
    if (w != waiting_.end()) {
      waiting_.erase(w);
      r.done = true;
      return;
    }
    finish(i);
  }
  KVBreakdown breakdown() const {
    KVBreakdown b;
    for (std::int64_t i : running_) {
      const Req& r = reqs[static_cast<std::size_t>(i)];
      const std::int64_t fin = std::min(r.final_tokens - 1, r.slots);
      b.token_states += r.computed;
      b.reservation += fin - r.computed;
      b.internal_fragmentation += r.slots - fin;
    }
    std::int64_t free = 0, largest = 0;
    for (const Extent& h : free_regions()) {
      free += h.length;
      largest = std::max(largest, h.length);
    }
    const bool external = !waiting_.empty() &&
                          static_cast<std::int64_t>(running_.size()) < max_seqs_ &&
                          slots_for(reqs[static_cast<std::size_t>(waiting_.front())]) > largest;
    (external ? b.external_fragmentation : b.free) = free;
    return b;
  }
  std::vector<std::int64_t> running_;
  std::deque<std::int64_t> waiting_;
  std::vector<Req> reqs;

 private:
  void finish(std::int64_t i) {
    Req& r = reqs[static_cast<std::size_t>(i)];
    for (std::int64_t k = r.offset; k < r.offset + r.slots; ++k)
      used_[static_cast<std::size_t>(k)] = 0;
    r.done = true;
    running_.erase(std::find(running_.begin(), running_.end(), i));
  }
  Res res_;
  FitPolicy fit_;
  std::vector<std::uint8_t> used_;
  std::int64_t max_seqs_, budget_, max_len_;
  std::vector<std::pair<std::int64_t, std::int64_t>> scheduled_;
};

}  // namespace

TEST_CASE("random runs match the naive model step by step, invariants after every step", "[core]") {
  std::int64_t steps = 0, external_steps = 0, admissions = 0, aborts = 0;
  std::array<std::int64_t, 3> placements{};
  for (std::uint64_t seed = 1; seed <= 120; ++seed) {
    std::mt19937_64 rng(seed);
    const auto uniform = [&](std::int64_t lo, std::int64_t hi) {
      return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
    };
    const Res res = std::array<Res, 3>{Res::kMaxModelLen, Res::kPow2, Res::kOracle}[seed % 3];
    const FitPolicy fit = std::array<FitPolicy, 3>{FitPolicy::kFirstFit, FitPolicy::kBestFit,
                                                   FitPolicy::kBuddy}[(seed / 3) % 3];
    const std::int64_t max_len = uniform(16, 128);
    // Under buddy a pool of 2 * max_len or more has a block for any rounded-up reservation.
    const std::int64_t pool =
        uniform(fit == FitPolicy::kBuddy ? 2 * max_len : max_len, 6 * max_len);
    const std::int64_t max_seqs = uniform(1, 12);
    const std::int64_t budget = uniform(max_len, 3 * max_len);
    INFO("seed " << seed << ", placement " << fit_policy_name(fit) << ", pool " << pool);
    Bench b(res, pool, max_seqs, budget, max_len, fit);
    NaiveOrca m(res, fit, pool, max_seqs, budget, max_len);
    placements[static_cast<std::size_t>(fit)] += 1;
    for (int step = 0; step < 600; ++step) {
      INFO("step " << step);
      const std::int64_t arrivals = uniform(0, 9) < 4 ? uniform(1, 3) : 0;
      for (std::int64_t k = 0; k < arrivals; ++k) {
        const std::int64_t prompt = uniform(1, max_len / 2);
        const std::int64_t outputs = uniform(1, max_len - prompt);
        REQUIRE(b.engine.admission_error(prompt, prompt + outputs) == nullptr);
        b.add(prompt, outputs);
        m.add(prompt, outputs);
      }
      if (uniform(0, 19) == 0 && b.reqs.size() > 0) {  // abort a random live request
        const auto i =
            static_cast<std::size_t>(uniform(0, static_cast<std::int64_t>(b.reqs.size()) - 1));
        const bool live = !is_finished(b.reqs[i]->status);
        REQUIRE(live == !m.reqs[i].done);
        if (live) {
          REQUIRE(b.engine.abort_request(*b.reqs[i]));
          m.abort(static_cast<std::int64_t>(i));
          ++aborts;
        } else {
          REQUIRE(!b.engine.abort_request(*b.reqs[i]));
        }
        REQUIRE(b.engine.find_violation().empty());
      }
      b.engine.schedule(b.out);
      const auto want = m.schedule();
      REQUIRE(b.out.scheduled.size() == want.size());
      for (std::size_t k = 0; k < want.size(); ++k) {
        const ScheduledRequest& sr = b.out.scheduled[k];
        REQUIRE(sr.request->index() == want[k].first);
        REQUIRE(sr.num_tokens == want[k].second);
        if (sr.kind == ScheduledRequest::Kind::kNew) {
          ++admissions;
          const auto& nr = m.reqs[static_cast<std::size_t>(want[k].first)];
          REQUIRE(b.extent_of(*sr.request) == Extent{nr.offset, nr.slots});
        }
        sr.request->sampled_token = 3;
      }
      b.engine.update_from_output(b.outputs);
      m.update();
      REQUIRE(b.engine.find_violation().empty());
      REQUIRE(free_regions(b.engine.allocator()) == m.free_regions());
      const KVBreakdown got = b.breakdown(), exp = m.breakdown();
      REQUIRE(got.token_states == exp.token_states);
      REQUIRE(got.reservation == exp.reservation);
      REQUIRE(got.internal_fragmentation == exp.internal_fragmentation);
      REQUIRE(got.external_fragmentation == exp.external_fragmentation);
      REQUIRE(got.free == exp.free);
      REQUIRE(got.total() == pool);
      if (res == Res::kOracle && fit != FitPolicy::kBuddy) REQUIRE(got.internal_fragmentation == 0);
      external_steps += got.external_fragmentation > 0;
      ++steps;
    }
  }
  CHECK(steps == 120 * 600);
  CHECK(admissions > 5000);
  CHECK(aborts > 500);
  CHECK(external_steps > 1000);
  CHECK(*std::min_element(placements.begin(), placements.end()) >= 39);  // all three placements
}

TEST_CASE(
    "under buddy a reservation takes a power-of-two block and the rounding is internal "
    "fragmentation",
    "[core]") {
  Bench e(Res::kOracle, 256, 64, 4096, 2048, FitPolicy::kBuddy);
  Request& ra = e.add(60, 41);  // K/V for 100 positions: a block of 128
  e.step();
  CHECK(e.extent_of(ra) == Extent{0, 128});
  KVBreakdown k = e.breakdown();
  CHECK(k.token_states == 60);            // the prompt
  CHECK(k.reservation == 40);             // positions 60..99, to be written
  CHECK(k.internal_fragmentation == 28);  // 100..127: the buddy rounding, never written
  CHECK(k.free == 128);
  CHECK(e.engine.pool_stats().blocks_allocated == 128);
  Request& rb = e.add(10, 23);  // 32 positions: [128, 256) splits into 32 + 32 + 64
  e.step();
  CHECK(e.extent_of(rb) == Extent{128, 32});
  CHECK(free_regions(e.engine.allocator()) == std::vector<Extent>{{160, 32}, {192, 64}});
  Request& rc = e.add(5, 40);  // 44 positions: 64, the block at 192 (the 32 at 160 is too small)
  e.step();
  CHECK(e.extent_of(rc) == Extent{192, 64});
  CHECK(e.breakdown().internal_fragmentation == 28 + 0 + 20);
}

TEST_CASE(
    "under buddy free slots that are contiguous but not one aligned block are external "
    "fragmentation",
    "[core]") {
  for (const FitPolicy fit : {FitPolicy::kBuddy, FitPolicy::kFirstFit}) {
    INFO(fit_policy_name(fit));
    Bench e(Res::kOracle, 128, 64, 4096, 2048, fit);
    std::vector<Request*> r;
    for (int i = 0; i < 4; ++i) r.push_back(&e.add(10, 23));  // 32 slots each: [0,32) .. [96,128)
    e.step();
    REQUIRE(e.engine.allocator().num_free_slots() == 0);
    REQUIRE(e.engine.abort_request(*r[1]));
    REQUIRE(e.engine.abort_request(*r[2]));
    // [32, 96) is free: one hole of 64 for first fit; for buddy two blocks of 32 whose buddies
    // ([0,32) and [96,128)) are held, so no block of 64.
    Request& head = e.add(10, 55);  // 64 slots
    const KVBreakdown k = e.breakdown();
    if (fit == FitPolicy::kBuddy) {
      CHECK(free_regions(e.engine.allocator()) == std::vector<Extent>{{32, 32}, {64, 32}});
      CHECK(e.engine.allocator().largest_allocatable() == 32);
      CHECK(e.engine.free_slots_are_external());
      CHECK(k.external_fragmentation == 64);
      CHECK(k.free == 0);
      e.step();
      CHECK(head.status == RequestStatus::kWaiting);
    } else {
      CHECK(free_regions(e.engine.allocator()) == std::vector<Extent>{{32, 64}});
      CHECK(!e.engine.free_slots_are_external());
      CHECK(k.external_fragmentation == 0);
      CHECK(k.free == 64);
      e.step();
      CHECK(e.extent_of(head) == Extent{32, 64});
    }
  }
}

TEST_CASE("under buddy a reservation rounded up past the pool's largest block is refused",
          "[core]") {
  // 96 slots = blocks of 64 and 32: a region of 65..96 slots fits the pool but no block.
  Bench buddy(Res::kOracle, 96, 64, 4096, 2048, FitPolicy::kBuddy);
  Bench first(Res::kOracle, 96, 64, 4096, 2048, FitPolicy::kFirstFit);
  CHECK(buddy.engine.allocator().max_allocatable() == 64);
  CHECK(buddy.engine.admission_error(10, 65) == nullptr);  // 64 positions
  CHECK(std::string(buddy.engine.admission_error(10, 71)) ==
        "its reservation, rounded up to a power of two, is larger than the whole KV pool");
  CHECK(first.engine.admission_error(10, 71) == nullptr);
  CHECK(std::string(buddy.engine.admission_error(10, 200)) ==
        "its reservation is larger than the whole KV pool");
}

TEST_CASE(
    "the invariant walk catches an extent that is not the region granted for its "
    "reservation",
    "[core]") {
  Bench b(Res::kOracle, 100);
  Request& r = b.add(10, 21);  // 30 slots: [0, 30), hole [30, 100)
  b.step();
  REQUIRE(b.extent_of(r) == Extent{0, 30});
  // Shrink the extent and free its tail: extents and holes still tile the pool.
  ContiguousSchedulerTestPeer::extents(b.engine)[0].length = 20;
  ContiguousSchedulerTestPeer::allocator(b.engine).free(20, 10);
  CHECK(b.engine.find_violation() ==
        "a running request's extent is not the region granted for its reservation");
}
