#include "trace_generator.h"

#include <fmt/format.h>

#include <memory>
#include <random>

#include "core/v1/scheduler.h"

namespace kvsim::bench {
namespace {

void append_list(std::string& s, const std::vector<std::int32_t>& v) {
  s += '[';
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  s += ']';
}

struct Rng {
  std::mt19937_64 g;
  explicit Rng(std::uint64_t seed) : g(seed) {}
  std::int64_t uniform(std::int64_t lo, std::int64_t hi) {  // inclusive
    return lo + static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(hi - lo + 1));
  }
};

std::vector<std::int32_t> make_prompt(Rng& rng,
                                      const std::vector<std::vector<std::int32_t>>& prefixes,
                                      std::int64_t min_suffix, std::int64_t max_suffix) {
  std::vector<std::int32_t> p = prefixes[rng.g() % prefixes.size()];
  for (std::int64_t n = rng.uniform(min_suffix, max_suffix); n > 0; --n)
    p.push_back(static_cast<std::int32_t>(rng.g() % 50));
  return p;
}

}  // namespace

KVCacheConfig bench_kv_config(std::int32_t block_size, std::int32_t num_gpu_blocks,
                              std::int64_t max_model_len, BenchLayout layout) {
  KVCacheConfig c{block_size, num_gpu_blocks, max_model_len, true, 64};
  if (layout.sliding_window > 0) {
    KVGroupSpec sw, full;
    sw.kind = KVGroupKind::kSlidingWindow;
    sw.sliding_window = layout.sliding_window;
    sw.block_size = full.block_size = block_size;
    c.kv_cache_groups = {sw, full};
  }
  return c;
}

std::string groups_field(const BenchLayout& layout) {
  if (layout.sliding_window <= 0) return "";
  return fmt::format(
      R"(,"kv_cache_groups":[{{"type":"sliding_window","sliding_window":{}}},{{"type":"full"}}])",
      layout.sliding_window);
}

