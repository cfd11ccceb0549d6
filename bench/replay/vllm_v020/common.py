"""Shared parts of the vLLM v0.20.1 differential harnesses: extracting vLLM's files, the import
stubs they run under, KV cache group specs, block pool snapshots, structural comparison, kvsim
runs and trace minimization."""
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import types

TAG = "v0.20.1"
# The vLLM files that run unchanged: the KV cache manager stack, the schedulers and the request.
REAL_FILES = [
    "vllm/utils/hashing.py", "vllm/utils/math_utils.py", "vllm/v1/utils.py",
    "vllm/v1/kv_cache_interface.py", "vllm/v1/request.py", "vllm/v1/metrics/stats.py",
    "vllm/v1/core/__init__.py", "vllm/v1/core/block_pool.py", "vllm/v1/core/encoder_cache_manager.py",
    "vllm/v1/core/kv_cache_coordinator.py", "vllm/v1/core/kv_cache_manager.py",
    "vllm/v1/core/kv_cache_metrics.py", "vllm/v1/core/kv_cache_utils.py",
    "vllm/v1/core/single_type_kv_cache_manager.py", "vllm/v1/core/sched/__init__.py",
    "vllm/v1/core/sched/async_scheduler.py", "vllm/v1/core/sched/interface.py",
    "vllm/v1/core/sched/output.py", "vllm/v1/core/sched/request_queue.py",
    "vllm/v1/core/sched/scheduler.py", "vllm/v1/core/sched/utils.py",
    # the CPU offloading tier (offm mode)
    "vllm/v1/kv_offload/__init__.py", "vllm/v1/kv_offload/abstract.py",
    "vllm/v1/kv_offload/mediums.py", "vllm/v1/kv_offload/reuse_manager.py",
    "vllm/v1/kv_offload/cpu/__init__.py", "vllm/v1/kv_offload/cpu/manager.py",
    "vllm/v1/kv_offload/cpu/policies/__init__.py", "vllm/v1/kv_offload/cpu/policies/abstract.py",
    "vllm/v1/kv_offload/cpu/policies/arc.py", "vllm/v1/kv_offload/cpu/policies/lru.py",
    # the OffloadingConnector (offsched mode): connector factory, base class, scheduler and worker
    # sides, offloading specs and the worker's job dispatcher
    "vllm/distributed/kv_transfer/kv_connector/factory.py",
    "vllm/distributed/kv_transfer/kv_connector/base.py",
    "vllm/distributed/kv_transfer/kv_connector/v1/base.py",
    "vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py",
    "vllm/distributed/kv_transfer/kv_connector/v1/offloading/common.py",
    "vllm/distributed/kv_transfer/kv_connector/v1/offloading/worker.py",
    "vllm/v1/kv_offload/spec.py", "vllm/v1/kv_offload/factory.py", "vllm/v1/kv_offload/cpu/spec.py",
    "vllm/v1/kv_offload/worker/__init__.py", "vllm/v1/kv_offload/worker/worker.py",
    # yield_req_data is appended to the stub from here (see Finder.exec_module)
    "vllm/distributed/kv_transfer/kv_connector/utils.py",
    "vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py",
    # the NixlConnector's scheduler side (pdsched mode) and its metadata
    "vllm/distributed/kv_transfer/kv_connector/v1/nixl/metadata.py",
    "vllm/distributed/kv_transfer/kv_connector/v1/nixl/scheduler.py",
]
# Third-party packages vLLM imports; they are replaced by auto-stubs (see AutoModule).
AUTO_TOP = {"torch", "msgspec", "cbor2", "uvloop", "xxhash", "pydantic", "typing_extensions", "nvtx",
            "regex", "zmq", "psutil", "transformers"}

