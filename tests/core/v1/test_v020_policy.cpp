// vLLM v0.20.1 (profile vllm-0.20): the KV cache coordinator with several KV cache groups checked
// against the naive model after every op (random layouts of full attention, sliding-window and
// chunked-local groups, mixed block sizes), random scheduler runs (sync and async, FCFS and
// priority, reserve_full_isl, chunked prefill off, min_tokens, resets) with the invariant walk
// after every op, each release difference on its own, and the invariant walk catching planted
// faults.

#include <catch2/catch.hpp>
#include <memory>
#include <random>

#include "core/v1/scheduler.h"
#include "naive_coordinator.h"
#include "test_util.h"

using namespace kvsim;
using namespace kvsim::test;

namespace {

using Naive = NaiveCoordinator;

std::vector<int> as_ints(std::span<const BlockId> b) {
  std::vector<int> out;
  for (BlockId x : b) out.push_back(to_int(x));
  return out;
}
Naive::Lists as_lists(const GroupBlockLists& g) {
  Naive::Lists out;
  for (const auto& l : g) out.push_back(as_ints(l));
  return out;
}
std::vector<int> ints(const std::vector<BlockId>& b) { return as_ints(b); }

/// A random layout the coordinator and the naive model both take: 1-3 groups, no two of one spec
/// (vLLM refuses that with caching), windows of at least 2 tokens, chunked local only when every
/// group has the same block size (vLLM asserts otherwise).
struct Layout {
  std::vector<KVGroupSpec> specs;
  std::vector<Naive::Group> naive;
};
Layout random_layout(std::mt19937_64& rng, int bs) {
  auto uniform = [&](std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
  };
  const bool mixed = rng() % 3 == 0;
  Layout l;
  const int n = static_cast<int>(uniform(1, 3));
  for (int i = 0; i < n; ++i) {
    KVGroupSpec s;
    s.block_size = mixed && rng() % 2 ? 2 * bs : bs;
    const auto kind = uniform(0, mixed ? 1 : 2);
    if (kind == 1) {
      s.kind = KVGroupKind::kSlidingWindow;
      s.sliding_window = uniform(2, 5 * bs);
    } else if (kind == 2) {
      s.kind = KVGroupKind::kChunkedLocal;
      s.attention_chunk_size = bs * uniform(1, 4);
    }
    bool dup = false;
    for (const KVGroupSpec& o : l.specs) dup = dup || o.same_spec(s);
    if (dup) continue;
    l.specs.push_back(s);
    Naive::Group g;
    g.kind = s.kind == KVGroupKind::kFullAttention   ? Naive::kFull
             : s.kind == KVGroupKind::kSlidingWindow ? Naive::kWindow
                                                     : Naive::kChunked;
    g.bs = s.block_size;
    g.size = s.kind == KVGroupKind::kSlidingWindow ? s.sliding_window : s.attention_chunk_size;
    l.naive.push_back(g);
  }
  return l;
}

struct Live {
  std::unique_ptr<Request> req;
  Naive::Req naive;
  bool running = false;
};

struct Coverage {
  std::int64_t hit_blocks = 0, null_hits = 0, failed_allocs = 0, evictions = 0, resets = 0,
               multi_group = 0, can_fit_false = 0;
};

void run_coordinator_seed(std::uint64_t seed, int num_ops, Coverage& cov) {
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  auto uniform = [&](std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
  };
  const int bs = std::array<int, 3>{2, 4, 8}[rng() % 3];
  const int num_blocks = static_cast<int>(uniform(16, 64));
  const bool caching = rng() % 8 != 0;
  const std::int64_t max_len = 4096;
  const Layout layout = random_layout(rng, bs);
  INFO("block size " << bs << ", " << num_blocks << " blocks, caching " << caching << ", groups "
                     << layout.specs.size());
  KVCacheConfig config{bs, num_blocks, max_len, caching, 0};
  config.kv_cache_groups = layout.specs;
  config.max_num_batched_tokens = max_len;  // the admission cap never binds (spec §12)
  REQUIRE(KVCacheCoordinator::check_layout(config).empty());
  KVCacheManager kv(config, kVllm020Policy);
  Naive naive(layout.naive, num_blocks, max_len, caching, max_len);
  const auto groups = static_cast<std::size_t>(kv.num_groups());
  cov.multi_group += groups > 1;
  std::vector<std::vector<Token>> prefixes;
  for (int i = 0; i < 4; ++i) {
    std::vector<Token> p(static_cast<std::size_t>(uniform(1, 8 * bs)));
    for (Token& t : p) t = static_cast<Token>(rng() % 3);
    prefixes.push_back(p);
  }
  std::vector<Live> live;
  GroupBlockLists hits;
  std::vector<const Request*> views;
  std::vector<std::int32_t> prefix;
  std::int64_t next_index = 0;

  for (int op = 0; op < num_ops; ++op) {
    INFO("op " << op);
    const auto kind = uniform(0, 99);
    if (kind < 15 && live.size() < 10) {  // a new request: a shared prefix plus a random suffix
      std::vector<Token> prompt = prefixes[rng() % prefixes.size()];
      for (auto extra = uniform(0, 3 * bs); extra > 0; --extra)
        prompt.push_back(static_cast<Token>(rng() % 3));
      if (prompt.size() < 2) prompt.push_back(1);
      Live l;
      l.req = std::make_unique<Request>(make_request(next_index++, prompt));
      kv.add_request(*l.req);
      l.naive = naive.make(prompt);
      live.push_back(std::move(l));
    } else if (!live.empty()) {
      Live& l = live[rng() % live.size()];
      Request& r = *l.req;
      if (kind < 45 && !l.running) {  // admit: lookup, (can_fit), allocate a chunk
        AllocStatus st;
        const std::int64_t hit_tokens = kv.get_computed_blocks(r, hits, st);
        REQUIRE(st == AllocStatus::kOk);
        const auto [nh, nt] = naive.lookup(l.naive);
        REQUIRE(as_lists(hits) == nh);
        REQUIRE(hit_tokens == nt);
        for (const auto& h : hits)
          for (BlockId b : h) (b == BlockId{0} ? cov.null_hits : cov.hit_blocks) += 1;
        const bool fits = kv.coordinator()->can_fit_full_sequence(r, hit_tokens, hits, st);
        REQUIRE(fits == naive.can_fit(l.naive, nt, nh));
        cov.can_fit_false += !fits;
        const std::int64_t n = std::min(r.num_tokens() - hit_tokens, uniform(1, 6 * bs));
        const std::int64_t lookahead = rng() % 4 == 0 ? uniform(1, 2 * bs) : 0;
        st = kv.allocate_slots(r, n, hit_tokens, hits, lookahead);
        const auto nres = naive.allocate(l.naive, n, nt, nh, lookahead);
        REQUIRE((st != AllocStatus::kOk) == !nres.has_value());
        if (st == AllocStatus::kOk) {
          for (std::size_t g = 0; g < groups; ++g) {
            const std::vector<int> t = ints(r.kv_groups[g].blocks);
            const auto k = kv.coordinator()->new_blocks(static_cast<std::int32_t>(g));
            REQUIRE(std::vector<int>(t.end() - k, t.end()) == (*nres)[g]);
          }
          r.num_computed_tokens = l.naive.computed = hit_tokens + n;
          l.running = true;
        } else {
          REQUIRE(st == AllocStatus::kNoFreeBlocks);
          ++cov.failed_allocs;
        }
      } else if (kind < 85 && l.running) {  // continue a prefill, or decode one token
        if (r.num_computed_tokens == r.num_tokens()) {
          const Token t = static_cast<Token>(rng() % 3);
          r.append_output_token(t);
          l.naive.tokens.push_back(t);
        }
        const std::int64_t n = std::min(r.num_tokens() - r.num_computed_tokens, uniform(1, 4 * bs));
        const std::int64_t lookahead = rng() % 4 == 0 ? uniform(1, 2 * bs) : 0;
        for (auto& h : hits) h.clear();
        const AllocStatus st = kv.allocate_slots(r, n, 0, hits, lookahead);
        const auto nres = naive.allocate(l.naive, n, 0, Naive::Lists(groups), lookahead);
        REQUIRE((st != AllocStatus::kOk) == !nres.has_value());
        if (st == AllocStatus::kOk) {
          r.num_computed_tokens += n;
          l.naive.computed = r.num_computed_tokens;
        } else {  // memory pressure: preempt it
          REQUIRE(st == AllocStatus::kNoFreeBlocks);
          kv.free(r);
          naive.free(l.naive);
          r.num_computed_tokens = l.naive.computed = 0;
          l.running = false;
        }
      } else if (kind < 90 && l.running) {  // preempt
        kv.free(r);
        naive.free(l.naive);
        r.num_computed_tokens = l.naive.computed = 0;
        l.running = false;
      } else if (kind < 93) {  // the common prefix (tracks the request in full groups)
        kv.coordinator()->num_common_prefix_blocks(r, prefix);
        REQUIRE(std::vector<int>(prefix.begin(), prefix.end()) == naive.common_prefix(l.naive));
      } else if (kind < 99 || r.num_tokens() > 40 * bs) {  // finish
        kv.free(r);
        naive.free(l.naive);
        kv.release_request(r);
        std::swap(l, live.back());
        live.pop_back();
      } else {
        const bool ok = kv.reset_prefix_cache();
        REQUIRE(ok == naive.reset());
        cov.resets += ok;
      }
    }
    // Full-state comparison and the invariant walk after every op.
    REQUIRE(free_queue_ids(kv) == naive.queue());
    for (const Live& x : live)
      for (std::size_t g = 0; g < groups; ++g)
        REQUIRE(ints(x.req->kv_groups[g].blocks) == x.naive.tables[g]);
    for (int b = 1; b < num_blocks; ++b) {  // the null block's count is not kept
      REQUIRE(kv.pool().block(BlockId{b}).ref_cnt == naive.refs()[static_cast<std::size_t>(b)]);
      REQUIRE((kv.pool().block(BlockId{b}).block_hash != kNoHash) == naive.cached(b));
    }
    views.clear();
    for (const Live& x : live) views.push_back(x.req.get());
    const std::string violation = kv.find_violation(views);
    INFO(violation);
    REQUIRE(violation.empty());
  }
  cov.evictions += kv.pool().stats().evictions;
  for (Live& l : live) {
    kv.free(*l.req);
    kv.release_request(*l.req);
  }
  CHECK(kv.pool().num_free_blocks() == num_blocks - 1);
  CHECK(kv.find_violation({}).empty());
}

void run_scheduler_seed(std::uint64_t seed, int num_ops, std::int64_t& preemptions,
                        std::int64_t& hit_tokens, std::int64_t& async_runs) {
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  auto uniform = [&](std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
  };
  const std::int32_t bs = std::array<std::int32_t, 3>{2, 4, 16}[rng() % 3];
  const std::int64_t max_len = 64 * bs;
  SchedulerConfig sc{uniform(1, 8), uniform(bs, 12 * bs), max_len};
  sc.long_prefill_token_threshold = rng() % 3 == 0 ? uniform(1, 3 * bs) : 0;
  sc.num_lookahead_tokens = rng() % 4 == 0 ? uniform(1, bs) : 0;
  sc.enable_chunked_prefill = rng() % 4 != 0;
  sc.scheduler_reserve_full_isl = rng() % 3 != 0;
  sc.priority_policy = rng() % 2 == 0;
  sc.async_scheduling = rng() % 2 == 0;
  async_runs += sc.async_scheduling;
  KVCacheConfig kc{bs, static_cast<std::int32_t>(uniform(12, 40)), max_len, rng() % 6 != 0, 0};
  kc.kv_cache_groups = random_layout(rng, bs).specs;
  // The admission cap never binds: a window's cap covers max_model_len (spec §12).
  sc.max_num_batched_tokens = std::max(sc.max_num_batched_tokens, max_len);
  sc.max_num_scheduled_tokens = uniform(bs, 12 * bs);
  INFO("groups " << kc.kv_cache_groups.size() << ", async " << sc.async_scheduling << ", priority "
                 << sc.priority_policy << ", reserve " << sc.scheduler_reserve_full_isl
                 << ", chunked prefill " << sc.enable_chunked_prefill);
  Scheduler sched(sc, kc, Profile::kVllm020);
  std::vector<std::unique_ptr<Request>> owned;
  std::vector<Token> shared(static_cast<std::size_t>(3 * bs));
  for (Token& t : shared) t = static_cast<Token>(rng() % 4);
  SchedulerOutput out;
  std::vector<RequestOutput> outputs;
  std::int64_t next_index = 0;
  const std::size_t max_in_flight = sc.async_scheduling ? 2 : 1;
  for (int op = 0; op < num_ops; ++op) {
    INFO("op " << op);
    const auto kind = uniform(0, 99);
    if (kind < 20 && sched.num_unfinished_requests() < 24) {
      std::vector<Token> prompt(shared.begin(), shared.begin() + uniform(0, 3 * bs));
      for (auto n = uniform(1, 4 * bs); n > 0; --n) prompt.push_back(static_cast<Token>(rng() % 4));
      SamplingLimits lim;
      lim.max_tokens = uniform(1, 3 * bs);
      lim.min_tokens = rng() % 4 == 0 ? uniform(0, lim.max_tokens) : 0;
      if (rng() % 4 == 0) lim.eos_token_id = 3;
      if (rng() % 4 == 0) lim.stop_token_ids = {2};
      owned.push_back(std::make_unique<Request>(next_index++, std::move(prompt), lim));
      owned.back()->priority = uniform(0, 3);
      owned.back()->arrival_time = static_cast<double>(next_index);
      sched.add_request(*owned.back());
    } else if (kind < 25 && sched.num_unfinished_requests() > 0) {
      Request* victim =
          rng() % 2 && !sched.running().empty()
              ? sched.running()[rng() % sched.running().size()]
              : (sched.waiting().empty() ? nullptr
                                         : sched.waiting()[rng() % sched.waiting().size()]);
      if (victim) REQUIRE(sched.abort_request(*victim));
    } else if (kind < 27 && sched.num_steps_in_flight() == 0) {
      const bool reset_running = rng() % 2 == 0;
      const bool ok = sched.reset_prefix_cache(reset_running);
      if (reset_running) REQUIRE(ok);
      if (reset_running) REQUIRE(sched.running().empty());
    } else if (sched.num_steps_in_flight() < max_in_flight &&
               (sched.num_steps_in_flight() == 0 || rng() % 2 == 0)) {
      sched.schedule(out);
      REQUIRE(sched.step_error()[0] == 0);
      REQUIRE(out.total_num_scheduled_tokens <= sc.max_num_scheduled_tokens);
      for (const ScheduledRequest& s : out.scheduled) {
        if (sc.long_prefill_token_threshold > 0)
          REQUIRE(s.num_tokens <= sc.long_prefill_token_threshold);
        REQUIRE(s.request->num_computed_tokens <= max_len - 1 + sc.num_lookahead_tokens);
      }
    } else {
      for (const InFlightRequest& e : sched.oldest_in_flight())
        if (e.request) e.request->sampled_token = static_cast<Token>(rng() % 4);
      sched.update_from_output(outputs);
      REQUIRE(sched.step_error()[0] == 0);
      for (const RequestOutput& o : outputs) {
        REQUIRE(o.request->num_output_placeholders >= 0);
        if (o.finished)
          REQUIRE(o.request->num_output_tokens() >=
                  std::min(o.request->limits.min_tokens, o.request->limits.max_tokens));
      }
    }
    const std::string v = sched.find_violation();
    INFO(v);
    REQUIRE(v.empty());
  }
  preemptions += sched.stats().num_preemptions;
  hit_tokens += sched.stats().prefix_hits_tokens;
}

KVCacheConfig two_groups(std::int32_t bs, std::int32_t blocks, std::int64_t window) {
  KVCacheConfig c{bs, blocks, 4096, true, 0};
  KVGroupSpec sw;
  sw.kind = KVGroupKind::kSlidingWindow;
  sw.block_size = bs;
  sw.sliding_window = window;
  KVGroupSpec full;
  full.block_size = bs;
  c.kv_cache_groups = {sw, full};
  return c;
}

}  // namespace

