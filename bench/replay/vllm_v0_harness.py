"""The ops-format-v0 sched-mode protocol on vLLM v0.7.2's own Scheduler (imported from the
scratch folder vllm_v0_side_by_side.py prepares). Not kvsim code: a reference for timings and
differential checks."""
import sys, json, copy, time as _time
import vllm.core.scheduler as S
from vllm.config import CacheConfig, SchedulerConfig
from vllm.sequence import Sequence, SequenceGroup, SequenceStatus
from vllm.sampling_params import SamplingParams
from vllm.engine.output_processor.stop_checker import StopChecker
from vllm.utils import Device

class _LP:
    logprob = 0.0
LP = _LP()
class Clock:
    now = 0.0
CLOCK = Clock()
S.time.time = lambda: CLOCK.now  # the op clock

INSIDE = [0.0]
class H:
    def __init__(self): self.mode = None; self.dead = None
    def run(self, line):
        op = json.loads(line); name = op['op']
        if name == 'comment': return {}
        if name == 'sched_init':
            self.dead = None
            try: return self.init(op)
            except Exception as e: self.dead = repr(e); return {'error': repr(e)}
        if self.dead: return {'error': 'EngineDead: ' + self.dead}
        try: return getattr(self, 'op_' + name)(op)
        except KeyboardInterrupt: raise
        except Exception as e:
            self.dead = type(e).__name__ + ': ' + str(e); return {'error': self.dead}
    def init(self, op):
        CLOCK.now = float(op.get('clock', 0))
        cc = CacheConfig(op['block_size'], op['num_gpu_blocks'], op['num_cpu_blocks'], op.get('enable_prefix_caching', False))
        sc = SchedulerConfig(op['max_num_batched_tokens'], op['max_num_seqs'], op['max_model_len'],
                             op.get('enable_chunked_prefill', False), op.get('preemption_mode'), op.get('policy', 'fcfs'), op.get('delay_factor', 0))
        self.sc = sc; self.s = S.Scheduler(sc, cc, None); self.counter = 0; self.groups = {}; self.seqs = {}
        self.stop = StopChecker(op['max_model_len'], None); self.last = None; self.bs = op['block_size']
        return {}
    def q(self):
        return {'waiting': [g.request_id for g in self.s.waiting], 'running': [g.request_id for g in self.s.running],
                'swapped': [g.request_id for g in self.s.swapped],
                'free_gpu': self.s.block_manager.get_num_free_gpu_blocks(), 'free_cpu': self.s.block_manager.get_num_free_cpu_blocks()}
    def op_add_seq_group(self, op):
        n = op.get('n', 1); sp = SamplingParams(n=n, best_of=op.get('best_of'), max_tokens=op.get('max_tokens', 16),
              min_tokens=op.get('min_tokens', 0), ignore_eos=op.get('ignore_eos', False), stop_token_ids=op.get('stop_token_ids'))
        n = sp.n; out = []
        for i in range(n):
            gid = op['id'] if n == 1 else f"{op['id']}_parallel_sample_{i}"
            p = copy.copy(sp); p.n = 1
            seq = Sequence(self.counter, {'prompt_token_ids': list(op['prompt'])}, self.bs, op.get('eos_token_id'))
            self.counter += 1
            g = SequenceGroup(gid, [seq], op.get('arrival_time', CLOCK.now), p, priority=op.get('priority', 0))
            self.s.add_seq_group(g); self.groups[gid] = g; self.seqs[seq.seq_id] = seq
            out.append([gid, [seq.seq_id]])
        return {'groups': out}
    def op_schedule(self, op):
        CLOCK.now = float(op['now']) if 'now' in op else CLOCK.now + 1
        before = list(self.s.running)
        t0 = _time.process_time(); md, so, _ = self.s.schedule(); INSIDE[0] += _time.process_time() - t0
        sch = []
        for m, sg in zip(md, so.scheduled_seq_groups):
            g = sg.seq_group
            sch.append({'id': g.request_id, 'chunk': sg.token_chunk_size, 'prefill': m.is_prompt, 'do_sample': m.do_sample,
                        'tables': {str(k): list(v) for k, v in m.block_tables.items()},
                        'computed_block_nums': list(m.computed_block_nums or [])})
        self.last = [(sg.seq_group, sg.token_chunk_size, m.do_sample) for m, sg in zip(md, so.scheduled_seq_groups)]
        if op.get('update_computed'):
            for g, c, _ in self.last: g.update_num_computed_tokens(c)
            self.last = None
        w = set(id(g) for g in self.s.waiting)
        res = {'scheduled': sch, 'num_prefill_groups': so.num_prefill_groups, 'num_batched_tokens': so.num_batched_tokens,
               'blocks_to_swap_in': [list(p) for p in so.blocks_to_swap_in], 'blocks_to_swap_out': [list(p) for p in so.blocks_to_swap_out],
               'blocks_to_copy': [list(p) for p in so.blocks_to_copy], 'ignored': [g.request_id for g in so.ignored_seq_groups],
               'preempted': so.preempted, 'recomputed': [g.request_id for g in before if id(g) in w],
               'swapped_out': [g.request_id for g in self.s.swapped if any(g is b for b in before)],
               'finished_ids': self.s.get_and_reset_finished_requests_ids()}
        res.update(self.q())
        for g in so.ignored_seq_groups: self.drop(g)
        return res
    def drop(self, g):
        self.groups.pop(g.request_id, None)
        for s in g.seqs: self.seqs.pop(s.seq_id, None)
    def op_update(self, op):
        if self.last is None: raise RuntimeError('update must follow a schedule')
        sampled = op.get('sampled', {}); ss = op.get('sampled_seqs', {}); rule = op.get('rule'); forks = op.get('forks', [])
        def tok(g, seq):
            if str(seq.seq_id) in ss: return ss[str(seq.seq_id)]
            if g.request_id in sampled: return sampled[g.request_id]
            if rule is not None: return (seq.get_len() * rule.get('mul', 1) + rule.get('add', 0)) % rule.get('mod', 2**30)
            return 0
        outs = []; fin = []; any_fin = False
        for g, c, ds in self.last:
            if g.is_finished(): continue
            g.update_num_computed_tokens(c)
            if ds:
                parents = [g.first_seq] if g.is_single_seq else g.get_seqs(SequenceStatus.RUNNING)
                pairs = []
                for p in parents:
                    for f in forks:
                        if f['parent'] != p.seq_id: continue
                        cid = f.get('child')
                        if cid is None: cid = self.counter; self.counter += 1
                        else: self.counter = max(self.counter, cid + 1)
                        ch = p.fork(cid); ch.append_token_id(f.get('token', 0), {f.get('token', 0): LP})
                        pairs.append((ch, p))
                    t = tok(g, p); p.append_token_id(t, {t: LP}); pairs.append((p, p))
                for s, _ in pairs: self.stop.maybe_stop_sequence(s, 0, g.sampling_params)
                for s, p in pairs:
                    if s is not p:
                        g.seqs.append(s); g.seqs_dict[s.seq_id] = s; g.is_single_seq = False; self.seqs[s.seq_id] = s
                        if not s.is_finished(): self.s.fork_seq(p, s)
                for s, p in pairs:
                    if s is p and s.is_finished(): self.s.free_seq(s)
                for s, p in pairs:
                    o = {'id': g.request_id, 'seq': s.seq_id, 'token': s.get_last_token_id(), 'finished': s.is_finished(),
                         'status': s.status.name, 'stop_reason': s.stop_reason}
                    if s is not p: o['parent'] = p.seq_id
                    outs.append(o)
            if g.is_finished(): fin.append(g); any_fin = True
        self.last = None
        if any_fin: self.s.free_finished_seq_groups()
        res = {'outputs': outs, 'finished': [g.request_id for g in fin]}; res.update(self.q())
        for g in fin: self.drop(g)
        return res
    def op_abort(self, op):
        for i in op['ids']:
            g = self.groups.get(i)
            self.s.abort_seq_group(i)
            if g is not None and g.is_finished(): self.drop(g)
        return self.q()
    def op_finish(self, op):
        s = self.seqs[op['seq']]
        s.status = SequenceStatus.FINISHED_LENGTH_CAPPED if op.get('reason') == 'length' else SequenceStatus.FINISHED_STOPPED
        self.s.free_seq(s); self.s.free_finished_seq_groups()
        g = next(g for g in self.groups.values() if s in g.seqs)
        res = self.q()
        if g.is_finished(): self.drop(g)
        return res
    def op_get_num_free_blocks(self, op):
        return {'free_gpu': self.s.block_manager.get_num_free_gpu_blocks(), 'free_cpu': self.s.block_manager.get_num_free_cpu_blocks()}
    def op_reset_prefix_cache(self, op): return {'ok': self.s.reset_prefix_cache()}
    def op_set_clock(self, op): CLOCK.now = float(op['now']); return {}
    def op_snapshot(self, op):
        bm = self.s.block_manager
        res = {'free_gpu': bm.get_num_free_gpu_blocks(), 'free_cpu': bm.get_num_free_cpu_blocks(),
               'tables': {str(k): list(v.physical_block_ids) for k, v in sorted(bm.block_tables.items())},
               'seqs': {str(s.seq_id): {'group': g.request_id, 'status': s.status.name, 'len': s.get_len(), 'output_len': s.get_output_len(),
                        'computed': s.data.get_num_computed_tokens(), 'prefill': s.is_prefill()}
                        for g in self.groups.values() for s in g.seqs}}
        res.update({k: v for k, v in self.q().items() if k in ('waiting', 'running', 'swapped')})
        return res  # brief only (gpu/cpu device dumps are compared by the cases, not here)