# Stand-ins for vLLM modules that drag in torch, configs or the engine. Each keeps only what the
# real files touch for plain text requests.
STUBS = {
    "vllm": "",
    "vllm.envs": '''
def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return None
''',
    "vllm.logger": '''
import logging
def init_logger(name):
    logger = logging.getLogger(name)
    logger.setLevel(logging.CRITICAL)
    return logger
''',
    "vllm.utils": '''
def length_from_prompt_token_ids_or_embeds(prompt_token_ids, prompt_embeds):
    if prompt_token_ids is not None:
        return len(prompt_token_ids)
    return len(prompt_embeds)
''',
    "vllm.utils.mem_utils": "def format_gib(b): return f'{b / 2**30:.2f} GiB'\n",
    "vllm.utils.torch_utils": "def get_dtype_size(d): return 2\ndef nvfp4_kv_cache_full_dim(*a, **k): return 0\n",
    "vllm.sampling_params": '''
class RepetitionDetectionParams: pass
class SamplingParams:
    """eos_token_id as SamplingParams.update_from_generation_config leaves it: unset with ignore_eos."""
    def __init__(self, max_tokens=16, min_tokens=0, stop_token_ids=None, ignore_eos=False,
                 eos_token_id=None, prompt_logprobs=None):
        self.max_tokens = max_tokens
        self.min_tokens = min_tokens
        self.stop_token_ids = list(stop_token_ids or [])
        self.ignore_eos = ignore_eos
        self._eos_token_id = None if ignore_eos else eos_token_id
        self._all_stop_token_ids = set(self.stop_token_ids)
        if self._eos_token_id is not None:
            self._all_stop_token_ids.add(self._eos_token_id)
        self.prompt_logprobs = prompt_logprobs
        self.skip_reading_prefix_cache = prompt_logprobs is not None
        self.extra_args = None
        self.logprobs = None
        self.repetition_detection = None
        self.structured_outputs = None
    @property
    def eos_token_id(self): return self._eos_token_id
    @property
    def all_stop_token_ids(self): return self._all_stop_token_ids
''',
    "vllm.lora.request": '''
class LoRARequest:
    def __init__(self, lora_name, lora_int_id=1, lora_path=""):
        self.lora_name = lora_name
        self.lora_int_id = lora_int_id
        self.lora_path = lora_path
    @property
    def adapter_id(self): return self.lora_int_id
    @property
    def name(self): return self.lora_name
''',
    "vllm.multimodal": '''
class MultiModalRegistry:
    def supports_multimodal_inputs(self, model_config): return False
MULTIMODAL_REGISTRY = MultiModalRegistry()
''',
    "vllm.multimodal.inputs": '''
from dataclasses import dataclass
@dataclass
class PlaceholderRange:
    offset: int
    length: int
    is_embed: object = None
    def get_num_embeds(self): return self.length
@dataclass
class MultiModalFeatureSpec:
    data: object
    modality: str
    identifier: str
    mm_position: PlaceholderRange
    mm_hash: str | None = None
''',
    "vllm.v1.engine": '''
import enum, time
from dataclasses import dataclass
from typing import Any
FINISH_REASON_STRINGS = ("stop", "length", "abort", "error", "repetition")
class FinishReason(enum.IntEnum):
    STOP = 0
    LENGTH = 1
    ABORT = 2
    ERROR = 3
    REPETITION = 4
    def __str__(self):
        return FINISH_REASON_STRINGS[self.value]
class EngineCoreEventType(enum.IntEnum):
    QUEUED = 1
    SCHEDULED = 2
    PREEMPTED = 3
@dataclass
class EngineCoreEvent:
    type: Any
    timestamp: float
    @classmethod
    def new_event(cls, event_type, timestamp=None):
        return cls(event_type, time.monotonic() if timestamp is None else timestamp)
class EngineCoreOutput:
    def __init__(self, request_id, new_token_ids, finish_reason=None, stop_reason=None, **kw):
        self.request_id = request_id
        self.new_token_ids = new_token_ids
        self.finish_reason = finish_reason
        self.stop_reason = stop_reason
        self.__dict__.update(kw)
    @property
    def finished(self): return self.finish_reason is not None
class EngineCoreOutputs:
    def __init__(self, outputs=None, finished_requests=None, scheduler_stats=None, **kw):
        self.outputs = outputs or []
        self.finished_requests = finished_requests
        self.scheduler_stats = scheduler_stats
class EngineCoreRequest: pass
''',
    "vllm.v1.outputs": '''
from dataclasses import dataclass, field
@dataclass
class ModelRunnerOutput:
    req_ids: list
    req_id_to_index: dict
    sampled_token_ids: list = field(default_factory=list)
    logprobs: object = None
    prompt_logprobs_dict: dict = field(default_factory=dict)
    pooler_output: object = None
    kv_connector_output: object = None
    ec_connector_output: object = None
    num_nans_in_logits: object = None
    cudagraph_stats: object = None
class DraftTokenIds: pass
@dataclass
class KVConnectorOutput:
    finished_sending: object = None
    finished_recving: object = None
    kv_connector_stats: object = None
    kv_cache_events: object = None
    kv_connector_worker_meta: object = None
    invalid_block_ids: set = field(default_factory=set)
    expected_finished_count: int = 0
    def is_empty(self):
        return (not self.finished_sending and not self.finished_recving and not self.kv_connector_stats
                and not self.kv_cache_events and not self.invalid_block_ids
                and not self.kv_connector_worker_meta)
class LogprobsLists: pass
class LogprobsTensors: pass
''',
    # ConstantList is appended from the extracted vllm/v1/utils.py (see Finder.exec_module).
    "vllm.v1.utils": '''
import contextlib
from collections.abc import Sequence
from typing import Generic, TypeVar, overload
T = TypeVar("T")
def record_function_or_nullcontext(name):
    return contextlib.nullcontext()
def tensor_data(t):
    raise NotImplementedError
''',
    "vllm.v1.structured_output": '''
class StructuredOutputManager:
    def __init__(self, *a, **k): pass
    def should_advance(self, request): return False
    def grammar_bitmask(self, *a, **k): return None
''',
    "vllm.v1.structured_output.request": '''
class StructuredOutputRequest:
    @staticmethod
    def from_sampling_params(sp): return None
''',
    # the package's __init__ also imports a benchmark connector
    "vllm.distributed.kv_transfer.kv_connector.v1": '''
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1, KVConnectorRole, SupportsHMA, supports_hma)
''',
    # yield_req_data is appended from the extracted file (see Finder.exec_module)
    "vllm.distributed.kv_transfer.kv_connector.utils": (
        "from collections.abc import Iterator\nBlockIds = tuple\nEngineId = str\n"),
    # nixl/scheduler.py reads the device type (a GPU: kv_buffer_device decides the host buffer)
    "vllm.platforms": "class _Platform:\n    device_type = 'cuda'\ncurrent_platform = _Platform()\n",
    "vllm.distributed.kv_events": '''
MEDIUM_GPU = "GPU"
class _Publisher:
    def publish(self, batch): pass
    def shutdown(self): pass
class EventPublisherFactory:
    @staticmethod
    def create(*a, **k): return _Publisher()
class KVEventBatch:
    def __init__(self, *a, **k): pass
class KVCacheEvent:
    def __init__(self, *a, **k): pass
class AllBlocksCleared(KVCacheEvent): pass
class BlockRemoved(KVCacheEvent): pass
class BlockStored(KVCacheEvent): pass
''',
}


