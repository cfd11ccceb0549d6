#!/usr/bin/python3
"""vLLM's own V1 scheduler loop on a kvsim scenario, on a simulated integer-nanosecond clock.

Drives the real `Scheduler` and KV cache manager of vLLM v0.7.2 (vllm/v1/core/scheduler.py) or
v0.20.1 (vllm/v1/core/sched/scheduler.py, synchronous) like their EngineCore busy loop, exactly as
the timed acceptance cases describe the loop that produced their expected files
(shared/cases/timed-vllm-0.7.2/README.md, timed-vllm-0.20.1/README.md, "What produced the
expected files"): before every step every request whose arrival is <= now is added in trace order
(or refused as that release's OpenAI server refuses it); when nothing is running or waiting the
clock jumps to the next arrival; each step calls schedule(), lasts the scenario's `constant` or
`fitted` step time of the batch (kvsim's BatchFeatures, rounded to ns as kvsim rounds), then
update_from_output() with one sampled token per request whose prefill is complete after the step.

The workload is kvsim's own: `dump_workload SCENARIO.yaml` (bench/sim/dump_workload.cpp, built
beside kvsim) writes the requests kvsim synthesises from the scenario seed, with their prompt and
generated token ids, so prefix-cache hashes and EOS positions agree.

Prints the counters of kvsim's summary.json (completed, rejected, num_steps, num_preemptions,
prefix_cache_queries/hits, num_evictions, num_blocks_allocated, total_input/output_tokens) as JSON
and, with --out, writes requests.csv in kvsim's format (sim/OUTPUTS.md) and summary.json there.
Python 3.11 standard library; vLLM's files come from a git directory into a scratch folder
outside the repository (bench/replay/vllm_v020/common.py's extraction and import stubs).

  bench/sim/vllm_loop.py --release v0.20.1 --vllm-git VLLM_GIT_DIR \
      --scratch /tmp/vllm-loop --workload W.jsonl [--out DIR]
  build/bench/sim/dump_workload S.yaml | bench/sim/vllm_loop.py --release v0.7.2 ... --workload -
"""
import argparse
import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "replay", "vllm_v020"))
import common  # noqa: E402  (bench/replay/vllm_v020/common.py)

# ----------------------------------------------------------------------------- v0.7.2 files

V072_FILES = ["vllm/v1/core/__init__.py", "vllm/v1/core/scheduler.py", "vllm/v1/core/kv_cache_manager.py",
              "vllm/v1/core/kv_cache_utils.py", "vllm/v1/core/encoder_cache_manager.py",
              "vllm/v1/request.py", "vllm/v1/metrics/stats.py", "vllm/v1/kv_cache_interface.py",
              "vllm/v1/utils.py"]

# Stand-ins for what v0.7.2's V1 scheduler, KV cache manager and request import: configs are
# namespaces built below, engine / model-runner containers hold only the fields they read.
V072_STUBS = {
    "vllm": "",
    "vllm.envs": common.STUBS["vllm.envs"],
    "vllm.logger": common.STUBS["vllm.logger"],
    "vllm.utils": "def cdiv(a, b):\n    return -(a // -b)\n",
    "vllm.sequence": '''
from dataclasses import dataclass
@dataclass
class RequestMetrics:
    arrival_time: float
    last_token_time: float
    first_scheduled_time: object
    first_token_time: object
    time_in_queue: object
''',
    "vllm.sampling_params": '''
class SamplingParams:
    def __init__(self, max_tokens=16, ignore_eos=False, stop_token_ids=None):
        self.max_tokens = max_tokens
        self.ignore_eos = ignore_eos
        self.stop_token_ids = list(stop_token_ids or [])
''',
    "vllm.multimodal": '''
class _Registry:
    def get_max_tokens_per_item_by_nonzero_modality(self, model_config):
        raise NotImplementedError
MULTIMODAL_REGISTRY = _Registry()
''',
    "vllm.v1.engine": '''
import enum
FINISH_REASON_STRINGS = ("stop", "length", "abort")
class FinishReason(enum.IntEnum):
    STOP = 0
    LENGTH = 1
    ABORT = 2
    def __str__(self):
        return FINISH_REASON_STRINGS[self.value]
class EngineCoreOutput:
    def __init__(self, request_id, new_token_ids, finished, finish_reason=None, stop_reason=None):
        self.request_id = request_id
        self.new_token_ids = new_token_ids
        self.finished = finished
        self.finish_reason = finish_reason
        self.stop_reason = stop_reason
class EngineCoreOutputs:
    def __init__(self, outputs=None, scheduler_stats=None):
        self.outputs = outputs or []
        self.scheduler_stats = scheduler_stats
class EngineCoreRequest: pass
''',
    "vllm.v1.outputs": '''
from dataclasses import dataclass
@dataclass
class ModelRunnerOutput:
    req_ids: list
    req_id_to_index: dict
    sampled_token_ids: list
    logprob_token_ids_cpu: object = None
    logprobs_cpu: object = None
''',
    # ConstantList is appended from the extracted vllm/v1/utils.py (see Finder072.exec_module).
    "vllm.v1.utils": '''
from collections.abc import Sequence
from typing import Generic, List, Optional, TypeVar, Union, overload
T = TypeVar("T")
''',
}
V072_SLICES = {"vllm.v1.utils": ("vllm/v1/utils.py", "class ConstantList", "\nclass ")}


