#!/usr/bin/env python3
"""Random vLLM V0 block-manager (bm mode) traces generated step by step against vLLM v0.7.2's own
SelfAttnBlockSpaceManager (each op valid for the state vLLM is in, the way the scheduler drives the
manager: allocate after can_allocate OK, decode steps with can_append_slots / append_slots, forks of
RUNNING sequences, swap out/in after can_swap_out / can_swap_in, frees of RUNNING and of SWAPPED
groups, prefix-cache queries; episodes restart after a vLLM error), with vLLM's answers: the
block-manager half of the differential check of kvsim's V0 replay (vllm_v0_random_traces.py is the
scheduler half; vllm_v0_diff.py runs both and compares).

  vllm_v0_bm_random_traces.py --vllm-git DIR --scratch /tmp/vllm072 --seeds 1-30 --ops 1500 --out D

BM is the bm-mode protocol of ops-format-v0.md on vLLM's code (brief snapshots only: the gpu/cpu
device dumps are compared by the cases, not here).
"""
import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vllm_v0_side_by_side import build_scratch  # noqa: E402


class BM:
    """ops-format-v0.md bm mode on vLLM v0.7.2's SelfAttnBlockSpaceManager (vLLM importable)."""

    def __init__(self):
        import vllm.core.block_manager as BMM
        from vllm.sequence import Sequence, SequenceGroup, SequenceStatus
        from vllm.sampling_params import SamplingParams
        self.BMM, self.Sequence, self.SequenceGroup = BMM, Sequence, SequenceGroup
        self.Status, self.SamplingParams = SequenceStatus, SamplingParams
        self.m = None; self.groups = {}; self.seqs = {}; self.counter = 0; self.now = 0.0

    def run(self, line):
        op = json.loads(line); name = op['op']
        if name == 'comment': return {}
        try:
            return getattr(self, 'op_' + name)(op)
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 -- any vLLM exception is an answer
            return {'error': type(e).__name__ + ': ' + str(e)}

    class _LP:
        logprob = 0.0

    def free(self):
        return {'free_gpu': self.m.get_num_free_gpu_blocks(), 'free_cpu': self.m.get_num_free_cpu_blocks()}

    def tables_of(self, g):
        return {str(s.seq_id): list(self.m.get_block_table(s)) for s in g.seqs if s.seq_id in self.m.block_tables}

    def op_bm_init(self, op):
        self.now = float(op.get('clock', 0)); self.groups = {}; self.seqs = {}; self.counter = 0
        self.bs = op['block_size']
        self.m = self.BMM.SelfAttnBlockSpaceManager(op['block_size'], op['num_gpu_blocks'], op['num_cpu_blocks'],
                                                    watermark=op.get('watermark', 0.01),
                                                    enable_caching=op.get('enable_caching', False))
        return {}

    def op_add_seq_group(self, op):
        n = op.get('num_seqs', 1); ids = op.get('seq_ids'); seqs = []
        for i in range(n):
            sid = ids[i] if ids else self.counter
            self.counter = max(self.counter, sid + 1)
            s = self.Sequence(sid, {'prompt_token_ids': list(op['prompt'])}, self.bs, op.get('eos_token_id'))
            seqs.append(s); self.seqs[sid] = s
        g = self.SequenceGroup(op['id'], seqs, op.get('arrival_time', self.now),
                               self.SamplingParams(max_tokens=op.get('max_tokens', 16)))
        self.groups[op['id']] = g
        return {'seq_ids': [s.seq_id for s in seqs]}

    def op_append_token(self, op):
        toks = op['tokens'] if 'tokens' in op else [op['token']]
        targets = [self.seqs[op['seq']]] if 'seq' in op else self.groups[op['id']].seqs
        for s in targets:
            for t in toks: s.append_token_id(t, {t: self._LP})
        return {}

    def op_computed(self, op):
        self.groups[op['id']].update_num_computed_tokens(op['n']); return {}

    def op_get_block_table(self, op):
        s = self.seqs[op['seq']]
        return {'table': list(self.m.get_block_table(s)) if s.seq_id in self.m.block_tables else None}

    def op_get_num_free_blocks(self, op): return self.free()
    def op_reset_prefix_cache(self, op): return {'ok': self.m.reset_prefix_cache()}
    def op_set_clock(self, op): self.now = float(op['now']); return {}

    def op_snapshot(self, op):
        return {'free_gpu': self.m.get_num_free_gpu_blocks(), 'free_cpu': self.m.get_num_free_cpu_blocks(),
                'tables': {str(k): list(v.physical_block_ids) for k, v in sorted(self.m.block_tables.items())},
                'seqs': {str(s.seq_id): {'group': g.request_id, 'status': s.status.name, 'len': s.get_len(),
                                         'output_len': s.get_output_len(), 'computed': s.data.get_num_computed_tokens(),
                                         'prefill': s.is_prefill()}
                         for g in self.groups.values() for s in g.seqs}}

    def op_can_allocate(self, op):
        return {'status': self.m.can_allocate(self.groups[op['id']], op.get('num_lookahead_slots', 0)).name}

    def op_allocate(self, op):
        g = self.groups[op['id']]; self.m.allocate(g)
        for s in g.seqs:
            if s.status == self.Status.WAITING: s.status = self.Status.RUNNING
        r = {'tables': self.tables_of(g)}; r.update(self.free()); return r

    def op_can_append_slots(self, op):
        return {'ok': self.m.can_append_slots(self.groups[op['id']], op.get('num_lookahead_slots', 0))}

    def op_append_slots(self, op):
        s = self.seqs[op['seq']]
        for t in op.get('tokens') or []: s.append_token_id(t, {t: self._LP})
        cows = self.m.append_slots(s, op.get('num_lookahead_slots', 0))
        r = {'cows': [list(p) for p in cows], 'table': list(self.m.get_block_table(s))}; r.update(self.free()); return r

    def op_can_swap_out(self, op): return {'ok': self.m.can_swap_out(self.groups[op['id']])}

    def op_can_swap_in(self, op):
        return {'status': self.m.can_swap_in(self.groups[op['id']], op.get('num_lookahead_slots', 0)).name}

    def _swap(self, op, into):
        g = self.groups[op['id']]
        frm, to = (self.Status.SWAPPED, self.Status.RUNNING) if into else (self.Status.RUNNING, self.Status.SWAPPED)
        mapping = self.m.swap_in(g) if into else self.m.swap_out(g)
        for s in g.seqs:
            if s.status == frm: s.status = to
        r = {'mapping': [list(p) for p in mapping], 'tables': self.tables_of(g)}; r.update(self.free()); return r

    def op_swap_out(self, op): return self._swap(op, False)
    def op_swap_in(self, op): return self._swap(op, True)

    def op_fork(self, op):
        p = self.seqs[op['parent']]; cid = op.get('child')
        if cid is None: cid = self.counter
        self.counter = max(self.counter, cid + 1)
        c = p.fork(cid)
        g = next(g for g in self.groups.values() if p in g.seqs)
        g.seqs.append(c); g.seqs_dict[c.seq_id] = c; g.is_single_seq = False; self.seqs[cid] = c
        self.m.fork(p, c)
        r = {'child': cid, 'table': list(self.m.get_block_table(c)) if cid in self.m.block_tables else None}
        r.update(self.free()); return r

    def op_free(self, op): self.m.free(self.seqs[op['seq']]); return self.free()

    def op_remove_group(self, op):
        g = self.groups[op['id']]
        for s in g.seqs: self.m.free(s)
        del self.groups[op['id']]
        for s in g.seqs: self.seqs.pop(s.seq_id, None)
        return self.free()

    def op_set_status(self, op):
        self.seqs[op['seq']].status = self.Status[op['status'].upper()]; return {}

    def op_mark_blocks_as_computed(self, op):
        self.m.block_allocator.mark_blocks_as_computed([]); return {}

    def op_access(self, op):
        self.m.access_all_blocks_in_seq(self.seqs[op['seq']], op.get('now', self.now)); return {}

    def op_get_common_computed_block_ids(self, op):
        return {'ids': list(self.m.get_common_computed_block_ids([self.seqs[i] for i in op['seqs']]))}

    def op_get_num_cached_tokens(self, op):
        return {'n': self.m.get_num_cached_tokens(self.seqs[op['seq']])}


