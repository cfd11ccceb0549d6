// KV cache groups in the simulator's outputs (vllm-0.20 with a hybrid model): each group's share
// of the pool equals a walk over every table and the free queue at every step, the shares add up
// to the pool breakdown, and steps.csv / summary.json carry them (only for runs of several groups).

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/v1/scheduler.h"
#include "sim/config/scenario.h"
#include "sim/engine/simulator.h"
#include "sim/run/run_scenario.h"
#include "sim/workload/workload.h"
#include "sim_test_util.h"

using namespace kvsim;
using kvsim::test::constant_ms;
using kvsim::test::read_csv;
using kvsim::test::read_json;
using kvsim::test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string kModels = std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/";

Scenario hybrid_scenario(const std::string& model, std::int64_t blocks, const char* async) {
  const std::string yaml =
      "name: g\nseed: 5\nengine: {profile: vllm-0.20}\nmodel: {config: " + kModels + model +
      ".json}\ncache: {block_size: 16, num_gpu_blocks_override: " + std::to_string(blocks) +
      "}\nscheduler: {max_model_len: 1024, max_num_seqs: 16, async_scheduling: " + async +
      "}\nworkload: {num_requests: 60, arrival: {process: poisson, rate_per_s: 100}, "
      "system_prompts: {count: 2, tokens: 300, share: 0.8}, prompt_tokens: {uniform: {min: 40, "
      "max: 700}}, output_tokens: {uniform: {min: 5, max: 300}}}\noutputs: {steps_every: 1}\n";
  return parse_scenario(load_yaml_string(yaml, "g.yaml"), "g.yaml");
}

/// Each group's share by walking every slot of every table and the free queue (the slow
/// reference for Scheduler::kv_breakdown_by_group).
std::vector<KVGroupShare> walk_groups(const Scheduler& s, std::span<const std::int64_t> final_kv) {
  const BlockPool& pool = s.kv_cache_manager().pool();
  const KVCacheCoordinator& c = *s.kv_cache_manager().coordinator();
  const std::int64_t big_b = s.kv_cache_manager().block_size();
  std::vector<KVGroupShare> out(static_cast<std::size_t>(c.num_groups()));
  std::vector<char> seen(static_cast<std::size_t>(pool.num_blocks()), 0);
  for (const Request* r : s.running()) {
    const std::int64_t comp = r->num_computed_tokens;
    const std::int64_t fin = final_kv[static_cast<std::size_t>(r->index())];
    for (std::int32_t g = 0; g < c.num_groups(); ++g) {
      const std::int64_t bs = c.manager(g).block_size();
      REQUIRE(big_b % bs == 0);
      const std::int64_t per_token = big_b / bs;
      KVGroupShare& sh = out[static_cast<std::size_t>(g)];
      const auto& table = r->kv_groups[static_cast<std::size_t>(g)].blocks;
      for (std::size_t k = 0; k < table.size(); ++k) {
        const BlockId b = table[k];
        if (b == pool.null_block() || seen[static_cast<std::size_t>(to_int(b))]) continue;
        seen[static_cast<std::size_t>(to_int(b))] = 1;
        ++sh.blocks;
        for (std::int64_t p = static_cast<std::int64_t>(k) * bs;
             p < static_cast<std::int64_t>(k + 1) * bs; ++p) {
          // A block shared by several tables holds computed tokens (full, cached).
          if (p < comp || pool.block(b).ref_cnt > 1)
            sh.token_states += per_token;
          else if (p < fin)
            sh.reservation += per_token;
          else
            sh.internal_fragmentation += per_token;
        }
      }
    }
  }
  for (const KVCacheBlock& blk : pool.free_queue())
    if (blk.block_hash != kNoHash)
      out[static_cast<std::size_t>(pool.group_of_key(blk.block_hash))].cached_free += big_b;
  return out;
}

/// An observer that reads the simulator it watches.
struct SimChecker : StepObserver {
  const Simulator* sim = nullptr;
};

/// Runs `s` (5 ms steps, the invariant walk after every step) with `check` watching; returns the
/// V1 scheduler's preemptions.
std::int64_t run_checked(const Scenario& s, std::int32_t vocab_size, SimChecker& check) {
  auto src = make_request_source(s.workload, s.seed, vocab_size);
  Simulator sim(s, *src, constant_ms(5));
  sim.set_check_invariants(true);
  check.sim = &sim;
  sim.attach(&check);
  sim.run();
  check.sim = nullptr;
  const auto* v1 = dynamic_cast<const Scheduler*>(&sim.engine());
  return v1 ? v1->stats().num_preemptions : -1;  // -1: not a V1 engine
}

