#!/usr/bin/env python3
"""The V0 differential check: random bm-mode (vllm_v0_bm_random_traces.py) and sched-mode
(vllm_v0_random_traces.py) traces generated against vLLM v0.7.2's own code, each replayed a second
time in vLLM's code in a fresh Python process, and then in `kvsim replay --profile vllm-0.7.2-v0`.

A trace whose two vLLM runs disagree has no single answer and is dropped (counted): v0.7.2's
prefix-caching evictor breaks heap ties by Python hash values, and on Python 3.11 those include
hash(None) (the first block's parent), which changes from process to process. Every other trace
must match kvsim line for line under the structural comparison of ops-format-v0.md.

  vllm_v0_diff.py --vllm-git DIR --scratch /tmp/vllm072 --kvsim build/kvsim --out D \
      --bm-seeds 1001-1040 --sched-seeds 2001-2040 --ops 15000
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def same(a, b):
    """Structural equality: key order ignored, list order kept, numbers by value (floats within
    1e-9), booleans only equal booleans, any error line equals any error line."""
    if isinstance(a, dict) and isinstance(b, dict):
        if "error" in a or "error" in b:
            return "error" in a and "error" in b
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= 1e-9
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def first_difference(path_a, path_b):
    """1-based line number of the first structural difference, 0 if none."""
    a = open(path_a).read().splitlines(); b = open(path_b).read().splitlines()
    for i, (x, y) in enumerate(zip(a, b)):
        if not same(json.loads(x), json.loads(y)):
            return i + 1
    return 0 if len(a) == len(b) else min(len(a), len(b)) + 1


def rerun(trace, out):
    """vLLM's answers to `trace` in this process (bm or sched mode, by the init ops)."""
    from vllm_v0_bm_random_traces import BM
    from vllm_v0_harness import H
    bm, sched, cur = BM(), H(), None
    res = []
    for line in open(trace):
        op = json.loads(line)['op']
        if op == 'bm_init': cur = bm
        elif op == 'sched_init': cur = sched
        res.append(json.dumps(cur.run(line)))
    open(out, 'w').write("\n".join(res) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vllm-git", required=True)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--kvsim")
    ap.add_argument("--out", required=True)
    ap.add_argument("--bm-seeds", default="")
    ap.add_argument("--sched-seeds", default="")
    ap.add_argument("--ops", type=int, default=1500)
    ap.add_argument("--bm-fork-swapped", type=float, default=0.0,
                    help="probability of forking a SWAPPED sequence in bm traces (vllm_v0_bm_random_traces.gen)")
    ap.add_argument("--rerun", nargs=2, metavar=("TRACE", "OUT"))
    a = ap.parse_args()
    from vllm_v0_side_by_side import build_scratch
    if a.rerun:
        sys.path.insert(0, a.scratch)
        rerun(*a.rerun)
        return
    build_scratch(a.vllm_git, a.scratch)
    sys.path.insert(0, a.scratch)
    import vllm_v0_bm_random_traces as bmgen
    import vllm_v0_random_traces as schedgen
    from vllm_v0_harness import H
    schedgen.H = H
    os.makedirs(a.out, exist_ok=True)
    traces = []
    for kind, seeds, fn in (("bm", a.bm_seeds, bmgen.gen), ("sched", a.sched_seeds, schedgen.gen)):
        if not seeds: continue
        first, last = (int(x) for x in seeds.split("-"))
        for seed in range(first, last + 1):
            base = os.path.join(a.out, f"{kind}{seed}")
            if kind == "bm":
                fn(seed, a.ops, base + ".trace.jsonl", base + ".vllm.jsonl", a.bm_fork_swapped)
            else:
                fn(seed, a.ops, base + ".trace.jsonl", base + ".vllm.jsonl")
            traces.append((kind, seed, base))
    totals = {"bm": [0, 0, 0, 0], "sched": [0, 0, 0, 0]}  # traces, ops, dropped, divergent
    for kind, seed, base in traces:
        t = totals[kind]
        n = sum(1 for _ in open(base + ".trace.jsonl"))
        t[0] += 1; t[1] += n
        subprocess.run([sys.executable, os.path.abspath(__file__), "--vllm-git", a.vllm_git, "--scratch",
                        a.scratch, "--out", a.out, "--rerun", base + ".trace.jsonl", base + ".vllm2.jsonl"],
                       check=True)
        unstable = first_difference(base + ".vllm.jsonl", base + ".vllm2.jsonl")
        if unstable:
            t[2] += 1
            print(f"{kind} seed {seed}: {n} ops, dropped (vLLM's two runs differ at line {unstable})")
            continue
        if a.kvsim:
            with open(base + ".kvsim.jsonl", "w") as f:
                subprocess.run([a.kvsim, "replay", "--profile", "vllm-0.7.2-v0", "--check-invariants",
                                base + ".trace.jsonl"], stdout=f, check=True)
            d = first_difference(base + ".vllm.jsonl", base + ".kvsim.jsonl")
            if d: t[3] += 1
            errs = sum(1 for l in open(base + ".vllm.jsonl") if '"error"' in l)
            idx = sum(1 for l in open(base + ".vllm.jsonl") if '"error": "IndexError' in l)
            print(f"{kind} seed {seed}: {n} ops, {errs} error lines ({idx} IndexError), "
                  + (f"DIVERGES at line {d}" if d else "identical"), flush=True)
    for kind, (nt, nops, dropped, div) in totals.items():
        if nt:
            print(f"{kind}: {nt} traces, {nops} ops; {dropped} dropped (vLLM unstable), "
                  f"{div} divergent of {nt - dropped} compared")


if __name__ == "__main__":
    main()