# Stubs that get one definition of the real file appended: module -> (file, start, end marker).
SLICES = {
    "vllm.v1.utils": ("vllm/v1/utils.py", "class ConstantList", "\nclass "),
    "vllm.distributed.kv_transfer.kv_connector.utils": (
        "vllm/distributed/kv_transfer/kv_connector/utils.py", "def yield_req_data", "\ndef "),
}


def extract(vllm_git, scratch):
    """Write REAL_FILES of vLLM's TAG from the git directory vllm_git into scratch."""
    for rel in REAL_FILES:
        text = subprocess.run(["git", "-C", vllm_git, "show", f"{TAG}:{rel}"], check=True,
                              capture_output=True, text=True).stdout
        path = os.path.join(scratch, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


class Dummy:
    """Value of every name of an auto-stub: accepts any construction, supports nothing else, so
    a code path that really used one would raise."""
    def __init__(self, *a, **k):
        pass

    def __class_getitem__(cls, item):
        return cls


class AutoModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        cls = type(name, (Dummy,), {})
        setattr(self, name, cls)
        return cls


class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """vllm.* from the scratch folder, else STUBS, else an AutoModule; AUTO_TOP packages as AutoModules.
    A subclass for another release sets `stubs` and `slices` (its own tables)."""
    stubs = STUBS
    slices = SLICES

    def __init__(self, scratch):
        self.scratch = scratch

    def find_spec(self, fullname, path, target=None):
        top = fullname.split(".")[0]
        if top != "vllm" and top not in AUTO_TOP:
            return None
        if fullname not in self.stubs and top == "vllm":
            rel = os.path.join(self.scratch, fullname.replace(".", "/"))
            if os.path.exists(rel + ".py"):
                return importlib.util.spec_from_file_location(fullname, rel + ".py")
            init = os.path.join(rel, "__init__.py")
            if os.path.exists(init):
                return importlib.util.spec_from_file_location(fullname, init, submodule_search_locations=[rel])
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = types.ModuleType(spec.name) if spec.name in self.stubs else AutoModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        src = self.stubs.get(module.__name__)
        if src is None:
            return
        piece = self.slices.get(module.__name__)
        if piece is not None:
            rel, first, stop = piece
            with open(os.path.join(self.scratch, rel)) as f:
                real = f.read()
            start = real.index(first)
            end = real.find(stop, start + 1)
            src += real[start:end if end >= 0 else len(real)]
        exec(compile(src, f"<stub {module.__name__}>", "exec"), module.__dict__)


def install(scratch):
    """Make `import vllm...` load the files extract() wrote into scratch, with the stubs."""
    if not os.path.exists(os.path.join(scratch, REAL_FILES[-1])):
        sys.exit(f"no extracted vLLM {TAG} in {scratch} (run the extract command first)")
    sys.meta_path.insert(0, Finder(scratch))


# ---------------------------------------------------------------- layouts and snapshots

class OpError(Exception):
    """An op the harness refuses (an error line, as where vLLM raises)."""


def init_groups(op):
    """The init op's KV cache groups: kv_cache_groups, or the flat layout's single group."""
    if op.get("kv_cache_groups") is not None:
        return op["kv_cache_groups"]
    if op.get("sliding_window") is not None:
        return [{"type": "sliding_window", "sliding_window": op["sliding_window"]}]
    return [{"type": "full"}]


def make_spec(group, default_bs, mamba_mode):
    """vLLM KVCacheSpec of one group of the trace (one KV head of size 1; sizes are not observed)."""
    from vllm.v1.kv_cache_interface import (ChunkedLocalAttentionSpec, FullAttentionSpec, MambaSpec,
                                            SlidingWindowSpec)
    kind = group.get("type", "full")
    bs = group.get("block_size") or default_bs
    if kind == "mamba":
        return MambaSpec(block_size=bs, shapes=((1,),), dtypes=(None,), mamba_cache_mode=mamba_mode,
                         num_speculative_blocks=group.get("num_speculative_blocks") or 0)
    common = dict(block_size=bs, num_kv_heads=1, head_size=1, dtype=None)
    if kind == "full":
        return FullAttentionSpec(**common)
    if kind == "sliding_window":
        return SlidingWindowSpec(sliding_window=group["sliding_window"], **common)
    if kind == "chunked_local":
        return ChunkedLocalAttentionSpec(attention_chunk_size=group["attention_chunk_size"], **common)
    raise ValueError(f"unknown group type {kind}")


def json_value(x):
    """x with tuples turned into lists, as a JSON round trip leaves it."""
    return json.loads(json.dumps(x))


class RecordingHasher:
    """vLLM's sha256 block hash that remembers the extra keys hashed into each block hash."""
    def __init__(self):
        from vllm.utils.hashing import sha256
        self.sha256 = sha256
        self.extra_keys = {}

    def __call__(self, obj):
        h = self.sha256(obj)
        self.extra_keys[h] = obj[2]
        return h

    def keys_of(self, block_hashes):
        keys = [self.extra_keys.get(h) for h in block_hashes]
        return [None if k is None else json_value(list(k)) for k in keys]


def request_tables(manager, rid):
    """Block ids of request rid, one list per KV cache group."""
    return [[b.block_id for b in m.req_to_blocks.get(rid) or []]
            for m in manager.coordinator.single_type_managers]


def pool_snapshot(manager, fmt_ids, brief):
    """The snapshot fields both modes share (ops-format.md), from a KVCacheManager."""
    pool = manager.block_pool
    cache = pool.cached_block_hash_to_block._cache
    num_blocks = 0
    dups = []
    for v in cache.values():
        if isinstance(v, dict):
            num_blocks += len(v)
            if len(v) >= 2:
                dups.append(list(v.keys()))
        else:
            num_blocks += 1
    dups.sort(key=lambda x: x[0])
    rids = []
    for m in manager.coordinator.single_type_managers:
        rids += [rid for rid, blocks in m.req_to_blocks.items() if blocks and rid not in rids]
    out = {"num_free_blocks": pool.get_num_free_blocks(), "usage": manager.usage,
           "num_cached_hashes": len(cache), "num_cached_blocks": num_blocks, "dup_hashes": dups,
           "req_blocks": {rid: fmt_ids(request_tables(manager, rid)) for rid in rids}}
    if not brief:
        out["free_queue"] = [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]
        out["cached_block_ids"] = sorted(b.block_id for b in pool.blocks if b.block_hash is not None)
        out["ref_cnts"] = [0 if b.is_null else b.ref_cnt for b in pool.blocks]
    return out


def run_ops(harness, ops):
    """Results of ops, one per op, from a fresh harness instance."""
    return [harness.run_op(dict(op)) for op in ops]


# ---------------------------------------------------------------- comparison and kvsim

def same(a, b):
    """Structural equality of ops-format.md: key order ignored, list order kept, numbers by value
    (floats within 1e-9), booleans only equal booleans, any error line equals any error line."""
    if isinstance(a, dict) and isinstance(b, dict):
        if "error" in a or "error" in b:
            return "error" in a and "error" in b
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= 1e-9
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def first_diff(a, b):
    """Index of the first line where result lists a and b differ (or the shorter length), or None."""
    for i, (x, y) in enumerate(zip(a, b)):
        if not same(x, y):
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def dumps(rows):
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows)


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run_kvsim(binary, ops):
    """kvsim's result lines for ops; an unparsable line stays in as {"_unparsable": text}."""
    p = subprocess.run([binary, "replay", "--profile", "vllm-0.20", "-"], input=dumps(ops),
                       capture_output=True, text=True)
    out = []
    for line in p.stdout.splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"_unparsable": line[:200]})
    return out