TEST_CASE("v0.20: random coordinator use agrees with the naive model on every op", "[core][slow]") {
  Coverage cov;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) run_coordinator_seed(seed, 20000, cov);
  // The generator must reach the interesting paths.
  CHECK(cov.multi_group > 10);
  CHECK(cov.hit_blocks > 10000);
  CHECK(cov.null_hits > 1000);
  CHECK(cov.failed_allocs > 100);
  CHECK(cov.evictions > 1000);
  CHECK(cov.can_fit_false > 100);
  CHECK(cov.resets > 0);
}

TEST_CASE("v0.20: random scheduler runs keep every invariant", "[core][slow]") {
  std::int64_t preemptions = 0, hit_tokens = 0, async_runs = 0;
  for (std::uint64_t seed = 1; seed <= 20; ++seed)
    run_scheduler_seed(seed, 30000, preemptions, hit_tokens, async_runs);
  CHECK(preemptions > 100);
  CHECK(hit_tokens > 10000);
  CHECK(async_runs >= 5);
}

TEST_CASE("v0.20: usage leaves the null block out of the pool", "[core]") {
  KVCacheManager kv(KVCacheConfig{4, 11, 4096, true, 0}, kVllm020Policy);
  CHECK(kv.usage() == 0.0);
  Request r = make_request(0, iota_tokens(20));
  kv.add_request(r);
  GroupBlockLists hits(1);
  REQUIRE(kv.allocate_slots(r, 20, 0, hits, 0) == AllocStatus::kOk);
  CHECK(kv.usage() == Approx(0.5));  // 5 of the 10 usable blocks; v0.8.5 would say 6/11
  KVCacheManager old(KVCacheConfig{4, 11, 4096, true, 0}, kVllm085Policy);
  Request o = make_request(1, iota_tokens(20));
  std::vector<BlockId> h;
  REQUIRE(old.allocate_slots(o, 20, h).ok());
  CHECK(old.usage() == Approx(6.0 / 11.0));
  kv.free(r);
  kv.release_request(r);
  old.free(o);
  old.release_request(o);
}

