#!/usr/bin/python3
"""Checks that bench/sim/vllm_loop.py is the timed acceptance cases' oracle loop: for every case
folder NAME/ (scenario.yaml, expected/) under the given case directories, dumps kvsim's workload
(dump_workload), runs vLLM's loop of the case's release and compares requests.csv byte for byte
and every key of expected/summary.json. Prints one line per case; exit 1 on any difference.

  bench/sim/vllm_loop_cases.py --dump build/bench/sim/dump_workload --scratch /tmp/vllm-loop \
      [--vllm-git VLLM_GIT_DIR] tests/cases/timed-vllm-0.20.1 tests/cases/timed-vllm-0.7.2
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RELEASES = {"timed-vllm-0.20.1": "v0.20.1", "timed-vllm-0.7.2": "v0.7.2"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--dump", default="build/bench/sim/dump_workload")
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--vllm-git")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="vllm-loop-cases-")
    passed = failed = 0
    for d in a.dirs:
        rel = RELEASES.get(os.path.basename(os.path.normpath(d)))
        if rel is None:
            sys.exit(f"vllm_loop_cases.py: {d}: not one of {sorted(RELEASES)}")
        for name in sorted(os.listdir(d)):
            case = os.path.join(d, name)
            if not os.path.isfile(os.path.join(case, "scenario.yaml")):
                continue
            work = os.path.join(tmp, f"{name}.{rel}.jsonl")
            out = os.path.join(tmp, f"{name}.{rel}")
            with open(work, "w") as f:
                subprocess.run([a.dump, os.path.join(case, "scenario.yaml")], stdout=f, check=True)
            cmd = [sys.executable, os.path.join(HERE, "vllm_loop.py"), "--release", rel, "--scratch", a.scratch,
                   "--workload", work, "--out", out]
            if a.vllm_git:
                cmd += ["--vllm-git", a.vllm_git]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with open(os.path.join(case, "expected", "requests.csv")) as f:
                exp = f.read().splitlines()
            with open(os.path.join(out, "requests.csv")) as f:
                got = f.read().splitlines()
            bad = []
            if exp != got:
                i = next((i for i, (x, y) in enumerate(zip(exp, got)) if x != y), min(len(exp), len(got)))
                bad.append(f"requests.csv line {i + 1}: expected {exp[i] if i < len(exp) else 'EOF'!r}, "
                           f"vLLM {got[i] if i < len(got) else 'EOF'!r}")
            with open(os.path.join(case, "expected", "summary.json")) as f:
                es = json.load(f)
            with open(os.path.join(out, "summary.json")) as f:
                gs = json.load(f)
            bad += [f"{k}: expected {v}, vLLM {gs.get(k)}" for k, v in es.items() if gs.get(k) != v]
            print(f"{'ok  ' if not bad else 'FAIL'} {rel} {name}" + "".join(f"\n     {b}" for b in bad))
            passed += not bad
            failed += bool(bad)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
