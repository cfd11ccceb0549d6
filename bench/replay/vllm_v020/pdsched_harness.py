"""pdsched mode: sched mode with `kv_pd` (shared/spec/ops-format-pd.md). vLLM v0.20.1's own Scheduler /
AsyncScheduler with the NixlConnector's scheduler side: the real NixlConnectorScheduler
(nixl/scheduler.py), behind a connector object that delegates to it as NixlConnector does
(nixl/connector.py 136-173: get_num_new_matched_tokens, update_state_after_alloc,
build_connector_meta, request_finished_all_groups). The NIXL worker is a restatement of
NixlConnectorWorker's bookkeeping (worker.py start_load_kv 1840-1895, get_finished 1651-1730,
_get_new_notifs) with the transfers replaced by the trace: reads finish when an update names them
(or every read at the end of its step with completion "step"), D's read notifications arrive when an
update names them, and time.perf_counter() is the trace's clock. Import after common.install()."""
import copy
from types import SimpleNamespace

import vllm.distributed.kv_transfer.kv_connector.v1.nixl.scheduler as nixl_sched
import vllm.envs as envs
import vllm.v1.core.sched.scheduler as sched_mod
from common import OpError, request_tables
from sched_harness import SchedHarness
from vllm.distributed.kv_transfer.kv_connector.v1.base import SupportsHMA
from vllm.v1.metrics.stats import PrefixCacheStats
from vllm.v1.outputs import KVConnectorOutput
from vllm.v1.request import RequestStatus

KV_PD_FIELDS = {"engine_id", "kv_role", "side_channel_host", "side_channel_port", "abort_timeout", "tp_size",
                "completion", "start_time", "kv_load_failure_policy", "disable_hybrid_kv_cache_manager"}
STAT_KEYS = ("requests", "queries", "hits", "preempted_requests", "preempted_queries", "preempted_hits")


class Clock:
    """time.perf_counter() for nixl/scheduler.py: the trace's clock."""
    def __init__(self, now):
        self.now = now

    def perf_counter(self):
        return self.now


class NixlShim(SupportsHMA):
    """NixlConnector's scheduler role: every call goes to the real NixlConnectorScheduler; the
    harness records the calls' answers (they change nothing)."""
    def __init__(self, harness, cs):
        self.h = harness
        self.cs = cs

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        ext, load_async = self.cs.get_num_new_matched_tokens(request, num_computed_tokens)
        self.h.lookups.append({"id": request.request_id, "local": num_computed_tokens, "external": ext,
                               "load_async": load_async})
        self.h.last_lookup = (request.request_id, load_async)
        return ext, load_async

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        if self.h.last_lookup == (request.request_id, True):
            self.h.to_remote.append(request)
        return self.cs.update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output):
        return self.cs.build_connector_meta(scheduler_output)

    def request_finished(self, request, block_ids):
        return self.request_finished_all_groups(request, (block_ids,))

    def request_finished_all_groups(self, request, block_ids):
        delay, params = self.cs.request_finished(request, block_ids)
        self.h.finishes[request.request_id] = (delay, params)
        self.h.finish_order.append(request.request_id)
        return delay, params

    def update_connector_output(self, connector_output):
        pass

    def take_events(self):
        return ()

    def get_kv_connector_stats(self):
        return None

    def reset_cache(self):
        return None

    def shutdown(self):
        pass


class NixlWorker:
    """NixlConnectorWorker's request bookkeeping (worker.py), transfers replaced by the trace."""
    def __init__(self):
        self.recving = {}           # _recving_transfers: req_id -> done?
        self.reqs_to_process = set()
        self.reqs_to_send = {}      # req_id -> expiry (insertion order)
        self.notifs = []

    def start_load_kv(self, meta, started, notify_only):
        for req_id, m in meta.reqs_to_recv.items():
            if len(m.local_block_ids) == 0:   # _read_blocks: full local hit, send_notif only
                notify_only.append((req_id, m))
                continue
            started.append((req_id, m))
            self.recving[req_id] = False
        for req_id in meta.reqs_in_batch:
            self.reqs_to_process.add(req_id)
        for req_id in meta.reqs_not_processed:
            self.reqs_to_process.discard(req_id)
            assert req_id not in self.reqs_to_send
        for req_id, expiration_time in meta.reqs_to_send.items():
            if req_id in self.reqs_to_process:
                self.reqs_to_send[req_id] = expiration_time

    def get_finished(self, now, ignored):
        done_sending = set()
        for req_id in self.notifs:   # _get_new_notifs, one consumer per producer
            if req_id not in self.reqs_to_send and req_id not in self.reqs_to_process:
                ignored.append(req_id)   # "unrecognized request"
                continue
            done_sending.add(req_id)
            self.reqs_to_process.remove(req_id)
            self.reqs_to_send.pop(req_id, None)
        self.notifs = []
        done_recving = {r for r, done in self.recving.items() if done}
        for r in done_recving:
            del self.recving[r]
        expired = []
        while self.reqs_to_send:
            req_id, expires = next(iter(self.reqs_to_send.items()))
            if now < expires:
                break
            self.reqs_to_process.remove(req_id)
            del self.reqs_to_send[req_id]
            done_sending.add(req_id)
            expired.append(req_id)
        return done_sending, done_recving, expired


