#!/usr/bin/env python3
"""Replays vLLM V0 sched-mode op traces (shared/spec/ops-format-v0.md) in vLLM v0.7.2's own
vllm/core code, for the side-by-side timing of bench/README.md and for differential checks.

vLLM's files are taken from a git directory into a scratch folder outside the repository (never
committed); torch, msgspec and the engine modules vllm/core imports are replaced by the small
stubs below (only what vllm/core/** and vllm/sequence.py read at v0.7.2). Sched mode only; a
snapshot is answered in its `brief` form.

  vllm_v0_side_by_side.py --vllm-git /work/.mirror/CentML+vllm/repo --scratch /tmp/vllm072 \
      TRACE.jsonl [TRACE.jsonl ...]     # writes TRACE.vllm.jsonl beside each, prints timings
"""
import argparse
import json
import os
import subprocess
import sys

VLLM_FILES = [
    "vllm/core/__init__.py", "vllm/core/scheduler.py", "vllm/core/block_manager.py",
    "vllm/core/interfaces.py", "vllm/core/evictor.py", "vllm/core/placeholder_block_space_manager.py",
    "vllm/core/block/__init__.py", "vllm/core/block/block_table.py", "vllm/core/block/common.py",
    "vllm/core/block/cpu_gpu_block_allocator.py", "vllm/core/block/interfaces.py",
    "vllm/core/block/naive_block.py", "vllm/core/block/prefix_caching_block.py",
    "vllm/core/block/utils.py", "vllm/sequence.py", "vllm/engine/output_processor/stop_checker.py",
]
EMPTY = ["vllm/__init__.py", "vllm/engine/__init__.py", "vllm/engine/output_processor/__init__.py",
         "vllm/lora/__init__.py", "vllm/prompt_adapter/__init__.py", "vllm/transformers_utils/__init__.py"]
STUBS = {
    'torch.py': '''\
class Tensor: pass
''',
    'msgspec.py': '''\
import dataclasses
def field(default=dataclasses.MISSING, default_factory=dataclasses.MISSING, name=None):
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory)
    return dataclasses.field(default=default)
class Struct:
    def __init_subclass__(cls, **kw):
        super().__init_subclass__()
        try:
            dataclasses.dataclass(cls)
        except TypeError:
            dataclasses.dataclass(cls, kw_only=True)
''',
    'vllm/logger.py': '''\
import logging
def init_logger(name):
    l = logging.getLogger(name); l.setLevel(logging.CRITICAL); return l
''',
    'vllm/config.py': '''\
class CacheConfig:
    def __init__(self, block_size, num_gpu_blocks, num_cpu_blocks, enable_prefix_caching=False, sliding_window=None):
        self.block_size = block_size; self.num_gpu_blocks = num_gpu_blocks; self.num_cpu_blocks = num_cpu_blocks
        self.enable_prefix_caching = enable_prefix_caching; self.sliding_window = sliding_window
        self.is_attention_free = False
class SchedulerConfig:
    def __init__(self, max_num_batched_tokens, max_num_seqs, max_model_len, enable_chunked_prefill=False,
                 preemption_mode=None, policy="fcfs", delay_factor=0.0):
        self.runner_type = "generate"; self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs; self.max_model_len = max_model_len
        self.chunked_prefill_enabled = enable_chunked_prefill; self.preemption_mode = preemption_mode
        self.policy = policy; self.delay_factor = delay_factor; self.num_lookahead_slots = 0
        self.num_scheduler_steps = 1; self.is_multi_step = False; self.send_delta_data = False
        if max_num_batched_tokens < max_model_len and not enable_chunked_prefill:
            raise ValueError("max_num_batched_tokens smaller than max_model_len")
        if max_num_batched_tokens < max_num_seqs:
            raise ValueError("max_num_batched_tokens must be >= max_num_seqs")
class LoRAConfig: pass
''',
    'vllm/lora/request.py': '''\
class LoRARequest: pass
''',
    'vllm/prompt_adapter/request.py': '''\
class PromptAdapterRequest: pass
''',
    'vllm/platforms/__init__.py': '''\
class _P:
    def is_hpu(self): return False
current_platform = _P()
''',
    'vllm/inputs/__init__.py': '''\
SingletonInputs = dict
class SingletonInputsAdapter:
    def __init__(self, inputs): self.inputs = inputs
    @property
    def prompt_token_ids(self): return self.inputs["prompt_token_ids"]
    @property
    def prompt(self): return None
    @property
    def multi_modal_data(self): return {}
    @property
    def multi_modal_placeholders(self): return {}
    @property
    def mm_processor_kwargs(self): return {}
    @property
    def token_type_ids(self): return []
''',
    'vllm/multimodal/__init__.py': '''\
MultiModalDataDict = dict
MultiModalPlaceholderDict = dict
''',
    'vllm/pooling_params.py': '''\
class PoolingParams: pass
''',
    'vllm/transformers_utils/tokenizer.py': '''\
AnyTokenizer = object
''',
    'vllm/sampling_params.py': '''\
import enum
class RequestOutputKind(enum.Enum):
    CUMULATIVE = 0; DELTA = 1; FINAL_ONLY = 2
class SamplingParams:
    def __init__(self, n=1, best_of=None, max_tokens=16, min_tokens=0, ignore_eos=False, stop_token_ids=None):
        self.n = n; self.best_of = best_of; self.max_tokens = max_tokens; self.min_tokens = min_tokens
        self.ignore_eos = ignore_eos; self.stop_token_ids = list(stop_token_ids or []); self.stop = []
        self.include_stop_str_in_output = False; self.detokenize = False; self.output_kind = RequestOutputKind.CUMULATIVE
        self.logprobs = None; self.prompt_logprobs = None
        if best_of:
            if best_of < n: raise ValueError("best_of must be >= n")
            self.n = best_of
        if self.n < 1: raise ValueError("n must be at least 1")
        if max_tokens is not None and max_tokens < 1: raise ValueError("max_tokens must be at least 1")
''',
}
UTILS = """import enum
STR_NOT_IMPL_ENC_DEC_SWA = "not supported"
STR_NOT_IMPL_ENC_DEC_PREFIX_CACHE = "not supported"
class Device(enum.Enum):
    GPU = enum.auto()
    CPU = enum.auto()
def cdiv(a: int, b: int) -> int:
    return -(a // -b)
def chunk_list(lst, chunk_size):
    for i in range(0, len(lst), chunk_size):
        yield lst[i:i + chunk_size]
"""


