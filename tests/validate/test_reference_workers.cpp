// The dense-reference workers: every task once, the first exception back on the caller, and a
// validation run whose records do not depend on the number of workers.

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "sim/config/scenario.h"
#include "tests/validate/validate_test_util.h"
#include "validate/reference_workers.h"

using namespace kvsim;
using namespace kvsim::validate;
using kvsim::validate::detail::ReferenceScratch;
using kvsim::validate::detail::ReferenceWorkers;

TEST_CASE("reference workers run every task once on several threads when the step is large",
          "[validate]") {
  ReferenceWorkers workers(4);
  REQUIRE(workers.threads() == 4);
  for (const std::int64_t elements : {std::int64_t{10}, ReferenceWorkers::kMinParallelElements}) {
    std::vector<int> runs(97, 0);
    std::set<std::thread::id> ids;
    std::set<const ReferenceScratch*> scratches;
    std::mutex m;
    workers.run(runs.size(), elements, [&](std::size_t i, ReferenceScratch& scratch) {
      ++runs[i];  // disjoint
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      const std::lock_guard<std::mutex> lock(m);
      ids.insert(std::this_thread::get_id());
      scratches.insert(&scratch);
    });
    INFO("elements " << elements);
    CHECK(std::count(runs.begin(), runs.end(), 1) == 97);
    CHECK(ids.size() == scratches.size());  // one scratch per worker
    if (elements < ReferenceWorkers::kMinParallelElements)
      CHECK(ids == std::set<std::thread::id>{std::this_thread::get_id()});
    else
      CHECK(ids.size() > 1);
  }
}

TEST_CASE("a reference worker's exception reaches the caller after every worker stopped",
          "[validate]") {
  ReferenceWorkers workers(3);
  std::vector<int> runs(50, 0);
  CHECK_THROWS_WITH(workers.run(runs.size(), ReferenceWorkers::kMinParallelElements,
                                [&](std::size_t i, ReferenceScratch&) {
                                  ++runs[i];
                                  if (i == 7) throw std::runtime_error("task 7 failed");
                                }),
                    "task 7 failed");
  CHECK(std::count_if(runs.begin(), runs.end(), [](int r) { return r > 1; }) == 0);
  CHECK(runs[7] == 1);
}

TEST_CASE("a validation run checks the same bits on one reference worker and on four",
          "[validate]") {
  // 8 KV heads x 128: a step's references regenerate more than kMinParallelElements elements, so
  // the four-worker run really splits them.
  const Scenario s =
      load_scenario(test::kSmall, {"model.num_attention_heads=32", "model.num_key_value_heads=8",
                                   "model.head_dim=128", "model.hidden_size=4096"});
  ValidationOptions one = test::cpu_options(15), four = test::cpu_options(15);
  one.threads = 1;
  four.threads = 4;
  const ValidationRunResult a = run_validation(s, test::out_dir("workers-1"), one);
  const ValidationRunResult b = run_validation(s, test::out_dir("workers-4"), four);
  REQUIRE(a.records.size() > 10);
  std::int64_t parallel_steps = 0;
  for (const ValidationRecord& r : a.records)
    parallel_steps += r.sum_context_tokens * 8 * 128 >= ReferenceWorkers::kMinParallelElements;
  CHECK(parallel_steps > 5);
  CHECK(a.summary.pass);
  test::require_same_records(a, b);
}
