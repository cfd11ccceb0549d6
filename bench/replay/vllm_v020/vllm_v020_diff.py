#!/usr/bin/python3
"""Differential tests of `kvsim replay --profile vllm-0.20` against vLLM v0.20.1's own code.

  extract  --vllm-git DIR --scratch DIR          copy vLLM's files (tag v0.20.1) into DIR
  replay   --scratch DIR TRACE|-                 print vLLM's result lines for a trace
  gen      --scratch DIR --mode M --seed N ...   print a random trace
  check    --scratch DIR --kvsim BIN --mode M --seeds A:B ...   generate, replay on both, compare
  minimize --scratch DIR --kvsim BIN TRACE --out PREFIX          shrink a diverging trace
"""
import argparse
import json
import os
import sys

import common

KVM_ONLY = ("mamba", "mamba_spec", "bind", "tiny", "delay")


def mode_of(ops):
    """'offsched' for traces with a sched_init that has kv_offload, 'sched' for the other traces that
    start with sched_init, 'offm' with offload_init, else 'kvm'."""
    first = next((op["op"] for op in ops if op["op"] != "comment"), None)
    if first == "sched_init" and any(op["op"] == "sched_init" and op.get("kv_offload") is not None for op in ops):
        return "offsched"
    if first == "sched_init" and any(op["op"] == "sched_init" and op.get("kv_pd") is not None for op in ops):
        return "pdsched"
    return {"sched_init": "sched", "offload_init": "offm"}.get(first, "kvm")


def load_vllm(scratch):
    """Install the vLLM import stubs and return {mode: (harness class, generator class, valid_trace)}."""
    common.install(scratch)
    import kvm_gen
    import kvm_harness
    import offm_harness
    import offsched_gen
    import offsched_harness
    import pdsched_gen
    import pdsched_harness
    import sched_gen
    import sched_harness
    return {"kvm": (kvm_harness.KvmHarness, kvm_gen.KvmGen, kvm_harness.valid_trace),
            "sched": (sched_harness.SchedHarness, sched_gen.SchedGen, sched_harness.valid_trace),
            "offm": (offm_harness.OffmHarness, offm_harness.OffmGenerator, offm_harness.valid_trace),
            "offsched": (offsched_harness.OffschedHarness, offsched_gen.OffschedGen, offsched_gen.valid_trace),
            "pdsched": (pdsched_harness.PdschedHarness, pdsched_gen.PdschedGen, pdsched_gen.valid_trace)}


def read_trace(path):
    if path == "-":
        return [json.loads(line) for line in sys.stdin if line.strip()]
    return common.load(path)


def generate(modes, a, seed):
    """(trace, dropped-op count) for one seed under the generator options in a."""
    episodes = a.episodes or 3 + seed % 3
    gen_cls = modes[a.mode][1]
    if a.mode == "offm":
        g = gen_cls(seed, a.ops, episodes)
    elif a.mode in ("offsched", "pdsched"):
        g = gen_cls(seed, a.ops, episodes, stress=a.stress)
    elif a.mode == "kvm":
        g = gen_cls(seed, a.ops, episodes, mamba=a.mamba, bind=a.bind, mamba_spec=a.mamba_spec, tiny=a.tiny,
                    delay=a.delay, mamba_modes=a.mamba_modes)
    else:
        g = gen_cls(seed, a.ops, episodes, stress=a.stress, mamba_modes=a.mamba_modes,
                    reuse_inflight=a.reuse_inflight)
    return g.run(), len(g.errors)


def cmd_extract(a, _modes):
    common.extract(a.vllm_git, a.scratch)
    print(f"vLLM {common.TAG}: {len(common.REAL_FILES)} files in {a.scratch}")


def cmd_replay(a, modes):
    ops = read_trace(a.trace)
    sys.stdout.write(common.dumps(common.run_ops(modes[mode_of(ops)][0](), ops)))


def cmd_gen(a, modes):
    trace, dropped = generate(modes, a, a.seed)
    sys.stdout.write(common.dumps(trace))
    if dropped:
        print(f"{dropped} ops dropped (vLLM raised; the episode ended there)", file=sys.stderr)


def cmd_check(a, modes):
    start, end = (int(x) for x in a.seeds.split(":"))
    harness = modes[a.mode][0]
    os.makedirs(a.out, exist_ok=True)
    nops = ndropped = 0
    divergent = []
    for seed in range(start, end):
        trace, dropped = generate(modes, a, seed)
        want = common.run_ops(harness(), trace)
        got = common.run_kvsim(a.kvsim, trace)
        nops += len(trace)
        ndropped += dropped
        d = common.first_diff(want, got)
        if d is None:
            continue
        divergent.append(seed)
        base = os.path.join(a.out, f"{a.mode}-{seed}")
        for suffix, rows in ((".jsonl", trace), (".vllm.jsonl", want), (".kvsim.jsonl", got)):
            with open(base + suffix, "w") as f:
                f.write(common.dumps(rows))
        print(f"DIVERGE {a.mode} seed {seed} line {d + 1}: op {json.dumps(trace[d])[:200] if d < len(trace) else '-'}"
              f"\n  vllm:  {json.dumps(want[d])[:300] if d < len(want) else '-'}"
              f"\n  kvsim: {json.dumps(got[d])[:300] if d < len(got) else '-'}")
    print(f"{a.mode} seeds {a.seeds}: {end - start} traces, {nops} ops, {ndropped} dropped ops, "
          f"{len(divergent)} divergent{' ' + str(divergent) if divergent else ''}")
    return 1 if divergent else 0


