// Bad input to `kvsim replay`: every malformed or misused op yields exactly one {"error": ...}
// line and the replay goes on; random mutations of real traces never crash or hang it.

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "replay/mutate_line.h"
#include "sim/replay/json_line.h"
#include "sim/replay/v1_replayer.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::vector<std::string> run(kvsim::V1Replayer& r, const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) r.process_line(l, out);
  std::vector<std::string> res;
  std::size_t start = 0;
  for (std::size_t nl; (nl = out.find('\n', start)) != std::string::npos; start = nl + 1)
    res.push_back(out.substr(start, nl - start));
  return res;
}

bool is_error(const std::string& line) { return json::parse(line).contains("error"); }

}  // namespace

TEST_CASE("malformed and misused ops each give one error line and the replay goes on", "[sim]") {
  kvsim::V1Replayer r(kvsim::Profile::kVllm072, kvsim::ReplayOptions{true});
  const std::vector<std::string> ops = {
      R"({"op":"add_request","id":"a","prompt":[1,2]})",  // before any init
      R"({"op":"init","block_size":4,"num_gpu_blocks":8,"max_model_len":64})",
      R"({"op":"init","block_size":0,"num_gpu_blocks":8,"max_model_len":64})",  // bad block size
      R"(not json)",
      R"({"op":"frobnicate"})",
      R"({"no_op":1})",
      R"([1,2,3])",
      R"({"op":"add_request","id":"a","prompt":[1,2,3,4,5]})",
      R"({"op":"add_request","id":"a","prompt":[1]})",  // id is live
      R"({"op":"add_request","id":"b","prompt":"nope"})",
      R"({"op":"add_request","id":"c","prompt":[1,99999999999]})",
      R"({"op":"allocate_slots","id":"zzz","num_tokens":4})",  // unknown id
      R"({"op":"allocate_slots","id":"a","num_tokens":0})",    // zero tokens
      R"({"op":"allocate_slots","id":"a","num_tokens":-3})",   // negative
      R"({"op":"allocate_slots","id":"a","num_tokens":4,"new_computed_blocks":[99]})",
      R"({"op":"allocate_slots","id":"a"})",  // missing field
      R"({"op":"schedule"})",                 // wrong mode
      R"({"op":"set_num_computed_tokens","id":"a","n":-1})",
      R"({"op":"allocate_slots","id":"a","num_tokens":5})",  // fine after all that
  };
  const auto out = run(r, ops);
  REQUIRE(out.size() == ops.size());
  const std::vector<bool> want_error = {true,  false, true, true, true, true, true,
                                        false, true,  true, true, true, true, true,
                                        true,  true,  true, true, false};
  for (std::size_t i = 0; i < ops.size(); ++i) {
    INFO(ops[i] << " -> " << out[i]);
    CHECK(is_error(out[i]) == want_error[i]);
  }
  // 2 blocks needed + 16 preallocated (64 tokens), capped by the 8 in the pool.
  CHECK(json::parse(out.back()) == json::parse(R"({"blocks":[0,1,2,3,4,5,6,7]})"));
  CHECK(r.num_errors() == 16);
}

TEST_CASE("update without a schedule and a zero modulus are errors in sched mode", "[sim]") {
  kvsim::V1Replayer r;
  const auto out = run(
      r,
      {
          R"({"op":"sched_init","block_size":4,"num_gpu_blocks":8,"max_model_len":64,"max_num_seqs":4,"max_num_batched_tokens":16})",
          R"({"op":"update"})", R"({"op":"add_request","id":"x","prompt":[1,2,3]})",
          R"({"op":"schedule"})", R"({"op":"update","rule":{"mul":1,"add":0,"mod":0}})",
          R"({"op":"update","rule":{"mul":3,"add":-20,"mod":7}})",
          R"({"op":"abort","ids":["x","unknown"]})", R"({"op":"update"})",
          R"({"op":"add_request","id":"y","prompt":[1,2,3]})",
          R"({"op":"set_num_computed_tokens","id":"y","n":2})",  // kvm-only ops would corrupt
          R"({"op":"allocate_slots","id":"y","num_tokens":1})",  // the scheduler's state
      });
  REQUIRE(out.size() == 11);
  CHECK(is_error(out[9]));
  CHECK(is_error(out[10]));
  CHECK(is_error(out[1]));
  CHECK(is_error(out[4]));
  // Python's floor modulo: (3*3 - 20) % 7 == 3.
  CHECK(json::parse(out[5])["outputs"][0]["new_token_ids"] == json::parse("[3]"));
  CHECK(json::parse(out[6]) == json::object());
  CHECK(is_error(out[7]));
}

