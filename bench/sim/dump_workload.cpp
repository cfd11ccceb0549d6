// dump_workload SCENARIO.yaml [--set k=v ...] > WORKLOAD.jsonl: the requests kvsim synthesises for
// a timed scenario, for bench/sim/vllm_loop.py (vLLM's own scheduler loop on the same workload).
// Line 1: the engine and latency settings the loop needs (coefficients printed to round-trip);
// then one line per request in arrival order: id, arrival_ns, prompt token ids, the client's
// max_tokens (null: not sent), ignore_eos, eos_token_id, output_tokens (where EOS lands), and
// `out`: the token ids it generates (kvsim's generated_tokens), as many as it can generate before
// max_tokens, EOS or max_model_len. Open-loop workloads only (no multi-turn sessions, no client
// timeouts). A developer tool, not part of kvsim.

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "core/engine_api.h"
#include "sim/config/scenario.h"
#include "sim/engine/simulator.h"
#include "sim/workload/workload.h"

namespace {

void ints(std::string& s, const std::vector<std::int32_t>& v, std::size_t n) {
  s += '[';
  for (std::size_t i = 0; i < n; ++i) {
    if (i) s += ',';
    s += fmt::format("{}", v[i]);
  }
  s += ']';
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kvsim;
  if (argc < 2) {
    std::fprintf(stderr, "usage: dump_workload SCENARIO.yaml [--set k=v ...]\n");
    return 2;
  }
  std::vector<std::string> sets;
  for (int i = 2; i < argc; i += 2) {
    if (std::string(argv[i]) != "--set" || i + 1 == argc) {
      std::fprintf(stderr, "dump_workload: expected --set KEY=VALUE at %s\n", argv[i]);
      return 2;
    }
    sets.emplace_back(argv[i + 1]);
  }
  try {
    const Scenario sc = load_scenario(argv[1], sets);
    const std::int32_t vocab = scenario_vocab_size(sc);
    const auto& l = sc.latency;
    std::string lat;
    if (l.kind == LatencyConfig::Kind::kConstant) {
      lat = fmt::format("{{\"kind\":\"constant\",\"step_time_us\":{:.17g}}}", l.step_time_us);
    } else if (l.kind == LatencyConfig::Kind::kFitted) {
      const auto& c = l.fit.coefficients_us;
      lat = fmt::format(
          "{{\"kind\":\"fitted\",\"c\":[{:.17g},{:.17g},{:.17g},{:.17g},{:.17g},{:.17g}]}}", c[0],
          c[1], c[2], c[3], c[4], c[5]);
    } else {
      std::fprintf(stderr, "dump_workload: latency must be constant or fitted\n");
      return 2;
    }
    const auto& s = sc.scheduler;
    std::printf(
        "{\"name\":\"%s\",\"profile\":\"%s\",\"block_size\":%lld,\"num_gpu_blocks\":%lld,"
        "\"enable_prefix_caching\":%s,\"max_num_seqs\":%lld,\"max_num_batched_tokens\":%lld,"
        "\"max_model_len\":%lld,\"long_prefill_token_threshold\":%lld,"
        "\"enable_chunked_prefill\":%s,\"async_scheduling\":%s,\"latency\":%s}\n",
        sc.name.c_str(), profile_name(sc.engine.profile),
        static_cast<long long>(sc.cache.sizing.block_size),
        static_cast<long long>(sc.num_gpu_blocks),
        sc.cache.enable_prefix_caching ? "true" : "false", static_cast<long long>(s.max_num_seqs),
        static_cast<long long>(s.max_num_batched_tokens), static_cast<long long>(s.max_model_len),
        static_cast<long long>(s.long_prefill_token_threshold),
        s.enable_chunked_prefill ? "true" : "false", s.async_scheduling ? "true" : "false",
        lat.c_str());
    auto source = make_request_source(sc.workload, sc.seed, vocab);
    std::string line;
    std::vector<std::int32_t> out;
    while (std::optional<RequestSpec> r = source->next()) {
      if (r->session >= 0 || r->client_timeout_ns >= 0) {
        std::fprintf(stderr,
                     "dump_workload: multi-turn sessions and client timeouts unsupported\n");
        return 2;
      }
      r->materialize_prompt();
      const std::int64_t prompt = r->num_prompt_tokens();
      std::int64_t n =
          r->stops_at_eos() ? r->output_tokens : r->max_tokens.value_or(r->output_tokens);
      if (r->max_tokens) n = std::min<std::int64_t>(n, *r->max_tokens);
      n = std::max<std::int64_t>(0, std::min<std::int64_t>(n, s.max_model_len - prompt));
      // kvsim's Simulator::generated_tokens
      out.resize(static_cast<std::size_t>(n));
      fill_output_tokens(out.data(), r->output_seed, n, vocab, r->eos_token_id.value_or(-1));
      if (r->stops_at_eos() && n >= r->output_tokens)
        out[static_cast<std::size_t>(r->output_tokens - 1)] = *r->eos_token_id;
      line = fmt::format("{{\"id\":{},\"arrival_ns\":{},\"prompt\":", r->id, r->arrival_ns);
      ints(line, r->prompt, static_cast<std::size_t>(prompt));
      line += fmt::format(
          ",\"max_tokens\":{},\"ignore_eos\":{},\"eos\":{},\"output_tokens\":{},\"out\":",
          r->max_tokens ? fmt::format("{}", *r->max_tokens) : "null",
          r->ignore_eos ? "true" : "false",
          r->eos_token_id ? fmt::format("{}", *r->eos_token_id) : "null", r->output_tokens);
      ints(line, out, out.size());
      line += "}\n";
      std::fputs(line.c_str(), stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dump_workload: %s\n", e.what());
    return 2;
  }
  return 0;
}