TEST_CASE("v0.20: the same content is cached once per group, under (hash, group) keys", "[core]") {
  KVCacheManager kv(two_groups(4, 20, 8), kVllm020Policy);
  Request a = make_request(0, iota_tokens(13));
  kv.add_request(a);
  GroupBlockLists hits(2);
  REQUIRE(kv.allocate_slots(a, 13, 0, hits, 0) == AllocStatus::kOk);
  // 3 full blocks in each group: 6 keys for 3 distinct hashes.
  CHECK(kv.pool().num_cached_blocks() == 6);
  CHECK(kv.pool().num_cached_hashes() == 6);
  CHECK(ints(a.kv_groups[0].blocks) == std::vector<int>{1, 2, 3, 4});  // the window group first
  CHECK(ints(a.kv_groups[1].blocks) == std::vector<int>{5, 6, 7, 8});
  a.num_computed_tokens = 13;
  // B shares 12 tokens: window 8 needs 2 contiguous hits, nulls before them.
  Request b = make_request(1, [] {
    auto t = iota_tokens(12);
    t.push_back(99);
    t.push_back(98);
    return t;
  }());
  kv.add_request(b);
  AllocStatus st;
  CHECK(kv.get_computed_blocks(b, hits, st) == 12);
  CHECK(ints(hits[0]) == std::vector<int>{0, 2, 3});
  CHECK(ints(hits[1]) == std::vector<int>{5, 6, 7});
  for (Request* r : {&a, &b}) {
    kv.free(*r);
    kv.release_request(*r);
  }
}

