// bench_replay: op-trace replay throughput, end to end (parse + execute + print) and for the core
// alone, on seeded generated traces in kvm and sched mode, for every V1 profile side by side (the
// repetitions interleave the profiles, so that machine noise hits them alike). See bench/README.md.
//
//   bench_replay [--ops N] [--seed S] [--reps R] [--profile NAME]... [--hybrid BOOL]
//                [--core-only] [--mode kvm|sched|both] [--write-v0-traces DIR]
//
// Modes: V1's kvm and sched traces (per V1 profile), and vLLM V0's sched-mode traces with
// recompute (v0-rc) and swap (v0-sw) preemption (--write-v0-traces DIR saves those two files, for
// replaying the same traces in vLLM's own code).
//
// vllm-0.20 also runs with a hybrid layout ("vllm-0.20+sw": a sliding-window group, then a full
// one, as gpt-oss: window 128 in the kvm trace, 32 in the sched trace's shorter requests), unless
// --hybrid false.

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/v0/scheduler.h"
#include "core/v1/scheduler.h"
#include "core/v1/v1_policy.h"
#include "sim/replay/replayer.h"
#include "trace_generator.h"
#include "v0_trace_generator.h"

using namespace kvsim;
using namespace kvsim::bench;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// In-process end to end: split lines, parse, execute, render into a buffer flushed to /dev/null.
double time_end_to_end(const std::string& text, Profile profile, std::int64_t& errors) {
  std::FILE* sink = std::fopen("/dev/null", "wb");
  const auto t0 = Clock::now();
  const std::unique_ptr<Replayer> replayer = make_replayer(profile, ReplayOptions{});
  OutBuf out;
  std::size_t start = 0;
  for (std::size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    replayer->process_line(std::string_view(text).substr(start, nl - start), out);
    if (out.size() >= (1 << 20)) {
      std::fwrite(out.data(), 1, out.size(), sink);
      out.clear();
    }
  }
  std::fwrite(out.data(), 1, out.size(), sink);
  const double s = seconds_since(t0);
  std::fclose(sink);
  errors = replayer->num_errors();
  return s;
}

/// A profile and a KV cache group layout to bench.
struct Bench {
  Profile profile;
  BenchLayout kvm_layout, sched_layout;
  std::string label;
};

[[gnu::noinline]] double time_core_kvm(const KvmTrace& t, Profile profile) {
  const auto t0 = Clock::now();
  KVCacheManager kv(bench_kv_config(t.block_size, t.num_gpu_blocks, t.max_model_len, t.layout),
                    v1_policy(profile));
  const bool v020 = kv.coordinator() != nullptr;
  std::vector<std::unique_ptr<Request>> reqs;
  std::vector<BlockId> hits, given;
  GroupBlockLists group_hits(static_cast<std::size_t>(kv.num_groups()));
  AllocStatus st;
  for (const KvmOp& op : t.ops) {
    switch (op.kind) {
      case KvmOp::Kind::kAdd:
        if (reqs.size() <= static_cast<std::size_t>(op.req))
          reqs.resize(static_cast<std::size_t>(op.req) + 1);
        reqs[static_cast<std::size_t>(op.req)] =
            std::make_unique<Request>(op.req, op.data, SamplingLimits{});
        if (v020) kv.add_request(*reqs[static_cast<std::size_t>(op.req)]);
        break;
      case KvmOp::Kind::kLookup:
        if (v020)
          kv.get_computed_blocks(*reqs[static_cast<std::size_t>(op.req)], group_hits, st);
        else
          kv.get_computed_blocks(*reqs[static_cast<std::size_t>(op.req)], hits);
        break;
      case KvmOp::Kind::kAlloc:
        if (v020) {  // the groups' lists, each ended by -1
          std::size_t g = 0;
          for (auto& h : group_hits) h.clear();
          for (std::int32_t b : op.data) {
            if (b < 0)
              ++g;
            else
              group_hits[g].push_back(BlockId{b});
          }
          const std::int64_t hit_tokens =
              static_cast<std::int64_t>(group_hits[0].size()) * t.block_size;
          (void)kv.allocate_slots(*reqs[static_cast<std::size_t>(op.req)], op.n, hit_tokens,
                                  group_hits, 0);
          break;
        }
        given.clear();
        for (std::int32_t b : op.data) given.push_back(BlockId{b});
        (void)kv.allocate_slots(*reqs[static_cast<std::size_t>(op.req)], op.n, given);
        break;
      case KvmOp::Kind::kSetComputed:
        reqs[static_cast<std::size_t>(op.req)]->num_computed_tokens = op.n;
        break;
      case KvmOp::Kind::kAppend:
        for (std::int32_t tok : op.data)
          reqs[static_cast<std::size_t>(op.req)]->append_output_token(tok);
        break;
      case KvmOp::Kind::kFree:
        kv.free(*reqs[static_cast<std::size_t>(op.req)]);
        break;
      case KvmOp::Kind::kFinish: {
        Request& r = *reqs[static_cast<std::size_t>(op.req)];
        kv.free(r);
        kv.release_request(r);
        reqs[static_cast<std::size_t>(op.req)].reset();
        break;
      }
    }
  }
  for (auto& r : reqs)
    if (r) kv.release_request(*r);
  return seconds_since(t0);
}

