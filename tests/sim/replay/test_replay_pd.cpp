// sched mode with kv_pd (shared/spec/ops-format-pd.md): bad P/D input answers one error line and
// the replay goes on; a D and a P lifecycle replayed with exact values (the read's blocks, the
// promotion step, P's returned kv_transfer_params, the expiry on the trace's clock). The
// acceptance cases themselves run in test_replay_cases.cpp.

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/replay/v1_replayer.h"

using nlohmann::json;

namespace {

std::vector<json> run(const std::vector<std::string>& lines) {
  kvsim::V1Replayer r(kvsim::Profile::kVllm020, kvsim::ReplayOptions{true});
  std::string out;
  for (const auto& l : lines) r.process_line(l, out);
  std::vector<json> res;
  std::size_t start = 0;
  for (std::size_t nl; (nl = out.find('\n', start)) != std::string::npos; start = nl + 1)
    res.push_back(json::parse(out.substr(start, nl - start)));
  REQUIRE(res.size() == lines.size());
  return res;
}

const std::string kInit =
    R"({"op":"sched_init","block_size":16,"num_gpu_blocks":100,"max_model_len":1000,)"
    R"("max_num_seqs":16,"max_num_batched_tokens":64,"kv_pd":)";

std::string prompt(int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? "," : "") + std::to_string(i);
  return s + "]";
}

}  // namespace

TEST_CASE("bad kv_pd input gives one error line each and the replay goes on", "[sim]") {
  const std::vector<std::string> ops = {
      kInit + R"({"bogus":1}})",                           // unknown field
      kInit + R"({},"kv_offload":{"num_cpu_blocks":4}})",  // two connectors
      kInit + R"([]})",                                    // not an object
      kInit + R"({"abort_timeout":"soon"}})",              // wrong types
      kInit + R"({"engine_id":3}})",
      kInit + R"({"side_channel_port":1.5}})",
      kInit + R"({"completion":"later"}})",
      kInit + R"({"kv_role":"kv_everything"}})",
      kInit + R"({"disable_hybrid_kv_cache_manager":1}})",
      kInit + R"({}})",  // fine
      R"({"op":"add_request","id":"a","prompt":[1,2],"kv_transfer_params":[1]})",
      R"({"op":"schedule","now":"later"})",
      R"({"op":"update","finished_recving":"a"})",  // no step in flight
      R"({"op":"add_request","id":"b","prompt":[1,2,3]})",
      R"({"op":"schedule"})",
      R"({"op":"update","finished_recving":"b"})",  // not a list
  };
  const std::vector<json> res = run(ops);
  for (std::size_t i = 0; i < res.size(); ++i) {
    INFO(ops[i]);
    const bool want_error = i != 9 && i != 13 && i != 14;
    CHECK(res[i].contains("error") == want_error);
  }
}

TEST_CASE("a decode engine reads, promotes and recomputes the last prompt token", "[sim]") {
  const std::string params =
      R"({"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[[7,8,9]],)"
      R"("remote_engine_id":"p0","remote_request_id":"p-r","remote_host":"h","remote_port":1})";
  const std::vector<json> res = run({
      kInit + "{}}",
      R"({"op":"add_request","id":"r","prompt":)" + prompt(40) + R"(,"kv_transfer_params":)" +
          params + "}",
      R"({"op":"schedule"})",
      R"({"op":"update"})",
      R"({"op":"schedule"})",
      R"({"op":"update","finished_recving":["r","nobody"]})",
      R"({"op":"schedule"})",
  });
  CHECK(res[2]["pd"]["to_remote_kvs"] ==
        json::parse(R"([{"id":"r","num_computed_tokens":40,"block_ids":[1,2,3]}])"));
  CHECK(res[2]["pd"]["recv"] == json::parse(R"([{"id":"r","local_block_ids":[1,2,3]}])"));
  CHECK(res[2]["waiting_for_remote_kvs"] == json::parse(R"(["r"])"));
  CHECK(res[3]["pd"]["reads_started"][0]["remote_block_ids"] == json::parse("[[7,8,9]]"));
  CHECK(res[4]["new"].empty());  // not promoted before its read is reported
  CHECK(res[5]["pd"]["finished_recving"] == json::parse(R"(["r"])"));
  CHECK(res[5]["pd"]["ignored_recving"] == json::parse(R"(["nobody"])"));
  CHECK(res[6]["pd"]["promoted"] ==
        json::parse(
            R"([{"id":"r","num_computed_tokens":39,"cached_block_ids":[1,2],"failed":false}])"));
  CHECK(res[6]["num_scheduled_tokens"] == json::parse(R"([["r",1]])"));
}