struct GroupChecker : SimChecker {
  std::int64_t steps = 0, shared_steps = 0, window_steps = 0, cached_window_steps = 0;
  std::vector<KVGroupShare> fast;
  void on_step(const StepView& v) override {
    const auto& sched = dynamic_cast<const Scheduler&>(*v.engine);
    const auto final_kv = std::span<const std::int64_t>(sim->final_kv_tokens());
    fast.assign(static_cast<std::size_t>(sched.num_kv_cache_groups()), KVGroupShare{});
    const KVBreakdown total = sched.kv_breakdown_by_group(final_kv, fast);
    const KVBreakdown plain = sched.kv_breakdown(final_kv);
    const std::vector<KVGroupShare> slow = walk_groups(sched, final_kv);
    const BlockPool& pool = sched.kv_cache_manager().pool();
    const std::int64_t big_b = sched.kv_cache_manager().block_size();
    REQUIRE(fast.size() == slow.size());
    KVGroupShare sum;
    for (std::size_t g = 0; g < fast.size(); ++g) {
      INFO("step " << v.step << " group " << g);
      REQUIRE(fast[g].blocks == slow[g].blocks);
      REQUIRE(fast[g].token_states == slow[g].token_states);
      REQUIRE(fast[g].reservation == slow[g].reservation);
      REQUIRE(fast[g].internal_fragmentation == slow[g].internal_fragmentation);
      REQUIRE(fast[g].cached_free == slow[g].cached_free);
      REQUIRE(fast[g].blocks * big_b ==
              fast[g].token_states + fast[g].reservation + fast[g].internal_fragmentation);
      sum.blocks += fast[g].blocks;
      sum.token_states += fast[g].token_states;
      sum.reservation += fast[g].reservation;
      sum.internal_fragmentation += fast[g].internal_fragmentation;
      sum.cached_free += fast[g].cached_free;
    }
    // The shares, the null block and the free slots are the pool.
    REQUIRE(sum.blocks + 1 == pool.num_blocks() - pool.num_free_blocks());
    REQUIRE(total.token_states == sum.token_states);
    REQUIRE(total.reservation == sum.reservation);
    REQUIRE(total.internal_fragmentation == sum.internal_fragmentation + big_b);
    REQUIRE(total.cached_free == sum.cached_free);
    REQUIRE(total.total() == std::int64_t{pool.num_blocks()} * big_b);
    REQUIRE(plain.token_states == total.token_states);
    REQUIRE(plain.free == total.free);
    ++steps;
    bool shared = false;
    for (const Request* r : sched.running())
      for (const auto& t : r->kv_groups)
        for (BlockId b : t.blocks)
          if (b != pool.null_block() && pool.block(b).ref_cnt > 1) shared = true;
    shared_steps += shared;
    // gpt-oss: group 0 is the sliding window; beyond it a decoding request holds fewer blocks
    // there than in the full group, and the blocks it let go stay cached.
    window_steps += fast[0].blocks < fast[1].blocks;
    cached_window_steps += fast[0].cached_free > 0;
  }
};

}  // namespace

TEST_CASE("each KV cache group's share equals a walk of its tables and adds up to the pool",
          "[sim]") {
  for (const char* async : {"false", "true"}) {
    INFO("async " << async);
    const Scenario s = hybrid_scenario("gpt-oss-20b", 200, async);
    REQUIRE(s.kv_cache_config().kv_cache_groups.size() == 2);
    GroupChecker check;
    CHECK(run_checked(s, 201088, check) > 0);
    CHECK(check.steps > 100);
    CHECK(check.shared_steps > 0);
    CHECK(check.window_steps > check.steps / 2);
    CHECK(check.cached_window_steps > 0);
  }
}

