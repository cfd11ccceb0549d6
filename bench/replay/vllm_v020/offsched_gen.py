"""Seeded random offsched traces (sched_init with kv_offload), built step by step against vLLM's own
Scheduler and OffloadingConnector (offsched_harness), so every op is valid for the state it meets.
Varies: LRU / ARC, store_threshold 0 or >= 2 with small trackers, offloaded blocks of 1, 2 or 4 GPU
blocks, tiny CPU tiers (failing stores, evictions), GPU memory pressure (preemptions: flushes),
aborts, completion "step" and "manual" (partial completions keep transfers in flight over steps),
prefix caching on / off, sync / async scheduling, priority, reset_prefix_cache (with
reset_connector), kv events, do_remote_decode. Stays clear of vLLM's defects
(vllm-0.20-offload-semantics.md §9): a sliding window only with offloaded blocks of one GPU block
(§9.2), and no abort of a request waiting for its CPU load that ever prepared a store (§9.1).
Import after common.install()."""
import random

from offsched_harness import OffschedHarness
from sched_gen import SchedGen

VOCAB = 12   # a small vocabulary: repeated blocks across requests


class OffschedGen(SchedGen):
    def __init__(self, seed, total_ops, episodes, stress=False):
        super().__init__(seed, total_ops, episodes, stress=stress)
        self.h = OffschedHarness()

    def episode_config(self):
        r = self.rng
        bs = r.choice([1, 2, 2, 4, 4, 8, 16])
        factor = r.choice([1, 1, 2, 4])
        obs = bs * factor
        mml = max(r.choice([16, 32, 64, 128, 256]) * max(1, obs // 4), 4 * obs)
        op = {"op": "sched_init", "block_size": bs, "max_model_len": mml,
              "enable_caching": r.random() < 0.65, "max_num_seqs": r.choice([1, 2, 3, 4, 8, 16])}
        window = None
        x = r.random()
        if factor == 1 and x < 0.15:   # §9.2: a sliding window only with factor 1
            window = r.choice([1, 2, bs, bs + 1, 2 * bs, 4 * bs, 7, 33])
            if r.random() < 0.5:
                op["sliding_window"] = window
            else:
                op["kv_cache_groups"] = [{"type": "sliding_window", "sliding_window": window}]
        elif x < 0.25:
            op["kv_cache_groups"] = [{"type": "full"}]
        # vllm-0.20-semantics.md §12 guard: the admission cap never binds with a window
        mnbt = r.choice([max(1, mml // 8), mml // 4, mml // 2, mml, 2 * mml])
        if window is not None:
            mnbt = max(mnbt, mml - window + 1)
        op["max_num_batched_tokens"] = max(1, mnbt)
        if r.random() < 0.3:
            op["max_num_scheduled_tokens"] = r.choice([max(1, bs // 2), bs, 2 * bs + 3, 17, mml // 4 + 1])
        per_req = -(-mml // bs)
        lo = max(2, per_req // 2)
        choices = [lo + 1, per_req + 1, per_req + 2, per_req + 4, 2 * per_req + 1, 3 * per_req + 1]
        if self.stress:
            choices = [lo + 1, per_req + 1, per_req + 2, per_req + 4]
            op["max_num_seqs"] = r.choice([4, 8, 16])
        op["num_gpu_blocks"] = r.choice(choices)
        op["async_scheduling"] = r.random() < 0.4
        op["policy"] = "priority" if r.random() < 0.3 else "fcfs"
        if r.random() < 0.2:
            op["enable_chunked_prefill"] = False
        if r.random() < 0.3:
            op["scheduler_reserve_full_isl"] = False
        if r.random() < 0.2:
            op["long_prefill_token_threshold"] = r.choice([1, bs, 2 * bs + 1, 17, mml // 3 + 1])
        ko = {"eviction_policy": r.choice(["lru", "arc"]),
              "completion": "manual" if r.random() < 0.5 else "step"}
        y = r.random()
        if y < 0.85:
            ko["num_cpu_blocks"] = r.choice([1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 256])
        else:   # the tier from a byte budget (truncated; below one block: a tier of 0 blocks)
            ko["kv_bytes_per_block"] = r.choice([1, 3, 4096])
            if r.random() < 0.5:
                ko["world_size"] = r.choice([1, 2, 4])
            per = ko["kv_bytes_per_block"] * ko.get("world_size", 1) * factor
            ko["cpu_bytes_to_use"] = r.choice([per * r.randint(1, 8) + r.randint(0, per - 1),
                                               per * r.randint(1, 8) + 0.5, max(1, per // 2)])
        if factor > 1 or r.random() < 0.1:
            ko["block_size"] = obs
        if r.random() < 0.3:
            ko["store_threshold"] = r.choice([1, 2, 2, 3])
            if r.random() < 0.7:
                ko["max_tracker_size"] = r.randint(1, 8)
        if r.random() < 0.4:
            ko["kv_events"] = True
        if r.random() < 0.05:   # defaults written out (no load fails: the policy is never used)
            ko.update(spec_name="CPUOffloadingSpec", disable_hybrid_kv_cache_manager=True,
                      kv_load_failure_policy=r.choice(["fail", "recompute"]))
        if "num_cpu_blocks" in ko and r.random() < 0.1:
            ko["world_size"] = r.choice([1, 2])
            ko["kv_bytes_per_block"] = r.choice([1, 7])
        op["kv_offload"] = ko
        return op

    def run_episode(self, e, n_ops):
        r = self.rng
        cfg = self.episode_config()
        if self.emit(cfg) is None:
            return
        h = self.h
        mml = cfg["max_model_len"]
        asyn = cfg["async_scheduling"]
        manual = cfg["kv_offload"]["completion"] == "manual"
        pp = (not asyn) and r.random() < 0.2   # a batch queue of 2: two steps in flight
        docs = [[r.randrange(VOCAB) for _ in range(r.randint(1, mml))] for _ in range(3)]
        live = {}          # id -> prompt + outputs
        finished = []      # token lists of finished requests (re-asked: CPU hits)
        inflight = 0
        nid = 0
        start = len(self.trace)
        eos_pool = [r.randrange(VOCAB + 5) for _ in range(2)]
        rule = {"mul": r.choice([1, 3, 7]), "add": r.randrange(10), "mod": r.choice([VOCAB, VOCAB + 3, 7])}
        p_reset = r.choice([0.02, 0.05, 0.1])
        p_complete_all = r.choice([0.2, 0.4, 0.7])
        cap = r.choice([2, 4, 8]) + cfg["max_num_seqs"]   # live requests: a queue, not a pile
        while len(self.trace) - start < n_ops:
            x = r.random()
            if (x < 0.08 and len(live) < cap) or (not live and x < 0.5):
                for _ in range(r.randint(1, 3)):
                    rid = "e%d-%d" % (e, nid)   # ids are never reused
                    nid += 1
                    y = r.random()
                    if y < 0.35:
                        d = r.choice(docs)
                        p = d[:r.randint(1, len(d))] + [r.randrange(VOCAB) for _ in range(r.choice([0, 0, 1, 5]))]
                    elif y < 0.7 and finished:
                        f = r.choice(finished)
                        p = f[:r.choice([len(f), len(f), r.randint(1, len(f))])]
                    elif y < 0.75 and live:
                        p = list(live[r.choice(list(live))]) + [r.randrange(VOCAB) for _ in range(r.randint(0, 4))]
                    else:
                        p = [r.randrange(VOCAB) for _ in range(r.choice([1, 3, 8, 20, mml // 4, mml // 2, mml - 1]))]
                    p = p[:mml - 1] or [1]
                    op = {"op": "add_request", "id": rid, "prompt": p,
                          "max_tokens": r.choice([1, 2, 3, 5, 8, 16, 30, mml])}
                    if r.random() < 0.5:
                        op["eos_token_id"] = r.choice(eos_pool)
                    if r.random() < 0.2:
                        op["ignore_eos"] = True
                    if cfg["policy"] == "priority":
                        op["priority"] = r.randint(-1, 2)
                    if r.random() < 0.1:
                        op["cache_salt"] = "s"
                    if r.random() < 0.06:
                        op["kv_transfer_params"] = {"do_remote_decode": r.random() < 0.8}
                    if r.random() < 0.15:
                        op["stop_token_ids"] = r.sample(range(VOCAB), r.randint(1, 2))
                    if r.random() < 0.15:
                        op["min_tokens"] = r.randint(0, max(0, min(op["max_tokens"], mml - len(p))))
                    if r.random() < 0.05:
                        op["arrival_time"] = r.choice([0, 1, 2.5, 100]) + 0.0
                    if r.random() < 0.04:   # skips the GPU prefix cache, not the connector's lookup
                        op["prompt_logprobs"] = 1
                    if r.random() < 0.06:   # LoRA requests hash apart (extra keys)
                        op["lora_name"] = r.choice(["L1", "L2"])
                        op["lora_int_id"] = 1 if op["lora_name"] == "L1" else 2
                    if self.emit(op) is None:
                        return
                    live[rid] = list(p)
                continue
            if x < 0.78:
                if (asyn or pp) and inflight < 2 or (not (asyn or pp)) and inflight == 0:
                    if self.emit({"op": "schedule"}) is None:
                        return
                    inflight += 1
                    continue
                u = {"op": "update", "rule": rule}
                if r.random() < 0.1 and live:
                    u["sampled"] = {rid: r.choice(eos_pool) for rid in r.sample(list(live), 1)}
                if manual:
                    self.completions(u, p_complete_all)
                res = self.emit(u)
                if res is None:
                    return
                inflight -= 1
                for o in res["outputs"]:
                    if o["id"] in live:
                        live[o["id"]].extend(o["new_token_ids"])
                        if o["finished"]:
                            finished.append(live.pop(o["id"]))
                continue
            if x < 0.81:
                ids = [i for i in r.sample(list(live), min(len(live), r.randint(1, 2))) if self.abortable(i)]
                if r.random() < 0.1:
                    ids.append("nope")
                if not ids:
                    continue
                if self.emit({"op": "abort", "ids": ids}) is None:
                    return
                for i in ids:
                    if i in live:
                        finished.append(live.pop(i))
                continue
            if x < 0.81 + p_reset:
                op = {"op": "reset_prefix_cache"}
                if r.random() < 0.4:
                    op["reset_connector"] = True
                if r.random() < 0.3 and self.can_reset_running(asyn, inflight):
                    op["reset_running_requests"] = True
                if self.emit(op) is None:
                    return
                continue
            y = r.random()
            if y < 0.35:
                op = {"op": "snapshot", "brief": r.random() < 0.5}
            elif y < 0.55:
                op = {"op": "connector_cache_stats"}
            elif y < 0.7:
                op = {"op": "prefix_cache_stats"}
            elif y < 0.85 and live:
                op = {"op": "req_info", "id": r.choice(list(live))}
            elif live:
                op = {"op": "get_num_common_prefix_blocks", "id": r.choice(list(live)), "num_running": 0}
            else:
                continue
            if self.emit(op) is None:
                return

    def completions(self, u, p_all):
        """Manual completion: all transfers, those of some requests, or none (they stay in flight)."""
        r = self.rng
        o = self.h.off
        loads = sorted({o.cw._jobs[j][0] for j, _ in o.loads.jobs})
        stores = sorted({o.cw._jobs[j][0] for j, _ in o.stores.jobs} |
                        {o.cw._jobs[j][0] for j, _ in o.cw._unsubmitted_store_jobs})
        x = r.random()
        if x < p_all:
            u["complete_all"] = True
            return
        if x < p_all + (1 - p_all) * 0.6:
            if loads and r.random() < 0.7:
                u["complete_loads"] = r.sample(loads, r.randint(1, len(loads)))
            if stores and r.random() < 0.7:
                u["complete_stores"] = r.sample(stores, r.randint(1, len(stores)))
            if r.random() < 0.1:
                u.setdefault("complete_loads", []).append("nope")
            if r.random() < 0.1:
                u["complete_all"] = False

    def abortable(self, rid):
        """Not a request waiting for its CPU load that ever prepared a store (§9.1: vLLM frees its
        blocks at finished_sending under the load, then asserts)."""
        req = self.h.sched.requests.get(rid)
        if req is None or req.status.name != "WAITING_FOR_REMOTE_KVS":
            return True
        return rid not in self.h.off.cs._reqs_being_stored

    def can_reset_running(self, asyn, inflight):
        """reset_running_requests raises while a request that is not running holds blocks (waiting
        for its load, promoted after it, or finished and waiting for its stores: sched.py:1903-1909).
        The AsyncScheduler with two steps in flight trips async_scheduler.py:53 (the engine runs
        utility calls between steps). The sync scheduler with a step in flight (batch queue)
        applies that step's token to the request the reset preempted: if it finishes while waiting
        for a CPU load it started since, vLLM frees its blocks under the load (as in §9.1)."""
        if inflight > (1 if asyn else 0):
            return False
        held = self.h.kvm.coordinator.single_type_managers[0].req_to_blocks
        return all(r.status.name == "RUNNING" or not held.get(rid) for rid, r in self.h.sched.requests.items())


def valid_trace(ops, results):
    """Whether ops is usable for minimization: vLLM answers no op with an error, and every abort and
    reset_running_requests meets the generator's guards (the defects they avoid may raise only
    after the ops that minimize keeps)."""
    if any("error" in r for r in results):
        return False
    g = OffschedGen(0, 0, 1)
    h = g.h
    inflight, asyn = 0, False
    for op in ops:
        name = op.get("op")
        if name == "sched_init":
            inflight, asyn = 0, bool(op.get("async_scheduling"))
        elif name == "schedule":
            inflight += 1
        elif name == "update":
            inflight -= 1
        elif h.off is not None and name == "abort":
            if not all(g.abortable(i) for i in op["ids"]):
                return False
        elif h.off is not None and name == "reset_prefix_cache" and op.get("reset_running_requests"):
            if not g.can_reset_running(asyn, inflight):
                return False
        h.run_op(dict(op))
    return True
