"""Seeded random scheduler-mode (`sched_init`) traces, built step by step against vLLM's own
Scheduler (sched_harness), so every op is valid for the state it meets. Stays clear of
vllm-0.20-semantics.md §12: for every sliding-window group W-1+max_num_batched_tokens >=
max_model_len (chunked local: chunk+max_num_batched_tokens >= max_model_len), and min_tokens <=
min(max_tokens, max_model_len-prompt). Import after common.install()."""
import math
import random

from sched_harness import SchedHarness

VOCAB = 50


class SchedGen:
    def __init__(self, seed, total_ops, episodes, stress=False, mamba_modes=None, reuse_inflight=False):
        """stress: tiny pools and many sequences (preemption, resumption, priority victims);
        mamba_modes: 85% of the episodes mamba hybrids in these mamba_cache_modes;
        reuse_inflight: re-add finished ids while an output is in flight (the engine never does)."""
        self.mamba = mamba_modes
        self.reuse_inflight = reuse_inflight
        self.stress = stress
        self.rng = random.Random(seed)
        self.total = total_ops
        self.episodes = episodes
        self.h = SchedHarness()
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

    def episode_config(self):
        r = self.rng
        bs = r.choice([1, 2, 4, 8, 16, 16, 32])
        layout = r.choice(["flat", "flat", "flat_sw", "full_sw", "sw_full", "full_sw_sw", "sw_sw_full",
                           "full_chunked", "full_big_sw", "full_only_grouped"])
        mml = r.choice([8, 12, 16, 32, 48, 64, 96, 128, 256, 512]) * max(1, bs // 4)
        mml = max(mml, 4 * bs)
        op = {"op": "sched_init", "block_size": bs, "max_model_len": mml,
              "enable_caching": r.random() < 0.8, "max_num_seqs": r.choice([1, 2, 3, 4, 6, 8, 16])}
        groups = None
        windows = []
        chunks = []
        mamba_mode = None
        if self.mamba and r.random() < 0.85:
            layout = "mamba"
            mamba_mode = r.choice(self.mamba)

        def win():
            w = r.choice([1, 2, bs, bs + 1, 2 * bs, 3 * bs - 1, 4 * bs, 7, 16, 33, 64])
            windows.append(w)
            return w
        if layout == "flat_sw":
            op["sliding_window"] = win()
        elif layout == "full_sw":
            groups = [{"type": "full"}, {"type": "sliding_window", "sliding_window": win()}]
        elif layout == "sw_full":
            groups = [{"type": "sliding_window", "sliding_window": win()}, {"type": "full"}]
        elif layout == "full_sw_sw":
            groups = [{"type": "full"}, {"type": "sliding_window", "sliding_window": win()},
                      {"type": "sliding_window", "sliding_window": win()}]
        elif layout == "sw_sw_full":   # Gemma-like identical sliding-window groups
            w = win()
            groups = [{"type": "sliding_window", "sliding_window": w},
                      {"type": "sliding_window", "sliding_window": w}, {"type": "full"}]
        elif layout == "full_chunked":
            c = r.choice([bs, 2 * bs, 4 * bs])
            chunks.append(c)
            groups = [{"type": "full"}, {"type": "chunked_local", "attention_chunk_size": c}]
            if r.random() < 0.5:
                groups.reverse()
        elif layout == "full_big_sw":   # mixed block sizes
            k = r.choice([2, 4])
            groups = [{"type": "full", "block_size": bs * k}, {"type": "sliding_window", "sliding_window": win()}]
            if r.random() < 0.5:
                groups.reverse()
        elif layout == "full_only_grouped":
            groups = [{"type": "full"}]
        elif layout == "mamba":
            # 'align' needs prefix caching (vLLM forces 'none' without it); 'none' is what vLLM's
            # config leaves without prefix caching (models/config.py:351-406), rarely with caching
            op["enable_caching"] = mamba_mode != "none" or r.random() < 0.15
            m = {"type": "mamba"}
            default = "all" if op["enable_caching"] else "none"
            if mamba_mode != default or r.random() < 0.7:
                m["mamba_cache_mode"] = mamba_mode
            if r.random() < 0.2:
                m["num_speculative_blocks"] = r.randint(1, 2)
            if not op["enable_caching"] and r.random() < 0.3:
                m["block_size"] = mml   # mamba_block_size = max_model_len without prefix caching
            shape = r.choice(["fm", "fm", "mf", "mf", "fsm", "sfm", "mfs", "fmm"])
            if shape == "fm":
                groups = [{"type": "full"}, m]
            elif shape == "mf":
                groups = [m, {"type": "full"}]
            elif shape == "fsm":
                groups = [{"type": "full"}, {"type": "sliding_window", "sliding_window": win()}, m]
            elif shape == "sfm":
                groups = [{"type": "sliding_window", "sliding_window": win()}, {"type": "full"}, m]
            elif shape == "mfs":
                groups = [m, {"type": "full"}, {"type": "sliding_window", "sliding_window": win()}]
            else:
                groups = [{"type": "full"}, m, dict(m)]
        if groups is not None:
            op["kv_cache_groups"] = groups
        # §12 guard: the admission cap never binds
        mnbt_min = 1
        for w in windows:
            mnbt_min = max(mnbt_min, mml - w + 1)
        for c in chunks:
            mnbt_min = max(mnbt_min, mml - c)
        mnbt = max(mnbt_min, r.choice([mml // 4, mml // 2, mml, 2 * mml]))
        op["max_num_batched_tokens"] = max(1, mnbt)
        if mamba_mode == "align":
            op["max_num_batched_tokens"] = max(op["max_num_batched_tokens"], bs)  # config/vllm.py:1873
        if r.random() < 0.5:
            op["max_num_scheduled_tokens"] = r.choice([max(1, bs // 2), bs, 2 * bs + 3, 17, mml // 4 + 1, mml // 2])
            if mamba_mode == "align" and op["max_num_scheduled_tokens"] < bs and r.random() < 0.8:
                op["max_num_scheduled_tokens"] = bs   # a budget < block_size stalls every prefill
        # pool size: blocks per group for a full sequence
        per_req = 0
        gl = groups or [{"type": "sliding_window" if windows else "full"}]
        for g in gl:
            gbs = g.get("block_size", bs)
            per_req += -(-mml // gbs)
        lo = max(2, per_req // 2)
        op["num_gpu_blocks"] = r.choice([lo + 1, per_req + 1, per_req + 1, per_req + 2, per_req + 3,
                                         2 * per_req + 1, 3 * per_req + 1, 6 * per_req + 1])
        if self.stress:   # tiny pools, many sequences: preemption, resumption, priority victims
            op["num_gpu_blocks"] = r.choice([lo + 1, per_req + 1, per_req + 2, per_req + 4])
            op["max_num_seqs"] = r.choice([4, 8, 16])
            if r.random() < 0.5:
                op["scheduler_reserve_full_isl"] = False
        if groups and len(groups) > 1 and op["enable_caching"] and r.random() < 0.3:
            g = math.gcd(*[gg.get("block_size", bs) for gg in groups])
            divs = [d for d in range(1, g + 1) if g % d == 0]
            op["hash_block_size"] = r.choice(divs)
        op["async_scheduling"] = r.random() < 0.45
        op["policy"] = "priority" if r.random() < 0.4 else "fcfs"
        if r.random() < 0.3 and mamba_mode != "align":   # align needs chunked prefill (models/config.py:383)
            op["enable_chunked_prefill"] = False
        if r.random() < 0.3:
            op["scheduler_reserve_full_isl"] = False
        if r.random() < 0.3:
            op["long_prefill_token_threshold"] = r.choice([1, bs, 2 * bs + 1, 17, mml // 3 + 1])
            if mamba_mode == "align" and op["long_prefill_token_threshold"] < bs:  # config/vllm.py:1879
                op["long_prefill_token_threshold"] = bs
        return op

    def run(self):
        per_ep = max(50, self.total // self.episodes)
        for e in range(self.episodes):
            self.run_episode(e, per_ep)
        return self.trace

    def run_episode(self, e, n_ops):
        r = self.rng
        cfg = self.episode_config()
        if self.emit(cfg) is None:
            return
        mml = cfg["max_model_len"]
        asyn = cfg["async_scheduling"]
        # sync scheduler with a batch queue of 2 (pipeline parallelism): two outputs in flight
        pp = (not asyn) and r.random() < (0.5 if self.stress else 0.25)
        docs = [[r.randrange(VOCAB) for _ in range(r.randint(1, mml))] for _ in range(4)]
        live = {}          # id -> prompt+outputs (tokens)
        finished_ids = []
        inflight = 0
        nid = 0
        start = len(self.trace)
        eos_pool = [r.randrange(VOCAB + 10) for _ in range(3)]
        rule = {"mul": r.choice([1, 3, 7, 13]), "add": r.randrange(10), "mod": r.choice([VOCAB, VOCAB + 7, 61, 11])}
        while len(self.trace) - start < n_ops:
            x = r.random()
            # -- add a burst
            if x < 0.12 or (not live and x < 0.5):
                for _ in range(r.randint(1, 4)):
                    rid = "e%d-%d" % (e, nid)
                    nid += 1
                    if finished_ids and (inflight == 0 or self.reuse_inflight) and \
                            r.random() < (0.3 if self.reuse_inflight else 0.05):
                        rid = r.choice(finished_ids)
                        if rid in live:
                            continue
                    y = r.random()
                    if y < 0.5:
                        d = r.choice(docs)
                        p = d[:r.randint(1, len(d))] + [r.randrange(VOCAB) for _ in range(r.choice([0, 0, 1, 3, 9]))]
                    elif y < 0.65 and live:
                        p = list(live[r.choice(list(live))]) + [r.randrange(VOCAB) for _ in range(r.randint(0, 5))]
                    else:
                        p = [r.randrange(VOCAB) for _ in range(r.choice([1, 2, 3, 5, 8, 13, 20, 40, mml // 2, mml - 1]))]
                    p = p[:mml - 1] or [1]
                    op = {"op": "add_request", "id": rid, "prompt": p}
                    op["max_tokens"] = r.choice([1, 2, 3, 5, 8, 16, 30, mml])
                    if r.random() < 0.6:
                        op["eos_token_id"] = r.choice(eos_pool)
                    if r.random() < 0.3:
                        op["stop_token_ids"] = r.sample(range(VOCAB), r.randint(1, 3))
                    if r.random() < 0.15:
                        op["ignore_eos"] = True
                    if r.random() < 0.25:
                        op["min_tokens"] = r.randint(0, max(0, min(op["max_tokens"], mml - len(p))))
                    if cfg["policy"] == "priority" or r.random() < 0.1:
                        op["priority"] = r.randint(-1, 3)
                    if r.random() < 0.1:
                        op["arrival_time"] = r.choice([0, 1, 2.5, 5, 100]) + 0.0
                    if r.random() < 0.15:
                        op["cache_salt"] = r.choice(["a", "b"])
                    if r.random() < 0.05:
                        op["prompt_logprobs"] = 1
                    if r.random() < 0.08:
                        op["lora_name"] = r.choice(["L1", "L2"])
                        op["lora_int_id"] = 1 if op["lora_name"] == "L1" else 2
                    if self.emit(op) is None:
                        return
                    live[rid] = list(p)
                continue
            # -- schedule / update
            if x < 0.80:
                if asyn or pp:
                    if inflight < 2:
                        op = {"op": "schedule"}
                    else:
                        op = None
                else:
                    if inflight == 0 or (inflight == 1 and r.random() < 0.08):
                        op = {"op": "schedule"}
                    else:
                        op = None
                if op is not None:
                    if self.emit(op) is None:
                        return
                    inflight += 1
                    continue
                # update
                u = {"op": "update"}
                z = r.random()
                if z < 0.8:
                    u["rule"] = rule
                elif z < 0.9 and live:
                    u["sampled"] = {rid: r.choice(eos_pool + [r.randrange(VOCAB)]) for rid in r.sample(list(live), min(len(live), 2))}
                    u["rule"] = rule
                res = self.emit(u)
                if res is None:
                    return
                inflight -= 1
                for o in res["outputs"]:
                    if o["id"] in live:
                        live[o["id"]].extend(o["new_token_ids"])
                        if o["finished"]:
                            del live[o["id"]]
                            finished_ids.append(o["id"])
                continue
            if x < 0.87:
                if not live:
                    continue
                ids = r.sample(list(live), min(len(live), r.randint(1, 3)))
                if r.random() < 0.2:
                    ids.append("nope-%d" % r.randrange(5))
                if finished_ids and r.random() < 0.2:
                    ids.append(r.choice(finished_ids))
                if self.emit({"op": "abort", "ids": ids}) is None:
                    return
                for i in ids:
                    if i in live:
                        del live[i]
                        finished_ids.append(i)
                continue
            if x < 0.90:
                op = {"op": "reset_prefix_cache"}
                # AsyncScheduler + 2 outputs in flight + reset_running_requests trips
                # async_scheduler.py:53 (assert num_output_placeholders >= 0): the engine only
                # runs utility calls between steps (<= 1 output in flight), so stay there.
                if r.random() < 0.4 and ((not asyn) or inflight <= 1):
                    op["reset_running_requests"] = True
                if self.emit(op) is None:
                    return
                continue
            if x < 0.94:
                if self.emit({"op": "snapshot", "brief": r.random() < 0.5}) is None:
                    return
                continue
            if x < 0.97:
                if self.emit({"op": "prefix_cache_stats"}) is None:
                    return
                continue
            if x < 0.985 and live:
                rid = r.choice(list(live))
                if self.emit({"op": "req_info", "id": rid}) is None:
                    return
                continue
            if live and r.random() < 0.5:
                rid = r.choice(list(live))
                if self.emit({"op": "get_num_common_prefix_blocks", "id": rid, "num_running": 0}) is None:
                    return
                continue