TEST_CASE("steps.csv and summary.json show each KV cache group of a hybrid run", "[sim]") {
  TempDir tmp("kvgroups");
  RunOptions opt;
  opt.step_time = constant_ms(5);
  const Scenario s = hybrid_scenario("gpt-oss-20b", 200, "true");
  const fs::path folder = run_scenario(s, tmp.path / "h", opt).folder;
  const auto rows = read_csv(folder / "steps.csv");
  REQUIRE(rows.size() > 100);
  std::map<std::string, std::size_t> col;
  for (std::size_t i = 0; i < rows[0].size(); ++i) col[rows[0][i]] = i;
  for (const char* g : {"g0", "g1"})
    for (const char* part :
         {"_blocks", "_token_states", "_reservation", "_internal_fragmentation", "_cached_free"})
      REQUIRE(col.count(std::string(g) + part) == 1);
  REQUIRE(rows[0].back() == "g1_cached_free");
  const auto at = [&](const std::vector<std::string>& row, const std::string& name) {
    return static_cast<std::int64_t>(std::stoll(row[col.at(name)]));
  };
  const std::int64_t num_blocks = 200;
  double usage_sum = 0;
  std::int64_t g0_max = 0, g1_max = 0;
  for (std::size_t i = 1; i < rows.size(); ++i) {
    const auto& r = rows[i];
    REQUIRE(r.size() == rows[0].size());
    INFO("row " << i);
    CHECK(at(r, "g0_blocks") + at(r, "g1_blocks") + 1 == num_blocks - at(r, "num_free_blocks"));
    CHECK(at(r, "g0_token_states") + at(r, "g1_token_states") == at(r, "slots_token_states"));
    CHECK(at(r, "g0_reservation") + at(r, "g1_reservation") == at(r, "slots_reservation"));
    CHECK(at(r, "g0_internal_fragmentation") + at(r, "g1_internal_fragmentation") + 16 ==
          at(r, "slots_internal_fragmentation"));
    CHECK(at(r, "g0_cached_free") + at(r, "g1_cached_free") == at(r, "slots_cached_free"));
    usage_sum += static_cast<double>(at(r, "g0_blocks") + at(r, "g1_blocks")) / (num_blocks - 1);
    g0_max = std::max(g0_max, at(r, "g0_blocks"));
    g1_max = std::max(g1_max, at(r, "g1_blocks"));
  }
  CHECK(g0_max > 0);
  CHECK(g0_max < g1_max);  // the window keeps the sliding group small
  const nlohmann::json j = read_json(folder / "summary.json");
  const auto& groups = j["kv_cache_groups"];
  REQUIRE(groups.size() == 2);
  CHECK(groups["g0"]["kind"] == "sliding_window");
  CHECK(groups["g0"]["sliding_window"] == 128);
  CHECK(groups["g0"]["num_layers"] == 12);
  CHECK(groups["g0"]["block_size"] == 16);
  CHECK(groups["g1"]["kind"] == "full_attention");
  CHECK(groups["g1"]["num_layers"] == 12);
  CHECK_FALSE(groups["g1"].contains("sliding_window"));
  // Recorded every step: the groups' mean usages are the rows' usage, and the pool's.
  const double rows_mean = usage_sum / static_cast<double>(rows.size() - 1);
  const double g_mean = groups["g0"]["mean_kv_cache_usage_perc"].get<double>() +
                        groups["g1"]["mean_kv_cache_usage_perc"].get<double>();
  CHECK(g_mean == Approx(rows_mean).margin(1e-8));
  CHECK(groups["g1"]["max_kv_cache_usage_perc"].get<double>() ==
        Approx(static_cast<double>(g1_max) / (num_blocks - 1)).margin(1e-9));
  // Each group's breakdown plus the null block and the free slots is the pool breakdown.
  double parts = 0;
  for (const char* g : {"g0", "g1"})
    for (const auto& [k, v] : groups[g]["kv_breakdown"].items()) parts += v.get<double>();
  const auto& pool = j["kv_breakdown"];
  CHECK(parts + 16.0 / (num_blocks * 16) + pool["free"].get<double>() == Approx(1.0).margin(1e-8));
}

TEST_CASE("a run of one KV cache group writes no group columns or summary key", "[sim]") {
  TempDir tmp("kvgroup1");
  RunOptions opt;
  opt.step_time = constant_ms(5);
  for (const char* profile : {"vllm-0.20", "vllm-0.8.5"}) {
    INFO(profile);
    // gpt-oss under vllm-0.8.5: one pool of full attention; opt-125m under vllm-0.20: one group.
    const std::string model = std::string(profile) == "vllm-0.20" ? "opt-125m" : "gpt-oss-20b";
    std::string yaml = "name: one\nseed: 1\nengine: {profile: " + std::string(profile) +
                       "}\nmodel: {config: " + kModels + model +
                       ".json}\ncache: {block_size: 16, num_gpu_blocks_override: 200}\n"
                       "scheduler: {max_model_len: 2048}\nworkload: {num_requests: 5, "
                       "prompt_tokens: 100, output_tokens: 10}\n";
    const Scenario s = parse_scenario(load_yaml_string(yaml, "one.yaml"), "one.yaml");
    const fs::path folder = run_scenario(s, tmp.path / profile, opt).folder;
    const auto rows = read_csv(folder / "steps.csv");
    REQUIRE(!rows.empty());
    CHECK(rows[0].back() == "blocks_allocated");
    CHECK_FALSE(read_json(folder / "summary.json").contains("kv_cache_groups"));
  }
}