TEST_CASE("an id that finishes twice before a step is listed once, as vLLM's set lists it",
          "[sim]") {
  // vLLM's finished_req_ids is a set of ids (every V1 release): x finishes at max_tokens, a new
  // request reuses the id and is aborted before the next schedule.
  for (const kvsim::Profile p :
       {kvsim::Profile::kVllm072, kvsim::Profile::kVllm085, kvsim::Profile::kVllm020}) {
    kvsim::V1Replayer r(p, kvsim::ReplayOptions{});
    const auto out = run(
        r, {
               R"({"op":"sched_init","block_size":4,"num_gpu_blocks":16,"max_model_len":64,"max_num_seqs":4,"max_num_batched_tokens":64})",
               R"({"op":"add_request","id":"x","prompt":[1,2,3],"max_tokens":1})",
               R"({"op":"schedule"})",
               R"({"op":"update"})",
               R"({"op":"add_request","id":"x","prompt":[4,5,6]})",
               R"({"op":"abort","ids":["x"]})",
               R"({"op":"add_request","id":"a","prompt":[7,8,9],"max_tokens":1})",
               R"({"op":"schedule"})",
           });
    REQUIRE(out.size() == 8);
    INFO(kvsim::profile_name(p) << ": " << out[7]);
    CHECK(json::parse(out[3])["outputs"][0]["finished"] == true);
    CHECK(json::parse(out[7])["finished"] == json::parse(R"(["x"])"));
    CHECK(json::parse(out[7])["new"][0]["id"] == "a");
  }
}

TEST_CASE("vllm-0.20 keys a multimodal item without an identifier hash_<index>", "[sim]") {
  // ops-format-v0.20.md: "an item without one gets hash_<index>" (none listed for it, or null);
  // the older profiles need one string per item.
  const std::vector<std::string> ops = {
      R"({"op":"init","block_size":4,"num_gpu_blocks":16,"max_model_len":64})",
      R"({"op":"add_request","id":"a","prompt":[1,-1,-1,4,5,6,-1,-1,-1,10,11,12],"mm_positions":[{"offset":1,"length":2},{"offset":6,"length":3}],"mm_hashes":["img",null]})",
      R"({"op":"req_info","id":"a"})",
      R"({"op":"add_request","id":"b","prompt":[1,-1,-1,4,5,6,-1,-1,-1,10,11,12],"mm_positions":[{"offset":1,"length":2},{"offset":6,"length":3}],"mm_hashes":["img"]})",
      R"({"op":"req_info","id":"b"})",
      R"({"op":"add_request","id":"c","prompt":[1,2],"mm_positions":[{"offset":0,"length":1}],"mm_hashes":["x","y"]})",
      R"({"op":"add_request","id":"d","prompt":[1,2],"mm_positions":[{"offset":0,"length":1}],"mm_hashes":[3]})",
  };
  const json keys = json::parse(R"([[["img",1]],[["hash_1",2]],[["hash_1",-2]]])");
  kvsim::V1Replayer v020(kvsim::Profile::kVllm020, kvsim::ReplayOptions{});
  const auto out = run(v020, ops);
  REQUIRE(out.size() == ops.size());
  CHECK(json::parse(out[2])["block_hash_extra_keys"] == keys);
  CHECK(json::parse(out[4])["block_hash_extra_keys"] == keys);
  CHECK(is_error(out[5]));  // more identifiers than items
  CHECK(is_error(out[6]));  // not a string
  kvsim::V1Replayer v085(kvsim::Profile::kVllm085, kvsim::ReplayOptions{});
  const auto old = run(v085, ops);
  REQUIRE(old.size() == ops.size());
  CHECK(is_error(old[1]));
  CHECK(is_error(old[3]));
}

