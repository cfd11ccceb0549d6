// The acceptance cases of vLLM v0.20.1's pool sizing (tests/cases/kv-sizing-vllm-0.20.1): every
// case through `kvsim kv-size --profile vllm-0.20 --json-lines`, and every case built from a
// model config through the flags interface (`--model ... --json`), compared with vLLM's answer
// structurally and exactly. tests/sim/CMakeLists.txt also registers one ctest per case and
// interface (KVSIM_KV_CASE names the case; without it the tests run every case).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim_test_util.h"

namespace fs = std::filesystem;
using kvsim::test::slurp;
using kvsim::test::TempDir;
using kvsim::test::write_file;
using nlohmann::json;

namespace {

const fs::path kDir = fs::path(KVSIM_CASES_DIR) / "kv-sizing-vllm-0.20.1";

// The cases to run: KVSIM_KV_CASE, or all of them (at least the 29 vendored ones).
std::vector<std::string> case_ids() {
  if (const char* one = std::getenv("KVSIM_KV_CASE")) return {one};
  std::vector<std::string> ids;
  for (const auto& e : fs::directory_iterator(kDir)) {
    const std::string name = e.path().filename().string();
    const std::string suffix = ".input.json";
    if (name.size() > suffix.size() && name.ends_with(suffix))
      ids.push_back(name.substr(0, name.size() - suffix.size()));
  }
  std::sort(ids.begin(), ids.end());
  REQUIRE(ids.size() >= 29);
  return ids;
}

json load(const std::string& id, const char* kind) {
  const fs::path p = kDir / (id + "." + kind + ".json");
  REQUIRE(fs::exists(p));
  return json::parse(slurp(p));
}

// Where `got` differs from `want` ("" when equal): key order irrelevant, list order significant,
// integers exact, floats within 1e-9.
std::string difference(const json& got, const json& want, const std::string& path = "$") {
  if (got.is_number() && want.is_number()) {
    if (got.is_number_float() || want.is_number_float())
      return std::abs(got.get<double>() - want.get<double>()) <= 1e-9
                 ? ""
                 : path + ": " + got.dump() + " != " + want.dump();
    return got.get<std::int64_t>() == want.get<std::int64_t>()
               ? ""
               : path + ": " + got.dump() + " != " + want.dump();
  }
  if (got.type() != want.type()) return path + ": " + got.dump() + " != " + want.dump();
  if (got.is_object()) {
    for (auto it = want.begin(); it != want.end(); ++it)
      if (!got.contains(it.key())) return path + "." + it.key() + ": missing";
    for (auto it = got.begin(); it != got.end(); ++it) {
      if (!want.contains(it.key())) return path + "." + it.key() + ": not expected";
      std::string d = difference(it.value(), want.at(it.key()), path + "." + it.key());
      if (!d.empty()) return d;
    }
    return "";
  }
  if (got.is_array()) {
    if (got.size() != want.size())
      return path + ": " + std::to_string(got.size()) + " entries, want " +
             std::to_string(want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      std::string d = difference(got[i], want[i], path + "[" + std::to_string(i) + "]");
      if (!d.empty()) return d;
    }
    return "";
  }
  return got == want ? "" : path + ": " + got.dump() + " != " + want.dump();
}

struct Run {
  int status = -1;
  std::string out, err;
};

Run run_kvsim(const std::string& args, const std::string& stdin_text, const TempDir& tmp) {
  const fs::path in = tmp.path / "in.jsonl", out = tmp.path / "out", err = tmp.path / "err";
  write_file(in, stdin_text);
  const std::string cmd = kvsim::test::kvsim_exe() + " kv-size " + args + " < " + in.string() +
                          " > " + out.string() + " 2> " + err.string();
  const int rc = std::system(cmd.c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, slurp(out), slurp(err)};
}

// The flags of a model-config case: meta.kvsim_args plus the request shape of the input.
std::string case_flags(const json& input) {
  std::string flags = "--profile vllm-0.20 --json";
  for (const json& a : input["meta"]["kvsim_args"]) {
    std::string s = a.get<std::string>();
    if (s.starts_with("models/")) s = (kDir / s).string();
    flags += " " + s;
  }
  flags += " --max-model-len " + (input.value("auto_fit_max_model_len", false)
                                      ? std::string("auto")
                                      : std::to_string(input["max_model_len"].get<std::int64_t>()));
  flags += " --max-num-batched-tokens " +
           std::to_string(input["max_num_batched_tokens"].get<std::int64_t>());
  flags += std::string(" --disable-hybrid-kv-cache-manager=") +
           (input.value("disable_hybrid_kv_cache_manager", false) ? "true" : "false");
  return flags;
}

}  // namespace

