"""Scheduler mode (`sched_init` traces): vLLM v0.20.1's own Scheduler / AsyncScheduler, with its
KVCacheManager, driven op by op. Import after common.install()."""
from collections import deque
from types import SimpleNamespace

from common import OpError, RecordingHasher, init_groups, make_spec, pool_snapshot, request_tables
from vllm.lora.request import LoRARequest
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash, resolve_kv_cache_block_sizes
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus
from vllm.v1.structured_output import StructuredOutputManager

OPS = {"sched_init", "add_request", "schedule", "update", "abort", "reset_prefix_cache",
       "prefix_cache_stats", "get_num_common_prefix_blocks", "req_info", "snapshot", "comment"}
STAT_KEYS = ("requests", "queries", "hits", "preempted_requests", "preempted_queries", "preempted_hits")


def mamba_mode(groups, caching):
    """cache_config.mamba_cache_mode as vLLM's config leaves it (models/config.py:351-406): the
    groups' mode (default 'all') with prefix caching, 'none' without; one mode for all groups.
    None: no mamba group."""
    modes = {g.get("mamba_cache_mode") or ("all" if caching else "none")
             for g in groups if g.get("type") == "mamba"}
    if not modes:
        return None
    if len(modes) > 1:
        raise OpError("mamba groups with different mamba_cache_mode (one CacheConfig holds one mode)")
    mode = modes.pop()
    if mode not in ("none", "all", "align"):
        raise OpError(f"unknown mamba_cache_mode {mode!r}")
    return mode if caching else "none"


def zero_stats():
    return dict.fromkeys(STAT_KEYS, 0) | {"reset": False}