TEST_CASE("v0.20: out-of-window blocks are freed before the allocation, even when it fails",
          "[core]") {
  KVCacheConfig c{4, 6, 4096, true, 0};
  c.sliding_window = 5;  // one sliding-window group (flat)
  KVCacheManager kv(c, kVllm020Policy);
  Request r = make_request(0, iota_tokens(16));
  kv.add_request(r);
  GroupBlockLists hits(1);
  REQUIRE(kv.allocate_slots(r, 16, 0, hits, 0) == AllocStatus::kOk);
  r.num_computed_tokens = 16;
  CHECK(kv.pool().num_free_blocks() == 1);
  // 16 computed, window 5: tokens 0..11 are skipped, 3 blocks freed (last first), still cached;
  // then 40 more tokens need 10 blocks, which do not fit.
  CHECK(kv.allocate_slots(r, 40, 0, hits, 0) == AllocStatus::kNoFreeBlocks);
  CHECK(ints(r.kv_groups[0].blocks) == std::vector<int>{0, 0, 0, 4});
  CHECK(free_queue_ids(kv) == std::vector<int>{5, 3, 2, 1});
  CHECK(kv.pool().num_cached_blocks() == 4);
  const Request* live[] = {&r};
  CHECK(kv.find_violation(live).empty());
  kv.free(r);
  kv.release_request(r);
}