TEST_CASE("kv-size --json-lines answers the vLLM v0.20.1 sizing cases exactly", "[sim]") {
  const std::vector<std::string> ids = case_ids();
  std::string lines;
  for (const std::string& id : ids) {
    json input = load(id, "input");
    input.erase("meta");
    lines += input.dump() + "\n";
  }
  const TempDir tmp("kv-lines");
  const Run r = run_kvsim("--profile vllm-0.20 --json-lines", lines, tmp);
  REQUIRE(r.status == 0);
  REQUIRE(r.err.empty());
  std::vector<std::string> out;
  for (std::size_t at = 0, nl; (nl = r.out.find('\n', at)) != std::string::npos; at = nl + 1)
    out.push_back(r.out.substr(at, nl - at));
  REQUIRE(out.size() == ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    INFO(ids[i]);
    // Every field, errors' texts and vLLM's log lines included.
    CHECK(difference(json::parse(out[i]), load(ids[i], "expected")) == "");
  }
}

TEST_CASE("kv-size --model ... --json answers the model-config sizing cases exactly", "[sim]") {
  int model_cases = 0;
  for (const std::string& id : case_ids()) {
    INFO(id);
    const json input = load(id, "input");
    if (!input["meta"]["kvsim_args"].is_array()) {
      // Only the explicit-layer cases have no flags; they say why.
      CHECK(input["meta"].contains("kvsim_not_expressible"));
      continue;
    }
    ++model_cases;
    json want = load(id, "expected");
    const TempDir tmp("kv-flags");
    const Run r = run_kvsim(case_flags(input), "", tmp);
    INFO(r.err);
    if (want.contains("error")) {
      // One line, exit 2, vLLM's own message.
      CHECK(r.status == 2);
      CHECK(r.out.empty());
      CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
      CHECK(r.err.find("refuses to start: " + want["error"].get<std::string>()) !=
            std::string::npos);
      continue;
    }
    REQUIRE(r.status == 0);
    want.erase("id");
    json got = json::parse(r.out);
    if (got.contains("mamba_cache_mode")) {      // kvsim's addition for a model with mamba layers
      CHECK(got["mamba_cache_mode"] == "none");  // the cases leave prefix caching at its default
      got.erase("mamba_cache_mode");
    }
    CHECK(difference(got, want) == "");
  }
  if (std::getenv("KVSIM_KV_CASE") == nullptr) CHECK(model_cases >= 24);
}

TEST_CASE("Llama 4's default is the hybrid manager off, =false enables it as the env var does",
          "[sim]") {
  const std::string model = (kDir / "models" / "llama-4-scout-17b-16e.json").string();
  const std::string base = "--profile vllm-0.20 --json --model " + model +
                           " --tensor-parallel-size 8 --kv-cache-memory-bytes 42949672960 "
                           "--max-model-len 131072";
  const TempDir tmp("kv-llama4");
  json want = load("chunked_llama4_scout_tp8_default", "expected");
  want.erase("id");
  Run r = run_kvsim(base, "", tmp);
  REQUIRE(r.status == 0);
  CHECK(difference(json::parse(r.out), want) == "");
  want = load("chunked_llama4_scout_tp8_hma_allowed", "expected");
  want.erase("id");
  r = run_kvsim(base + " --disable-hybrid-kv-cache-manager=false", "", tmp);
  REQUIRE(r.status == 0);
  CHECK(difference(json::parse(r.out), want) == "");
}

TEST_CASE("the case comparison catches a planted difference", "[sim]") {
  const json want = load("hybrid_gpt_oss_120b_tp1_bs16_16gib", "expected");
  CHECK(difference(want, want) == "");
  json got = want;
  got["num_blocks"] = 29'126;
  CHECK(difference(got, want) == "$.num_blocks: 29126 != 29127");
  got = want;
  std::swap(got["groups"][0], got["groups"][1]);  // list order matters
  CHECK(difference(got, want).starts_with("$.groups[0]"));
  got = want;
  got["groups"][1]["layer_names"][0] = "model.layers.3.attn.attn";
  CHECK(!difference(got, want).empty());
  got = want;
  got["max_concurrency"] = want["max_concurrency"].get<double>() + 1e-7;
  CHECK(!difference(got, want).empty());
  got["max_concurrency"] = want["max_concurrency"].get<double>() + 1e-12;  // float tolerance
  CHECK(difference(got, want) == "");
  got.erase("tensors");
  CHECK(difference(got, want) == "$.tensors: missing");
}

TEST_CASE("kv-size --json-lines refuses a malformed question before answering any", "[sim]") {
  const TempDir tmp("kv-lines-bad");
  json input = load("synth_zero_memory", "input");
  input.erase("meta");
  Run r = run_kvsim("--profile vllm-0.20 --json-lines",
                    input.dump() + "\n{\"layers\": [], \"blok_size\": 16}\n", tmp);
  CHECK(r.status == 2);
  CHECK(r.out.empty());
  CHECK(r.err.find("stdin:2:") != std::string::npos);
  CHECK(r.err.find("unknown key 'blok_size' (did you mean 'block_size'?)") != std::string::npos);
  r = run_kvsim("--profile vllm-0.7.2 --json-lines", "", tmp);
  CHECK(r.status == 2);
  r = run_kvsim("--profile vllm-0.20 --json-lines --block-size 16", "", tmp);
  CHECK(r.status == 2);
  CHECK(r.err.find("--block-size does not apply") != std::string::npos);
}
