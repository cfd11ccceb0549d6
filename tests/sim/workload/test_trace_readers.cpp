#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "sim/workload/trace_readers.h"
#include "sim/workload/workload.h"
#include "sim_test_util.h"

using namespace kvsim;
using kvsim::test::next_made;
using kvsim::test::vendored_trace;

namespace {

std::unique_ptr<RequestSource> trace_source(const std::string& format, const std::string& path,
                                            const std::string& extra = "") {
  const std::string yaml = "trace: {format: " + format + ", path: '" + path + "'" + extra + "}";
  return make_request_source(
      parse_workload_config(YAML::Load(yaml), YamlContext{"s.yaml", "workload"}), 1, 32000);
}

std::string temp_file(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / "kvsim_test_traces";
  std::filesystem::create_directories(dir);
  const auto p = dir / name;
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

std::string error_of(RequestSource& src) {
  try {
    while (src.next()) {
    }
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("the Azure conversation trace has 19,366 rows, mean input 1,155 and output 211.1",
          "[sim]") {
  const std::string path = vendored_trace("azure_llm_conv_2023.csv");
  auto src = trace_source("azure", path);
  std::int64_t n = 0, in = 0, out = 0;
  SimTimeNs last = 0;
  std::optional<RequestSpec> first;
  while (auto r = next_made(*src)) {
    if (!first) first = *r;
    CHECK(r->id == static_cast<std::uint64_t>(n));
    ++n;
    in += static_cast<std::int64_t>(r->prompt.size());
    out += r->output_tokens;
    CHECK(r->max_tokens == r->output_tokens);  // ignore_eos: the benchmarks send max_tokens
    last = r->arrival_ns;
  }
  CHECK(n == 19'366);
  CHECK(static_cast<double>(in) / static_cast<double>(n) == Approx(1155).margin(0.5));
  CHECK(static_cast<double>(out) / static_cast<double>(n) == Approx(211.1).margin(0.05));
  REQUIRE(first);
  CHECK(first->arrival_ns == 0);
  CHECK(first->prompt.size() == 374);
  CHECK(first->output_tokens == 44);
  CHECK(first->max_tokens == 44);
  CHECK(static_cast<double>(n) / (static_cast<double>(last) / 1e9) == Approx(5.53).epsilon(0.02));
}

TEST_CASE("the Azure reader honours time_scale and max_requests", "[sim]") {
  const std::string path = vendored_trace("azure_llm_conv_2023.csv");
  auto src = trace_source("azure", path, ", time_scale: 0.5, max_requests: 2");
  auto a = next_made(*src);
  auto b = next_made(*src);
  REQUIRE((a && b));
  CHECK_FALSE(next_made(*src).has_value());
  // Rows 1 and 2: 18:15:46.6805900 and 18:15:50.9951690 -> 4.314579 s, halved.
  CHECK(b->arrival_ns == 2'157'289'500);
}

TEST_CASE("the Mooncake trace has 3,993 rows with mean input 15,326 and shared hash blocks",
          "[sim]") {
  const std::string path = vendored_trace("mooncake_synthetic.jsonl");
  auto src = trace_source("mooncake", path);
  std::int64_t n = 0, in = 0;
  std::vector<RequestSpec> head;
  while (auto r = next_made(*src)) {
    ++n;
    in += static_cast<std::int64_t>(r->prompt.size());
    if (head.size() < 200) head.push_back(std::move(*r));
  }
  CHECK(n == 3'993);
  CHECK(static_cast<double>(in) / static_cast<double>(n) == Approx(15'326).margin(1));
  // Rows 1 and 121 (0-based) both start with hash id 79: equal ids give equal tokens.
  REQUIRE(head.size() == 200);
  CHECK(std::equal(head[1].prompt.begin(), head[1].prompt.begin() + 512, head[121].prompt.begin()));
  CHECK_FALSE(
      std::equal(head[0].prompt.begin(), head[0].prompt.begin() + 512, head[1].prompt.begin()));
}

TEST_CASE("equal Mooncake hash ids give equal token blocks, the last block cut to the remainder",
          "[sim]") {
  const std::string path = temp_file(
      "mc.jsonl",
      "{\"timestamp\": 1000, \"input_length\": 1030, \"output_length\": 5, \"hash_ids\": [7, 8, "
      "9]}\n"
      "{\"timestamp\": 1500, \"input_length\": 600, \"output_length\": 0, \"hash_ids\": [7, 3]}\n");
  auto src = trace_source("mooncake", path);
  auto a = next_made(*src), b = next_made(*src);
  REQUIRE((a && b));
  CHECK(a->arrival_ns == 0);
  CHECK(b->arrival_ns == 500'000'000);
  CHECK(a->prompt.size() == 1030);
  CHECK(b->prompt.size() == 600);
  CHECK(b->output_tokens == 1);
  CHECK(b->max_tokens == 1);
  CHECK(std::equal(a->prompt.begin(), a->prompt.begin() + 512, b->prompt.begin()));
  CHECK_FALSE(
      std::equal(a->prompt.begin() + 512, a->prompt.begin() + 600, b->prompt.begin() + 512));
}

TEST_CASE("generic CSV and JSONL traces share prefixes within a prefix group", "[sim]") {
  const std::string csv = temp_file("g.csv",
                                    "arrival_s,prompt_tokens,output_tokens,prefix_group\n"
                                    "0.0,100,10,3\n0.25,80,5,3\n0.5,90,5,-1\n");
  auto src = trace_source("csv", csv, ", prefix_tokens: 64");
  auto a = next_made(*src), b = next_made(*src), c = next_made(*src);
  REQUIRE((a && b && c));
  CHECK(b->arrival_ns == 250'000'000);
  CHECK(std::equal(a->prompt.begin(), a->prompt.begin() + 64, b->prompt.begin()));
  CHECK(a->prompt[64] != b->prompt[64]);
  CHECK(a->prefix_group == 3);
  CHECK(c->prefix_group == -1);
  const std::string jsonl =
      temp_file("g.jsonl",
                "{\"arrival_s\": 1.5, \"prompt_tokens\": 10, \"output_tokens\": 2, "
                "\"prefix_group\": 0, \"prefix_tokens\": 4}\n"
                "\n{\"arrival_s\": 2, \"prompt_tokens\": 12, \"output_tokens\": 3, "
                "\"prefix_group\": 0, \"prefix_tokens\": 4}\n");
  auto js = trace_source("jsonl", jsonl);
  auto x = next_made(*js), y = next_made(*js);
  REQUIRE((x && y));
  CHECK(x->arrival_ns == 1'500'000'000);
  CHECK(std::equal(x->prompt.begin(), x->prompt.begin() + 4, y->prompt.begin()));
  CHECK_FALSE(next_made(*js).has_value());
}

TEST_CASE("a malformed trace row is reported with file:line", "[sim]") {
  const std::string azure = temp_file("bad_azure.csv",
                                      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                      "2023-11-16 18:15:46.6805900,374,44\n"
                                      "2023-11-16 18:15:50.9951690,abc,109\n");
  auto a = trace_source("azure", azure);
  CHECK(error_of(*a) == azure + ":3:1: ContextTokens: expected an integer, got 'abc'");

  const std::string mc = temp_file(
      "bad_mc.jsonl",
      "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [0]}\n"
      "{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [0}\n");
  auto m = trace_source("mooncake", mc);
  const std::string msg = error_of(*m);
  CHECK(msg.rfind(mc + ":2:", 0) == 0);
  CHECK(msg.find("JSON") != std::string::npos);

  const std::string back =
      temp_file("back.csv", "arrival_s,prompt_tokens,output_tokens\n2,5,5\n1,5,5\n");
  auto b = trace_source("csv", back);
  CHECK(error_of(*b).find(back + ":3:1: arrival goes backwards") == 0);

  const std::string hdr = temp_file("hdr.csv", "time,prompt_tokens,output_tokens\n");
  CHECK_THROWS_WITH(trace_source("csv", hdr),
                    Catch::Contains(hdr + ":1:1: header has no column 'arrival_s'"));
  CHECK_THROWS_WITH(trace_source("azure", "/nonexistent/x.csv"),
                    Catch::Contains("no such trace file"));
  CHECK_THROWS_WITH(trace_source("azur", azure), Catch::Contains("did you mean 'azure'?"));
}

TEST_CASE("the Azure code trace has 8,819 rows with mean input 2,048 and output 27.9", "[sim]") {
  const std::string path = vendored_trace("azure_llm_code_2023.csv");
  auto src = trace_source("azure", path);
  std::int64_t n = 0, in = 0, out = 0;
  while (auto r = next_made(*src)) {
    ++n;
    in += static_cast<std::int64_t>(r->prompt.size());
    out += r->output_tokens;
    CHECK(r->max_tokens == r->output_tokens);  // ignore_eos: the benchmarks send max_tokens
  }
  CHECK(n == 8'819);
  CHECK(static_cast<double>(in) / static_cast<double>(n) == Approx(2048).margin(0.5));
  CHECK(static_cast<double>(out) / static_cast<double>(n) == Approx(27.9).margin(0.05));
}