namespace {

/// Adds `r` to `sched` and runs one step per token of `sampled` (what the model samples at that
/// step's end); returns whether each step's output finished the request.
std::vector<bool> run_steps(Scheduler& sched, Request& r, std::initializer_list<Token> sampled) {
  sched.add_request(r);
  SchedulerOutput out;
  std::vector<RequestOutput> outs;
  std::vector<bool> finished;
  for (const Token t : sampled) {
    sched.schedule(out);
    r.sampled_token = t;
    sched.update_from_output(outs);
    REQUIRE(outs.size() == 1);
    finished.push_back(outs[0].finished);
  }
  return finished;
}

}  // namespace

TEST_CASE("v0.20: stop tokens end a request before the length limits, after min_tokens", "[core]") {
  for (const Profile p : {Profile::kVllm085, Profile::kVllm020}) {
    Scheduler sched(SchedulerConfig{4, 512, 4096}, KVCacheConfig{4, 64, 4096, true, 0}, p);
    SamplingLimits lim;
    lim.max_tokens = 2;
    lim.eos_token_id = 7;
    Request r(0, iota_tokens(6), lim);
    // EOS on the max_tokens-th token.
    CHECK(run_steps(sched, r, {1, 7}) == std::vector<bool>{false, true});
    INFO(profile_name(p));
    CHECK(std::string(finish_reason(r.status)) == (p == Profile::kVllm020 ? "stop" : "length"));
  }
  // min_tokens suppresses the EOS: the 2nd one counts.
  Scheduler sched(SchedulerConfig{4, 512, 4096}, KVCacheConfig{4, 64, 4096, true, 0},
                  Profile::kVllm020);
  SamplingLimits lim;
  lim.max_tokens = 5;
  lim.min_tokens = 2;
  lim.eos_token_id = 7;
  Request r(0, iota_tokens(6), lim);
  CHECK(run_steps(sched, r, {7, 7}) == std::vector<bool>{false, true});
  CHECK(r.status == RequestStatus::kFinishedStopped);
}

