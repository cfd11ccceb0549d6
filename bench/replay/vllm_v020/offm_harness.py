"""offm mode (`offload_init` traces, shared/spec/ops-format-offload.md §2): vLLM v0.20.1's own
CPUOffloadingManager (LRU or ARC) and FilterReusedOffloadingManager driven op by op, as
tests/v1/kv_offload/test_cpu_manager.py drives them. Import after common.install()."""
from common import OpError
from vllm.v1.kv_offload.abstract import ReqContext, make_offload_key
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
from vllm.v1.kv_offload.reuse_manager import FilterReusedOffloadingManager


def valid_trace(ops, results=None):
    """Every offm trace the generator could make is valid (minimize may cut any op)."""
    return bool(ops) and ops[0].get("op") == "offload_init"


class OffmHarness:
    def __init__(self):
        self.mgr = None
        self.spelling = {}  # key -> the trace's first spelling of it

    def run_op(self, op):
        name = op.get("op")
        fn = getattr(self, "op_" + str(name), None)
        try:
            if fn is None:
                raise OpError(f"unknown op {name}")
            if self.mgr is None and name not in ("offload_init", "comment"):
                raise OpError("no manager (offload_init missing or failed)")
            return fn(op)
        except Exception as e:  # noqa: BLE001 - any vLLM exception is an error line
            return {"error": f"{type(e).__name__}: {e}"}

    def key(self, v):
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            raise OpError("a key must be an int or a string")
        k = make_offload_key(str(v).encode(), 0)
        self.spelling.setdefault(k, v)
        return k

    def keys(self, op, field="keys"):
        return [self.key(v) for v in op[field]]

    def out(self, k):
        return self.spelling[k]

    def cpu(self):
        return self.mgr._backing if isinstance(self.mgr, FilterReusedOffloadingManager) else self.mgr

    def op_comment(self, op):
        return {}

    def op_offload_init(self, op):
        self.mgr = None
        self.spelling = {}
        mgr = CPUOffloadingManager(op["num_blocks"], op.get("eviction_policy", "lru"),
                                   op.get("enable_events", True))
        threshold = op.get("store_threshold", 0)
        if threshold >= 2:
            mgr = FilterReusedOffloadingManager(mgr, threshold, op.get("max_tracker_size", 64000))
        self.mgr = mgr
        return {}

    def op_offload_lookup(self, op):
        return {"hit": bool(self.mgr.lookup(self.key(op["key"]), ReqContext()))}

    def op_offload_prepare_store(self, op):
        out = self.mgr.prepare_store(self.keys(op), ReqContext())
        if out is None:
            return {"ok": False}
        return {"ok": True, "keys_to_store": [self.out(k) for k in out.keys_to_store],
                "store_block_ids": [int(b) for b in out.store_spec.block_ids],
                "evicted_keys": [self.out(k) for k in out.evicted_keys]}

    def op_offload_complete_store(self, op):
        self.mgr.complete_store(self.keys(op), op.get("success", True))
        return {}

    def op_offload_prepare_load(self, op):
        spec = self.mgr.prepare_load(self.keys(op), ReqContext())
        return {"block_ids": [int(b) for b in spec.block_ids]}

    def op_offload_complete_load(self, op):
        self.mgr.complete_load(self.keys(op))
        return {}

    def op_offload_touch(self, op):
        self.mgr.touch(self.keys(op))
        return {}

    def op_offload_take_events(self, op):
        return {"events": [{"keys": [self.out(k) for k in e.keys], "medium": e.medium,
                            "removed": e.removed} for e in self.mgr.take_events()]}

    def op_offload_snapshot(self, op):
        cpu = self.cpu()
        p = cpu._policy
        snap = {"num_blocks": cpu._num_blocks, "num_allocated": cpu._num_allocated_blocks,
                "free_list": list(cpu._free_list)}

        def blocks(d):
            return [[self.out(k), b.block_id, b.ref_cnt] for k, b in d.items()]
        if hasattr(p, "t1"):
            snap.update(policy="arc", t1=blocks(p.t1), t2=blocks(p.t2), b1=[self.out(k) for k in p.b1],
                        b2=[self.out(k) for k in p.b2], target_t1_size=float(p.target_t1_size))
        else:
            snap.update(policy="lru", order=blocks(p.blocks))
        if isinstance(self.mgr, FilterReusedOffloadingManager):
            snap["tracker"] = [[self.out(k), c] for k, c in self.mgr.counts.items()]
        return snap


class OffmGenerator:
    """Random offm traces: a few episodes of CPU-manager ops over a small key space, biased to the
    cases that matter (full tiers, loads pinning blocks, ghosts, failed stores, the filter)."""

    def __init__(self, seed, num_ops, episodes=3):
        import random
        self.rng = random.Random(seed)
        self.num_ops = num_ops
        self.episodes = episodes
        self.errors = []  # (the generator drops no ops)

    def run(self):
        r = self.rng
        ops = []
        per_episode = max(1, self.num_ops // self.episodes)
        for _ in range(self.episodes):
            init = {"op": "offload_init", "num_blocks": r.randint(0, 6),
                    "eviction_policy": r.choice(["lru", "arc"]), "enable_events": r.random() < 0.7}
            if r.random() < 0.3:
                init["store_threshold"] = r.randint(2, 3)
                init["max_tracker_size"] = r.randint(1, 8)
            ops.append(init)
            num_keys = r.randint(3, 16)
            ready, loading = set(), []
            for _ in range(per_episode):
                ks = r.sample(range(num_keys), r.randint(1, min(5, num_keys)))
                x = r.random()
                if x < 0.25:
                    ops.append({"op": "offload_lookup", "key": ks[0]})
                elif x < 0.45:
                    ops.append({"op": "offload_prepare_store", "keys": ks})
                elif x < 0.58:
                    op = {"op": "offload_complete_store", "keys": ks}
                    if r.random() < 0.2:
                        op["success"] = False
                    ops.append(op)
                    ready.update(ks)
                elif x < 0.72:
                    ops.append({"op": "offload_touch", "keys": ks})
                elif x < 0.8 and ready:
                    # Only keys the trace made ready; the op is dropped by the checker if vLLM refuses.
                    ks = r.sample(sorted(ready), min(len(ready), r.randint(1, 3)))
                    ops.append({"op": "offload_prepare_load", "keys": ks})
                    loading.append(ks)
                elif x < 0.88 and loading:
                    ops.append({"op": "offload_complete_load", "keys": loading.pop(0)})
                elif x < 0.94:
                    ops.append({"op": "offload_take_events"})
                else:
                    ops.append({"op": "offload_snapshot"})
        return ops