TEST_CASE("a prefill engine returns its blocks to D and frees them at the expiry", "[sim]") {
  const std::vector<json> res = run({
      kInit + R"({"engine_id":"P","abort_timeout":10,"side_channel_port":7000,"tp_size":2}})",
      R"({"op":"add_request","id":"p","prompt":)" + prompt(20) +
          R"(,"max_tokens":1,"kv_transfer_params":{"do_remote_decode":true}})",
      R"({"op":"schedule","now":1})",
      R"({"op":"update","now":2.5})",
      R"({"op":"schedule","now":3})",
      R"({"op":"update","now":12.4})",
      R"({"op":"schedule"})",
      R"({"op":"update","now":12.5})",
      R"({"op":"update","now":1})",
  });
  const json& out = res[3]["outputs"][0];
  CHECK(out["delay_free"] == true);
  CHECK(out["kv_transfer_params"] ==
        json::parse(
            R"({"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[[1,2]],)"
            R"("remote_engine_id":"P","remote_request_id":"p","remote_host":"localhost",)"
            R"("remote_port":7000,"tp_size":2})"));
  CHECK(res[3]["held"] == json::parse(R"({"p":[1,2]})"));
  CHECK(res[4]["pd"]["send"] == json::parse(R"([["p",12.5]])"));
  CHECK(res[5]["pd"]["expired"].empty());  // 12.4 < 12.5
  CHECK(res[7]["pd"]["expired"] == json::parse(R"(["p"])"));
  CHECK(res[7]["pd"]["finished_sending"] == json::parse(R"(["p"])"));
  CHECK(res[7]["held"].empty());
  CHECK(res[8].contains("error"));  // no step in flight
}

TEST_CASE("a notification for a request P dropped answers vLLM's assertion, then goes on",
          "[sim]") {
  // Async: the step that batched p is in flight when p is aborted; D's notification then reaches
  // a worker that still tracks p, and the scheduler no longer has it (vLLM raises too).
  const std::vector<json> res = run({
      R"({"op":"sched_init","block_size":4,"num_gpu_blocks":64,"max_model_len":128,"max_num_seqs":4,)"
      R"("max_num_batched_tokens":64,"async_scheduling":true,"kv_pd":{}})",
      R"({"op":"add_request","id":"p","prompt":[1,2,3,4,5,6],"max_tokens":3,)"
      R"("kv_transfer_params":{"do_remote_decode":true}})",
      R"({"op":"schedule"})",
      R"({"op":"schedule"})",
      R"({"op":"update"})",
      R"({"op":"abort","ids":["p"]})",
      R"({"op":"update","finished_sending":["p"]})",
      R"({"op":"update","finished_recving":[1]})",  // no step in flight (the last one was applied)
      R"({"op":"schedule"})",
      R"({"op":"update","finished_recving":[1]})",  // not strings: the step stays in flight
      R"({"op":"update"})",
      R"({"op":"snapshot","brief":true})",
  });
  CHECK(res[6].contains("error"));
  CHECK(res[7].contains("error"));
  CHECK(res[8]["finished"] == json::parse(R"(["p"])"));
  CHECK(res[9].contains("error"));
  CHECK(!res[10].contains("error"));
  CHECK(res[11]["num_free_blocks"] == 63);
}