# ---------------------------------------------------------------- minimization

def minimize(ops, vllm_answers, kvsim_answers, valid):
    """Shrink a diverging trace: cut after the first difference, drop earlier init episodes,
    delete runs of ops (halving the run length) and optional add_request fields, keeping only
    candidates that still diverge and that valid(ops, vllm_results) accepts."""
    def diverges(cand):
        if not cand:
            return None
        v = vllm_answers(cand)
        if not valid(cand, v):
            return None
        return first_diff(v, kvsim_answers(cand))

    d = diverges(ops)
    if d is None:
        raise ValueError("the trace does not diverge (or vLLM rejects it)")
    ops = ops[:d + 1]
    inits = [i for i, op in enumerate(ops) if op["op"] in ("init", "sched_init")]
    if inits and inits[-1] > 0:
        d = diverges(ops[inits[-1]:])
        if d is not None:
            ops = ops[inits[-1]:][:d + 1]
    n = max(1, len(ops) // 2)
    while n >= 1:
        i, changed = 1, False
        while i < len(ops):
            d = diverges(ops[:i] + ops[i + n:])
            if d is not None:
                ops = (ops[:i] + ops[i + n:])[:d + 1]
                changed = True
            else:
                i += n
        if not changed:
            n //= 2
    for i in range(len(ops)):
        if ops[i]["op"] != "add_request":
            continue
        for key in [k for k in ops[i] if k not in ("op", "id", "prompt")]:
            cand = ops[:i] + [{k: v for k, v in ops[i].items() if k != key}] + ops[i + 1:]
            if diverges(cand) is not None:
                ops = cand
    return ops