KvmTrace generate_kvm_trace(std::uint64_t seed, std::int64_t num_ops, Profile profile,
                            BenchLayout layout) {
  Rng rng(seed);
  KvmTrace t{16, 512, 4096, layout, {}, {}};
  const V1Policy& policy = v1_policy(profile);
  const bool v020 = policy.kv_cache_coordinator;
  KVCacheManager kv(bench_kv_config(t.block_size, t.num_gpu_blocks, t.max_model_len, layout),
                    policy);
  t.text = fmt::format(R"({{"op":"init","block_size":{},"num_gpu_blocks":{},"max_model_len":{}{}}})"
                       "\n",
                       t.block_size, t.num_gpu_blocks, t.max_model_len, groups_field(layout));
  std::vector<std::vector<std::int32_t>> prefixes;
  for (int i = 0; i < 6; ++i) {
    std::vector<std::int32_t> p(static_cast<std::size_t>(rng.uniform(16, 96)));
    for (auto& x : p) x = static_cast<std::int32_t>(rng.g() % 50);
    prefixes.push_back(p);
  }
  struct Live {
    std::unique_ptr<Request> req;
    std::int32_t slot;
    bool running = false;
    std::int64_t outputs_left;
  };
  std::vector<Live> live;
  std::vector<BlockId> hits;
  GroupBlockLists group_hits(static_cast<std::size_t>(kv.num_groups()));
  std::int32_t next_slot = 0;
  auto id = [](std::int32_t slot) { return "\"r" + std::to_string(slot) + "\""; };
  auto emit = [&](KvmOp op, const std::string& line) {
    t.ops.push_back(std::move(op));
    t.text += line;
    t.text += '\n';
  };
  while (static_cast<std::int64_t>(t.ops.size()) < num_ops) {
    if (live.size() < 24 && rng.uniform(0, 3) == 0) {
      auto prompt = make_prompt(rng, prefixes, 1, 48);
      const std::int32_t slot = next_slot++;
      std::string line = "{\"op\":\"add_request\",\"id\":" + id(slot) + ",\"prompt\":";
      append_list(line, prompt);
      line += '}';
      live.push_back({std::make_unique<Request>(slot, prompt, SamplingLimits{}), slot, false,
                      rng.uniform(4, 48)});
      if (v020) kv.add_request(*live.back().req);
      emit({KvmOp::Kind::kAdd, slot, 0, std::move(prompt)}, line);
      continue;
    }
    if (live.empty()) continue;
    const std::size_t pick = rng.g() % live.size();
    Live& l = live[pick];
    Request& r = *l.req;
    if (!l.running && v020) {  // the lookup and allocation of vLLM v0.20's manager, per group
      AllocStatus st;
      const std::int64_t hit_tokens = kv.get_computed_blocks(r, group_hits, st);
      emit({KvmOp::Kind::kLookup, l.slot, 0, {}},
           "{\"op\":\"get_computed_blocks\",\"id\":" + id(l.slot) + "}");
      const std::int64_t n = r.num_tokens() - hit_tokens;
      std::vector<std::int32_t> flat;  // group after group, each ended by -1
      std::string lists;
      for (const auto& g : group_hits) {
        std::vector<std::int32_t> ids;
        for (BlockId b : g) ids.push_back(to_int(b));
        if (!lists.empty()) lists += ',';
        append_list(lists, ids);
        flat.insert(flat.end(), ids.begin(), ids.end());
        flat.push_back(-1);
      }
      if (layout.sliding_window > 0) lists = '[' + lists + ']';
      const bool ok = kv.allocate_slots(r, n, hit_tokens, group_hits, 0) == AllocStatus::kOk;
      emit({KvmOp::Kind::kAlloc, l.slot, n, flat},
           "{\"op\":\"allocate_slots\",\"id\":" + id(l.slot) +
               ",\"num_tokens\":" + std::to_string(n) + ",\"new_computed_blocks\":" + lists + "}");
      if (ok) {
        r.num_computed_tokens = hit_tokens + n;
        emit({KvmOp::Kind::kSetComputed, l.slot, r.num_computed_tokens, {}},
             "{\"op\":\"set_num_computed_tokens\",\"id\":" + id(l.slot) +
                 ",\"n\":" + std::to_string(r.num_computed_tokens) + "}");
        l.running = true;
      }
      continue;
    }
    if (!l.running) {
      const std::int64_t hit_tokens = kv.get_computed_blocks(r, hits);
      emit({KvmOp::Kind::kLookup, l.slot, 0, {}},
           "{\"op\":\"get_computed_blocks\",\"id\":" + id(l.slot) + "}");
      std::int64_t computed = hit_tokens;
      if (computed == r.num_tokens()) {  // v0.7.2's scheduler full-hit rule (never at v0.8.5)
        hits.pop_back();
        computed -= t.block_size;
      }
      const std::int64_t n = r.num_tokens() - computed;
      std::vector<std::int32_t> hit_ids;
      for (BlockId b : hits) hit_ids.push_back(to_int(b));
      std::string line = "{\"op\":\"allocate_slots\",\"id\":" + id(l.slot) +
                         ",\"num_tokens\":" + std::to_string(n) + ",\"new_computed_blocks\":";
      append_list(line, hit_ids);
      line += '}';
      const bool ok = kv.allocate_slots(r, n, hits).ok();
      emit({KvmOp::Kind::kAlloc, l.slot, n, hit_ids}, line);
      if (ok) {
        r.num_computed_tokens = computed + n;
        emit({KvmOp::Kind::kSetComputed, l.slot, r.num_computed_tokens, {}},
             "{\"op\":\"set_num_computed_tokens\",\"id\":" + id(l.slot) +
                 ",\"n\":" + std::to_string(r.num_computed_tokens) + "}");
        l.running = true;
      }
      continue;
    }
    if (l.outputs_left == 0 || rng.uniform(0, 40) == 0) {  // finish, or preempt
      const bool finish = l.outputs_left == 0;
      kv.free(r);
      if (finish) {
        kv.release_request(r);
        emit({KvmOp::Kind::kFinish, l.slot, 0, {}},
             "{\"op\":\"finish\",\"id\":" + id(l.slot) + "}");
        std::swap(l, live.back());
        live.pop_back();
      } else {
        emit({KvmOp::Kind::kFree, l.slot, 0, {}}, "{\"op\":\"free\",\"id\":" + id(l.slot) + "}");
        r.num_computed_tokens = 0;
        emit({KvmOp::Kind::kSetComputed, l.slot, 0, {}},
             "{\"op\":\"set_num_computed_tokens\",\"id\":" + id(l.slot) + ",\"n\":0}");
        l.running = false;
      }
      continue;
    }
    // Decode one token.
    const auto tok = static_cast<std::int32_t>(rng.g() % 50);
    r.append_output_token(tok);
    --l.outputs_left;
    emit({KvmOp::Kind::kAppend, l.slot, 0, {tok}},
         "{\"op\":\"append_output\",\"id\":" + id(l.slot) + ",\"tokens\":[" + std::to_string(tok) +
             "]}");
    for (auto& g : group_hits) g.clear();
    const bool ok = v020 ? kv.allocate_slots(r, 1, 0, group_hits, 0) == AllocStatus::kOk
                         : kv.allocate_slots(r, 1).ok();
    emit({KvmOp::Kind::kAlloc, l.slot, 1, {}},
         "{\"op\":\"allocate_slots\",\"id\":" + id(l.slot) + ",\"num_tokens\":1}");
    if (ok) {
      ++r.num_computed_tokens;
      emit({KvmOp::Kind::kSetComputed, l.slot, r.num_computed_tokens, {}},
           "{\"op\":\"set_num_computed_tokens\",\"id\":" + id(l.slot) +
               ",\"n\":" + std::to_string(r.num_computed_tokens) + "}");
    } else {
      l.outputs_left = 0;  // out of memory: let it finish
    }
  }
  for (Live& l : live) {
    kv.free(*l.req);
    kv.release_request(*l.req);
  }
  return t;
}