def build_scratch(git_dir, scratch, tag="v0.7.2"):
    for f in VLLM_FILES:
        text = subprocess.run(["git", "-C", git_dir, "show", f"{tag}:{f}"], check=True,
                              capture_output=True, text=True).stdout
        path = os.path.join(scratch, f)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").write(text)
    utils = subprocess.run(["git", "-C", git_dir, "show", f"{tag}:vllm/utils.py"], check=True,
                           capture_output=True, text=True).stdout
    i = utils.index("class PyObjectCache")
    j = utils.index("@cache", i)
    for f in EMPTY:
        os.makedirs(os.path.dirname(os.path.join(scratch, f)), exist_ok=True)
        open(os.path.join(scratch, f), "w").write("")
    for f, text in STUBS.items():
        os.makedirs(os.path.dirname(os.path.join(scratch, f)) or scratch, exist_ok=True)
        open(os.path.join(scratch, f), "w").write(text)
    open(os.path.join(scratch, "vllm/utils.py"), "w").write(UTILS + utils[i:j])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vllm-git", required=True)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("traces", nargs="+")
    a = ap.parse_args()
    build_scratch(a.vllm_git, a.scratch)
    sys.path.insert(0, a.scratch)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import time as _t
    from vllm_v0_harness import H, INSIDE  # imports vLLM's code from the scratch folder
    for trace in a.traces:
        INSIDE[0] = 0.0
        h = H()
        lines = [l for l in open(trace) if l.strip()]
        t0 = _t.process_time()
        out = [json.dumps(h.run(l)) for l in lines]
        el = _t.process_time() - t0
        open(os.path.splitext(trace)[0] + ".vllm.jsonl", "w").write("\n".join(out) + "\n")
        print(f"{trace}: {len(lines)} ops, {el:.2f} s CPU e2e ({len(lines) / el:.0f} ops/s), "
              f"{INSIDE[0]:.2f} s inside Scheduler.schedule()")



if __name__ == "__main__":
    main()
