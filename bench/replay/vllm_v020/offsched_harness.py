"""offsched mode: sched mode with `kv_offload` (shared/spec/ops-format-offload.md §1). vLLM v0.20.1's
own Scheduler / AsyncScheduler with its real OffloadingConnector: the scheduler side
(OffloadingConnectorScheduler, CPUOffloadingSpec, CPUOffloadingManager with the LRU or ARC policy,
FilterReusedOffloadingManager) and the worker side's job bookkeeping (OffloadingConnectorWorker and
OffloadingWorker, a second OffloadingConnector in the WORKER role), driven per step in the GPU model
runner's order (gpu_model_runner.py:3822-3859, kv_connector_model_runner_mixin.py:37-119). Only the
copy engine is replaced: two handlers (GPU->CPU, CPU->GPU) whose transfers finish when the trace
says (`completion`). Import after common.install()."""
from types import SimpleNamespace

from common import OpError
from sched_harness import SchedHarness
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import OffloadingConnector
from vllm.v1.kv_cache_interface import KVCacheTensor
from vllm.v1.kv_offload.mediums import CPULoadStoreSpec, GPULoadStoreSpec
from vllm.v1.kv_offload.reuse_manager import FilterReusedOffloadingManager
from vllm.v1.kv_offload.worker.worker import OffloadingHandler, TransferResult
from vllm.v1.metrics.stats import PrefixCacheStats
from vllm.v1.outputs import KVConnectorOutput

KV_OFFLOAD_FIELDS = {"cpu_bytes_to_use", "num_cpu_blocks", "kv_bytes_per_block", "world_size", "block_size",
                     "eviction_policy", "store_threshold", "max_tracker_size", "kv_events", "completion",
                     "disable_hybrid_kv_cache_manager", "kv_load_failure_policy", "spec_name"}
STAT_KEYS = ("requests", "queries", "hits", "preempted_requests", "preempted_queries", "preempted_hits")


def ints(a):
    return [int(x) for x in a]


class SimulatedTransfers(OffloadingHandler):
    """One direction of the copy engine (cpu_gpu.py's SingleDirectionOffloadingHandler without the
    copies): submitted jobs finish when the harness says (finish), or when the worker waits for them
    (wait: the preemption flush); get_finished reports them in the order they finished."""

    def __init__(self, harness, store):
        self.h = harness
        self.store = store
        self.jobs = []       # (job_id, spec): submitted, unfinished, in submission order
        self.finished = []   # job ids finished since the last get_finished

    def transfer_async(self, job_id, spec):
        self.jobs.append((job_id, spec))
        return True

    def finish(self, pick, flushed=False):
        keep = []
        for job_id, spec in self.jobs:
            if pick(job_id):
                self.finished.append(job_id)
                self.h.record_done(job_id, spec, self.store, flushed)
            else:
                keep.append((job_id, spec))
        self.jobs = keep

    def get_finished(self):
        out = [TransferResult(job_id=j, success=True) for j in self.finished]
        self.finished = []
        return out

    def wait(self, job_ids):
        self.finish(lambda j: j in job_ids, flushed=True)


class EventList(list):
    """The CPU manager's event list, resolving each event's keys to CPU block ids when it is recorded
    (evicted keys: the blocks of the eviction just made; stored keys: their blocks) and handing the
    events over when take_events clears it (the scheduler publishes them in update_from_output)."""

    def __init__(self, harness, cpu):
        super().__init__()
        self.h = harness
        self.cpu = cpu
        self.resolved = []

    def append(self, event):
        if event.removed:
            ids = list(self.h.last_evicted)
        else:
            ids = [self.cpu._policy.get(k).block_id for k in event.keys]
        self.resolved.append({"removed": bool(event.removed), "cpu_block_ids": sorted(ints(ids))})
        super().append(event)

    def clear(self):
        self.h.published.extend(self.resolved)
        self.resolved = []
        super().clear()