def gen(seed, n_ops, out_trace, out_expected, fork_swapped=0.0):
    """One bm-mode trace of about n_ops ops; every op is chosen for the state vLLM is in.
    fork_swapped: the probability of a fork op on a SWAPPED sequence instead (the scheduler never
    does it; its blocks' objects then come from the CPU's pool, which kvsim does not model)."""
    rng = random.Random(seed); h = BM(); lines = []; exp = []
    def emit(op):
        lines.append(json.dumps(op)); r = h.run(json.dumps(op)); exp.append(json.dumps(r)); return r
    alive = False; gid = 0; caching = False
    while len(lines) < n_ops:
        if not alive or rng.random() < 0.005:
            bs = rng.choice([1, 2, 4, 8]); caching = rng.random() < 0.5
            emit({'op': 'bm_init', 'block_size': bs, 'num_gpu_blocks': rng.randint(4, 40),
                  'num_cpu_blocks': rng.choice([0, 1, 2, 3, 4, 8, 16]), 'watermark': rng.choice([0.0, 0.01, 0.1]),
                  'enable_caching': caching})
            alive = True; prefixes = [[rng.randint(0, 40) for _ in range(rng.randint(1, 20))] for _ in range(3)]
            continue
        St = h.Status
        def with_status(st):
            return sorted(k for k, g in h.groups.items() if any(s.status == st for s in g.seqs))
        waiting, running, swapped = with_status(St.WAITING), with_status(St.RUNNING), with_status(St.SWAPPED)
        x = rng.random(); r = {}
        if x < 0.12 or not h.groups:
            p = (rng.choice(prefixes) if rng.random() < 0.5 else []) + [rng.randint(0, 40) for _ in range(rng.randint(1, 30))]
            emit({'op': 'add_seq_group', 'id': f'g{gid}', 'prompt': p, 'num_seqs': rng.choice([1, 1, 1, 2, 3])}); gid += 1
        elif 0.12 <= x < 0.25 and waiting:
            g = rng.choice(waiting); la = rng.choice([0, 0, 1, 4])
            r = emit({'op': 'can_allocate', 'id': g, 'num_lookahead_slots': la})
            if r.get('status') == 'OK':
                r = emit({'op': 'allocate', 'id': g})
                if caching and 'error' not in r:
                    for s in h.groups[g].seqs:
                        r = emit({'op': 'get_num_cached_tokens', 'seq': s.seq_id})
                        if 'error' in r: break
            elif r.get('status') == 'NEVER':
                r = emit({'op': 'remove_group', 'id': g})
        elif 0.25 <= x < 0.55 and running:
            g = rng.choice(running); grp = h.groups[g]
            unc = min(s.data.get_num_uncomputed_tokens() for s in grp.seqs if not s.is_finished())
            if unc > 0: r = emit({'op': 'computed', 'id': g, 'n': unc})
            if 'error' not in r:
                for s in [s for s in grp.seqs if s.status == St.RUNNING]:
                    emit({'op': 'append_token', 'seq': s.seq_id, 'tokens': [rng.randint(0, 40) for _ in range(rng.choice([1, 1, 1, 2, 8]))]})
                la = rng.choice([0, 0, 1, 2])
                r = emit({'op': 'can_append_slots', 'id': g, 'num_lookahead_slots': la})
                if r.get('ok'):
                    for s in [s for s in grp.seqs if s.status == St.RUNNING]:
                        r = emit({'op': 'append_slots', 'seq': s.seq_id, 'num_lookahead_slots': la})
                        if 'error' in r: break
                        if caching and rng.random() < 0.3: r = emit({'op': 'mark_blocks_as_computed'})
                elif r.get('ok') is False:
                    r = emit({'op': 'can_swap_out', 'id': g})
                    if r.get('ok') and rng.random() < 0.8: r = emit({'op': 'swap_out', 'id': g})
                    else: r = emit({'op': 'remove_group', 'id': g})
        elif 0.55 <= x < 0.60 and swapped and fork_swapped > 0 and rng.random() < fork_swapped:
            grp = h.groups[rng.choice(swapped)]
            par = [s for s in grp.seqs if s.status == St.SWAPPED]
            if len(grp.seqs) < 4 and par:
                r = emit({'op': 'fork', 'parent': rng.choice(par).seq_id})
                if caching and 'error' not in r: r = emit({'op': 'get_num_cached_tokens', 'seq': r['child']})
        elif 0.55 <= x < 0.60 and running:
            g = rng.choice(running); grp = h.groups[g]
            par = [s for s in grp.seqs if s.status == St.RUNNING]
            if len(grp.seqs) < 4 and par:
                r = emit({'op': 'fork', 'parent': rng.choice(par).seq_id})
                if caching and 'error' not in r: r = emit({'op': 'get_num_cached_tokens', 'seq': r['child']})
        elif 0.60 <= x < 0.68 and running:
            g = rng.choice(running)
            r = emit({'op': 'can_swap_out', 'id': g})
            if r.get('ok'): r = emit({'op': 'swap_out', 'id': g})
        elif 0.68 <= x < 0.76 and swapped:
            g = rng.choice(swapped); la = rng.choice([0, 0, 1])
            r = emit({'op': 'can_swap_in', 'id': g, 'num_lookahead_slots': la})
            if r.get('status') == 'OK': r = emit({'op': 'swap_in', 'id': g})
        elif 0.76 <= x < 0.82 and h.groups:
            pool = swapped if swapped and rng.random() < 0.6 else sorted(h.groups)
            r = emit({'op': 'remove_group', 'id': rng.choice(pool)})
        elif 0.82 <= x < 0.86 and running:
            grp = h.groups[rng.choice(running)]; par = [s for s in grp.seqs if s.status == St.RUNNING]
            if len(par) > 1:
                s = rng.choice(par)
                emit({'op': 'set_status', 'seq': s.seq_id, 'status': 'FINISHED_STOPPED'})
                r = emit({'op': 'free', 'seq': s.seq_id})
        elif 0.86 <= x < 0.89 and caching and running:
            grp = h.groups[rng.choice(running)]; par = [s for s in grp.seqs if s.status == St.RUNNING]
            if par: r = emit({'op': 'access', 'seq': rng.choice(par).seq_id, 'now': len(lines)})
        elif 0.89 <= x < 0.92 and running:
            grp = h.groups[rng.choice(running)]; par = [s.seq_id for s in grp.seqs if s.status == St.RUNNING]
            if par: r = emit({'op': 'get_common_computed_block_ids', 'seqs': par})
        elif 0.92 <= x < 0.95:
            r = emit({'op': 'snapshot', 'brief': True})
        elif 0.95 <= x < 0.96:
            r = emit({'op': 'reset_prefix_cache'})
        elif 0.96 <= x < 0.98:
            r = emit({'op': 'get_num_free_blocks'})
        elif x >= 0.98:
            r = emit({'op': 'set_clock', 'now': len(lines)})
        if 'error' in r: alive = False
    open(out_trace, 'w').write("\n".join(lines) + "\n"); open(out_expected, 'w').write("\n".join(exp) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vllm-git", required=True)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--seeds", default="1-10")
    ap.add_argument("--ops", type=int, default=1500)
    ap.add_argument("--out", required=True)
    ap.add_argument("--fork-swapped", type=float, default=0.0)
    a = ap.parse_args()
    build_scratch(a.vllm_git, a.scratch)
    sys.path.insert(0, a.scratch)
    first, last = (int(x) for x in a.seeds.split("-"))
    os.makedirs(a.out, exist_ok=True)
    for seed in range(first, last + 1):
        gen(seed, a.ops, os.path.join(a.out, f"bm{seed}.trace.jsonl"), os.path.join(a.out, f"bm{seed}.vllm.jsonl"),
            a.fork_swapped)
        print(f"seed {seed}: written")


if __name__ == "__main__":
    main()