TEST_CASE("v0.20: below min_tokens nothing stops a request: EOS, stop token or max_model_len",
          "[core]") {
  // max_model_len 8, a prompt of 6: the 2nd output reaches max_model_len (vLLM's quirk: the
  // request is not stopped below min_tokens, see case
  // v20_edge_sched_min_tokens_past_max_model_len).
  for (const Token last : {7, 5, 1}) {  // EOS, a stop token, neither
    INFO("last token " << last);
    Scheduler sched(SchedulerConfig{4, 512, 8}, KVCacheConfig{4, 64, 8, true, 0},
                    Profile::kVllm020);
    SamplingLimits lim;
    lim.max_tokens = 2;  // as many as fit
    lim.min_tokens = 3;
    lim.eos_token_id = 7;
    lim.stop_token_ids = {5};
    Request r(0, iota_tokens(6), lim);
    CHECK(run_steps(sched, r, {last, last}) == std::vector<bool>{false, false});
    CHECK(r.num_tokens() == 8);  // at max_model_len and at max_tokens
    CHECK(r.status == RequestStatus::kRunning);
    CHECK(r.stop_reason == std::nullopt);
  }
}

TEST_CASE("v0.20: scheduler_reserve_full_isl admits only what fits whole", "[core]") {
  for (const bool reserve : {false, true}) {
    SchedulerConfig sc{4, 8, 4096};  // 8-token chunks
    sc.scheduler_reserve_full_isl = reserve;
    Scheduler sched(sc, KVCacheConfig{4, 5, 4096, true, 0}, Profile::kVllm020);
    SamplingLimits lim;
    Request r(0, iota_tokens(30), lim);  // 8 blocks whole; 4 usable blocks
    sched.add_request(r);
    SchedulerOutput out;
    sched.schedule(out);
    CHECK(out.scheduled.size() == (reserve ? 0u : 1u));
    CHECK(sched.num_waiting() == (reserve ? 1 : 0));
  }
}

