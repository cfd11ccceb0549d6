"""Manager mode (`init` traces): vLLM v0.20.1's own KVCacheManager driven op by op.
Import after common.install()."""
from types import SimpleNamespace

from common import OpError, RecordingHasher, init_groups, make_spec, pool_snapshot, request_tables
from vllm.lora.request import LoRARequest
from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_manager import KVCacheBlocks, KVCacheManager
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash, resolve_kv_cache_block_sizes
from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec
from vllm.v1.request import Request


class KvmHarness:
    def __init__(self):
        self.mgr = None
        self.reqs = {}
        self.hasher = RecordingHasher()

    def run_op(self, op):
        """The result line of one op; {"error": ...} where vLLM (or the protocol) refuses it."""
        name = op.get("op")
        fn = getattr(self, "op_" + str(name), None)
        try:
            if fn is None:
                raise OpError(f"unknown op {name}")
            if self.mgr is None and name not in ("init", "comment"):
                raise OpError("no manager (init missing or failed)")
            return fn(op)
        except Exception as e:  # noqa: BLE001 - any vLLM exception is an error line
            return {"error": f"{type(e).__name__}: {e}"}

    # ---------------------------------------------------------------- helpers
    def fmt_ids(self, per_group):
        lists = [list(x) for x in per_group]
        return lists if self.grouped else lists[0]

    def blocks_ids(self, kvb):
        return self.fmt_ids([[b.block_id for b in grp] for grp in kvb.blocks])

    def req(self, rid):
        if rid not in self.reqs:
            raise OpError(f"unknown request {rid}")
        return self.reqs[rid]

    def new_computed(self, op):
        """(KVCacheBlocks or None, num_new_computed_tokens) of an allocate/can_fit op."""
        ncb = op.get("new_computed_blocks")
        groups = None
        if ncb is not None:
            groups = ncb if self.grouped else [ncb]
            if len(groups) != self.ngroups:
                raise OpError("new_computed_blocks: wrong number of groups")
            if all(len(g) == 0 for g in groups):
                groups = None
        kvb, default_n = None, 0
        if groups is not None:
            pool = self.mgr.block_pool.blocks
            kvb = KVCacheBlocks(tuple([pool[i] for i in g] for g in groups))
            default_n = len(groups[0]) * self.group_bs[0]
        n = op.get("num_new_computed_tokens")
        return kvb, default_n if n is None else n

    # ---------------------------------------------------------------- ops
    def op_init(self, op):
        self.mgr = None
        self.reqs = {}
        self.arrival = 0
        bs = op["block_size"]
        caching = op.get("enable_caching")
        caching = True if caching is None else caching
        self.grouped = op.get("kv_cache_groups") is not None
        groups = init_groups(op)
        specs = [make_spec(g, bs, g.get("mamba_cache_mode") or ("all" if caching else "none")) for g in groups]
        kv_cfg = KVCacheConfig(
            num_blocks=op["num_gpu_blocks"], kv_cache_tensors=[],
            kv_cache_groups=[KVCacheGroupSpec([f"layer.{i}"], s, is_eagle_group=bool(g.get("eagle", False)))
                             for i, (g, s) in enumerate(zip(groups, specs))])
        vcfg = SimpleNamespace(
            cache_config=SimpleNamespace(block_size=bs, enable_prefix_caching=caching,
                                         hash_block_size=op.get("hash_block_size")),
            parallel_config=SimpleNamespace(decode_context_parallel_size=1, prefill_context_parallel_size=1),
            kv_transfer_config=None)
        _, hash_bs = resolve_kv_cache_block_sizes(kv_cfg, vcfg)
        self.ngroups = len(specs)
        self.group_bs = [s.block_size for s in specs]
        self.block_hasher = None
        if caching:  # every hash_algo runs as sha256: only hash equality is observable
            init_none_hash(sha256)
            self.block_hasher = get_request_block_hasher(hash_bs, self.hasher)
        self.mgr = KVCacheManager(
            kv_cfg, max_model_len=op["max_model_len"], hash_block_size=hash_bs,
            max_num_batched_tokens=op.get("max_num_batched_tokens"), enable_caching=caching,
            use_eagle=bool(op.get("use_eagle", False)), log_stats=True)
        return {}

    def op_add_request(self, op):
        rid = op["id"]
        if rid in self.reqs:
            raise OpError(f"request {rid} is live")
        max_tokens = op.get("max_tokens")
        sp = SamplingParams(max_tokens=16 if max_tokens is None else max_tokens,
                            min_tokens=op.get("min_tokens") or 0, ignore_eos=bool(op.get("ignore_eos", False)),
                            stop_token_ids=op.get("stop_token_ids"), eos_token_id=op.get("eos_token_id"),
                            prompt_logprobs=op.get("prompt_logprobs"))
        hashes = op.get("mm_hashes") or []
        mm = []
        for i, p in enumerate(op.get("mm_positions") or []):
            ident = hashes[i] if i < len(hashes) and hashes[i] is not None else f"hash_{i}"
            mm.append(MultiModalFeatureSpec(data=None, modality="image", identifier=ident, mm_hash=ident,
                                            mm_position=PlaceholderRange(offset=p["offset"], length=p["length"])))
        lora = None
        if op.get("lora_name") is not None:
            lora = LoRARequest(op["lora_name"], op.get("lora_int_id") or 1)
        arrival = op.get("arrival_time")
        if arrival is None:
            arrival = float(self.arrival)
        self.arrival += 1
        self.reqs[rid] = Request(request_id=rid, prompt_token_ids=list(op["prompt"]), sampling_params=sp,
                                 pooling_params=None, arrival_time=arrival, mm_features=mm or None,
                                 lora_request=lora, cache_salt=op.get("cache_salt"),
                                 priority=op.get("priority") or 0, block_hasher=self.block_hasher)
        return {}

    def op_get_computed_blocks(self, op):
        kvb, n = self.mgr.get_computed_blocks(self.req(op["id"]))
        return {"blocks": self.blocks_ids(kvb), "num_computed_tokens": n}

    def op_allocate_slots(self, op):
        req = self.req(op["id"])
        kvb, n = self.new_computed(op)
        res = self.mgr.allocate_slots(req, op["num_tokens"], num_new_computed_tokens=n, new_computed_blocks=kvb,
                                      num_lookahead_tokens=op.get("num_lookahead_tokens") or 0,
                                      delay_cache_blocks=bool(op.get("delay_cache_blocks", False)))
        return {"blocks": None if res is None else self.blocks_ids(res)}

    def op_can_fit_full_sequence(self, op):
        req = self.req(op["id"])
        kvb, n = self.new_computed(op)
        return {"ok": bool(self.mgr.can_fit_full_sequence(req, num_new_computed_tokens=n,
                                                           new_computed_blocks=kvb))}

    def op_cache_blocks(self, op):
        self.mgr.cache_blocks(self.req(op["id"]), op["n"])
        return {}

    def op_new_step(self, op):
        self.mgr.new_step_starts()
        return {}

    def op_append_output(self, op):
        self.req(op["id"]).append_output_token_ids(list(op["tokens"]))
        return {}

    def op_set_num_computed_tokens(self, op):
        self.req(op["id"]).num_computed_tokens = op["n"]
        return {}

    def op_free(self, op):
        self.mgr.free(self.req(op["id"]))
        return {}

    def op_finish(self, op):
        self.mgr.free(self.req(op["id"]))
        del self.reqs[op["id"]]
        return {}

    def op_get_num_common_prefix_blocks(self, op):
        self.req(op["id"])
        n = self.mgr.get_num_common_prefix_blocks(op["id"])
        return {"n": list(n) if self.grouped else n[0]}

    def op_reset_prefix_cache(self, op):
        return {"ok": bool(self.mgr.reset_prefix_cache())}

    def op_prefix_cache_stats(self, op):
        s = self.mgr.make_prefix_cache_stats()
        return {"requests": s.requests, "queries": s.queries, "hits": s.hits,
                "preempted_requests": s.preempted_requests, "preempted_queries": s.preempted_queries,
                "preempted_hits": s.preempted_hits, "reset": bool(s.reset)}

    def op_req_info(self, op):
        req = self.req(op["id"])
        return {"num_tokens": req.num_tokens, "num_computed_tokens": req.num_computed_tokens,
                "num_output_tokens": req.num_output_tokens, "num_block_hashes": len(req.block_hashes),
                "block_hash_extra_keys": self.hasher.keys_of(req.block_hashes),
                "blocks": self.fmt_ids(request_tables(self.mgr, op["id"]))}

    def op_snapshot(self, op):
        return pool_snapshot(self.mgr, self.fmt_ids, op.get("brief"))

    def op_comment(self, op):
        return {}