SchedTrace generate_sched_trace(std::uint64_t seed, std::int64_t num_ops, BenchLayout layout) {
  Rng rng(seed);
  SchedTrace t{8, 96, 256, 16, 96, layout, 96, 42, 50, {}, {}};
  t.text =
      fmt::format(R"({{"op":"sched_init","block_size":{},"num_gpu_blocks":{},"max_model_len":{},)"
                  R"("max_num_seqs":{},"max_num_batched_tokens":{}{}}})"
                  "\n",
                  t.block_size, t.num_gpu_blocks, t.max_model_len, t.max_num_seqs,
                  t.max_num_batched_tokens, groups_field(layout));
  std::vector<std::vector<std::int32_t>> prefixes;
  for (int i = 0; i < 4; ++i) {
    std::vector<std::int32_t> p(static_cast<std::size_t>(rng.uniform(8, 40)));
    for (auto& x : p) x = static_cast<std::int32_t>(rng.g() % 50);
    prefixes.push_back(p);
  }
  const std::string rule = fmt::format(R"({{"op":"update","rule":{{"mul":{},"add":{},"mod":{}}}}})",
                                       t.rule_mul, t.rule_add, t.rule_mod);
  std::int32_t next_slot = 0;
  std::vector<std::int32_t> recent;
  while (static_cast<std::int64_t>(t.ops.size()) < num_ops) {
    const auto adds = rng.uniform(0, 1);
    for (std::int64_t a = 0; a < adds; ++a) {
      SchedOp op{SchedOp::Kind::kAdd, next_slot++, rng.uniform(1, 24),
                 make_prompt(rng, prefixes, 1, 24)};
      std::string line =
          "{\"op\":\"add_request\",\"id\":\"q" + std::to_string(op.req) + "\",\"prompt\":";
      append_list(line, op.prompt);
      line += ",\"max_tokens\":" + std::to_string(op.max_tokens) + "}";
      recent.push_back(op.req);
      t.ops.push_back(std::move(op));
      t.text += line + '\n';
    }
    t.ops.push_back({SchedOp::Kind::kSchedule, -1, 0, {}});
    t.text += "{\"op\":\"schedule\"}\n";
    t.ops.push_back({SchedOp::Kind::kUpdate, -1, 0, {}});
    t.text += rule + '\n';
    if (!recent.empty() && rng.uniform(0, 30) == 0) {
      const std::int32_t victim = recent[rng.g() % recent.size()];
      t.ops.push_back({SchedOp::Kind::kAbort, victim, 0, {}});
      t.text += "{\"op\":\"abort\",\"ids\":[\"q" + std::to_string(victim) + "\"]}\n";
    }
    if (recent.size() > 64) recent.erase(recent.begin(), recent.begin() + 32);
  }
  return t;
}

}  // namespace kvsim::bench
