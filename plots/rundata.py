"""Reading kvsim run folders (the contract is sim/OUTPUTS.md).

A Run is one run folder: summary.json (required), requests.csv, steps.csv and
config.resolved.yaml (optional). A sweep folder holds run folders named
`key=value,key=value` and a sweep.csv. Nothing here draws.
"""

import csv
import json
import math
import os
import warnings

import numpy as np

# steps.csv columns (sim/OUTPUTS.md), in the order they are used here.
STEP_GAUGES = [
    "kv_cache_usage_perc", "num_running", "num_waiting", "num_free_blocks",
    "slots_token_states", "slots_reservation", "slots_internal_fragmentation",
    "slots_external_fragmentation", "slots_cached_free", "slots_free",
]
STEP_COUNTERS = ["prefix_queries", "prefix_hits", "preemptions", "evictions", "blocks_allocated"]
# vLLM V0 runs (vllm-0.7.2-v0) have these too.
V0_GAUGES = ["num_swapped", "cpu_cache_usage_perc", "blocks_without_sharing", "blocks_used"]
V0_COUNTERS = ["swapped_in_blocks", "swapped_out_blocks", "cow_copies", "preemptions_swap",
               "preemptions_recompute"]
# Runs of several KV cache groups (vllm-0.20 with a hybrid model) have these per group k, "g<k>_".
GROUP_GAUGES = ["blocks", "token_states", "reservation", "internal_fragmentation", "cached_free"]


def group_columns(header):
    """The KV cache groups a steps.csv header has columns for (0, 1, ... while g<k>_blocks is
    there), as column-name lists."""
    groups = []
    while "g%d_blocks" % len(groups) in header:
        groups.append(["g%d_%s" % (len(groups), c) for c in GROUP_GAUGES])
    return groups

# Keys whose change changes the cache capacity (num_gpu_blocks * block_size).
CAPACITY_KEYS = ("num_gpu_blocks", "num_gpu_blocks_override", "capacity_tokens",
                 "gpu_memory_utilization", "kv_cache_memory_bytes")


class DataError(Exception):
    """A run folder that cannot be read; the message names the file."""


def parse_value(text):
    """A swept value as it appears in a folder name or CSV cell: int, float, bool or str."""
    t = text.strip()
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        return t


def parse_point_name(name):
    """`cache.block_size=16,cache.enable_prefix_caching=true` -> ordered [(key, value)], or None."""
    parts = name.split(",")
    out = []
    for p in parts:
        if "=" not in p:
            return None
        k, v = p.split("=", 1)
        out.append((k, parse_value(v)))
    return out


def sort_key(value):
    """Sorts numbers numerically before strings, booleans as False < True (bool is an int)."""
    if isinstance(value, (int, float)):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def fmt_value(value):
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return "%g" % value
    return str(value)


def short_key(key):
    """`cache.block_size` -> `block_size`."""
    return key.rsplit(".", 1)[-1]


class Run:
    """One run folder. Large files are read on first use."""

    def __init__(self, path, summary=None, params=None):
        self.path = path
        self.params = params or []  # [(swept key, value)] when part of a sweep
        if summary is None:
            summary = load_json(os.path.join(path, "summary.json"))
        self.summary = summary
        self._steps = None
        self._requests = None
        self.display = None  # a label chosen by the caller (to keep labels unique)

    @property
    def name(self):
        return str(self.summary.get("name") or os.path.basename(os.path.normpath(self.path)))

    @property
    def label(self):
        """What a legend calls this run: its swept values, else its name."""
        if self.display:
            return self.display
        if self.params:
            return ", ".join("%s=%s" % (short_key(k), fmt_value(v)) for k, v in self.params)
        return self.name

    @property
    def capacity_tokens(self):
        s = self.summary
        if "num_gpu_blocks" in s and "block_size" in s:
            return int(s["num_gpu_blocks"]) * int(s["block_size"])
        return None

    def file(self, name):
        p = os.path.join(self.path, name)
        return p if self.path and os.path.isfile(p) else None

    def steps(self, max_points):
        """steps.csv, bucketed to at most max_points rows (gauges averaged, counters summed,
        time and step taken at the bucket's end), plus full-resolution cumulative prefix counters
        sampled at the same points. None when the run has no steps.csv."""
        if self._steps is None:
            p = self.file("steps.csv")
            self._steps = load_steps(p, max_points) if p else {}
        return self._steps or None

    def requests(self):
        """requests.csv as columns of floats (NaN where empty) plus finish_reason; None if
        absent."""
        if self._requests is None:
            p = self.file("requests.csv")
            self._requests = load_requests(p) if p else {}
        return self._requests or None


