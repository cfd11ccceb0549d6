// Once warm, the contiguous engine's step (schedule + update_from_output, and through them the
// slot allocator's allocate and free, for every placement) makes no heap allocation.

#include <catch2/catch.hpp>
#include <memory>
#include <random>

#include "alloc_counter.h"
#include "core/contiguous/contiguous_scheduler.h"

using namespace kvsim;

TEST_CASE("once warm the contiguous engine's step allocates nothing on the heap", "[core]") {
  const Profile profiles[] = {Profile::kOrcaMax, Profile::kOrcaPow2, Profile::kOrcaOracle};
  const FitPolicy fits[] = {FitPolicy::kFirstFit, FitPolicy::kBestFit, FitPolicy::kBuddy};
  for (int c = 0; c < 9; ++c) {
    const Profile p = profiles[c / 3];
    ContiguousPolicy policy = contiguous_policy(p);
    policy.fit = fits[c % 3];
    INFO(profile_name(p) << ", " << fit_policy_name(policy.fit));
    ContiguousScheduler sched(p, policy, SchedulerConfig{32, 2048, 1024},
                              KVCacheConfig{16, 512, 1024, false, 0});
    std::mt19937_64 rng(11);
    SchedulerOutput out;
    std::vector<RequestOutput> outputs;
    std::vector<std::unique_ptr<Request>> round;
    std::int64_t next_index = 0, counted = 0, steps_counted = 0, admitted = 0;
    for (int r = 0; r < 6; ++r) {
      const bool measure = r >= 3;  // rounds 0-2 warm the queues and output vectors
      round.clear();
      for (int i = 0; i < 64; ++i) {
        SamplingLimits lim;
        lim.max_tokens = 20 + static_cast<std::int64_t>(rng() % 200);
        auto req = std::make_unique<Request>(next_index++, std::vector<Token>(10 + rng() % 300, 5),
                                             lim);  // room for its outputs
        req->oracle_final_num_tokens = req->num_tokens() + lim.max_tokens;
        sched.add_request(*req);
        round.push_back(std::move(req));
      }
      while (sched.num_unfinished_requests() > 0) {
        test::AllocationWindow window;
        sched.schedule(out);
        for (const ScheduledRequest& sr : out.scheduled) {
          sr.request->sampled_token = 9;
          admitted += sr.kind == ScheduledRequest::Kind::kNew;
        }
        sched.update_from_output(outputs);
        if (measure) {
          counted += window.count();
          ++steps_counted;
        }
      }
    }
    CHECK(steps_counted > 100);
    CHECK(admitted == 6 * 64);
    CHECK(counted == 0);
  }
}

TEST_CASE("the allocation counter sees the contiguous engine's first growth", "[core]") {
  ContiguousScheduler sched(Profile::kOrcaOracle, contiguous_policy(Profile::kOrcaOracle),
                            SchedulerConfig{4, 512, 1024}, KVCacheConfig{16, 64, 1024, false, 0});
  SamplingLimits lim;
  lim.max_tokens = 4;
  Request r(0, std::vector<Token>(10, 1), lim);
  r.oracle_final_num_tokens = 14;
  sched.add_request(r);  // the waiting ring grows here, outside the window
  SchedulerOutput out;   // empty vectors: the first schedule() grows them
  test::AllocationWindow window;
  sched.schedule(out);
  CHECK(window.count() > 0);
}
