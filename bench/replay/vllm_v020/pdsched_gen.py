"""Seeded random pdsched traces (sched_init with kv_pd), built step by step against vLLM's own
Scheduler / AsyncScheduler and NixlConnectorScheduler (pdsched_harness), so every op is valid for the
state it meets. One engine per episode: a decode engine D (requests with do_remote_prefill and the
remote_* parameters, plain requests among them; reads finished by name, all at once or per step) or a
prefill engine P (do_remote_decode requests with max_tokens 1, a few longer or stopping on their
first token, plain requests; D's read notifications for held requests; expiries on a clock that
advances every step). Both with sync or async scheduling, FCFS or priority, prefix caching on or
off, a full or one sliding-window group, small pools (allocation failures, preemptions), aborts (of loading, held and running
requests), names the worker does not track (ignored), snapshots and stats. Import after
common.install()."""
import random

from pdsched_harness import PdschedHarness

VOCAB = 16   # a small vocabulary: shared prefixes, local hits on D


class PdschedGen:
    def __init__(self, seed, total_ops, episodes, stress=False):
        self.rng = random.Random(seed)
        self.total = total_ops
        self.episodes = episodes
        self.stress = stress
        self.h = PdschedHarness()
        self.trace = []
        self.errors = []

    def emit(self, op):
        """vLLM's result for op, appended to the trace; None (op dropped, episode ends) if vLLM raised."""
        res = self.h.run_op(op)
        if "error" in res:
            self.errors.append((len(self.trace), op, res))
            return None
        self.trace.append(op)
        return res

    def episode_config(self, role):
        r = self.rng
        bs = r.choice([2, 4, 4, 8, 16])
        mml = r.choice([64, 128, 256]) * max(1, bs // 4)
        per_req = -(-mml // bs)
        op = {"op": "sched_init", "block_size": bs, "max_model_len": mml,
              "max_num_seqs": r.choice([2, 3, 4, 8, 16]),
              "max_num_batched_tokens": r.choice([16, 32, 64, mml]),
              "enable_caching": r.random() < 0.8,
              "num_gpu_blocks": r.choice([per_req // 2 + 1, per_req + 1, per_req + 3, 2 * per_req, 4 * per_req]),
              "async_scheduling": r.random() < 0.4}
        if self.stress:
            op["num_gpu_blocks"] = r.choice([per_req // 3 + 2, per_req // 2 + 1, per_req + 1])
        if r.random() < 0.2:
            op["policy"] = "priority"
        if r.random() < 0.2:
            op["scheduler_reserve_full_isl"] = False
        if r.random() < 0.15:
            op["long_prefill_token_threshold"] = r.choice([bs, 17, 33])
        x = r.random()
        if x < 0.1:
            op["kv_cache_groups"] = [{"type": "full"}]
        elif x < 0.2:   # one sliding-window group: the connector clips the blocks it hands out
            w = r.choice([2 * bs, 33, 64])
            if r.random() < 0.5:
                op["sliding_window"] = w
            else:
                op["kv_cache_groups"] = [{"type": "sliding_window", "sliding_window": w}]
            # vllm-0.20-semantics.md §12 guard: the admission cap never binds
            op["max_num_batched_tokens"] = max(op["max_num_batched_tokens"], mml - w + 1)
        kp = {"engine_id": r.choice(["p-engine", "d-engine", "e0"])}
        if r.random() < 0.5:
            kp["kv_role"] = "kv_consumer" if role == "d" else "kv_producer"
        if role == "p" or r.random() < 0.3:
            kp["abort_timeout"] = r.choice([1, 2, 3, 5, 480])
        if role == "d" and r.random() < 0.25:
            kp["completion"] = "step"
        elif r.random() < 0.5:
            kp["completion"] = "manual"
        if r.random() < 0.2:
            kp["start_time"] = r.choice([0.0, 10.0, 1000.5])
        if r.random() < 0.15:
            kp["side_channel_host"] = "p-host"
            kp["side_channel_port"] = r.choice([5600, 7000])
        if r.random() < 0.15:
            kp["tp_size"] = r.choice([1, 2])
        if r.random() < 0.15:
            kp["disable_hybrid_kv_cache_manager"] = r.random() < 0.5
        op["kv_pd"] = kp
        return op

    def run(self):
        per_ep = max(40, self.total // self.episodes)
        for e in range(self.episodes):
            self.run_episode(e, per_ep, self.rng.choice(["d", "p"]))
        return self.trace

    def add(self, e, nid, role, cfg, docs, eos):
        r = self.rng
        mml = cfg["max_model_len"]
        rid = "e%d-r%d" % (e, nid)
        if r.random() < 0.6:
            d = r.choice(docs)
            p = d[:r.randint(1, len(d))] + [r.randrange(VOCAB) for _ in range(r.choice([0, 1, 3, 9]))]
        else:
            p = [r.randrange(VOCAB) for _ in range(r.choice([1, 2, 5, 15, 16, 17, 33, mml // 2]))]
        p = p[:mml - 8] or [1]
        op = {"op": "add_request", "id": rid, "prompt": p, "eos_token_id": eos}
        plain = r.random() < 0.15
        if role == "d" and not plain:
            nb = -(-len(p) // cfg["block_size"])
            blocks = [100 + i for i in range(nb)]
            params = {"do_remote_prefill": True, "do_remote_decode": False,
                      "remote_block_ids": [blocks] if r.random() < 0.7 else blocks,
                      "remote_engine_id": "p-engine", "remote_request_id": "p-" + rid,
                      "remote_host": "p-host", "remote_port": 5600}
            if r.random() < 0.5:
                params["tp_size"] = 1
            if r.random() < 0.04:   # missing key: a warning, no read (it waits until aborted)
                del params["remote_host"]
            op["kv_transfer_params"] = params
            op["max_tokens"] = r.choice([1, 2, 4, 8, 16])
        elif role == "p" and not plain:
            op["kv_transfer_params"] = {"do_remote_decode": True, "do_remote_prefill": False}
            op["max_tokens"] = 1 if r.random() < 0.85 else r.choice([2, 3])
        else:
            op["max_tokens"] = r.choice([1, 2, 4, 8])
        if cfg.get("policy") == "priority":
            op["priority"] = r.randint(0, 2)
        return op

    def run_episode(self, e, n_ops, role):
        r = self.rng
        cfg = self.episode_config(role)
        if self.emit(cfg) is None:
            return
        h = self.h
        asyn = cfg["async_scheduling"]
        mml = cfg["max_model_len"]
        docs = [[r.randrange(VOCAB) for _ in range(r.randint(8, mml // 2))] for _ in range(3)]
        eos = r.randrange(VOCAB)
        rule = {"mul": r.choice([3, 7]), "add": r.randrange(5), "mod": r.choice([VOCAB + 3, 97])}
        live = set()
        inflight = 0
        nid = 0
        now = h.clock.now
        start = len(self.trace)
        while len(self.trace) - start < n_ops:
            x = r.random()
            if x < 0.15 or (not live and x < 0.5):
                for _ in range(r.randint(1, 3)):
                    op = self.add(e, nid, role, cfg, docs, eos)
                    nid += 1
                    if self.emit(op) is None:
                        return
                    live.add(op["id"])
                continue
            if x < 0.82:
                if inflight < (2 if asyn else 1):
                    op = {"op": "schedule"}
                    if r.random() < 0.3:
                        now += r.choice([0.25, 0.5, 1.0])
                        op["now"] = now
                    if self.emit(op) is None:
                        return
                    inflight += 1
                    continue
                u = {"op": "update", "rule": rule}
                if r.random() < 0.8:
                    now += r.choice([0.25, 0.5, 1.0, 2.0])
                    u["now"] = now
                w = h.pd.worker
                if role == "d":
                    inflight_reads = sorted(w.recving)
                    pick = [i for i in inflight_reads if r.random() < 0.5]
                    if r.random() < 0.1:
                        pick.append(r.choice(sorted(live) or ["ghost"]))   # not (yet) reading: ignored
                    if pick:
                        u["finished_recving"] = pick
                    if r.random() < 0.05:
                        u["complete_all"] = True
                else:
                    held = sorted(rid for rid, q in h.sched.requests.items() if q.is_finished())
                    pick = [i for i in held if r.random() < 0.4]
                    if r.random() < 0.08:
                        pick.append("ghost-%d" % r.randrange(3))
                    if pick:
                        u["finished_sending"] = pick
                res = self.emit(u)
                if res is None:
                    return
                inflight -= 1
                for o in res["outputs"]:
                    if o["finished"]:
                        live.discard(o["id"])
                continue
            if x < 0.88:
                pool = sorted(h.sched.requests)
                if not pool:
                    continue
                ids = r.sample(pool, min(len(pool), r.randint(1, 2)))
                if self.emit({"op": "abort", "ids": ids}) is None:
                    return
                live.difference_update(ids)
                continue
            if x < 0.94:
                if self.emit({"op": "snapshot", "brief": r.random() < 0.7}) is None:
                    return
                continue
            if x < 0.97:
                if self.emit({"op": "connector_cache_stats"}) is None:
                    return
                continue
            if self.emit({"op": "prefix_cache_stats"}) is None:
                return


def valid_trace(ops, results):
    return not any("error" in r for r in results)
