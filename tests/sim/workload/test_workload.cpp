#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <vector>

#include "sim/workload/workload.h"
#include "sim_test_util.h"

using namespace kvsim;

namespace {
std::vector<RequestSpec> drain(RequestSource& src, std::size_t limit = 1'000'000) {
  std::vector<RequestSpec> out;
  while (out.size() < limit) {
    auto r = kvsim::test::next_made(src);
    if (!r) break;
    out.push_back(std::move(*r));
  }
  return out;
}
std::unique_ptr<RequestSource> source(const std::string& yaml, std::uint64_t seed = 1) {
  return make_request_source(
      parse_workload_config(YAML::Load(yaml), YamlContext{"s.yaml", "workload"}), seed, 32000);
}
constexpr const char* kChat = R"(
num_requests: 300
arrival: {process: poisson, rate_per_s: 20}
system_prompts: {count: 4, tokens: 100, popularity: {zipf: 1.1}}
prompt_tokens: {lognormal: {mean: 300, sigma: 0.8}}
output_tokens: {lognormal: {mean: 250, sigma: 0.9}}
)";
}  // namespace

TEST_CASE("a synthetic workload is the same for the same seed and differs for another", "[sim]") {
  auto a = drain(*source(kChat, 7)), b = drain(*source(kChat, 7)), c = drain(*source(kChat, 8));
  REQUIRE(a.size() == 300);
  REQUIRE(b.size() == 300);
  bool same = true, differs = false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    same = same && a[i].prompt == b[i].prompt && a[i].arrival_ns == b[i].arrival_ns &&
           a[i].output_tokens == b[i].output_tokens && a[i].max_tokens == b[i].max_tokens &&
           a[i].output_seed == b[i].output_seed;
    differs = differs || a[i].prompt != c[i].prompt;
  }
  CHECK(same);
  CHECK(differs);
}

TEST_CASE("synthetic requests have dense ids, nondecreasing arrivals and the configured rate",
          "[sim]") {
  auto reqs = drain(*source(kChat));
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    CHECK(reqs[i].id == i);
    if (i) CHECK(reqs[i].arrival_ns >= reqs[i - 1].arrival_ns);
    CHECK(reqs[i].output_tokens >= 1);
    CHECK(reqs[i].max_tokens == reqs[i].output_tokens);
    for (auto t : reqs[i].prompt) REQUIRE((t >= 0 && t < 32000));
  }
  const double rate =
      static_cast<double>(reqs.size()) / (static_cast<double>(reqs.back().arrival_ns) / 1e9);
  CHECK(rate == Approx(20).epsilon(0.15));
}

TEST_CASE("two requests of the same system prompt share exactly the prefix tokens", "[sim]") {
  auto reqs = drain(*source(kChat));
  std::vector<int> seen(4, 0);
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    REQUIRE(reqs[i].prefix_group >= 0);
    REQUIRE(reqs[i].prefix_group < 4);
    ++seen[static_cast<std::size_t>(reqs[i].prefix_group)];
    for (std::size_t j = 0; j < i; ++j) {
      const auto& a = reqs[i].prompt;
      const auto& b = reqs[j].prompt;
      const auto common = static_cast<std::size_t>(
          std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
      if (reqs[i].prefix_group == reqs[j].prefix_group) {
        REQUIRE(common == 100);  // the whole system prompt, then the texts diverge
      } else {
        REQUIRE(common < 100);
      }
    }
  }
  CHECK(seen[0] > seen[3]);  // zipf popularity: prompt 0 is the most popular
}

