// A cluster run's metrics.prom (shared/spec/cluster-routing.md §10): vLLM's names with one series
// per replica labelled engine="<r>" after model_name, each family's HELP and TYPE once; the
// merge of the replicas' texts on hand-written ones, and a cache_only cluster whose per-engine
// counters are the replicas' figures in summary.json.

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sim/metrics/cluster_outputs.h"
#include "sim/run/run_scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
namespace fs = std::filesystem;

TEST_CASE("prometheus_by_engine puts each family's series of every replica under one HELP",
          "[sim]") {
  const std::vector<std::string> texts = {
      "# HELP a:x gauge x.\n# TYPE a:x gauge\na:x{model_name=\"m\"} 1\n"
      "# HELP a:h hist.\n# TYPE a:h histogram\n"
      "a:h_bucket{le=\"1\",model_name=\"m\"} 2\na:h_bucket{le=\"+Inf\",model_name=\"m\"} 3\n"
      "a:h_sum{model_name=\"m\"} 4.5\na:h_count{model_name=\"m\"} 3\n",
      "# HELP a:x gauge x.\n# TYPE a:x gauge\na:x{model_name=\"m\"} 7\n"
      "# HELP a:h hist.\n# TYPE a:h histogram\n"
      "a:h_bucket{le=\"1\",model_name=\"m\"} 0\na:h_bucket{le=\"+Inf\",model_name=\"m\"} 1\n"
      "a:h_sum{model_name=\"m\"} 2\na:h_count{model_name=\"m\"} 1\n"};
  CHECK(prometheus_by_engine(texts, "m") ==
        "# HELP a:x gauge x.\n# TYPE a:x gauge\n"
        "a:x{model_name=\"m\",engine=\"0\"} 1\n"
        "a:x{model_name=\"m\",engine=\"1\"} 7\n"
        "# HELP a:h hist.\n# TYPE a:h histogram\n"
        "a:h_bucket{le=\"1\",model_name=\"m\",engine=\"0\"} 2\n"
        "a:h_bucket{le=\"+Inf\",model_name=\"m\",engine=\"0\"} 3\n"
        "a:h_sum{model_name=\"m\",engine=\"0\"} 4.5\n"
        "a:h_count{model_name=\"m\",engine=\"0\"} 3\n"
        "a:h_bucket{le=\"1\",model_name=\"m\",engine=\"1\"} 0\n"
        "a:h_bucket{le=\"+Inf\",model_name=\"m\",engine=\"1\"} 1\n"
        "a:h_sum{model_name=\"m\",engine=\"1\"} 2\n"
        "a:h_count{model_name=\"m\",engine=\"1\"} 1\n");
}

TEST_CASE("a cluster run's metrics.prom has each replica's counters, labelled engine", "[sim]") {
  kvsim::test::TempDir tmp("cluster-prom");
  const std::string text =
      "name: mc\n"
      "engine: {profile: vllm-0.7.2, mode: cache_only}\n"
      "cache: {block_size: 512, capacity_tokens: 1000000, enable_prefix_caching: true, "
      "num_preallocate_tokens: 0}\n"
      "scheduler: {max_model_len: 4000000}\n"
      "workload: {trace: {format: mooncake, max_requests: 500, path: " +
      kvsim::test::vendored_trace("mooncake_synthetic.jsonl") +
      "}}\n"
      "cluster: {replicas: 3, router: {policy: prefix_hash, seed: 1}}\n"
      "outputs: {metrics_prom: true}\n";
  const fs::path folder = run_scenario(kvsim::test::parse_text(text), tmp.path).folder;
  const nlohmann::json j = kvsim::test::read_json(folder / "summary.json");
  std::ifstream f(folder / "metrics.prom");
  const std::string prom((std::istreambuf_iterator<char>(f)), {});
  const auto count = [&](const std::string& s) {
    std::size_t n = 0;
    for (std::size_t at = prom.find(s); at != std::string::npos; at = prom.find(s, at + 1)) ++n;
    return n;
  };
  CHECK(count("# HELP vllm:prefix_cache_queries_total ") == 1);
  CHECK(count("# TYPE vllm:request_prompt_tokens histogram") == 1);
  std::int64_t queries = 0;
  for (int r = 0; r < 3; ++r) {
    const auto& rep = j["replicas"][static_cast<std::size_t>(r)];
    const std::string engine = "{model_name=\"mc\",engine=\"" + std::to_string(r) + "\"} ";
    INFO("replica " << r);
    CHECK(count("vllm:prefix_cache_queries_total" + engine +
                std::to_string(rep["prefix_cache_queries"].get<std::int64_t>()) + "\n") == 1);
    CHECK(count("vllm:prefix_cache_hits_total" + engine +
                std::to_string(rep["prefix_cache_hits"].get<std::int64_t>()) + "\n") == 1);
    // cache_only observes no request histograms, as the single engine's metrics.prom.
    CHECK(count("vllm:request_prompt_tokens_count" + engine + "0\n") == 1);
    queries += rep["prefix_cache_queries"].get<std::int64_t>();
  }
  CHECK(queries == j["prefix_cache_queries"].get<std::int64_t>());
  // The replicas differ, so a series taken from the wrong replica would show.
  CHECK(j["replicas"][0]["prefix_cache_queries"] != j["replicas"][1]["prefix_cache_queries"]);
  // Every series names its engine.
  std::istringstream lines(prom);
  for (std::string line; std::getline(lines, line);)
    if (!line.starts_with("#")) CHECK_THAT(line, Catch::Contains(",engine=\""));
}
