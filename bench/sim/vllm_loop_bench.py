#!/usr/bin/python3
"""Side-by-side CPU time: `kvsim run SCENARIO` against vLLM's own scheduler loop
(bench/sim/vllm_loop.py) on the same workload, per profile / release, in one run, alternating,
best of N rounds. Each process's CPU time is user + sys from os.wait4's rusage. Every round also
checks that the counters of kvsim's summary.json equal vLLM's (exit 1 otherwise).

  bench/sim/vllm_loop_bench.py --kvsim build/kvsim --dump build/bench/sim/dump_workload \
      --vllm-git VLLM_GIT_DIR --scratch /tmp/vllm-loop --rounds 3 \
      bench/sim/poisson-10k.yaml

The workload (kvsim's synthesised requests) is dumped once per profile before the rounds and is
not timed; the vLLM process's time includes reading it (reported apart as `load`).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PAIRS = [("vllm-0.7.2", "v0.7.2", ["--set", "scheduler.async_scheduling=null"]),
         ("vllm-0.20", "v0.20.1", [])]


def timed(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL):
    """(exit status, user + sys seconds) of cmd run as a child."""
    p = subprocess.Popen(cmd, stdout=stdout, stderr=stderr)
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, ru.ru_utime + ru.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario")
    ap.add_argument("--kvsim", default="build/kvsim")
    ap.add_argument("--dump", default="build/bench/sim/dump_workload")
    ap.add_argument("--vllm-git")
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="vllm-loop-bench-")
    name = None
    work = {}
    for prof, rel, sets in PAIRS:
        w = os.path.join(tmp, f"{prof}.jsonl")
        with open(w, "w") as f:
            subprocess.run([a.dump, a.scenario, "--set", f"engine.profile={prof}"] + sets, stdout=f, check=True)
        with open(w) as f:
            name = json.loads(f.readline())["name"]
        work[prof] = w
    best = {}
    for rnd in range(a.rounds):
        for prof, rel, sets in PAIRS:
            kout = os.path.join(tmp, f"k-{prof}")
            rc, kcpu = timed([a.kvsim, "run", a.scenario, "--set", f"engine.profile={prof}"] + sets
                             + ["-o", kout, "--quiet"])
            if rc != 0:
                sys.exit(f"kvsim failed ({rc})")
            vout = os.path.join(tmp, f"v-{prof}")
            err = os.path.join(tmp, "err")
            cmd = [sys.executable, os.path.join(HERE, "vllm_loop.py"), "--release", rel, "--scratch", a.scratch,
                   "--workload", work[prof], "--out", vout]
            if a.vllm_git:
                cmd += ["--vllm-git", a.vllm_git]
            with open(err, "w") as e:
                rc, vcpu = timed(cmd, stderr=e)
            if rc != 0:
                sys.exit(f"vllm_loop.py failed ({rc}): {open(err).read()[-500:]}")
            line = open(err).read().strip().splitlines()[-1]
            load = float(line.split("load ")[1].split(" s")[0])
            with open(os.path.join(kout, name, "summary.json")) as f:
                ks = json.load(f)
            with open(os.path.join(vout, "summary.json")) as f:
                vs = json.load(f)
            diff = {k: (ks.get(k), v) for k, v in vs.items() if ks.get(k) != v}
            with open(os.path.join(kout, name, "requests.csv")) as f1, open(os.path.join(vout, "requests.csv")) as f2:
                same_csv = f1.read() == f2.read()
            if diff or not same_csv:
                sys.exit(f"{prof}: kvsim and vLLM {rel} differ: counters {diff}, requests.csv same: {same_csv}")
            print(f"round {rnd + 1} {prof}: kvsim {kcpu:.3f} s, vLLM {rel} {vcpu:.2f} s (load {load:.2f} s), "
                  f"ratio {vcpu / kcpu:.0f}x, steps {vs['num_steps']}, counters and requests.csv equal",
                  flush=True)
            b = best.setdefault(prof, [1e9, 1e9, 1e9])
            b[0], b[1], b[2] = min(b[0], kcpu), min(b[1], vcpu), min(b[2], vcpu - load)
    for prof, rel, _ in PAIRS:
        k, v, vl = best[prof]
        print(f"best {prof}: kvsim {k:.3f} s CPU, vLLM {rel} loop process {v:.2f} s CPU "
              f"({vl:.2f} s without reading the workload): {v / k:.0f}x ({vl / k:.0f}x)")


if __name__ == "__main__":
    main()