PURE_OPS = {"can_fit_full_sequence", "req_info", "snapshot", "comment", "prefix_cache_stats",
            "get_num_common_prefix_blocks", "get_computed_blocks"}


def valid_trace(ops, results):
    """Whether ops is a trace the generator could have made, for minimization: no vLLM errors
    except the generator's deliberate ones, hits passed on right after their lookup,
    set_num_computed_tokens right after a successful allocation (or a free, with 0), cache_blocks
    within the computed tokens."""
    last_lookup, computed, ntok = {}, {}, {}
    bs0 = 1
    prev = prev_res = None
    for op, res in zip(ops, results):
        name = op["op"]
        if "error" in res and not (name == "get_num_common_prefix_blocks" and op.get("id") == "nope") \
                and not (name == "allocate_slots" and op.get("num_tokens") == 0):
            return False
        if name == "init":
            last_lookup.clear()
            computed.clear()
            ntok.clear()
            bs0 = init_groups(op)[0].get("block_size") or op["block_size"]
        elif name == "add_request":
            ntok[op["id"]] = len(op["prompt"])
            computed[op["id"]] = 0
        elif name == "append_output":
            ntok[op["id"]] = ntok.get(op["id"], 0) + len(op["tokens"])
        elif name == "finish":
            ntok.pop(op["id"], None)
            computed.pop(op["id"], None)
        elif name == "get_computed_blocks":
            last_lookup[op["id"]] = res["blocks"]
        elif name in ("allocate_slots", "can_fit_full_sequence"):
            ncb = op.get("new_computed_blocks")
            grouped = bool(ncb) and isinstance(ncb[0], list)
            if ncb is not None and any(ncb if not grouped else [x for x in ncb if x]):
                lookup = last_lookup.get(op["id"])
                if lookup is None:
                    return False
                if grouped:
                    if len(ncb) != len(lookup) or any(a != b[:len(a)] for a, b in zip(ncb, lookup)):
                        return False
                elif ncb != lookup[:len(ncb)]:
                    return False
        elif name == "set_num_computed_tokens":
            if op["n"] > 0:
                if not (prev and prev["op"] == "allocate_slots" and prev["id"] == op["id"]
                        and prev_res.get("blocks") is not None):
                    return False
                ncb = prev.get("new_computed_blocks")
                g0 = (ncb[0] if ncb and isinstance(ncb[0], list) else ncb) or []
                nct = prev.get("num_new_computed_tokens")
                base = computed.get(op["id"], 0) + (len(g0) * bs0 if nct is None else nct)
                if not (base < op["n"] <= base + prev["num_tokens"] and op["n"] <= ntok.get(op["id"], 0)):
                    return False
            elif not (prev and prev["op"] == "free" and prev["id"] == op["id"]):
                return False
            computed[op["id"]] = op["n"]
        elif name == "cache_blocks" and op["n"] > computed.get(op["id"], 0):
            return False
        if name not in PURE_OPS:  # a lookup is only valid until the next state-changing op
            last_lookup.clear()
        prev, prev_res = op, res
    return True