class OffschedHarness(SchedHarness):
    ops = SchedHarness.ops | {"connector_cache_stats"}

    def __init__(self):
        super().__init__()
        self.off = None

    # ---------------------------------------------------------------- set-up

    def sched_init(self, op):
        self.off = None
        ko = op.get("kv_offload")
        if ko is not None:
            if not isinstance(ko, dict):
                raise OpError("kv_offload must be an object")
            unknown = set(ko) - KV_OFFLOAD_FIELDS
            if unknown:
                raise OpError(f"unknown kv_offload fields {sorted(unknown)}")
            if ko.get("completion", "step") not in ("step", "manual"):
                raise OpError("completion must be 'step' or 'manual'")
        self.pending = None
        res = super().sched_init(op)
        if ko is not None:
            self.start_connector(ko)
        return res

    def configure(self, op, vllm_config, kv_cache_config):
        ko = op.get("kv_offload")
        if ko is None:
            return
        # With the hybrid KV cache manager off vLLM unifies the layers into one group or refuses
        # the model (semantics §0): one group only.
        if len(kv_cache_config.kv_cache_groups) != 1:
            raise OpError("the OffloadingConnector needs exactly one KV cache group")
        gpu_bs = kv_cache_config.kv_cache_groups[0].kv_cache_spec.block_size
        extra = {}
        factor = 1
        if ko.get("block_size") is not None:
            extra["block_size"] = ko["block_size"]
            if ko["block_size"] % gpu_bs == 0:
                factor = ko["block_size"] // gpu_bs
        kv_bytes = ko.get("kv_bytes_per_block", 1)
        world = ko.get("world_size", 1)
        if ko.get("num_cpu_blocks") is not None:
            extra["cpu_bytes_to_use"] = ko["num_cpu_blocks"] * kv_bytes * world * factor
        elif ko.get("cpu_bytes_to_use") is not None:
            extra["cpu_bytes_to_use"] = ko["cpu_bytes_to_use"]
        for k in ("eviction_policy", "store_threshold", "max_tracker_size", "spec_name"):
            if ko.get(k) is not None:
                extra[k] = ko[k]
        # kv_bytes_per_block = sum of the tensor sizes // num_gpu_blocks (cpu/spec.py:28-35)
        kv_cache_config.kv_cache_tensors = [KVCacheTensor(size=kv_bytes * kv_cache_config.num_blocks,
                                                          shared_by=["layer.0"])]
        vllm_config.kv_transfer_config = SimpleNamespace(
            kv_connector="OffloadingConnector", kv_connector_module_path=None, kv_role="kv_both",
            kv_connector_extra_config=extra, engine_id="0",
            kv_load_failure_policy=ko.get("kv_load_failure_policy") or "fail")
        vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = \
            ko.get("disable_hybrid_kv_cache_manager", True) is not False
        vllm_config.parallel_config.world_size = world
        if ko.get("kv_events"):
            vllm_config.kv_events_config = SimpleNamespace(enable_kv_cache_events=True, publisher="null",
                                                           endpoint=None, topic="")
        self.pending = (vllm_config, kv_cache_config)

    def start_connector(self, ko):
        vllm_config, kv_cache_config = self.pending
        sched = self.sched
        conn = sched.connector
        o = self.off = SimpleNamespace(
            manual=ko.get("completion", "step") == "manual", kv_events=bool(ko.get("kv_events")),
            conn=conn, cs=conn.connector_scheduler)
        mgr = o.cs.manager
        o.filter = mgr if isinstance(mgr, FilterReusedOffloadingManager) else None
        o.cpu = mgr._backing if o.filter is not None else mgr
        # the worker side: a second connector in the WORKER role, with simulated copy handlers
        o.wconn = OffloadingConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
        o.cw = o.wconn.connector_worker
        o.stores = SimulatedTransfers(self, True)
        o.loads = SimulatedTransfers(self, False)
        o.cw.worker.register_handler(GPULoadStoreSpec, CPULoadStoreSpec, o.stores)
        o.cw.worker.register_handler(CPULoadStoreSpec, GPULoadStoreSpec, o.loads)
        self.lookups, self.evicted, self.last_evicted, self.published, self.done = [], [], [], [], []
        self.cacc = dict.fromkeys(STAT_KEYS, 0) | {"reset": False}

        # recorders (they change nothing): lookups, evictions, events
        lookup = conn.get_num_new_matched_tokens

        def recorded_lookup(request, num_computed_tokens):
            res = lookup(request, num_computed_tokens)
            self.lookups.append({"id": request.request_id, "local": num_computed_tokens, "external": res[0]})
            return res
        conn.get_num_new_matched_tokens = recorded_lookup
        policy = o.cpu._policy
        evict = policy.evict

        def recorded_evict(n, protected):
            res = evict(n, protected)
            self.last_evicted = [] if res is None else [b.block_id for _, b in res]
            self.evicted += self.last_evicted
            return res
        policy.evict = recorded_evict
        if o.cpu.events is not None:
            o.cpu.events = EventList(self, o.cpu)
        # The oracle's order for vLLM's set of preempted ids: ascending (ops-format-offload.md §4).
        build = sched._build_kv_connector_meta

        def sorted_flush_meta(connector, so):
            pre = so.preempted_req_ids
            if pre:
                so.preempted_req_ids = sorted(pre)
            try:
                return build(connector, so)
            finally:
                so.preempted_req_ids = pre
        sched._build_kv_connector_meta = sorted_flush_meta

    def record_done(self, job_id, spec, store, flushed):
        req_id = self.off.cw._jobs[job_id][0]
        src, dst = spec
        gpu, cpu = (src, dst) if store else (dst, src)
        d = {"id": req_id, "gpu_block_ids": ints(gpu.block_ids), "cpu_block_ids": ints(cpu.block_ids)}
        if store:
            d["flushed"] = flushed
        self.done.append((store, d))

    # ---------------------------------------------------------------- views

    def queues(self):
        if self.off is None:
            return super().queues()
        return [r.request_id for r in self.sched.running], [r.request_id for r in self.sched.waiting]

    def skipped(self):
        return [r.request_id for r in self.sched.skipped_waiting]

    def cpu_tier(self):
        p = self.off.cpu._policy
        cpu = self.off.cpu
        out = {"num_blocks": cpu._num_blocks, "num_allocated": cpu._num_allocated_blocks,
               "free_list": ints(cpu._free_list)}

        def blocks(d):
            return [[int(b.block_id), int(b.ref_cnt)] for b in d.values()]
        if hasattr(p, "t1"):
            out.update(policy="arc", t1=blocks(p.t1), t2=blocks(p.t2), b1=len(p.b1), b2=len(p.b2),
                       target_t1_size=float(p.target_t1_size))
        else:
            out.update(policy="lru", order=blocks(p.blocks))
        return out

    def cpu_used(self):
        p = self.off.cpu._policy
        return len(p.t1) + len(p.t2) if hasattr(p, "t1") else len(p.blocks)

    # ---------------------------------------------------------------- ops

    def schedule(self, op):
        if self.off is None:
            return super().schedule(op)
        self.lookups, self.evicted = [], []
        res = super().schedule(op)
        meta = self.inflight[-1][0].kv_connector_metadata

        def transfers(d, store):
            out = []
            for rid, (src, dst) in d.items():
                gpu, cpu = (src, dst) if store else (dst, src)
                out.append({"id": rid, "gpu_block_ids": ints(gpu.block_ids), "cpu_block_ids": ints(cpu.block_ids),
                            "group_sizes": ints(gpu.group_sizes), "block_indices": ints(gpu.block_indices)})
            return out
        res["skipped_waiting"] = self.skipped()
        res["offload"] = {"lookups": self.lookups, "loads": transfers(meta.reqs_to_load, False),
                          "stores": transfers(meta.reqs_to_store, True),
                          "flush": sorted(meta.reqs_to_flush or ()), "evicted": ints(self.evicted),
                          "cpu_used": self.cpu_used()}
        return res

    def worker_side(self, so, op):
        """The model runner's connector calls for step so (handle_preemptions, start_load_kv,
        wait_for_save when tokens were scheduled, get_finished), with this update's completions
        applied just before get_finished."""
        o = self.off
        if o is None:
            return None
        self.done = []
        meta = so.kv_connector_metadata
        w = o.wconn
        w.bind_connector_metadata(meta)
        w.handle_preemptions(meta)
        w.start_load_kv(None)
        if so.total_num_scheduled_tokens:
            w.wait_for_save()
        if not o.manual:
            o.loads.finish(lambda j: True)
            o.stores.finish(lambda j: True)
        else:
            for key, handler in (("complete_loads", o.loads), ("complete_stores", o.stores)):
                for rid in op.get(key) or ():
                    handler.finish(lambda j, rid=rid: o.cw._jobs[j][0] == rid)
            if op.get("complete_all"):
                o.loads.finish(lambda j: True)
                o.stores.finish(lambda j: True)
        sending, recving = w.get_finished(so.finished_req_ids)
        w.clear_connector_metadata()
        # the oracle's order for vLLM's sets: ascending ids (ops-format-offload.md §4)
        self.sending, self.recving = sorted(sending), sorted(recving)
        kvo = KVConnectorOutput(finished_sending=self.sending, finished_recving=self.recving)
        if not so.total_num_scheduled_tokens and kvo.is_empty():
            return None   # EMPTY_MODEL_RUNNER_OUTPUT (mixin.py:46-47)
        return kvo

    def update(self, op):
        if self.off is None:
            return super().update(op)
        self.published = []
        res = super().update(op)
        res["finished_sending"] = self.sending
        res["finished_recving"] = self.recving
        res["loads_done"] = [d for store, d in self.done if not store]
        res["stores_done"] = [d for store, d in self.done if store]
        res["skipped_waiting"] = self.skipped()
        if self.off.kv_events:
            res["offload_events"] = self.published
        self.published = []
        return res

    def absorb_connector(self, scheduler_stats):
        st = scheduler_stats.connector_prefix_cache_stats
        if self.off is None or st is None:
            return
        for k in STAT_KEYS:
            self.cacc[k] += getattr(st, k)
        self.cacc["reset"] = self.cacc["reset"] or bool(st.reset)

    def connector_cache_stats(self, op):
        if self.off is None:
            raise OpError("connector_cache_stats needs a KV connector")
        st = self.sched.connector_prefix_cache_stats
        self.sched.connector_prefix_cache_stats = PrefixCacheStats()   # as make_stats does
        self.absorb_connector(SimpleNamespace(connector_prefix_cache_stats=st))
        out, self.cacc = self.cacc, dict.fromkeys(STAT_KEYS, 0) | {"reset": False}
        return out

    def reset_prefix_cache(self, op):
        return {"ok": bool(self.sched.reset_prefix_cache(
            reset_running_requests=bool(op.get("reset_running_requests")),
            reset_connector=bool(op.get("reset_connector"))))}

    def add_request(self, op):
        if op.get("kv_transfer_params") is None:
            return super().add_request(op)
        # Request reads kv_transfer_params from the sampling params' extra_args (request.py:112-115)
        import vllm.sampling_params as sp_mod
        cls = sp_mod.SamplingParams
        params = op["kv_transfer_params"]

        class WithParams(cls):
            def __init__(self, *a, **k):
                super().__init__(*a, **k)
                self.extra_args = {"kv_transfer_params": params}
        import sched_harness
        sched_harness.SamplingParams = WithParams
        try:
            return super().add_request(op)
        finally:
            sched_harness.SamplingParams = cls

    def snapshot(self, op):
        res = super().snapshot(op)
        o = self.off
        if o is None:
            return res
        cs = o.cs
        res["skipped_waiting"] = self.skipped()
        off = {"cpu": self.cpu_tier(), "tracked_requests": sorted(cs._req_status),
               "being_stored": {k: len(v) for k, v in cs._reqs_being_stored.items()},
               "being_loaded": {k: len(v) for k, v in cs._reqs_being_loaded.items()},
               "blocks_being_loaded": None if cs._blocks_being_loaded is None else len(cs._blocks_being_loaded),
               "finished_recving_pending": sorted(self.sched.finished_recving_kv_req_ids),
               "worker": {"loads_in_flight": [o.cw._jobs[j][0] for j, _ in o.loads.jobs],
                          "stores_in_flight": [o.cw._jobs[j][0] for j, _ in o.stores.jobs],
                          "stores_unsubmitted": [o.cw._jobs[j][0] for j, _ in o.cw._unsubmitted_store_jobs],
                          "finished_waiting_for_store": sorted(o.cw._finished_reqs_waiting_for_store)}}
        if o.filter is not None:
            off["tracker_size"] = len(o.filter.counts)
        res["offload"] = off
        return res