def load_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise DataError("%s: no such file" % path)
    except json.JSONDecodeError as e:
        raise DataError("%s:%d:%d: malformed JSON: %s" % (path, e.lineno, e.colno, e.msg))
    if not isinstance(data, dict):
        raise DataError("%s: expected a JSON object" % path)
    return data


def _header(path):
    with open(path, newline="", encoding="utf-8") as f:
        row = next(csv.reader(f), None)
    if not row:
        raise DataError("%s: empty file" % path)
    return [c.strip() for c in row]


def load_steps(path, max_points):
    header = _header(path)
    wanted = ["step", "time_s"] + STEP_GAUGES + STEP_COUNTERS
    missing = [c for c in wanted if c not in header]
    if missing:
        raise DataError("%s: missing columns %s" % (path, ", ".join(missing)))
    v0 = all(c in header for c in V0_GAUGES + V0_COUNTERS)
    groups = group_columns(header)
    missing = [c for g in groups for c in g if c not in header]
    if missing:
        raise DataError("%s: missing columns %s" % (path, ", ".join(missing)))
    gauges = STEP_GAUGES + (V0_GAUGES if v0 else []) + [c for g in groups for c in g]
    counters = STEP_COUNTERS + (V0_COUNTERS if v0 else [])
    wanted = ["step", "time_s"] + gauges + counters
    cols = [header.index(c) for c in wanted]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "input contained no data"
            data = np.loadtxt(path, delimiter=",", skiprows=1, usecols=cols, ndmin=2,
                              dtype=np.float64)
    except ValueError as e:
        raise DataError("%s: %s" % (path, e))
    n = data.shape[0]
    if n == 0:
        return {}
    full = {c: data[:, i] for i, c in enumerate(wanted)}
    cum_q = np.cumsum(full["prefix_queries"])
    cum_h = np.cumsum(full["prefix_hits"])
    bucket = max(1, int(math.ceil(n / float(max_points))))
    starts = np.arange(0, n, bucket)
    ends = np.minimum(starts + bucket, n) - 1
    out = {"num_rows": n, "bucket": bucket, "v0": v0, "num_groups": len(groups)}
    for c in ("step", "time_s"):
        out[c] = full[c][ends]
    counts = (ends - starts + 1).astype(np.float64)
    for c in gauges:
        out[c] = np.add.reduceat(full[c], starts) / counts
    for c in counters:
        out[c] = np.add.reduceat(full[c], starts)
        out["cum_" + c] = np.cumsum(full[c])[ends]
    out["max_num_running"] = np.maximum.reduceat(full["num_running"], starts)
    out["max_num_waiting"] = np.maximum.reduceat(full["num_waiting"], starts)
    # Windowed hit rate: over the last `window` rows (about 2% of the run, at least one bucket).
    window = max(bucket, n // 50, 1)
    lo = np.maximum(ends - window, -1)
    q_lo = np.where(lo >= 0, cum_q[np.maximum(lo, 0)], 0.0)
    h_lo = np.where(lo >= 0, cum_h[np.maximum(lo, 0)], 0.0)
    dq = cum_q[ends] - q_lo
    dh = cum_h[ends] - h_lo
    with np.errstate(invalid="ignore", divide="ignore"):
        out["hit_rate_window"] = np.where(dq > 0, dh / np.where(dq > 0, dq, 1), np.nan)
        out["hit_rate_cum"] = np.where(cum_q[ends] > 0,
                                       cum_h[ends] / np.where(cum_q[ends] > 0, cum_q[ends], 1),
                                       np.nan)
    out["window_rows"] = window
    # Steps spanned by the window (rows may be every outputs.steps_every steps).
    steps_per_row = (full["step"][-1] - full["step"][0]) / max(1, n - 1) if n > 1 else 1.0
    out["window_steps"] = int(round(window * max(1.0, steps_per_row)))
    return out


REQUEST_FLOATS = ["arrival_s", "prompt_tokens", "output_tokens", "ttft_ms", "tpot_ms", "e2el_ms",
                  "queue_ms", "first_lookup_hit_tokens", "num_preemptions"]


def load_requests(path):
    header = _header(path)
    missing = [c for c in REQUEST_FLOATS + ["finish_reason"] if c not in header]
    if missing:
        raise DataError("%s: missing columns %s" % (path, ", ".join(missing)))
    idx = {c: header.index(c) for c in REQUEST_FLOATS + ["finish_reason"]}
    cols = {c: [] for c in REQUEST_FLOATS}
    reasons = []
    nan = float("nan")
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        next(reader, None)
        for line, row in enumerate(reader, start=2):
            if not row:
                continue
            try:
                for c in REQUEST_FLOATS:
                    cell = row[idx[c]]
                    cols[c].append(float(cell) if cell != "" else nan)
                reasons.append(row[idx["finish_reason"]])
            except (ValueError, IndexError):
                raise DataError("%s:%d: malformed row" % (path, line))
    out = {c: np.asarray(v, dtype=np.float64) for c, v in cols.items()}
    out["finish_reason"] = reasons
    # Finished requests (length or stop): the ones latency statistics are over.
    out["finished"] = np.array([r in ("length", "stop") for r in reasons], dtype=bool)
    return out if reasons else {}


def is_run_dir(path):
    return os.path.isfile(os.path.join(path, "summary.json"))


def is_sweep_dir(path):
    if not os.path.isdir(path) or is_run_dir(path):
        return False
    if os.path.isfile(os.path.join(path, "sweep.csv")):
        return True
    return any(is_run_dir(os.path.join(path, d)) for d in os.listdir(path))


class Sweep:
    """A sweep folder: runs (sorted by swept values) and the swept keys in order."""

    def __init__(self, path):
        self.path = path
        self.runs = []
        self.keys = []
        subdirs = sorted(d for d in os.listdir(path) if is_run_dir(os.path.join(path, d)))
        for d in subdirs:
            params = parse_point_name(d) or []
            self.runs.append(Run(os.path.join(path, d), params=params))
        csv_path = os.path.join(path, "sweep.csv")
        if not self.runs and os.path.isfile(csv_path):
            self.runs = self._runs_from_csv(csv_path)
        for r in self.runs:
            for k, _ in r.params:
                if k not in self.keys:
                    self.keys.append(k)
        # Keep only keys that actually vary.
        self.keys = [k for k in self.keys
                     if len({repr(dict(r.params).get(k)) for r in self.runs}) > 1]
        for r in self.runs:
            r.params = [(k, v) for k, v in r.params if k in self.keys]
            r.sweep_name = self.name
        # A grid gives every run every key; a listed sweep (`sweep: [{...}, ...]`) may not.
        self.is_grid = all(len(r.params) == len(self.keys) for r in self.runs)
        self.runs.sort(key=lambda r: [sort_key(dict(r.params).get(k)) for k in self.keys])

    @property
    def name(self):
        return os.path.basename(os.path.normpath(self.path))

    def _runs_from_csv(self, csv_path):
        """Runs from sweep.csv alone (summary scalars only): the columns before the first summary
        key (`name`, `seed`, ...) are the swept keys."""
        with open(csv_path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        if len(rows) < 2:
            return []
        header = rows[0]
        first_summary = next((i for i, c in enumerate(header)
                              if c in ("name", "seed", "profile", "mode", "completed")), 0)
        swept = header[:first_summary] or [c for c in header if "." in c]
        runs = []
        for row in rows[1:]:
            values = {c: parse_value(v) for c, v in zip(header, row)}
            summary = {}
            for c, v in values.items():
                if c in swept:
                    continue
                for prefix in ("kv_breakdown.", "kv_breakdown_"):  # flattened by kvsim merge
                    if c.startswith(prefix):
                        summary.setdefault("kv_breakdown", {})[c[len(prefix):]] = v
                        break
                else:
                    summary[c] = v
            params = [(k, values.get(k)) for k in swept]
            runs.append(Run("", summary=summary, params=params))
        return runs


def collect(paths):
    """Run folders and sweeps from the command line's paths: (runs, sweeps). A folder that is
    neither a run nor a sweep raises DataError."""
    runs, sweeps = [], []
    for p in paths:
        if is_run_dir(p):
            runs.append(Run(p))
        elif is_sweep_dir(p):
            sweeps.append(Sweep(p))
        elif os.path.isfile(p) and os.path.basename(p) == "summary.json":
            runs.append(Run(os.path.dirname(p) or "."))
        else:
            raise DataError("%s: not a run folder (no summary.json) nor a sweep folder" % p)
    return runs, sweeps


def one_sweep(path):
    """The sweep folder `path` (a study script's one argument); DataError when it is not one."""
    _, sweeps = collect([path])
    if len(sweeps) != 1:
        raise DataError("%s: not a sweep folder" % path)
    return sweeps[0]