TEST_CASE("v0.20: async scheduling keeps two steps in flight and caches outputs a step late",
          "[core]") {
  SchedulerConfig sc{4, 512, 4096};
  sc.async_scheduling = true;
  Scheduler sched(sc, KVCacheConfig{4, 64, 4096, true, 0}, Profile::kVllm020);
  SamplingLimits lim;
  lim.max_tokens = 4;
  lim.ignore_eos = true;
  Request r(0, iota_tokens(7), lim);  // block 1 completes with the first output
  sched.add_request(r);
  SchedulerOutput out;
  std::vector<RequestOutput> outs;
  const BlockPool& pool = sched.kv_cache_manager().pool();
  sched.schedule(out);  // the prompt
  sched.schedule(out);  // the first output's position, before that token is known
  REQUIRE(sched.num_steps_in_flight() == 2);
  CHECK(r.num_output_placeholders == 2);
  CHECK(pool.num_cached_blocks() == 1);  // block 1 waits for its last token
  r.sampled_token = 100;
  sched.update_from_output(outs);  // the first output: its K/V is still being computed
  REQUIRE(outs.size() == 1);
  CHECK(r.num_output_placeholders == 1);
  CHECK(pool.num_cached_blocks() == 1);
  sched.schedule(out);
  r.sampled_token = 101;
  sched.update_from_output(outs);  // the step that computed it is done: block 1 is cached
  CHECK(pool.num_cached_blocks() == 2);
  CHECK(sched.num_steps_in_flight() == 1);
  // The synchronous scheduler caches it when the next step is scheduled.
  Scheduler sync(SchedulerConfig{4, 512, 4096}, KVCacheConfig{4, 64, 4096, true, 0},
                 Profile::kVllm020);
  Request s(0, iota_tokens(7), lim);
  sync.add_request(s);
  sync.schedule(out);
  s.sampled_token = 100;
  sync.update_from_output(outs);
  CHECK(sync.kv_cache_manager().pool().num_cached_blocks() == 1);
  sync.schedule(out);
  CHECK(sync.kv_cache_manager().pool().num_cached_blocks() == 2);
}