def cmd_minimize(a, modes):
    ops = read_trace(a.trace)
    harness, _, valid = modes[mode_of(ops)]
    ops = common.minimize(ops, lambda t: common.run_ops(harness(), t),
                          lambda t: common.run_kvsim(a.kvsim, t), valid)
    want, got = common.run_ops(harness(), ops), common.run_kvsim(a.kvsim, ops)
    for suffix, rows in ((".jsonl", ops), (".vllm.jsonl", want), (".kvsim.jsonl", got)):
        with open(a.out + suffix, "w") as f:
            f.write(common.dumps(rows))
    d = common.first_diff(want, got)
    print(f"{len(ops)} ops, first difference at line {d + 1}: {a.out}.jsonl")


def gen_options(p):
    p.add_argument("--mode", choices=("kvm", "sched", "offm", "offsched", "pdsched"), required=True)
    p.add_argument("--ops", type=int, default=1500, help="ops per trace (default 1500)")
    p.add_argument("--episodes", type=int, help="init episodes per trace (default 3 + seed %% 3)")
    p.add_argument("--mamba-modes", type=lambda s: s.split(","),
                   help="comma list of mamba_cache_modes (align,all,none): 85%% of the episodes mamba hybrids")
    p.add_argument("--stress", action="store_true", help="sched, offsched: tiny pools, many sequences")
    p.add_argument("--reuse-inflight", action="store_true",
                   help="sched: re-add finished ids while an output is in flight")
    p.add_argument("--mamba", action="store_true", help="kvm: mamba 'all'/'none' groups among the layouts")
    p.add_argument("--mamba-spec", action="store_true", help="kvm, with --mamba: num_speculative_blocks")
    p.add_argument("--bind", action="store_true", help="kvm: admission caps that bind")
    p.add_argument("--tiny", action="store_true", help="kvm: tiny block sizes and model lengths")
    p.add_argument("--delay", action="store_true", help="kvm: many delay_cache_blocks")


def main():
    if os.environ.get("PYTHONHASHSEED") != "0":  # vLLM iterates sets of request ids: fix their order
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("extract", help="copy vLLM v0.20.1's files into a scratch folder")
    p.add_argument("--vllm-git", required=True, help="a vLLM git directory that has the tag v0.20.1")
    p.add_argument("--scratch", required=True)
    p = sub.add_parser("replay", help="print vLLM's result lines for a trace")
    p.add_argument("--scratch", required=True)
    p.add_argument("trace", help="trace file, - for stdin")
    p = sub.add_parser("gen", help="print a random trace")
    p.add_argument("--scratch", required=True)
    p.add_argument("--seed", type=int, required=True)
    gen_options(p)
    p = sub.add_parser("check", help="random traces: vLLM vs kvsim")
    p.add_argument("--scratch", required=True)
    p.add_argument("--kvsim", required=True, help="kvsim binary")
    p.add_argument("--seeds", required=True, help="A:B, seeds A..B-1")
    p.add_argument("--out", default="vllm_v020_divergences", help="folder for diverging traces")
    gen_options(p)
    p = sub.add_parser("minimize", help="shrink a diverging trace")
    p.add_argument("--scratch", required=True)
    p.add_argument("--kvsim", required=True, help="kvsim binary")
    p.add_argument("--out", required=True, help="prefix of the three output files")
    p.add_argument("trace")
    a = ap.parse_args()
    if getattr(a, "mode", None) in ("sched", "offsched", "offm", "pdsched") and any(getattr(a, k) for k in KVM_ONLY):
        ap.error("--mamba, --mamba-spec, --bind, --tiny and --delay are kvm options")
    if getattr(a, "mode", None) in ("offsched", "offm", "pdsched") and (a.mamba_modes or a.reuse_inflight):
        ap.error("--mamba-modes and --reuse-inflight are kvm / sched options")
    if getattr(a, "mode", None) == "kvm" and (a.stress or a.reuse_inflight):
        ap.error("--stress and --reuse-inflight are sched options")
    modes = None if a.cmd == "extract" else load_vllm(a.scratch)
    return {"extract": cmd_extract, "replay": cmd_replay, "gen": cmd_gen, "check": cmd_check,
            "minimize": cmd_minimize}[a.cmd](a, modes)


if __name__ == "__main__":
    sys.exit(main())
