#!/usr/bin/env python3
"""Random vLLM V0 sched-mode traces generated step by step against vLLM v0.7.2's own code (each op
valid for the state vLLM is in; episodes restart after an engine death), with vLLM's answers:
the differential check of kvsim's V0 replay on traces nobody wrote by hand.

  vllm_v0_random_traces.py --vllm-git DIR --scratch /tmp/vllm072 --seeds 1-30 --ops 1500 --out D
  for s in D/*.trace.jsonl: kvsim replay --profile vllm-0.7.2-v0 --check-invariants $s and
  compare with the matching .vllm.jsonl (structurally, as tests/cases/README.md says).
"""
import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vllm_v0_side_by_side import build_scratch  # noqa: E402

H = None  # vllm_v0_harness.H once vLLM's code is importable


def gen(seed, n_ops, out_trace, out_expected, priority=True):
    rng = random.Random(seed); h = H(); lines = []; exp = []
    def emit(op):
        lines.append(json.dumps(op)); r = h.run(json.dumps(op)); exp.append(json.dumps(r)); return r
    alive = False; rid = 0
    while len(lines) < n_ops:
        if not alive or rng.random() < 0.01:
            bs = rng.choice([1, 2, 4, 8]); gpu = rng.randint(4, 40); mnbt = rng.choice([16, 32, 64, 128])
            chunked = rng.random() < 0.4; caching = rng.random() < 0.5
            mml = rng.choice([32, 64, 96]); 
            if not chunked: mnbt = max(mnbt, mml)
            if chunked and caching: mnbt = (mnbt // bs) * bs or bs
            r = emit({'op': 'sched_init', 'block_size': bs, 'num_gpu_blocks': gpu, 'num_cpu_blocks': rng.choice([0, 2, 8, 32]),
                      'max_num_seqs': rng.randint(2, 8), 'max_num_batched_tokens': mnbt, 'max_model_len': mml,
                      'enable_chunked_prefill': chunked, 'enable_prefix_caching': caching,
                      'preemption_mode': rng.choice([None, None, 'swap', 'recompute']),
                      'policy': 'priority' if priority and rng.random() < 0.2 else 'fcfs'})
            alive = 'error' not in r; prefixes = [[rng.randint(0, 40) for _ in range(rng.randint(1, 20))] for _ in range(3)]
            continue
        x = rng.random()
        if x < 0.18:
            p = (rng.choice(prefixes) if rng.random() < 0.5 else []) + [rng.randint(0, 40) for _ in range(rng.randint(1, 30))]
            op = {'op': 'add_seq_group', 'id': f'r{rid}', 'prompt': p, 'max_tokens': rng.randint(1, 24)}; rid += 1
            if rng.random() < 0.2: op['eos_token_id'] = rng.randint(0, 40)
            if rng.random() < 0.1: op['stop_token_ids'] = [rng.randint(0, 40)]
            if rng.random() < 0.1: op['min_tokens'] = rng.randint(0, 5)
            if rng.random() < 0.1: op['n'] = rng.randint(2, 3)
            if rng.random() < 0.1: op['priority'] = rng.randint(0, 3)
            r = emit(op)
        elif x < 0.75:
            r = emit({'op': 'schedule'} if rng.random() < 0.9 else {'op': 'schedule', 'now': len(lines)})
            if 'error' in r: alive = False; continue
            upd = {'op': 'update', 'rule': {'mul': rng.randint(1, 7), 'add': rng.randint(0, 40), 'mod': 41}}
            if rng.random() < 0.15 and r['scheduled']:
                s = rng.choice(r['scheduled'])
                running = sum(len(v['tables']) for v in r['scheduled'])
                if s['do_sample'] and s['tables'] and running < 3:
                    upd['forks'] = [{'parent': int(next(iter(s['tables']))), 'token': rng.randint(0, 40)}]
            r = emit(upd)
        elif x < 0.82 and h.groups:
            r = emit({'op': 'abort', 'ids': [rng.choice(sorted(h.groups))]})
        elif x < 0.85 and h.seqs:
            r = emit({'op': 'finish', 'seq': rng.choice(sorted(h.seqs)), 'reason': rng.choice(['stopped', 'length'])})
            if 'error' in r: alive = False
        elif x < 0.9:
            r = emit({'op': 'snapshot', 'brief': True})
        elif x < 0.93:
            r = emit({'op': 'reset_prefix_cache'})
        else:
            r = emit({'op': 'get_num_free_blocks'})
        if 'error' in r: alive = False
    open(out_trace, 'w').write("\n".join(lines) + "\n"); open(out_expected, 'w').write("\n".join(exp) + "\n")


def main():
    global H
    ap = argparse.ArgumentParser()
    ap.add_argument("--vllm-git", required=True)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--seeds", default="1-10")
    ap.add_argument("--ops", type=int, default=1500)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    build_scratch(a.vllm_git, a.scratch)
    sys.path.insert(0, a.scratch)
    from vllm_v0_harness import H as harness
    H = harness
    first, last = (int(x) for x in a.seeds.split("-"))
    os.makedirs(a.out, exist_ok=True)
    for seed in range(first, last + 1):
        gen(seed, a.ops, os.path.join(a.out, f"seed{seed}.trace.jsonl"),
            os.path.join(a.out, f"seed{seed}.vllm.jsonl"))
        print(f"seed {seed}: written")


if __name__ == "__main__":
    main()