/// The scheduler-mode ops on `sched` (V1's or V0's Scheduler): adds, steps and aborts.
/// `update(out, reqs)` samples the step's tokens, applies the step and forgets finished requests.
template <class Sched, class Update>
void run_sched_ops(const std::vector<SchedOp>& ops, Sched& sched, Update&& update) {
  std::vector<std::unique_ptr<Request>> reqs;
  SchedulerOutput out;
  for (const SchedOp& op : ops) {
    switch (op.kind) {
      case SchedOp::Kind::kAdd: {
        SamplingLimits lim;
        lim.max_tokens = op.max_tokens;
        if (reqs.size() <= static_cast<std::size_t>(op.req))
          reqs.resize(static_cast<std::size_t>(op.req) + 1);
        reqs[static_cast<std::size_t>(op.req)] = std::make_unique<Request>(op.req, op.prompt, lim);
        sched.add_request(*reqs[static_cast<std::size_t>(op.req)]);
        break;
      }
      case SchedOp::Kind::kSchedule:
        sched.schedule(out);
        break;
      case SchedOp::Kind::kUpdate:
        update(out, reqs);
        break;
      case SchedOp::Kind::kAbort: {
        auto& r = reqs[static_cast<std::size_t>(op.req)];
        if (r && sched.abort_request(*r)) r.reset();
        break;
      }
    }
  }
}

[[gnu::noinline]] double time_core_sched(const SchedTrace& t, Profile profile) {
  const auto t0 = Clock::now();
  SchedulerConfig sc{t.max_num_seqs, t.max_num_batched_tokens, t.max_model_len};
  // vllm-0.20's sched_init default (the replayer's too).
  sc.scheduler_reserve_full_isl = v1_policy(profile).v020_scheduler_settings;
  Scheduler sched(sc, bench_kv_config(t.block_size, t.num_gpu_blocks, t.max_model_len, t.layout),
                  profile);
  std::vector<RequestOutput> outputs;
  const auto sample = [&](Request& r) {
    r.sampled_token = static_cast<Token>((r.num_tokens() * t.rule_mul + t.rule_add) % t.rule_mod);
  };
  run_sched_ops(t.ops, sched, [&](const SchedulerOutput&, auto& reqs) {
    // The requests the update reads, as the replayer finds them: v0.20's step in flight (a
    // request preempted since, too), the running list before it.
    if (sched.num_steps_in_flight() > 0) {
      for (const InFlightRequest& e : sched.oldest_in_flight())
        if (e.request) sample(*e.request);
    } else {
      for (Request* r : sched.running()) sample(*r);
    }
    sched.update_from_output(outputs);
    for (const RequestOutput& o : outputs)
      if (o.finished) reqs[static_cast<std::size_t>(o.request->index())].reset();
  });
  return seconds_since(t0);
}

/// The V0 trace's ops on the V0 Scheduler through EngineCore (the simulator's path; its clock
/// ticks once per schedule from 0, as the trace's does).
double time_core_v0(const V0SchedTrace& t) {
  const auto t0 = Clock::now();
  v0::V0Config c;
  c.block_size = t.block_size;
  c.num_gpu_blocks = t.num_gpu_blocks;
  c.num_cpu_blocks = t.num_cpu_blocks;
  c.enable_prefix_caching = !t.swap;
  c.max_num_seqs = t.max_num_seqs;
  c.max_num_batched_tokens = t.max_num_batched_tokens;
  c.max_model_len = t.max_model_len;
  if (t.swap) c.preemption_mode = v0::PreemptionMode::kSwap;
  v0::Scheduler sched(c);
  std::vector<RequestOutput> outputs;
  run_sched_ops(t.ops, sched, [&](const SchedulerOutput& out, auto& reqs) {
    for (const ScheduledRequest& s : out.scheduled)
      s.request->sampled_token =
          static_cast<Token>((s.request->num_tokens() * t.rule_mul + t.rule_add) % t.rule_mod);
    sched.update_from_output(outputs);
    for (const RequestOutput& o : outputs)
      if (o.finished) reqs[static_cast<std::size_t>(o.request->index())].reset();
    for (Request* r : out.ignored) reqs[static_cast<std::size_t>(r->index())].reset();
  });
  return seconds_since(t0);
}