class Finder072(common.Finder):
    """common.Finder with v0.7.2's stubs: vllm.* from the scratch folder, else V072_STUBS, else an
    auto-stub (common.AutoModule); a package is a stub package (its __init__.py is not run)."""
    stubs = V072_STUBS
    slices = V072_SLICES

    def find_spec(self, fullname, path, target=None):
        top = fullname.split(".")[0]
        if top != "vllm" and top not in common.AUTO_TOP:
            return None
        if fullname not in self.stubs and top == "vllm":
            rel = os.path.join(self.scratch, fullname.replace(".", "/"))
            if os.path.exists(rel + ".py"):
                import importlib.util
                return importlib.util.spec_from_file_location(fullname, rel + ".py")
        import importlib.machinery
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)


def extract(vllm_git, scratch, tag, files):
    for rel in files:
        text = subprocess.run(["git", "-C", vllm_git, "show", f"{tag}:{rel}"], check=True,
                              capture_output=True, text=True).stdout
        path = os.path.join(scratch, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


def install(release, vllm_git, scratch):
    """Extract vLLM's files of `release` into scratch/<release> (once) and route imports there."""
    d = os.path.join(scratch, release)
    files = V072_FILES if release == "v0.7.2" else common.REAL_FILES
    if not os.path.exists(os.path.join(d, files[-1])):
        if not vllm_git:
            sys.exit(f"vllm_loop.py: no extracted vLLM {release} in {d}: pass --vllm-git")
        if release == "v0.7.2":
            extract(vllm_git, d, "v0.7.2", V072_FILES)
        else:
            common.extract(vllm_git, d)
    if release == "v0.7.2":
        sys.meta_path.insert(0, Finder072(d))
    else:
        common.install(d)


# ----------------------------------------------------------------------------- the two releases

class Counters:
    def __init__(self):
        self.queries = self.hits = self.allocated = self.evictions = 0


class V072:
    """vLLM v0.7.2: Scheduler(scheduler_config, model_config, cache_config, lora_config)."""
    def __init__(self, cfg, counters):
        from vllm.sampling_params import SamplingParams
        from vllm.v1.core import kv_cache_manager as kvm_mod
        from vllm.v1.core.scheduler import Scheduler
        from vllm.v1.outputs import ModelRunnerOutput
        from vllm.v1.request import Request, RequestStatus
        self.SamplingParams, self.Request, self.MRO = SamplingParams, Request, ModelRunnerOutput
        self.PREEMPTED = RequestStatus.PREEMPTED
        sc = SimpleNamespace(max_num_seqs=cfg["max_num_seqs"], max_num_batched_tokens=cfg["max_num_batched_tokens"],
                             max_model_len=cfg["max_model_len"], max_num_encoder_input_tokens=0,
                             encoder_cache_size=0)
        cc = SimpleNamespace(block_size=cfg["block_size"], num_gpu_blocks=cfg["num_gpu_blocks"],
                             sliding_window=None, enable_prefix_caching=cfg["enable_prefix_caching"])
        mc = SimpleNamespace(is_multimodal_model=False)
        self.sched = Scheduler(sc, mc, cc, None)
        kvm = self.sched.kv_cache_manager
        bs = cfg["block_size"]
        caching = cfg["enable_prefix_caching"]
        # counters, kvsim's meanings, by wrapping the manager's own methods
        get_computed, get_new, maybe_evict = kvm.get_computed_blocks, kvm._get_new_blocks, kvm._maybe_evict_cached_block

        def get_computed_blocks(request):
            blocks, n = get_computed(request)
            if caching:
                counters.queries += request.num_tokens
                counters.hits += n - bs if n == request.num_tokens else n   # the full-hit rule
            return blocks, n

        def _get_new_blocks(num_blocks):
            counters.allocated += num_blocks
            return get_new(num_blocks)

        def _maybe_evict_cached_block(block):
            evicted = maybe_evict(block)
            counters.evictions += bool(evicted)
            return evicted
        kvm.get_computed_blocks, kvm._get_new_blocks = get_computed_blocks, _get_new_blocks
        kvm._maybe_evict_cached_block = _maybe_evict_cached_block
        del kvm_mod
        self.max_model_len = cfg["max_model_len"]

    def admit(self, r):
        """(max_tokens to send, refused): v0.7.2's OpenAI server refuses prompt + max_tokens >
        max_model_len when max_tokens is sent, prompt >= max_model_len when it is not (then
        max_tokens = max_model_len - prompt)."""
        p, mml = len(r["prompt"]), self.max_model_len
        if r["max_tokens"] is not None:
            return r["max_tokens"], p + r["max_tokens"] > mml
        return mml - p, p >= mml

    def add(self, r, max_tokens):
        sp = self.SamplingParams(max_tokens=max_tokens, ignore_eos=r["ignore_eos"])
        req = self.Request(str(r["id"]), None, r["prompt"], None, None, None, sp,
                           None if r["ignore_eos"] else r["eos"], 0.0)
        self.sched.add_request(req)
        return req

    def schedule(self):
        before = self.sched.running[:]
        so = self.sched.schedule()
        preempted = [q for q in before if q.status == self.PREEMPTED]
        return so, preempted

    def computed_before(self, req, n):
        return req.num_computed_tokens        # v0.7.2 advances it in update_from_output

    def update(self, so, reqs, tok):
        ids = list(so.num_scheduled_tokens)
        sampled = [tok(reqs[i]) for i in ids]
        return self.sched.update_from_output(
            so, self.MRO(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                         sampled_token_ids=sampled)).outputs

    def unfinished(self):
        return self.sched.has_unfinished_requests()


class V020:
    """vLLM v0.20.1's synchronous Scheduler (async_scheduling false)."""
    def __init__(self, cfg, counters):
        import sched_harness  # noqa: F401  (bench/replay/vllm_v020: the import order it needs)
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import sha256
        from vllm.v1.core import block_pool as bp
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec
        from vllm.v1.outputs import ModelRunnerOutput
        from vllm.v1.request import Request
        from vllm.v1.structured_output import StructuredOutputManager
        if cfg["async_scheduling"]:
            sys.exit("vllm_loop.py: scheduler.async_scheduling must be false (the synchronous loop)")
        self.SamplingParams, self.Request, self.MRO = SamplingParams, Request, ModelRunnerOutput
        bs = cfg["block_size"]
        caching = cfg["enable_prefix_caching"]
        spec = common.make_spec({"type": "full"}, bs, None)
        kv_cache_config = KVCacheConfig(num_blocks=cfg["num_gpu_blocks"], kv_cache_tensors=[],
                                        kv_cache_groups=[KVCacheGroupSpec(layer_names=["layer.0"], kv_cache_spec=spec)])
        mnbt = cfg["max_num_batched_tokens"]
        scheduler_config = SimpleNamespace(
            max_num_seqs=cfg["max_num_seqs"], max_num_batched_tokens=mnbt, max_num_scheduled_tokens=None,
            policy="fcfs", long_prefill_token_threshold=cfg["long_prefill_token_threshold"],
            enable_chunked_prefill=cfg["enable_chunked_prefill"], scheduler_reserve_full_isl=True,
            async_scheduling=False)
        cache_config = SimpleNamespace(block_size=bs, num_gpu_blocks=cfg["num_gpu_blocks"],
                                       enable_prefix_caching=caching, hash_block_size=None,
                                       mamba_cache_mode="none", mamba_block_size=None,
                                       prefix_caching_hash_algo="sha256")
        vllm_config = SimpleNamespace(
            scheduler_config=scheduler_config, cache_config=cache_config, lora_config=None,
            kv_events_config=None,
            parallel_config=SimpleNamespace(data_parallel_index=0, decode_context_parallel_size=1,
                                            prefill_context_parallel_size=1, pipeline_parallel_size=1),
            observability_config=SimpleNamespace(kv_cache_metrics=False, enable_mfu_metrics=False,
                                                 kv_cache_metrics_sample=0.0),
            model_config=SimpleNamespace(is_encoder_decoder=False, max_model_len=cfg["max_model_len"],
                                         enable_return_routed_experts=False),
            kv_transfer_config=None, ec_transfer_config=None, speculative_config=None)
        self.sched = Scheduler(vllm_config=vllm_config, kv_cache_config=kv_cache_config,
                               structured_output_manager=StructuredOutputManager(vllm_config),
                               include_finished_set=False, log_stats=True, block_size=bs, hash_block_size=bs)
        self.block_hasher = None
        if caching:
            init_none_hash(sha256)
            self.block_hasher = get_request_block_hasher(bs, sha256)
        kvm = self.sched.kv_cache_manager
        pool = kvm.block_pool
        get_computed, get_new, maybe_evict = kvm.get_computed_blocks, pool.get_new_blocks, pool._maybe_evict_cached_block

        def get_computed_blocks(request):
            blocks, n = get_computed(request)
            if caching:
                counters.queries += request.num_tokens
                counters.hits += n
            return blocks, n

        def get_new_blocks(num_blocks):
            counters.allocated += num_blocks
            return get_new(num_blocks)

        def _maybe_evict_cached_block(block):
            evicted = maybe_evict(block)
            counters.evictions += bool(evicted)
            return evicted
        kvm.get_computed_blocks = get_computed_blocks
        pool.get_new_blocks, pool._maybe_evict_cached_block = get_new_blocks, _maybe_evict_cached_block
        del bp
        self.max_model_len = cfg["max_model_len"]

    def admit(self, r):
        """v0.20.1's OpenAI server refuses only prompt >= max_model_len and clamps max_tokens to
        max_model_len - prompt."""
        p, mml = len(r["prompt"]), self.max_model_len
        mt = mml - p if r["max_tokens"] is None else min(r["max_tokens"], mml - p)
        return mt, p >= mml

    def add(self, r, max_tokens):
        sp = self.SamplingParams(max_tokens=max_tokens, ignore_eos=r["ignore_eos"], eos_token_id=r["eos"])
        req = self.Request(request_id=str(r["id"]), prompt_token_ids=r["prompt"], sampling_params=sp,
                           pooling_params=None, arrival_time=0.0, block_hasher=self.block_hasher)
        self.sched.add_request(req)
        return req

    def schedule(self):
        so = self.sched.schedule()
        reqs = self.sched.requests
        return so, [reqs[i] for i in so.preempted_req_ids] if so.preempted_req_ids else []

    def computed_before(self, req, n):
        return req.num_computed_tokens - n    # v0.20.1 advances it at the end of schedule()

    def update(self, so, reqs, tok):
        ids = list(so.num_scheduled_tokens)
        sampled = [[] if reqs[i].is_prefill_chunk else [tok(reqs[i])] for i in ids]
        eco = self.sched.update_from_output(
            so, self.MRO(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                         sampled_token_ids=sampled))
        return [o for ci in sorted(eco) for o in eco[ci].outputs]

    def unfinished(self):
        return self.sched.has_unfinished_requests()


# ----------------------------------------------------------------------------- the loop

def step_time_fn(lat):
    """kvsim's constant / fitted step time in ns (sim/engine/latency_model.cpp: us clamped to
    [1, 9e12], llround(us * 1e3))."""
    def us_to_ns(us):
        if not us >= 1.0:
            us = 1.0
        if us > 9.0e12:
            us = 9.0e12
        x = us * 1e3
        i = int(x)
        return i + 1 if x - i >= 0.5 else i
    if lat["kind"] == "constant":
        ns = us_to_ns(lat["step_time_us"])
        return lambda f: ns
    c = lat["c"]

    def fitted(f):
        y = 0.0
        for k, t in zip(c, (1.0, float(f[0]), float(f[1]), float(f[2]), f[3], float(f[4]))):
            y += k * t
        return us_to_ns(y)
    return fitted


def fixed(ns, unit, decimals):
    """sim/metrics/writers.cpp append_fixed: integer ns as exact fixed point."""
    scale = 10 ** decimals
    sign = "-" if ns < 0 else ""
    ticks = abs(ns) // (unit // scale)
    return f"{sign}{ticks // scale}.{ticks % scale:0{decimals}d}"


def run(cfg, requests, eng, counters, rows):
    """The EngineCore busy loop on a simulated clock; returns the summary counters."""
    step_time = step_time_fn(cfg["latency"])
    n = len(requests)
    nxt = 0
    now = 0
    live = {}       # vLLM request id -> [spec, Request, first_scheduled, first_token, preemptions, hit]
    steps = preemptions = completed = rejected = tin = tout = 0

    def tok(req):
        out = live[req.request_id][0]["out"]
        i = req.num_output_tokens
        return out[i] if i < len(out) else 0   # a partial prefill's token (v0.7.2 ignores it)

    while True:
        while nxt < n and requests[nxt]["arrival_ns"] <= now:
            r = requests[nxt]
            nxt += 1
            max_tokens, refused = eng.admit(r)
            if refused:
                rejected += 1
                if rows is not None:
                    rows.append(f"{r['id']},{fixed(r['arrival_ns'], 10**9, 9)},{len(r['prompt'])},0,,,,,,,,0,0,rejected")
                continue
            req = eng.add(r, max_tokens)
            live[req.request_id] = [r, req, -1, -1, 0, 0]
        if not eng.unfinished():
            if nxt >= n:
                break
            now = requests[nxt]["arrival_ns"]
            continue
        so, preempted = eng.schedule()
        for q in preempted:
            live[q.request_id][4] += 1
        preemptions += len(preempted)
        nst = so.num_scheduled_tokens
        if not nst:
            raise SystemExit(f"vllm_loop.py: nothing schedulable at {now} ns with requests unfinished")
        prefill = decode = ctx_sum = nseq = 0
        ctx_sq = 0.0
        reqs = {}
        for rid, k in nst.items():
            l = live[rid]
            req = l[1]
            reqs[rid] = req
            c = eng.computed_before(req, k)
            if l[2] < 0:
                l[2] = now
                l[5] = c
            if k == 1 and req.num_output_tokens > 0 and c == req.num_tokens - 1:
                decode += 1
            else:
                prefill += k
            ctx = c + k
            ctx_sum += ctx
            ctx_sq += float(ctx) * float(ctx)
            nseq += 1
        now += step_time((prefill, decode, ctx_sum, ctx_sq, nseq))
        steps += 1
        for o in eng.update(so, reqs, tok):
            l = live[o.request_id]
            if l[3] < 0:
                l[3] = now
            if o.finish_reason is None:
                continue
            r, req = l[0], l[1]
            del live[o.request_id]
            completed += 1
            out = req.num_output_tokens
            tin += len(r["prompt"])
            tout += out
            if rows is not None:
                a, fs, ft = r["arrival_ns"], l[2], l[3]
                tpot = fixed((now - ft) // (out - 1), 10**6, 6) if out > 1 else ""
                rows.append(f"{r['id']},{fixed(a, 10**9, 9)},{len(r['prompt'])},{out},{fixed(fs, 10**9, 9)},"
                            f"{fixed(ft, 10**9, 9)},{fixed(now, 10**9, 9)},{fixed(ft - a, 10**6, 6)},{tpot},"
                            f"{fixed(now - a, 10**6, 6)},{fixed(fs - a, 10**6, 6)},{l[5]},{l[4]},{o.finish_reason}")
    return {"completed": completed, "rejected": rejected, "num_steps": steps, "num_preemptions": preemptions,
            "prefix_cache_queries": counters.queries, "prefix_cache_hits": counters.hits,
            "num_evictions": counters.evictions, "num_blocks_allocated": counters.allocated,
            "total_input_tokens": tin, "total_output_tokens": tout}


HEADER = ("request_id,arrival_s,prompt_tokens,output_tokens,first_scheduled_s,first_token_s,finish_s,"
          "ttft_ms,tpot_ms,e2el_ms,queue_ms,first_lookup_hit_tokens,num_preemptions,finish_reason")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--release", required=True, choices=["v0.7.2", "v0.20.1"])
    ap.add_argument("--vllm-git", help="vLLM's git directory (needed the first time, to extract)")
    ap.add_argument("--scratch", required=True, help="folder outside the repository for vLLM's files")
    ap.add_argument("--workload", required=True, help="dump_workload's output (- for stdin)")
    ap.add_argument("--out", help="folder for requests.csv and summary.json")
    a = ap.parse_args()
    install(a.release, a.vllm_git, a.scratch)
    t0 = time.process_time()
    f = sys.stdin if a.workload == "-" else open(a.workload)
    cfg = json.loads(f.readline())
    requests = [json.loads(line) for line in f if line.strip()]
    t1 = time.process_time()
    counters = Counters()
    eng = (V072 if a.release == "v0.7.2" else V020)(cfg, counters)
    rows = [] if a.out else None
    summary = run(cfg, requests, eng, counters, rows)
    t2 = time.process_time()
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "requests.csv"), "w") as g:
            g.write(HEADER + "\n" + "".join(r + "\n" for r in rows))
        with open(os.path.join(a.out, "summary.json"), "w") as g:
            g.write(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary))
    print(f"vllm_loop: {a.release} {cfg['name']}: load {t1 - t0:.3f} s, loop {t2 - t1:.3f} s CPU",
          file=sys.stderr)


if __name__ == "__main__":
    main()