TEST_CASE("few-shot templates stack after the system prompt", "[sim]") {
  auto reqs = drain(*source(R"(
num_requests: 50
arrival: {process: all_at_once}
system_prompts: {count: 1, tokens: 32}
few_shot: {count: 3, examples: 4, example_tokens: 10, popularity: uniform}
prompt_tokens: 5
output_tokens: 3
)"));
  for (const auto& r : reqs) {
    CHECK(r.arrival_ns == 0);
    CHECK(r.prompt.size() == 32 + 40 + 5);
    CHECK(r.prefix_group >= 4 * 1 + 0);  // (sp + 1) * (F + 1) + fs = 4 + fs
    CHECK(std::equal(r.prompt.begin(), r.prompt.begin() + 32, reqs[0].prompt.begin()));
  }
}

TEST_CASE("turn 2 of a session starts with turn 1's prompt and outputs", "[sim]") {
  auto src = source(R"(
num_requests: 5
arrival: {process: constant, rate_per_s: 1}
prompt_tokens: 20
output_tokens: 4
sessions: {turns: 3, think_time_s: {exponential: {mean: 2}}, user_tokens: 7}
)");
  auto first = drain(*src);
  REQUIRE(first.size() == 5);
  CHECK(first[1].arrival_ns == 1'000'000'000);
  const RequestSpec& t0 = first[0];
  std::vector<std::int32_t> out;
  for (int i = 0; i < t0.output_tokens; ++i) out.push_back(output_token(t0.output_seed, i, 32000));
  auto t1 = src->on_finished(t0, 5'000'000'000, out);
  REQUIRE(t1.has_value());
  CHECK(t1->id == 5);
  CHECK(t1->session == t0.session);
  CHECK(t1->turn == 1);
  CHECK(t1->arrival_ns >= 5'000'000'000);
  REQUIRE(t1->prompt.size() == 20 + 4 + 7);
  CHECK(std::equal(t0.prompt.begin(), t0.prompt.end(), t1->prompt.begin()));
  CHECK(std::equal(out.begin(), out.end(), t1->prompt.begin() + 20));
  std::vector<std::int32_t> out1(4, 1);
  auto t2 = src->on_finished(*t1, 9'000'000'000, out1);
  REQUIRE(t2.has_value());
  CHECK(t2->turn == 2);
  CHECK(!src->on_finished(*t2, 10'000'000'000, out1).has_value());  // 3 turns in all
  CHECK(src->on_finished(first[1], 1, {}).has_value());             // session 1 still has turns
}

TEST_CASE("a session's later turns do not depend on the order sessions finish", "[sim]") {
  constexpr const char* yaml = R"(
num_requests: 2
prompt_tokens: 8
output_tokens: 2
sessions: {turns: 2, think_time_s: {uniform: {min: 0, max: 1}}, user_tokens: {uniform: {min: 1, max: 50}}}
)";
  auto a = source(yaml), b = source(yaml);
  auto ra = drain(*a), rb = drain(*b);
  const std::vector<std::int32_t> out{1, 2};
  auto a0 = a->on_finished(ra[0], 100, out), a1 = a->on_finished(ra[1], 100, out);
  auto b1 = b->on_finished(rb[1], 100, out), b0 = b->on_finished(rb[0], 100, out);
  REQUIRE((a0 && a1 && b0 && b1));
  CHECK(a0->prompt == b0->prompt);
  CHECK(a1->prompt == b1->prompt);
  CHECK(a0->arrival_ns == b0->arrival_ns);
  CHECK(a0->output_seed == b0->output_seed);
}

TEST_CASE("arrival processes produce their documented times", "[sim]") {
  auto ts =
      drain(*source("arrival: {process: timestamps, times_s: [0, 0.5, 0.5, 2]}\nprompt_tokens: "
                    "1\noutput_tokens: 1\n"));
  REQUIRE(ts.size() == 4);
  CHECK(ts[3].arrival_ns == 2'000'000'000);
  auto bursts =
      drain(*source("num_requests: 6\narrival: {process: bursts, burst_size: 3, interval_s: "
                    "10}\nprompt_tokens: 1\noutput_tokens: 1\n"));
  REQUIRE(bursts.size() == 6);
  CHECK(bursts[2].arrival_ns == 0);
  CHECK(bursts[3].arrival_ns == 10'000'000'000);
  auto g =
      drain(*source("num_requests: 20000\narrival: {process: gamma, rate_per_s: 5, cv: "
                    "3}\nprompt_tokens: 1\noutput_tokens: 1\n"));
  std::vector<double> gaps;
  for (std::size_t i = 1; i < g.size(); ++i)
    gaps.push_back(static_cast<double>(g[i].arrival_ns - g[i - 1].arrival_ns) / 1e9);
  double m = 0, v = 0;
  for (double x : gaps) m += x;
  m /= static_cast<double>(gaps.size());
  for (double x : gaps) v += (x - m) * (x - m);
  v /= static_cast<double>(gaps.size());
  CHECK(m == Approx(0.2).epsilon(0.06));
  CHECK(std::sqrt(v) / m == Approx(3.0).epsilon(0.12));
  auto dur =
      drain(*source("num_requests: 100000\nduration_s: 10\narrival: {process: constant, "
                    "rate_per_s: 2}\nprompt_tokens: 1\noutput_tokens: 1\n"));
  CHECK(dur.size() == 21);
}

TEST_CASE("workload errors name the key and suggest the right one", "[sim]") {
  CHECK_THROWS_WITH(
      source("num_request: 5\nprompt_tokens: 1\noutput_tokens: 1\n"),
      Catch::Contains(
          "s.yaml:1:1: unknown key 'num_request' in workload (did you mean 'num_requests'?)"));
  CHECK_THROWS_WITH(source("prompt_tokens: 1\n"),
                    Catch::Contains("missing required key 'output_tokens'"));
  CHECK_THROWS_WITH(
      source("arrival: {process: poison, rate_per_s: 1}\nprompt_tokens: 1\noutput_tokens: 1\n"),
      Catch::Contains("did you mean 'poisson'?"));
  CHECK_THROWS_WITH(source("arrival: {process: poisson}\nprompt_tokens: 1\noutput_tokens: 1\n"),
                    Catch::Contains("missing required key 'rate_per_s' in workload.arrival"));
}

TEST_CASE("output tokens are deterministic per seed and position", "[sim]") {
  CHECK(output_token(5, 3, 32000) == output_token(5, 3, 32000));
  CHECK(output_token(5, 3, 32000) != output_token(5, 4, 32000));
  // In [0, vocab), every value reached, the avoided (EOS) token never.
  std::set<std::int32_t> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::int32_t t = output_token(11, i, 7, 3);
    CHECK(t >= 0);
    CHECK(t < 7);
    seen.insert(t);
  }
  CHECK(seen == std::set<std::int32_t>{0, 1, 2, 4, 5, 6});
}

TEST_CASE("bulk output tokens equal the per-position function", "[sim]") {
  // avoid = vocab - 1 wraps to 0; vocab 1 keeps its only token even when it is the avoided one.
  for (const auto& [vocab, avoid] : {std::pair{32000, -1}, std::pair{7, 3}, std::pair{7, 6},
                                    std::pair{2, 0}, std::pair{1, 0}}) {
    for (std::int64_t count : {0, 1, 5, 8, 17, 300}) {
      std::vector<std::int32_t> out(static_cast<std::size_t>(count) + 1, -7);
      fill_output_tokens(out.data(), 99, count, vocab, avoid);
      for (std::int64_t i = 0; i < count; ++i)
        CHECK(out[static_cast<std::size_t>(i)] == output_token(99, i, vocab, avoid));
      CHECK(out.back() == -7);  // nothing written past count
    }
  }
}

TEST_CASE("bulk pseudo tokens equal the per-position function", "[sim]") {
  for (std::int64_t count : {0, 1, 2, 7, 64, 2047, 2048, 2049, 5001}) {  // across 2048-token chunks
    std::vector<std::int32_t> out{-1};
    append_pseudo_tokens(out, 1234, count, 50);
    REQUIRE(static_cast<std::int64_t>(out.size()) == count + 1);
    CHECK(out[0] == -1);
    for (std::int64_t j = 0; j < count; ++j) {
      CHECK(out[static_cast<std::size_t>(j + 1)] == pseudo_token(1234, j, 50));
      CHECK(out[static_cast<std::size_t>(j + 1)] < 50);
    }
  }
  std::vector<std::int32_t> a, b;
  append_pseudo_tokens(a, 1, 64, 128000);
  append_pseudo_tokens(b, 2, 64, 128000);
  CHECK(a != b);
  CHECK(std::set<std::int32_t>(a.begin(), a.end()).size() > 60);  // no short cycle
}