double time_cli(const std::string& text, Profile profile, const char* tag) {
  const auto path =
      std::filesystem::temp_directory_path() / (std::string("kvsim_bench_") + tag + ".jsonl");
  {
    std::ofstream o(path, std::ios::binary);
    o << text;
  }
  const std::string cmd = std::string(KVSIM_BINARY_DIR) + "/kvsim replay --profile " +
                          profile_name(profile) + " " + path.string() + " > /dev/null";
  const auto t0 = Clock::now();
  const int rc = std::system(cmd.c_str());
  const double s = seconds_since(t0);
  std::filesystem::remove(path);
  return rc == 0 ? s : -1.0;
}

constexpr double kNotRun = 1e30;  // best_of's time when no run was made

// For each profile, the fastest of `reps` runs of f(profile index) (kNotRun when reps is 0); the
// repetitions interleave the profiles. Negative (a failed run) if any run failed.
template <class F>
std::vector<double> best_of(int reps, std::size_t num_profiles, F&& f) {
  std::vector<double> best(num_profiles, kNotRun);
  for (int i = 0; i < reps; ++i)
    for (std::size_t p = 0; p < num_profiles; ++p) {
      const double t = f(p);
      if (t < 0 || best[p] < 0) {
        best[p] = -1;
        continue;
      }
      best[p] = std::min(best[p], t);
    }
  return best;
}

/// One result row; a rate whose runs were left out (--core-only) prints "-".
void print_row(const char* label, const char* mode, double ops, std::size_t bytes, double e2e,
               double cli, double core, bool errors) {
  std::printf("%-14s %-6s %10.0f %8.1f", label, mode, ops, static_cast<double>(bytes) / 1e6);
  for (const double s : {e2e, cli, core}) {
    if (s >= kNotRun)
      std::printf(" %14s", "-");
    else
      std::printf(" %14.0f", ops / s);
  }
  std::printf("%s\n", errors ? "  (ERROR LINES!)" : "");
}

}  // namespace