class SchedHarness:
    ops = OPS

    def __init__(self):
        self.sched = None
        self.hasher = RecordingHasher()

    def run_op(self, op):
        """The result line of one op; {"error": ...} where vLLM (or the protocol) refuses it."""
        name = op.get("op")
        try:
            if name not in self.ops:
                raise OpError(f"unknown or unsupported op {name!r}")
            if self.sched is None and name not in ("sched_init", "comment"):
                raise OpError("no sched_init")
            return getattr(self, name)(op)
        except Exception as e:  # noqa: BLE001 - any vLLM exception is an error line
            return {"error": f"{type(e).__name__}: {e}"}

    def sched_init(self, op):
        self.sched = None
        bs = op["block_size"]
        self.grouped = op.get("kv_cache_groups") is not None
        groups = init_groups(op)
        caching = op.get("enable_caching", True)
        mode = mamba_mode(groups, caching)
        chunked = op.get("enable_chunked_prefill", True)
        mnbt = op["max_num_batched_tokens"]
        long_prefill = op.get("long_prefill_token_threshold") or 0
        if mode == "align":
            # MambaModelConfig.verify_and_update_config (models/config.py:383-386) and the align-mode
            # checks of VllmConfig (config/vllm.py:1872-1882)
            if not chunked:
                raise OpError("Chunked prefill is required for mamba cache mode 'align'")
            if bs > mnbt:
                raise OpError("mamba cache align mode needs block_size <= max_num_batched_tokens")
            if 0 < long_prefill < bs:
                raise OpError("mamba cache align mode needs long_prefill_token_threshold >= block_size")
        group_specs = [KVCacheGroupSpec(layer_names=[f"layer.{i}"], kv_cache_spec=make_spec(g, bs, mode),
                                        is_eagle_group=bool(g.get("eagle", False)))
                       for i, g in enumerate(groups)]
        kv_cache_config = KVCacheConfig(num_blocks=op["num_gpu_blocks"], kv_cache_tensors=[],
                                        kv_cache_groups=group_specs)
        asyn = bool(op.get("async_scheduling", False))
        scheduler_config = SimpleNamespace(
            max_num_seqs=op["max_num_seqs"], max_num_batched_tokens=mnbt,
            max_num_scheduled_tokens=op.get("max_num_scheduled_tokens"), policy=op.get("policy", "fcfs"),
            long_prefill_token_threshold=long_prefill, enable_chunked_prefill=chunked,
            scheduler_reserve_full_isl=op.get("scheduler_reserve_full_isl", True), async_scheduling=asyn)
        cache_config = SimpleNamespace(
            block_size=bs, num_gpu_blocks=op["num_gpu_blocks"], enable_prefix_caching=caching,
            hash_block_size=op.get("hash_block_size"), mamba_cache_mode=mode or "none",
            # models/config.py:397-406 (read by the config path only; groups carry their block size)
            mamba_block_size=(bs if caching else op["max_model_len"]) if mode is not None else None,
            # every hash_algo runs as sha256: only hash equality is observable
            prefix_caching_hash_algo="sha256")
        vllm_config = SimpleNamespace(
            scheduler_config=scheduler_config, cache_config=cache_config, lora_config=None,
            kv_events_config=None,
            parallel_config=SimpleNamespace(data_parallel_index=0, decode_context_parallel_size=1,
                                            prefill_context_parallel_size=1, pipeline_parallel_size=1),
            observability_config=SimpleNamespace(kv_cache_metrics=False, enable_mfu_metrics=False,
                                                 kv_cache_metrics_sample=0.0),
            model_config=SimpleNamespace(is_encoder_decoder=False, max_model_len=op["max_model_len"],
                                         enable_return_routed_experts=False),
            kv_transfer_config=None, ec_transfer_config=None, speculative_config=None)
        self.configure(op, vllm_config, kv_cache_config)
        sched_bs, hash_bs = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
        sched = (AsyncScheduler if asyn else Scheduler)(
            vllm_config=vllm_config, kv_cache_config=kv_cache_config,
            structured_output_manager=StructuredOutputManager(vllm_config), include_finished_set=False,
            log_stats=True, block_size=sched_bs, hash_block_size=hash_bs)
        self.block_hasher = None
        # engine/core.py:202-211: hashed for prefix caching or for a KV connector
        if caching or vllm_config.kv_transfer_config is not None:
            init_none_hash(sha256)
            self.block_hasher = get_request_block_hasher(hash_bs, self.hasher)
        self.sched = sched
        self.kvm = sched.kv_cache_manager
        self.ngroups = len(group_specs)
        self.inflight = deque()   # (SchedulerOutput, {req_id: gets a sampled token})
        self.arrival = 0
        self.acc = zero_stats()
        return {}

    def configure(self, op, vllm_config, kv_cache_config):
        """Hook: adjust the configs of a sched_init op before the scheduler is built."""

    def worker_side(self, so, op):
        """Hook: the model runner's KV connector work for the step so; its KVConnectorOutput."""
        return None

    def absorb_connector(self, scheduler_stats):
        """Hook: the connector's part of a step's SchedulerStats."""

    def absorb(self, stats):
        """Add PrefixCacheStats to the totals the next prefix_cache_stats op reports."""
        if stats is None:
            return
        for k in STAT_KEYS:
            self.acc[k] += getattr(stats, k)
        self.acc["reset"] = self.acc["reset"] or bool(stats.reset)

    def fmt_ids(self, per_group):
        per_group = per_group or tuple([] for _ in range(self.ngroups))
        return [list(x) for x in per_group] if self.grouped else list(per_group[0])

    def fmt_n(self, ns):
        return list(ns) if self.grouped else ns[0]

    def queues(self):
        return ([r.request_id for r in self.sched.running],
                [r.request_id for r in self.sched.waiting] + [r.request_id for r in self.sched.skipped_waiting])

    def add_request(self, op):
        rid = op["id"]
        if rid in self.sched.requests:
            raise OpError(f"request {rid} is live")
        if op.get("mm_positions"):
            raise OpError("mm inputs not supported in sched mode")
        sp = SamplingParams(max_tokens=op.get("max_tokens", 16), min_tokens=op.get("min_tokens", 0),
                            stop_token_ids=op.get("stop_token_ids"), ignore_eos=bool(op.get("ignore_eos")),
                            eos_token_id=op.get("eos_token_id"), prompt_logprobs=op.get("prompt_logprobs"))
        arrival = op.get("arrival_time")
        if arrival is None:
            arrival = float(self.arrival)
        self.arrival += 1
        lora = None
        if op.get("lora_name") is not None:
            lora = LoRARequest(op["lora_name"], op.get("lora_int_id", 1))
        self.sched.add_request(Request(
            request_id=rid, prompt_token_ids=list(op["prompt"]), sampling_params=sp, pooling_params=None,
            arrival_time=arrival, lora_request=lora, cache_salt=op.get("cache_salt"),
            priority=op.get("priority", 0), block_hasher=self.block_hasher))
        return {}

    def schedule(self, op):
        before = {r.request_id: i for i, r in enumerate(self.sched.running)}
        so = self.sched.schedule()
        self.inflight.append((so, {rid: not self.sched.requests[rid].is_prefill_chunk
                                   for rid in so.num_scheduled_tokens}))
        c = so.scheduled_cached_reqs
        running, waiting = self.queues()
        return {"new": [{"id": d.req_id, "block_ids": self.fmt_ids(d.block_ids),
                         "num_computed_tokens": d.num_computed_tokens} for d in so.scheduled_new_reqs],
                "cached": [{"id": rid, "new_block_ids": self.fmt_ids(c.new_block_ids[i]),
                            "num_computed_tokens": c.num_computed_tokens[i], "resumed": rid in c.resumed_req_ids}
                           for i, rid in enumerate(c.req_ids)],
                "num_scheduled_tokens": [[k, v] for k, v in so.num_scheduled_tokens.items()],
                "total": so.total_num_scheduled_tokens,
                "num_common_prefix_blocks": self.fmt_n(so.num_common_prefix_blocks),
                "finished": sorted(so.finished_req_ids),
                "preempted": sorted(so.preempted_req_ids, key=lambda r: before.get(r, 1 << 30)),
                "running": running, "waiting": waiting}

    def update(self, op):
        if not self.inflight:
            raise OpError("update without a schedule output in flight")
        so, gets = self.inflight.popleft()
        sampled = op.get("sampled") or {}
        rule = op.get("rule")
        req_ids = list(so.num_scheduled_tokens)
        tokens = []
        for rid in req_ids:
            if not gets[rid]:
                tokens.append([])
            elif rid in sampled:
                tokens.append([sampled[rid]])
            elif rule is not None:
                r = self.sched.requests.get(rid)
                n = r.num_tokens if r is not None else 0
                tokens.append([(n * rule["mul"] + rule["add"]) % rule["mod"]])
            else:
                tokens.append([0])
        mro = ModelRunnerOutput(req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                sampled_token_ids=tokens, kv_connector_output=self.worker_side(so, op))
        eco = self.sched.update_from_output(so, mro)
        outs = []
        for ci in sorted(eco):
            if eco[ci].scheduler_stats is not None:
                self.absorb(eco[ci].scheduler_stats.prefix_cache_stats)
                self.absorb_connector(eco[ci].scheduler_stats)
            for o in eco[ci].outputs:
                fr = o.finish_reason
                outs.append({"id": o.request_id, "new_token_ids": list(o.new_token_ids),
                             "finished": fr is not None, "finish_reason": None if fr is None else str(fr),
                             "stop_reason": o.stop_reason})
        running, waiting = self.queues()
        return {"outputs": outs, "running": running, "waiting": waiting}

    def abort(self, op):
        for rid in op["ids"]:
            self.sched.finish_requests(rid, RequestStatus.FINISHED_ABORTED)
        return {}

    def reset_prefix_cache(self, op):
        return {"ok": bool(self.sched.reset_prefix_cache(
            reset_running_requests=bool(op.get("reset_running_requests"))))}

    def prefix_cache_stats(self, op):
        self.absorb(self.kvm.make_prefix_cache_stats())
        out, self.acc = self.acc, zero_stats()
        return out

    def get_num_common_prefix_blocks(self, op):
        if op["id"] not in self.sched.requests:
            raise OpError("unknown request")
        return {"n": self.fmt_n(self.kvm.get_num_common_prefix_blocks(op["id"]))}

    def req_info(self, op):
        r = self.sched.requests.get(op["id"])
        if r is None:
            raise OpError("unknown request")
        return {"num_tokens": r.num_tokens, "num_computed_tokens": r.num_computed_tokens,
                "num_output_tokens": r.num_output_tokens, "num_block_hashes": len(r.block_hashes),
                "block_hash_extra_keys": self.hasher.keys_of(r.block_hashes),
                "blocks": self.fmt_ids(request_tables(self.kvm, op["id"]))}

    def snapshot(self, op):
        res = pool_snapshot(self.kvm, self.fmt_ids, op.get("brief"))
        res["running"], res["waiting"] = self.queues()
        res["requests"] = {rid: {"num_tokens": r.num_tokens, "num_computed_tokens": r.num_computed_tokens,
                                 "num_output_tokens": r.num_output_tokens, "status": r.status.name}
                           for rid, r in self.sched.requests.items()}
        return res

    def comment(self, op):
        return {}


def valid_trace(ops, results):
    """Whether ops is usable for minimization: vLLM answers no op with an error."""
    return not any("error" in r for r in results)