TEST_CASE("blank lines produce no output and a final line needs no newline", "[sim]") {
  kvsim::V1Replayer r;
  std::string out;
  CHECK_FALSE(r.process_line("   ", out));
  CHECK_FALSE(r.process_line("", out));
  CHECK(out.empty());
  CHECK(r.process_line(R"({"op":"comment","text":"hi"})", out));
  CHECK(out == "{}\n");
}

namespace {

/// The lines of a few real traces of `folder`; with `window` > 0, every init op also asks for a
/// sliding window of that many tokens (so the v0.8.5 fuzz reaches the sliding-window manager).
/// The vllm-0.20.1 folder adds its own random traces (KV cache groups of every type, async
/// scheduling, priority policy) and its edge cases.
std::vector<std::string> fuzz_corpus(const char* folder, int window) {
  const fs::path dir = fs::path(KVSIM_CASES_DIR) / folder;
  std::vector<std::string> corpus;
  std::vector<std::string> names = {"gen_kvm_seed1.jsonl", "gen_sched_seed1.jsonl",
                                    "test_mm_prefix_caching.jsonl"};
  if (std::string(folder) == "vllm-0.20.1")
    for (const char* n :
         {"gen_v20_kvm_seed11.jsonl", "gen_v20_sched_seed12.jsonl",
          "v20_edge_mamba_hybrid_all_mode.jsonl", "v20_edge_chunked_local_attention.jsonl",
          "v20_edge_swa_admission_cap_undercount_raises.jsonl", "v20_test_async_abort.jsonl",
          "v20_test_cache_key_salting_and_lora.jsonl", "v20_edge_sched_prefix_cache_stats.jsonl",
          "v20_test_priority_scheduling_preemption.jsonl"})
      names.emplace_back(n);
  for (const std::string& name : names) {
    std::ifstream in(dir / name);
    for (std::string line; std::getline(in, line);) {
      if (window > 0 && line.find("init\"") != std::string::npos)
        line.insert(1, "\"sliding_window\":" + std::to_string(window) + ",");
      corpus.push_back(line);
    }
  }
  return corpus;
}

}  // namespace

TEST_CASE("randomly mutated real traces never crash and always answer one line per op", "[sim]") {
  struct Run {
    kvsim::Profile profile;
    const char* folder;
    int window;
    int rounds = 20;
  };
  for (const Run& run : {Run{kvsim::Profile::kVllm072, "vllm-0.7.2", 0},
                         Run{kvsim::Profile::kVllm085, "vllm-0.8.5.post1", 0},
                         Run{kvsim::Profile::kVllm085, "vllm-0.8.5.post1", 40},
                         Run{kvsim::Profile::kVllm020, "vllm-0.20.1", 0, 5},
                         Run{kvsim::Profile::kVllm020, "vllm-0.20.1", 40, 3}}) {
    INFO(kvsim::profile_name(run.profile) << " on " << run.folder << ", window " << run.window);
    const std::vector<std::string> corpus = fuzz_corpus(run.folder, run.window);
    REQUIRE(corpus.size() > 5000);
    std::mt19937_64 rng(12345);
    for (int round = 0; round < run.rounds; ++round) {
      kvsim::V1Replayer r(run.profile, kvsim::ReplayOptions{true});
      std::string out;
      std::int64_t nonblank = 0;
      for (std::size_t i = 0; i < corpus.size(); i += 1 + rng() % 3) {
        const std::string line = kvsim::test::mutate_line(corpus[i], rng);
        const std::size_t before = std::count(out.begin(), out.end(), '\n');
        const bool answered = r.process_line(line, out);
        const std::size_t after = std::count(out.begin(), out.end(), '\n');
        REQUIRE(after - before == (answered ? 1u : 0u));
        nonblank += answered;
      }
      // Every answer is valid JSON.
      std::size_t start = 0;
      std::int64_t lines = 0;
      for (std::size_t nl; (nl = out.find('\n', start)) != std::string::npos;
           start = nl + 1, ++lines)
        REQUIRE_NOTHROW(json::parse(out.substr(start, nl - start)));
      CHECK(lines == nonblank);
    }
  }
}