namespace {

/// Every step: the one group's share is every block in use but the null block.
struct OneGroupChecker : SimChecker {
  std::int64_t steps = 0, busy_steps = 0;
  void on_step(const StepView& v) override {
    const EngineCore& e = *v.engine;
    REQUIRE(e.num_kv_cache_groups() == 1);
    const auto final_kv = std::span<const std::int64_t>(sim->final_kv_tokens());
    KVGroupShare share[1];
    const KVBreakdown b = e.kv_breakdown_by_group(final_kv, share);
    const KVBreakdown plain = e.kv_breakdown(final_kv);
    const KVPoolStats pool = e.pool_stats();
    const std::int64_t null_slots = b.total() - share[0].token_states - share[0].reservation -
                                    share[0].internal_fragmentation - share[0].cached_free -
                                    b.free - b.external_fragmentation;
    REQUIRE(plain.token_states == b.token_states);
    REQUIRE(plain.internal_fragmentation == b.internal_fragmentation);
    REQUIRE(share[0].token_states == b.token_states);
    REQUIRE(share[0].reservation == b.reservation);
    REQUIRE(share[0].cached_free == b.cached_free);
    // vllm-0.8.5 reserves a null block (one block of internal fragmentation); the others none.
    const bool null_block = e.profile() == Profile::kVllm085;
    REQUIRE(null_slots == (null_block ? pool.block_size : 0));
    REQUIRE(share[0].blocks + (null_block ? 1 : 0) == pool.num_blocks - pool.num_free_blocks);
    ++steps;
    busy_steps += share[0].blocks > 0;
  }
};

}  // namespace

TEST_CASE("an engine of one KV cache group gives it every block in use", "[sim]") {
  for (const char* profile : {"vllm-0.7.2", "vllm-0.8.5", "vllm-0.7.2-v0", "orca-pow2"}) {
    INFO(profile);
    const std::string yaml =
        "name: one\nseed: 4\nengine: {profile: " + std::string(profile) +
        "}\nmodel: {config: " + kModels +
        "opt-125m.json}\ncache: {block_size: 16, num_gpu_blocks_override: 64}\n"
        "scheduler: {max_model_len: 1024}\nworkload: {num_requests: 20, arrival: {process: "
        "poisson, rate_per_s: 100}, system_prompts: {count: 1, tokens: 64}, prompt_tokens: "
        "{uniform: {min: 70, max: 300}}, output_tokens: {uniform: {min: 5, max: 100}}}\n";
    const Scenario s = parse_scenario(load_yaml_string(yaml, "one.yaml"), "one.yaml");
    OneGroupChecker check;
    run_checked(s, 50272, check);
    CHECK(check.busy_steps > 20);
  }
}

namespace {

/// vllm-0.20 with one full-attention group: the breakdown's prefix walk (shared blocks first,
/// cached blocks counted from the group's num_cached_block) equals a walk of every slot.
struct OneTableChecker : SimChecker {
  std::int64_t steps = 0, shared_steps = 0, cached_free_steps = 0;
  void on_step(const StepView& v) override {
    const auto& sched = dynamic_cast<const Scheduler&>(*v.engine);
    const auto final_kv = std::span<const std::int64_t>(sim->final_kv_tokens());
    REQUIRE(sched.num_kv_cache_groups() == 1);
    const KVBreakdown fast = sched.kv_breakdown(final_kv);
    const std::vector<KVGroupShare> slow = walk_groups(sched, final_kv);
    const BlockPool& pool = sched.kv_cache_manager().pool();
    const std::int64_t bs = sched.kv_cache_manager().block_size();
    INFO("step " << v.step);
    REQUIRE(fast.token_states == slow[0].token_states);
    REQUIRE(fast.reservation == slow[0].reservation);
    REQUIRE(fast.internal_fragmentation == slow[0].internal_fragmentation + bs);  // null block
    REQUIRE(fast.cached_free == slow[0].cached_free);
    REQUIRE(fast.total() == std::int64_t{pool.num_blocks()} * bs);
    ++steps;
    for (const Request* r : sched.running())
      if (!r->kv_groups[0].blocks.empty() && pool.block(r->kv_groups[0].blocks[0]).ref_cnt > 1) {
        ++shared_steps;
        break;
      }
    cached_free_steps += fast.cached_free > 0;
  }
};

}  // namespace

TEST_CASE("vllm-0.20 with one KV cache group: the fast breakdown equals a walk of every slot",
          "[sim]") {
  for (const char* async : {"false", "true"}) {
    INFO("async " << async);
    const Scenario s = hybrid_scenario("opt-125m", 120, async);
    REQUIRE(s.kv_cache_config().kv_cache_groups.size() == 1);
    OneTableChecker check;
    CHECK(run_checked(s, 50272, check) > 0);
    CHECK(check.steps > 100);
    CHECK(check.shared_steps > 0);
    CHECK(check.cached_free_steps > 0);
  }
}