class PdschedHarness(SchedHarness):
    ops = SchedHarness.ops | {"connector_cache_stats"}

    def __init__(self):
        super().__init__()
        self.pd = None

    def sched_init(self, op):
        self.pd = None
        kp = op.get("kv_pd")
        if kp is not None:
            if not isinstance(kp, dict):
                raise OpError("kv_pd must be an object")
            unknown = set(kp) - KV_PD_FIELDS
            if unknown:
                raise OpError(f"unknown kv_pd fields {sorted(unknown)}")
            if op.get("kv_offload") is not None:
                raise OpError("kv_pd and kv_offload")
            if kp.get("completion", "manual") not in ("manual", "step"):
                raise OpError("completion must be 'manual' or 'step'")
        res = super().sched_init(op)
        if kp is not None:
            self.pd = SimpleNamespace(step=kp.get("completion", "manual") == "step", worker=NixlWorker(),
                                      cs=self.sched.connector.cs)
        return res

    def configure(self, op, vllm_config, kv_cache_config):
        kp = op.get("kv_pd")
        if kp is None:
            return
        if len(kv_cache_config.kv_cache_groups) != 1:
            raise OpError("P/D with several KV cache groups is not simulated")
        envs.VLLM_NIXL_SIDE_CHANNEL_HOST = kp.get("side_channel_host", "localhost")
        envs.VLLM_NIXL_SIDE_CHANNEL_PORT = kp.get("side_channel_port", 5600)
        envs.VLLM_NIXL_ABORT_REQUEST_TIMEOUT = kp.get("abort_timeout", 480)
        self.clock = Clock(float(kp.get("start_time", 0.0)))
        nixl_sched.time = self.clock
        vllm_config.kv_transfer_config = SimpleNamespace(
            kv_connector="NixlConnector", kv_role=kp.get("kv_role", "kv_both"), engine_id=kp.get("engine_id",
            "oracle-engine"), kv_buffer_device="cuda",
            kv_load_failure_policy=kp.get("kv_load_failure_policy", "fail"))
        vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = bool(
            kp.get("disable_hybrid_kv_cache_manager", False))
        vllm_config.parallel_config.tensor_parallel_size = kp.get("tp_size", 1)
        harness = self

        class Factory:
            @staticmethod
            def create_connector(config, role, kv_cache_config):
                cs = nixl_sched.NixlConnectorScheduler(config, config.kv_transfer_config.engine_id,
                                                       kv_cache_config)
                return NixlShim(harness, cs)
        sched_mod.KVConnectorFactory = Factory
        self.lookups, self.to_remote, self.promoted, self.finishes, self.finish_order = [], [], [], {}, []
        self.last_lookup = None
        self.cacc = dict.fromkeys(STAT_KEYS, 0) | {"reset": False}

    # ---------------------------------------------------------------- views

    def queues(self):
        if self.pd is None:
            return super().queues()
        return [r.request_id for r in self.sched.running], [r.request_id for r in self.sched.waiting]

    def queue_keys(self):
        s = self.sched
        held = {rid: self.fmt_ids(request_tables(self.kvm, rid))
                for rid, r in sorted(s.requests.items()) if r.is_finished()}
        return {"skipped_waiting": [r.request_id for r in s.skipped_waiting],
                "waiting_for_remote_kvs": sorted(r.request_id for r in s.skipped_waiting
                                                 if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS),
                "held": held}

    def set_clock(self, op):
        if op.get("now") is not None:
            self.clock.now = max(self.clock.now, float(op["now"]))

    def local_ids(self, m):
        return [] if len(m.local_block_ids) == 0 else self.fmt_ids(m.local_block_ids)

    # ---------------------------------------------------------------- ops

    def add_request(self, op):
        if op.get("kv_transfer_params") is None:
            return super().add_request(op)
        import vllm.sampling_params as sp_mod
        import sched_harness
        cls = sp_mod.SamplingParams
        params = copy.deepcopy(op["kv_transfer_params"])   # vLLM mutates it (do_remote_prefill)

        class WithParams(cls):
            def __init__(self, *a, **k):
                super().__init__(*a, **k)
                self.extra_args = {"kv_transfer_params": params}
        sched_harness.SamplingParams = WithParams
        try:
            return super().add_request(op)
        finally:
            sched_harness.SamplingParams = cls

    def schedule(self, op):
        if self.pd is None:
            return super().schedule(op)
        self.set_clock(op)
        self.lookups, self.to_remote, self.promoted, self.last_lookup = [], [], [], None
        s = self.sched
        update = s._update_waiting_for_remote_kv

        def recorded(request):
            blocks = s.kv_cache_manager.coordinator.single_type_managers[0].req_to_blocks[request.request_id]
            before = {b.block_id for b in blocks if b.block_hash is not None}
            update(request)
            self.promoted.append({"id": request.request_id, "num_computed_tokens": request.num_computed_tokens,
                                  "cached_block_ids": [b.block_id for b in blocks if b.block_hash is not None
                                                       and b.block_id not in before], "failed": False})
        s._update_waiting_for_remote_kv = recorded
        try:
            res = super().schedule(op)
        finally:
            del s._update_waiting_for_remote_kv
        meta = self.inflight[-1][0].kv_connector_metadata
        res.update(self.queue_keys())
        res["pd"] = {
            "now": self.clock.now, "lookups": self.lookups,
            "to_remote_kvs": [{"id": r.request_id, "num_computed_tokens": r.num_computed_tokens,
                               "block_ids": self.fmt_ids(request_tables(self.kvm, r.request_id))}
                              for r in self.to_remote],
            "promoted": self.promoted,
            "recv": [{"id": rid, "local_block_ids": self.local_ids(m)}
                     for rid, m in sorted(meta.reqs_to_recv.items())],
            "send": [[rid, t] for rid, t in meta.reqs_to_send.items()],
            "in_batch": sorted(meta.reqs_in_batch), "not_processed": sorted(meta.reqs_not_processed)}
        return res

    def worker_side(self, so, op):
        pd = self.pd
        if pd is None:
            return None
        w = pd.worker
        started, notify_only = [], []
        w.start_load_kv(so.kv_connector_metadata, started, notify_only)
        self.ignored_recving, self.ignored_notifs = [], []
        for rid in op.get("finished_recving") or ():
            if rid in w.recving:
                w.recving[rid] = True
            else:
                self.ignored_recving.append(rid)
        if pd.step or op.get("complete_all"):
            for rid in w.recving:
                w.recving[rid] = True
        for rid in op.get("finished_sending") or ():
            w.notifs.append(rid)
        sending, recving, expired = w.get_finished(self.clock.now, self.ignored_notifs)

        def reads(lst):
            return [{"id": rid, "local_block_ids": self.local_ids(m), "remote_block_ids": m.remote.block_ids,
                     "remote_engine_id": m.remote.engine_id, "remote_request_id": m.remote.request_id}
                    for rid, m in lst]
        self.worker_report = {"reads_started": reads(started), "notify_only": reads(notify_only),
                              "finished_recving": sorted(recving), "finished_sending": sorted(sending),
                              "expired": expired, "ignored_notifs": self.ignored_notifs,
                              "ignored_recving": self.ignored_recving, "now": self.clock.now}
        # the oracle's order for vLLM's sets: ascending ids
        return KVConnectorOutput(finished_sending=sorted(sending), finished_recving=sorted(recving))

    def update(self, op):
        if self.pd is None:
            return super().update(op)
        self.set_clock(op)
        self.finishes, self.finish_order = {}, []
        res = super().update(op)
        for o in res["outputs"]:
            if o["finished"]:
                delay, params = self.finishes.get(o["id"], (False, None))
                o["kv_transfer_params"] = None if params is None else json_value(params)
                o["delay_free"] = bool(delay)
        res["pd"] = self.worker_report
        res.update(self.queue_keys())
        return res

    def abort(self, op):
        if self.pd is None:
            return super().abort(op)
        self.set_clock(op)
        self.finishes, self.finish_order = {}, []
        super().abort(op)
        out = []
        for rid in self.finish_order:
            delay, params = self.finishes[rid]
            out.append({"id": rid, "delay_free": bool(delay),
                        "kv_transfer_params": None if params is None else json_value(params)})
        return {"pd_finished": out} | self.queue_keys()

    def absorb_connector(self, scheduler_stats):
        st = scheduler_stats.connector_prefix_cache_stats
        if self.pd is None or st is None:
            return
        for k in STAT_KEYS:
            self.cacc[k] += getattr(st, k)
        self.cacc["reset"] = self.cacc["reset"] or bool(st.reset)

    def connector_cache_stats(self, op):
        if self.pd is None:
            raise OpError("connector_cache_stats needs a KV connector")
        st = self.sched.connector_prefix_cache_stats
        self.sched.connector_prefix_cache_stats = PrefixCacheStats()
        self.absorb_connector(SimpleNamespace(connector_prefix_cache_stats=st))
        out, self.cacc = self.cacc, dict.fromkeys(STAT_KEYS, 0) | {"reset": False}
        return out

    def snapshot(self, op):
        res = super().snapshot(op)
        if self.pd is None:
            return res
        cs, w = self.pd.cs, self.pd.worker
        res.update(self.queue_keys())
        res["pd"] = {"now": self.clock.now, "finished_recving_pending": sorted(self.sched.finished_recving_kv_req_ids),
                     "connector": {"reqs_need_recv": sorted(cs._reqs_need_recv),
                                   "reqs_need_send": sorted(cs._reqs_need_send),
                                   "reqs_in_batch": sorted(cs._reqs_in_batch),
                                   "reqs_not_processed": sorted(cs._reqs_not_processed)},
                     "worker": {"recving": sorted(w.recving), "reqs_to_process": sorted(w.reqs_to_process),
                                "reqs_to_send": [[k, v] for k, v in w.reqs_to_send.items()]}}
        return res


def json_value(x):
    import json
    return json.loads(json.dumps(x))