TEST_CASE("v0.20: a priority victim scheduled earlier in the step leaves it untouched", "[core]") {
  // vLLM pops the victim's entry before _update_after_schedule runs: its computed tokens are
  // reset by the preemption, and under async scheduling it gets no output placeholder.
  for (const bool async : {false, true}) {
    INFO("async " << async);
    SchedulerConfig sc{4, 512, 4096};
    sc.priority_policy = true;
    sc.async_scheduling = async;
    Scheduler sched(sc, KVCacheConfig{4, 4, 4096, false, 0}, Profile::kVllm020);  // 3 usable
    SamplingLimits lim;
    lim.max_tokens = 8;
    lim.ignore_eos = true;
    Request x(0, iota_tokens(2), lim);  // 1 block; the victim: the larger priority
    Request y(1, iota_tokens(8), lim);  // 2 blocks, admitted after x
    x.priority = 5;
    x.arrival_time = 1;
    y.priority = 0;
    y.arrival_time = 2;
    SchedulerOutput out;
    std::vector<RequestOutput> outs;
    sched.add_request(x);
    sched.schedule(out);  // x's prompt
    x.sampled_token = 7;
    sched.update_from_output(outs);
    sched.add_request(y);
    sched.schedule(out);  // x decodes, y's prompt: the pool is full
    REQUIRE(out.scheduled.size() == 2);
    x.sampled_token = y.sampled_token = 7;
    sched.update_from_output(outs);
    REQUIRE(outs.size() == 2);
    REQUIRE(sched.running().size() == 2);
    REQUIRE(sched.running()[0] == &x);
    REQUIRE(x.num_output_placeholders == 0);
    // x decodes inside its block and is scheduled first; y needs a block: x is the victim.
    sched.schedule(out);
    REQUIRE(out.preempted.size() == 1);
    CHECK(out.preempted[0] == &x);
    REQUIRE(out.scheduled.size() == 1);
    CHECK(out.scheduled[0].request == &y);
    CHECK(out.total_num_scheduled_tokens == 1);
    CHECK(x.num_computed_tokens == 0);
    CHECK(x.num_output_placeholders == 0);
    CHECK(y.num_computed_tokens == 9);
    CHECK(y.num_output_placeholders == (async ? 1 : 0));
    REQUIRE(sched.oldest_in_flight().size() == 1);
    CHECK(sched.oldest_in_flight()[0].request == &y);
    CHECK(sched.find_violation().empty());
  }
}

TEST_CASE("v0.20: the invariant walk catches planted faults in group tables", "[core]") {
  KVCacheManager kv(two_groups(4, 20, 8), kVllm020Policy);
  Request a = make_request(0, iota_tokens(13));
  kv.add_request(a);
  GroupBlockLists hits(2);
  REQUIRE(kv.allocate_slots(a, 13, 0, hits, 0) == AllocStatus::kOk);
  const Request* live[] = {&a};
  REQUIRE(kv.find_violation(live).empty());
  const auto planted = [&](auto&& plant, auto&& undo) {
    plant();
    const std::string v = kv.find_violation(live);
    undo();
    return v;
  };
  // A block of group 1 listed in group 0's table too.
  CHECK_FALSE(planted([&] { a.kv_groups[0].blocks.push_back(BlockId{5}); },
                      [&] { a.kv_groups[0].blocks.pop_back(); })
                  .empty());
  // The null block inside a full-attention table.
  CHECK_FALSE(planted([&] { a.kv_groups[1].blocks[0] = BlockId{0}; },
                      [&] { a.kv_groups[1].blocks[0] = BlockId{5}; })
                  .empty());
  // A null entry after a real block of the window group.
  CHECK_FALSE(planted([&] { a.kv_groups[0].blocks.push_back(BlockId{0}); },
                      [&] { a.kv_groups[0].blocks.pop_back(); })
                  .empty());
  // A lost req_to_blocks entry.
  CHECK_FALSE(
      planted([&] { a.kv_groups[1].has_entry = false; }, [&] { a.kv_groups[1].has_entry = true; })
          .empty());
  CHECK(kv.find_violation(live).empty());
  kv.free(a);
  kv.release_request(a);
}