int main(int argc, char** argv) {
  namespace po = boost::program_options;
  std::int64_t num_ops = 1000000;
  std::uint64_t seed = 1;
  int reps = 5;
  std::vector<std::string> profile_args;
  std::string v0_dir;
  bool hybrid = true;
  bool core_only = false;
  std::string mode_arg = "both";
  po::options_description opts("bench_replay options");
  opts.add_options()("help,h", "this text")("ops", po::value(&num_ops)->default_value(num_ops),
                                            "ops per generated trace")(
      "seed", po::value(&seed)->default_value(seed), "trace generator seed")(
      "reps", po::value(&reps)->default_value(reps), "runs per measurement (the best is kept)")(
      "profile", po::value(&profile_args)->composing(),
      "profile to run (repeatable; default: every V1 profile and V0)")(
      "hybrid", po::value(&hybrid)->default_value(hybrid),
      "also run vllm-0.20's hybrid layout (vllm-0.20+sw)")(
      "core-only", po::bool_switch(&core_only),
      "time the core alone (no end-to-end or kvsim replay runs; their columns print -)")(
      "mode", po::value(&mode_arg)->default_value(mode_arg),
      "V1 traces to run: kvm, sched or both (a profiler sees one mode alone)")(
      "write-v0-traces", po::value(&v0_dir), "save the V0 traces (v0-rc, v0-sw) to this folder");
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(opts).run(), vm);
    if (vm.count("help")) {
      std::cout << "bench_replay: op-trace replay throughput (see bench/README.md)\n" << opts;
      return 0;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    std::fprintf(stderr, "bench_replay: %s\n", e.what());
    return 2;
  }
  std::vector<Profile> chosen;
  for (const std::string& name : profile_args) {
    const auto p = find_profile(name);
    if (!p) {
      std::fprintf(stderr, "bench_replay: --profile: unknown profile '%s' (%s)\n", name.c_str(),
                   profile_names().c_str());
      return 2;
    }
    chosen.push_back(*p);
  }
  if (mode_arg != "kvm" && mode_arg != "sched" && mode_arg != "both") {
    std::fprintf(stderr, "bench_replay: --mode: '%s' is not kvm, sched or both\n",
                 mode_arg.c_str());
    return 2;
  }
  if (reps < 1 || num_ops < 1) {
    std::fprintf(stderr, "bench_replay: --reps and --ops need positive counts\n");
    return 2;
  }
  // The V1 traces run under the V1 profiles named (all of them when none is); the V0 traces
  // run unless only V1 profiles are named.
  bool run_v0 = chosen.empty();
  std::vector<Profile> v1;
  for (Profile p : chosen) {
    const EngineFamily f = profile_info(p).family;
    if (f == EngineFamily::kV0) {
      run_v0 = true;
    } else if (f == EngineFamily::kV1) {
      v1.push_back(p);
    } else {
      std::fprintf(stderr, "bench_replay: --profile: %s has no op protocol\n", profile_name(p));
      return 2;
    }
  }
  if (chosen.empty())
    for (const ProfileInfo& p : profiles())
      if (p.family == EngineFamily::kV1) v1.push_back(p.profile);
  std::vector<Bench> profs;
  for (Profile p : v1) {
    profs.push_back({p, {}, {}, profile_name(p)});
    if (hybrid && v1_policy(p).kv_cache_coordinator)
      profs.push_back({p, BenchLayout{128}, BenchLayout{32}, std::string(profile_name(p)) + "+sw"});
  }
  std::vector<KvmTrace> kvm;
  std::vector<SchedTrace> sch;
  const bool run_kvm = mode_arg != "sched", run_sched = mode_arg != "kvm";
  for (const Bench& b : profs) {
    kvm.push_back(run_kvm ? generate_kvm_trace(seed, num_ops, b.profile, b.kvm_layout)
                          : KvmTrace{});
    sch.push_back(run_sched ? generate_sched_trace(seed, num_ops, b.sched_layout) : SchedTrace{});
  }
  std::printf("bench_replay: seed %llu, best of %d runs (profiles interleaved), one core\n",
              static_cast<unsigned long long>(seed), reps);
  std::printf("%-14s %-6s %10s %8s %14s %14s %14s\n", "profile", "mode", "ops", "MB", "e2e ops/s",
              "cli ops/s", "core ops/s");
  for (int mode = run_kvm ? 0 : 1; mode < (run_sched ? 2 : 1) && !profs.empty(); ++mode) {
    const auto text = [&](std::size_t p) -> const std::string& {
      return mode == 0 ? kvm[p].text : sch[p].text;
    };
    std::vector<std::int64_t> errors(profs.size(), 0);
    const auto e2e = best_of(core_only ? 0 : reps, profs.size(), [&](std::size_t p) {
      return time_end_to_end(text(p), profs[p].profile, errors[p]);
    });
    const auto cli = best_of(core_only ? 0 : reps, profs.size(), [&](std::size_t p) {
      return time_cli(text(p), profs[p].profile, mode == 0 ? "kvm" : "sched");
    });
    const auto core = best_of(reps, profs.size(), [&](std::size_t p) {
      return mode == 0 ? time_core_kvm(kvm[p], profs[p].profile)
                       : time_core_sched(sch[p], profs[p].profile);
    });
    for (std::size_t p = 0; p < profs.size(); ++p) {
      if (cli[p] < 0) {
        std::fprintf(stderr, "bench_replay: kvsim replay failed on the %s trace (%s)\n",
                     mode == 0 ? "kvm" : "sched", profs[p].label.c_str());
        return 1;
      }
      const auto ops = static_cast<double>(mode == 0 ? kvm[p].ops.size() : sch[p].ops.size());
      print_row(profs[p].label.c_str(), mode == 0 ? "kvm" : "sched", ops, text(p).size(), e2e[p],
                cli[p], core[p], errors[p] != 0);
      if (errors[p]) return 1;
    }
  }
  for (int mode = 0; mode < 2 && run_v0; ++mode) {
    const V0SchedTrace v0t = generate_v0_sched_trace(seed, num_ops, /*swap=*/mode == 1);
    const char* tag = mode == 0 ? "v0-rc" : "v0-sw";
    if (!v0_dir.empty()) {
      const std::filesystem::path file =
          std::filesystem::path(v0_dir) / (std::string(tag) + ".jsonl");
      std::ofstream o(file, std::ios::binary);
      o << v0t.text;
      if (!o.flush()) {
        std::fprintf(stderr, "bench_replay: --write-v0-traces: cannot write %s\n", file.c_str());
        return 2;
      }
    }
    const auto ops = static_cast<double>(v0t.ops.size());
    std::int64_t errors = 0;
    const Profile v0p = Profile::kVllm072V0;
    const int outer_reps = core_only ? 0 : reps;
    const double e2e = best_of(
        outer_reps, 1, [&](std::size_t) { return time_end_to_end(v0t.text, v0p, errors); })[0];
    const double cli =
        best_of(outer_reps, 1, [&](std::size_t) { return time_cli(v0t.text, v0p, tag); })[0];
    const double core = best_of(reps, 1, [&](std::size_t) { return time_core_v0(v0t); })[0];
    if (cli < 0) {
      std::fprintf(stderr, "bench_replay: kvsim replay failed on the %s trace\n", tag);
      return 1;
    }
    print_row(profile_name(v0p), tag, ops, v0t.text.size(), e2e, cli, core, errors != 0);
    if (errors) return 1;
  }
  return 0;
}