TEST_CASE("the JSON line parser reads values, escapes and reports the column of an error",
          "[sim]") {
  kvsim::JsonLine j;
  REQUIRE(j.parse(R"( {"a": [1, -2, 3.5e2], "s": "x\"y\u0041", "t": true, "n": null} )"));
  const auto a = j.find(kvsim::JsonLine::root(), "a");
  REQUIRE(a != kvsim::JsonLine::kNone);
  CHECK(j[a].size == 3);
  const auto first = kvsim::JsonLine::first_child(a);
  CHECK(j[first].i == 1);
  CHECK(j[j.next(first)].i == -2);
  CHECK(j[j.next(j.next(first))].d == 350.0);
  CHECK(j[j.find(kvsim::JsonLine::root(), "s")].s == "x\"yA");
  CHECK(j[j.find(kvsim::JsonLine::root(), "t")].b);
  CHECK(j.is_null_or_absent(j.find(kvsim::JsonLine::root(), "n")));
  CHECK(j.find(kvsim::JsonLine::root(), "missing") == kvsim::JsonLine::kNone);
  CHECK_FALSE(j.parse(R"({"a": [1, 2,]})"));
  CHECK(j.error().rfind("col 13", 0) == 0);
  CHECK_FALSE(j.parse(R"({"a": 01})"));
  CHECK_FALSE(j.parse(R"({"a": 1} x)"));
  CHECK_FALSE(j.parse("\"unterminated"));
  CHECK_FALSE(j.parse(std::string(100, '[') + std::string(100, ']')));  // too deep
}

TEST_CASE("the JSON writer escapes strings and keeps floats recognisable", "[sim]") {
  kvsim::OutBuf buf;
  kvsim::JsonWriter w(buf);
  w.begin_object().key("q\"").value(std::string_view("a\nb")).key("f").value(0.0).key("i");
  w.value(std::int64_t{-5}).key("l").begin_array().value(true).null().end_array().end_object();
  const std::string s(buf.view());
  CHECK(s == R"({"q\"":"a\nb","f":0.0,"i":-5,"l":[true,null]})");
  CHECK_NOTHROW(json::parse(s));
}

TEST_CASE("the JSON writer's array and literal-key fast paths write what the element calls write",
          "[sim]") {
  // int_array, string_array and key("literal") against begin_array / value / end_array and
  // key(std::string_view): the same bytes, escapes included (a string that needs escaping falls
  // back mid-array), empty arrays, extremes, nested in objects and arrays.
  const std::vector<std::int64_t> ints = {0,
                                          -1,
                                          7,
                                          1234567890123LL,
                                          std::numeric_limits<std::int64_t>::min(),
                                          std::numeric_limits<std::int64_t>::max()};
  const std::vector<std::string> strs = {
      "r0", "", "a\"b", "c\\d", std::string("e\x01", 2), "tab\there", "plain-id-12345"};
  for (std::size_t n = 0; n <= strs.size(); ++n) {
    INFO("prefix of " << n);
    const std::vector<std::int64_t> iv(ints.begin(), ints.begin() + std::min(n, ints.size()));
    const std::vector<std::string> sv(strs.begin(), strs.begin() + n);
    kvsim::OutBuf fast_buf, slow_buf;
    kvsim::JsonWriter fast(fast_buf), slow(slow_buf);
    fast.begin_array().begin_object().key("ints");
    fast.int_array(iv, [](std::int64_t x) { return x; });
    fast.key("strs");
    fast.string_array(sv, [](const std::string& x) { return std::string_view(x); });
    fast.end_object();
    fast.int_array(iv, [](std::int64_t x) { return x; });
    fast.string_array(sv, [](const std::string& x) { return std::string_view(x); });
    fast.end_array();
    slow.begin_array().begin_object().key(std::string_view("ints")).begin_array();
    for (std::int64_t x : iv) slow.value(x);
    slow.end_array().key(std::string_view("strs")).begin_array();
    for (const std::string& x : sv) slow.value(std::string_view(x));
    slow.end_array().end_object().begin_array();
    for (std::int64_t x : iv) slow.value(x);
    slow.end_array().begin_array();
    for (const std::string& x : sv) slow.value(std::string_view(x));
    slow.end_array().end_array();
    CHECK(std::string(fast_buf.view()) == std::string(slow_buf.view()));
    CHECK_NOTHROW(json::parse(std::string(fast_buf.view())));
  }
}
