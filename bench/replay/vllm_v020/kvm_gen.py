"""Seeded random manager-mode (`init`) traces, built step by step against vLLM's own answers
(kvm_harness), so every op is valid for the state it meets. Import after common.install()."""
import json
import math
import random

from kvm_harness import KvmHarness

VOCAB_SMALL = 4


class EpisodeEnd(Exception):
    pass


class KvmGen:
    def __init__(self, seed, ops, episodes, mamba=False, bind=False, mamba_spec=False, tiny=False,
                 delay=False, mamba_modes=None):
        """mamba: mamba 'all'/'none' groups among the grouped layouts (mamba_spec: with
        num_speculative_blocks); bind: admission caps that bind; tiny: tiny block sizes and model
        lengths; delay: many delay_cache_blocks; mamba_modes: 85% of the episodes mamba hybrids in
        these mamba_cache_modes (caching on unless 'none'; all groups at the init's block size,
        chunks split like Scheduler._mamba_block_aligned_split)."""
        self.mamba_align = bool(mamba_modes)
        self.mamba_modes = mamba_modes
        self.delay = delay
        self.tiny = tiny
        self.mamba_spec = mamba_spec
        self.mamba = mamba
        self.bind = bind
        self.r = random.Random(seed)
        self.target = ops
        self.episodes = episodes
        self.trace = []
        self.h = KvmHarness()
        self.errors = []
        self.rid_counter = 0

    # ------------------------------------------------------------ emit
    def emit(self, op):
        res = self.h.run_op(op)
        if "error" in res:
            # vLLM raised where the generator did not expect it: drop the op, end the episode
            self.errors.append((len(self.trace), op, res))
            raise EpisodeEnd()
        self.trace.append(op)
        return res

    def emit_err(self, op):
        res = self.h.run_op(op)
        assert "error" in res
        self.trace.append(op)

    # ------------------------------------------------------------ layout
    def layout(self):
        r = self.r
        bs = r.choice([1, 2, 4, 4, 8, 16, 16, 32, 64])
        mml = r.choice([32, 64, 96, 128, 256, 512, 1024, 2048])
        if self.tiny:
            bs = r.choice([1, 2, 2, 3, 4])
            mml = r.choice([5, 8, 12, 16, 24, 33])
        mml = max(mml, 4 * bs)
        caching = r.random() < 0.85
        align_layout = self.mamba_align and r.random() < 0.85
        if align_layout:
            self.lay_mode = r.choice(self.mamba_modes)
            # vLLM forces mamba_cache_mode 'none' without prefix caching (models/config.py:399-402)
            caching = self.lay_mode != "none" or r.random() < 0.15
        init = {"op": "init", "block_size": bs, "max_model_len": mml, "enable_caching": caching}
        if r.random() < 0.2:
            init["hash_algo"] = r.choice(["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"])
        if r.random() < 0.1:
            init["num_preallocate_tokens"] = r.choice([0, 16, 64])
        kind = r.choice(["flat", "flat", "flat_sw", "grouped"])
        if align_layout:
            kind = "align"
        groups = None
        if kind == "align":
            while True:
                groups = self.align_groups(bs, mml, self.lay_mode, caching)
                if groups is not None:
                    break
            init["kv_cache_groups"] = groups
        elif kind == "flat_sw":
            init["sliding_window"] = r.randint(1, min(mml, 8 * bs))
        elif kind == "grouped":
            while True:
                groups = self.rand_groups(bs, mml, caching)
                if groups is not None:
                    break
            init["kv_cache_groups"] = groups
        gl = groups or ([{"type": "sliding_window", "sliding_window": init["sliding_window"]}]
                        if "sliding_window" in init else [{"type": "full"}])
        bss = [g.get("block_size", bs) for g in gl]
        has_chunked = any(g.get("type") == "chunked_local" for g in gl)
        if r.random() < 0.2 and not has_chunked:
            init["use_eagle"] = True
        if groups and len(groups) > 1 and caching and r.random() < 0.3:
            g = math.gcd(*bss)
            divs = [d for d in range(1, g + 1) if g % d == 0]
            init["hash_block_size"] = r.choice(divs)
        elif len(gl) == 1 and r.random() < 0.15:
            divs = [d for d in range(1, bs + 1) if bs % d == 0]
            init["hash_block_size"] = r.choice(divs + [None])
        # admission cap: only values where it never binds (vllm-0.20-semantics.md §12)
        if r.random() < 0.3:
            need = 1
            for g in gl:
                if g.get("type") == "sliding_window":
                    need = max(need, mml - g["sliding_window"] + 1)
                elif g.get("type") == "chunked_local":
                    need = max(need, mml - g["attention_chunk_size"])
            if self.bind and r.random() < 0.5:
                init["max_num_batched_tokens"] = r.randint(1, max(1, need))
            else:
                init["max_num_batched_tokens"] = r.randint(need, need + 2 * mml)
            if kind == "align" and self.lay_mode == "align":
                # config/vllm.py:1872-1878: align mode needs block_size <= max_num_batched_tokens
                init["max_num_batched_tokens"] = max(init["max_num_batched_tokens"], bs)
        # pool size: small pools -> failures and evictions
        per_req = sum(-(-mml // b) for b in bss)
        nb = r.choice([max(3, per_req // 4), max(4, per_req // 2), per_req + 1, 2 * per_req, r.randint(3, 40)])
        init["num_gpu_blocks"] = max(2, min(nb, 600)) if r.random() > 0.02 else r.choice([1, 2])
        self.bss = bss
        self.groups_l = gl
        self.has_mamba = any(g.get("type") == "mamba" for g in gl)
        self.align_active = any(g.get("type") == "mamba" and g.get("mamba_cache_mode") == "align" for g in gl)
        self.init_bs = bs
        self.use_eagle = bool(init.get("use_eagle"))
        self.all_full = all(g.get("type", "full") == "full" for g in gl)
        self.lcm = math.lcm(*bss)
        return init

    def align_groups(self, bs, mml, mode="align", caching=True):
        """mamba_cache_mode 'align' hybrids. All groups at the init's block size: vLLM sets
        mamba_block_size = block_size with prefix caching (models/config.py:397-398) and unifies
        the attention block size with it."""
        r = self.r
        m = {"type": "mamba", "mamba_cache_mode": mode}
        if mode != "align" and mode == ("all" if caching else "none") and r.random() < 0.3:
            del m["mamba_cache_mode"]   # the default
        if not caching and r.random() < 0.3:
            m["block_size"] = mml   # mamba_block_size = max_model_len without prefix caching
        x = r.random()
        if x < 0.45:
            m["num_speculative_blocks"] = r.randint(1, 2)
        elif x < 0.55:
            m["num_speculative_blocks"] = 0
        def sw():
            return {"type": "sliding_window", "sliding_window": r.randint(1, min(mml, 12 * bs))}
        full = {"type": "full"}
        shape = r.choice(["fm", "fm", "mf", "mf", "fsm", "sfm", "mfs", "sm", "ms", "fmm"])
        g = {"fm": [full, m], "mf": [m, full], "fsm": [full, sw(), m], "sfm": [sw(), full, m],
             "mfs": [m, full, sw()], "sm": [sw(), m], "ms": [m, sw()],
             "fmm": [full, m, dict(m)]}[shape]
        g = [dict(x) for x in g]
        if r.random() < 0.15:
            cand = [x for x in g if x["type"] != "mamba"]
            r.choice(cand)["eagle"] = True
        return g

    def rand_groups(self, bs, mml, caching):
        r = self.r
        shapes = ["full_sw", "sw_full", "multi_sw", "gemma", "chunked", "single", "mixed_bs", "full_chunked_sw"]
        if self.mamba:
            shapes = ["mamba"] * 3 + shapes
        shape = r.choice(shapes)
        def sw():
            return {"type": "sliding_window", "sliding_window": r.randint(1, min(mml, 12 * bs))}
        def ck():
            if r.random() < 0.2:
                return {"type": "chunked_local", "attention_chunk_size": r.randint(1, 6 * bs)}
            return {"type": "chunked_local", "attention_chunk_size": bs * r.randint(1, 6)}
        if shape == "mamba":
            m = {"type": "mamba", "mamba_cache_mode": "all" if caching else "none"}
            if self.mamba_spec and r.random() < 0.6:
                m["mamba_cache_mode"] = r.choice(["all", "none"])
                if r.random() < 0.5:
                    m["num_speculative_blocks"] = r.randint(1, 2)
            g = r.choice([[{"type": "full"}, m], [m, {"type": "full"}], [{"type": "full"}, sw(), m],
                          [{"type": "full"}, dict(m), dict(m)] if not caching else [{"type": "full"}, m]])
        elif shape == "full_sw":
            g = [{"type": "full"}, sw()]
        elif shape == "sw_full":
            g = [sw(), {"type": "full"}]
        elif shape == "multi_sw":
            g = [{"type": "full"}] + [sw() for _ in range(r.randint(2, 3))]
            r.shuffle(g)
        elif shape == "gemma":
            s = sw()
            g = [dict(s) for _ in range(r.randint(2, 5))] + [{"type": "full"}]
            if r.random() < 0.3:
                g.reverse()
        elif shape == "chunked":
            g = [{"type": "full"}, ck()]
            if r.random() < 0.3:
                g.reverse()
        elif shape == "full_chunked_sw":
            # sliding window + chunked local in separate groups (different managers)
            g = [{"type": "full"}, ck(), sw()]
        elif shape == "single":
            g = [r.choice([{"type": "full"}, sw(), ck()])]
        else:  # mixed block sizes
            mult = [1, 2, 4] + ([0.5] if bs >= 2 else []) + ([0.25] if bs >= 4 else [])
            g = []
            for t in r.sample(["full", "sw", "sw2"], r.randint(2, 3)):
                if t == "full":
                    e = {"type": "full"}
                elif t in ("sw", "sw2"):
                    e = sw()
                else:
                    e = ck()
                if r.random() < 0.7:
                    e["block_size"] = int(bs * r.choice(mult))
                if e["type"] == "chunked_local":
                    b = e.get("block_size", bs)
                    e["attention_chunk_size"] = b * r.randint(1, 4)
                g.append(e)
            # keep at least one group at the init's block size when possible
        if len(g) > 1 and r.random() < 0.15:
            # eagle flag on one non-chunked group
            cand = [x for x in g if x["type"] != "chunked_local"]
            if cand and not any(x["type"] == "chunked_local" for x in g):
                r.choice(cand)["eagle"] = True
        if caching and len(g) > 1:
            keys = {json.dumps({k: v for k, v in x.items() if k != "eagle"}, sort_keys=True) for x in g}
            if len(keys) == 1:
                return None  # vLLM refuses identical specs only (init error)
        if len(g) == 1 and g[0].get("block_size", bs) != bs:
            g[0].pop("block_size")
        return g

    # ------------------------------------------------------------ requests
    def new_prompt(self):
        r = self.r
        mml = self.mml
        maxlen = min(mml, r.choice([8, 16, 32, 64, 128, 256, 512]))
        c = r.random()
        if self.corpus and c < 0.6:
            base = r.choice(self.corpus)
            cut = r.randint(0, len(base))
            if r.random() < 0.5 and self.lcm > 1:
                cut = cut // self.lcm * self.lcm
            p = base[:cut] + self.rand_tokens(r.randint(0 if cut else 1, max(1, maxlen // 2)))
        elif c < 0.7 or (self.tiny and c < 0.9):
            p = [r.randint(0, VOCAB_SMALL if not self.tiny else 1) for _ in range(r.randint(1, maxlen))]
        else:
            p = self.rand_tokens(r.randint(1, maxlen))
        p = p[:mml] if r.random() < 0.05 else p[:mml - 1]
        if not p:
            p = [1]
        return p

    def rand_tokens(self, n):
        return [self.r.randint(0, 1000) for _ in range(n)]

    def add_request(self):
        r = self.r
        self.rid_counter += 1
        rid = f"r{self.rid_counter}" if r.random() < 0.9 or not self.dead_ids else r.choice(self.dead_ids)
        if rid in self.reqs:
            return
        prompt = self.new_prompt()
        op = {"op": "add_request", "id": rid, "prompt": prompt}
        if r.random() < 0.1:
            op["cache_salt"] = r.choice(["s1", "s2", "s1", ""])
        if r.random() < 0.1:
            op["lora_name"] = r.choice(["la", "lb", "la", "lb", ""])
            if r.random() < 0.7:
                op["lora_int_id"] = r.choice([1, 2, 3])
        if r.random() < 0.05:
            op["prompt_logprobs"] = 1
        if r.random() < 0.1 and len(prompt) >= 2:
            n = r.randint(1, 3)
            pos = []
            cur = 0
            for _ in range(n):
                if cur >= len(prompt) - 1:
                    break
                off = r.randint(cur, len(prompt) - 1) if r.random() < 0.7 else max(cur, len(prompt) - r.randint(1, 2 * self.bss[0]))
                ln = r.randint(1, max(1, min(3 * self.bss[0], len(prompt) - off)))
                pos.append({"offset": off, "length": ln})
                cur = off + ln
            if pos:
                if r.random() < 0.5:
                    for p_ in pos:
                        for t in range(p_["offset"], p_["offset"] + p_["length"]):
                            prompt[t] = -1
                op["mm_positions"] = pos
                if r.random() < 0.8:
                    op["mm_hashes"] = [r.choice(["ia", "ib", "ic", "ia"]) for _ in pos]
        if r.random() < 0.1:
            op["max_tokens"] = r.randint(1, 50)
            op["eos_token_id"] = r.randint(0, 5)
        self.emit(op)
        self.reqs[rid] = {"tokens": len(prompt), "computed": 0, "state": "waiting", "delayed": False,
                          "prompt": prompt}
        self.corpus.append(prompt)
        if len(self.corpus) > 50:
            self.corpus.pop(0)

    def grouped(self, lists):
        return lists if self.is_grouped else lists[0]

    def align_split(self, rid, k, nct=0):
        """Scheduler._mamba_block_aligned_split (scheduler.py:302-345), used by the scheduler
        for every chunk when has_mamba_layers and mamba_cache_mode == 'align'. A small share
        of chunks is left unaligned (vLLM's manager still answers something for them)."""
        if not self.align_active or self.r.random() < 0.03:
            return k
        q = self.reqs[rid]
        comp = q["computed"] + nct
        ntok = q["tokens"]
        if comp < max(len(q["prompt"]), ntok - 1):
            bs = self.init_bs
            last = ntok - ntok % bs
            if self.use_eagle:
                last = max(last - bs, 0)
            after = comp + k
            if after < last:
                k = k // bs * bs
            elif comp < last < after:
                k = last - comp
        return k

    def admit(self, rid):
        r = self.r
        q = self.reqs[rid]
        res = self.emit({"op": "get_computed_blocks", "id": rid})
        hits = res["blocks"] if self.is_grouped else [res["blocks"]]
        nct = res["num_computed_tokens"]
        if r.random() < 0.15 and any(hits):
            if self.all_full and r.random() < 0.7:
                # shorten consistently (multiple of lcm)
                keep_tok = r.randint(0, nct // self.lcm) * self.lcm
                hits = [h[:keep_tok // b] for h, b in zip(hits, self.bss)]
                nct = keep_tok
            else:
                hits = [[] for _ in hits]
                nct = 0
        remaining = q["tokens"] - nct
        if remaining <= 0:
            return
        if r.random() < 0.1:
            self.emit({"op": "can_fit_full_sequence", "id": rid, "new_computed_blocks": self.grouped(hits),
                       "num_new_computed_tokens": nct})
        if r.random() < 0.03:
            self.emit({"op": "req_info", "id": rid})
        k = remaining if r.random() < 0.6 else r.randint(1, remaining)
        k = min(k, self.max_chunk)
        k = self.align_split(rid, k, nct)
        if k <= 0:
            return
        op = {"op": "allocate_slots", "id": rid, "num_tokens": k}
        if r.random() < 0.8 or any(hits):
            op["new_computed_blocks"] = self.grouped(hits)
        if r.random() < 0.3:
            op["num_new_computed_tokens"] = nct
        delayed = self.alloc_options(op, max_lookahead=8, p_delay=0.05)
        res = self.emit(op)
        if res["blocks"] is None:
            if r.random() < 0.3:
                self.preempt_some(exclude=rid)
            return
        q["state"] = "running"
        q["delayed"] = delayed
        q["main_hi"] = q["computed"] + nct + k
        q["computed"] = q["computed"] + nct + k
        self.emit({"op": "set_num_computed_tokens", "id": rid, "n": q["computed"]})
        self.maybe_cache(rid)

    def alloc_options(self, op, max_lookahead, p_delay):
        """Random lookahead slots and delay_cache_blocks for an allocate_slots op; True if
        delayed (--delay raises the chance to 0.3)."""
        r = self.r
        if r.random() < 0.1:
            op["num_lookahead_tokens"] = r.randint(1, max_lookahead)
        delayed = r.random() < (0.3 if self.delay else p_delay)
        if delayed:
            op["delay_cache_blocks"] = True
        return delayed

    def maybe_cache(self, rid):
        q = self.reqs[rid]
        if q["delayed"] and self.r.random() < (0.3 if self.delay else 0.6):
            n = q["computed"] if self.r.random() < 0.7 else self.r.randint(0, q["computed"])
            self.emit({"op": "cache_blocks", "id": rid, "n": n})
            q["delayed"] = False

    def step(self, rid):
        r = self.r
        q = self.reqs[rid]
        if q["computed"] >= q["tokens"]:
            if q["tokens"] >= self.mml:
                self.finish(rid)
                return
            n = 1 if r.random() < 0.8 else r.randint(1, 4)
            n = min(n, self.mml - q["tokens"])
            toks = [r.randint(0, VOCAB_SMALL) if r.random() < 0.3 else r.randint(0, 1000) for _ in range(n)]
            self.emit({"op": "append_output", "id": rid, "tokens": toks})
            q["tokens"] += n
            if r.random() < 0.03:
                self.finish(rid)  # EOS
                return
        remaining = q["tokens"] - q["computed"]
        k = remaining if r.random() < 0.8 else r.randint(1, remaining)
        k = min(k, self.max_chunk)
        k = self.align_split(rid, k)
        if k <= 0:
            return
        drafts = 0
        if k == remaining and r.random() < 0.07:
            drafts = r.randint(1, 4)
            drafts = max(0, min(drafts, self.mml - q["computed"] - k, self.max_chunk - k))
        if self.align_active and q.get("main_hi", 0) > q["computed"] + k + drafts:
            # a real spec-decode step never schedules fewer main-model tokens than the previous
            # one (rejected drafts come back as 1 + num_spec); keep vLLM's align-mode assertion
            # (single_type_kv_cache_manager.py:996-999) mostly out of reach
            pad = q["main_hi"] - q["computed"] - k
            if q["computed"] + k + pad <= self.mml and k + pad <= self.max_chunk:
                drafts = pad
        op = {"op": "allocate_slots", "id": rid, "num_tokens": k + drafts}
        delayed = self.alloc_options(op, max_lookahead=6, p_delay=0.04)
        res = self.emit(op)
        if res["blocks"] is None:
            # preempt: FCFS picks the last running request, sometimes itself
            self.preempt_some(prefer=rid if r.random() < 0.4 else None)
            return
        q["main_hi"] = max(q.get("main_hi", 0), q["computed"] + k + drafts)
        q["computed"] += k
        q["delayed"] = q["delayed"] or delayed
        self.emit({"op": "set_num_computed_tokens", "id": rid, "n": q["computed"]})
        self.maybe_cache(rid)

    def preempt(self, rid):
        self.emit({"op": "free", "id": rid})
        self.emit({"op": "set_num_computed_tokens", "id": rid, "n": 0})
        q = self.reqs[rid]
        q["computed"] = 0
        q["main_hi"] = 0
        q["state"] = "waiting"
        q["delayed"] = False

    def preempt_some(self, exclude=None, prefer=None):
        running = [x for x in self.reqs if self.reqs[x]["state"] == "running" and x != exclude]
        if prefer is not None and prefer in running:
            self.preempt(prefer)
        elif running:
            self.preempt(running[-1] if self.r.random() < 0.7 else self.r.choice(running))

    def finish(self, rid):
        self.emit({"op": "finish", "id": rid})
        del self.reqs[rid]
        self.dead_ids.append(rid)

    # ------------------------------------------------------------ episode
    def episode(self, budget):
        init = self.layout()
        self.is_grouped = "kv_cache_groups" in init
        self.mml = init["max_model_len"]
        self.reqs = {}
        self.corpus = []
        self.dead_ids = []
        self.maxlive = self.r.choice([4, 8, 12, 20])
        self.max_chunk = init.get("max_num_batched_tokens") or 10 ** 9
        self.emit(init)
        end = len(self.trace) + budget
        r = self.r
        while len(self.trace) < end:
            live = list(self.reqs)
            waiting = [x for x in live if self.reqs[x]["state"] == "waiting"]
            running = [x for x in live if self.reqs[x]["state"] == "running"]
            acts = []
            if len(live) < self.maxlive:
                acts.append(("add", 10 if len(live) < 3 else 4))
            if waiting:
                acts.append(("admit", 12))
            if running:
                acts += [("step", 30), ("preempt", 1.5), ("cache", 1), ("common", 2)]
            if live:
                acts += [("finish", 2.5 if len(live) > 4 else 1), ("req_info", 1.5), ("canfit", 2)]
            if live:
                acts += [("lookup_any", 0.7), ("append_waiting", 0.4 if waiting else 0)]
            if waiting:
                acts += [("admit_nolookup", 1.0)]
            acts += [("snapshot", 2), ("reset", 0.6), ("stats", 0.6), ("new_step", 6 if self.has_mamba else 0.5),
                     ("comment", 0.1), ("bad_common", 0.05)]
            tot = sum(w for _, w in acts)
            x = r.random() * tot
            for a, w in acts:
                x -= w
                if x < 0:
                    break
            if a == "add":
                self.add_request()
            elif a == "admit":
                self.admit(waiting[0] if r.random() < 0.7 else r.choice(waiting))
            elif a == "step":
                self.step(r.choice(running))
            elif a == "finish":
                self.finish(r.choice(live))
            elif a == "preempt":
                self.preempt(r.choice(running))
            elif a == "snapshot":
                self.emit({"op": "snapshot", "brief": r.random() < 0.3} if r.random() < 0.5 else {"op": "snapshot"})
            elif a == "req_info":
                self.emit({"op": "req_info", "id": r.choice(live)})
            elif a == "common":
                cand = running if r.random() < 0.85 else live
                self.emit({"op": "get_num_common_prefix_blocks", "id": r.choice(cand), "num_running": len(running)})
            elif a == "lookup_any":
                self.emit({"op": "get_computed_blocks", "id": r.choice(live)})
            elif a == "append_waiting":
                x = r.choice(waiting)
                q = self.reqs[x]
                if q["tokens"] < self.mml:
                    t = [r.randint(0, VOCAB_SMALL)]
                    self.emit({"op": "append_output", "id": x, "tokens": t})
                    q["tokens"] += 1
            elif a == "admit_nolookup":
                x = r.choice(waiting)
                q = self.reqs[x]
                k = q["tokens"] if r.random() < 0.6 else r.randint(1, q["tokens"])
                k = min(k, self.max_chunk)
                k = self.align_split(x, k)
                if k <= 0:
                    continue
                res = self.emit({"op": "allocate_slots", "id": x, "num_tokens": k})
                if res["blocks"] is not None:
                    q["state"] = "running"
                    q["computed"] = k
                    q["main_hi"] = k
                    self.emit({"op": "set_num_computed_tokens", "id": x, "n": k})
            elif a == "bad_common":
                if r.random() < 0.5 and running:
                    self.emit_err({"op": "allocate_slots", "id": r.choice(running), "num_tokens": 0})
                else:
                    self.emit_err({"op": "get_num_common_prefix_blocks", "id": "nope", "num_running": 0})
            elif a == "reset":
                self.emit({"op": "reset_prefix_cache"})
            elif a == "stats":
                self.emit({"op": "prefix_cache_stats"})
            elif a == "new_step":
                self.emit({"op": "new_step"})
            elif a == "canfit":
                x = r.choice(live)
                q = self.reqs[x]
                if q["state"] == "running":
                    self.emit({"op": "can_fit_full_sequence", "id": x})
                else:
                    res = self.emit({"op": "get_computed_blocks", "id": x})
                    self.emit({"op": "can_fit_full_sequence", "id": x, "new_computed_blocks": res["blocks"],
                               "num_new_computed_tokens": res["num_computed_tokens"]})
            elif a == "cache":
                x = r.choice(running)
                q = self.reqs[x]
                self.emit({"op": "cache_blocks", "id": x, "n": r.randint(0, q["computed"])})
                q["delayed"] = False
            else:
                self.emit({"op": "comment", "text": "x"})

    def run(self):
        per = max(50, self.target // self.episodes)
        while len(self.trace) < self.target:
            try:
                self.episode(min(per, self.target - len(self.trace) + 10))
            except EpisodeEnd:
                pass
        return self.trace
