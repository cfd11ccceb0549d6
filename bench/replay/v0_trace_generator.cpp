#include "v0_trace_generator.h"

#include <random>

namespace kvsim::bench {

V0SchedTrace generate_v0_sched_trace(std::uint64_t seed, std::int64_t num_ops, bool swap) {
  V0SchedTrace t;
  t.block_size = 16;
  t.num_gpu_blocks = 64;
  t.num_cpu_blocks = swap ? 4096 : 0;
  t.max_model_len = 2048;
  t.max_num_seqs = 32;
  t.max_num_batched_tokens = 2048;
  t.swap = swap;
  t.rule_mul = 7;
  t.rule_add = 3;
  t.rule_mod = 32000;
  std::mt19937_64 rng(seed);  // raw draws only: no std::*_distribution
  auto below = [&](std::uint64_t n) { return static_cast<std::int64_t>(rng() % n); };
  std::vector<std::vector<std::int32_t>> prefixes(8);
  auto make = [](SchedOp::Kind kind, std::int32_t req) {
    SchedOp op;
    op.kind = kind;
    op.req = req;
    return op;
  };
  for (auto& p : prefixes) {
    p.resize(static_cast<std::size_t>(16 + below(112)));
    for (auto& tok : p) tok = static_cast<std::int32_t>(below(32000));
  }
  std::string& s = t.text;
  s += "{\"op\":\"sched_init\",\"block_size\":" + std::to_string(t.block_size) +
       ",\"num_gpu_blocks\":" + std::to_string(t.num_gpu_blocks) +
       ",\"num_cpu_blocks\":" + std::to_string(t.num_cpu_blocks) +
       ",\"max_num_seqs\":" + std::to_string(t.max_num_seqs) +
       ",\"max_num_batched_tokens\":" + std::to_string(t.max_num_batched_tokens) +
       ",\"max_model_len\":" + std::to_string(t.max_model_len) +
       ",\"enable_prefix_caching\":" + (swap ? "false" : "true") +
       ",\"preemption_mode\":" + (swap ? "\"swap\"" : "null") + "}\n";
  const std::string rule = "{\"op\":\"update\",\"rule\":{\"mul\":" + std::to_string(t.rule_mul) +
                           ",\"add\":" + std::to_string(t.rule_add) +
                           ",\"mod\":" + std::to_string(t.rule_mod) + "}}\n";
  std::int32_t next = 0;
  while (static_cast<std::int64_t>(t.ops.size()) < num_ops) {
    // ~1 arrival per 10 steps (bursts of 6 one time in 8), ~40 output tokens each: the pool
    // holds ~6 requests, so bursts preempt and the queues stay bounded.
    if (below(16) == 0) {
      const int burst = below(8) == 0 ? 6 : 1;
      for (int b = 0; b < burst; ++b) {
        SchedOp op = make(SchedOp::Kind::kAdd, next++);
        op.max_tokens = 8 + below(64);
        if (below(2) == 0) op.prompt = prefixes[static_cast<std::size_t>(below(8))];
        const std::int64_t own = 1 + below(200);
        for (std::int64_t k = 0; k < own; ++k)
          op.prompt.push_back(static_cast<std::int32_t>(below(32000)));
        s += "{\"op\":\"add_seq_group\",\"id\":\"r" + std::to_string(op.req) + "\",\"prompt\":[";
        for (std::size_t k = 0; k < op.prompt.size(); ++k) {
          if (k) s += ',';
          s += std::to_string(op.prompt[k]);
        }
        s += "],\"max_tokens\":" + std::to_string(op.max_tokens) + "}\n";
        t.ops.push_back(std::move(op));
      }
    }
    t.ops.push_back(make(SchedOp::Kind::kSchedule, -1));
    s += "{\"op\":\"schedule\"}\n";
    t.ops.push_back(make(SchedOp::Kind::kUpdate, -1));
    s += rule;
    if (next > 0 && below(40) == 0) {
      SchedOp op = make(SchedOp::Kind::kAbort, static_cast<std::int32_t>(below(next)));
      s += "{\"op\":\"abort\",\"ids\":[\"r" + std::to_string(op.req) + "\"]}\n";
      t.ops.push_back(std::move(op));
    }
  }
  return t;
}

}  // namespace kvsim::bench
