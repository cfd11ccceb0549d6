"""Sweep figures over a numeric swept key: any summary metric against it, one line per value of
another swept key (one panel per combination of the rest), and KV breakdown bars per value of a
swept key at one point of the numeric key (the PagedAttention paper's Fig. 2 kind).

Metrics are summary.json keys (`output_throughput`, `kv_breakdown.free`, ...) or one of DERIVED,
computed from each run's requests.csv."""

import math
import os

import numpy as np

from common import BREAKDOWN, Figure, Skipped, colors, percent_axis, plt, save, thousands
from compare import _metric, _slug
from rundata import _header, fmt_value, short_key, sort_key

MAX_PANELS = 4
DEFAULT_METRICS = ("normalized_latency_s", "mean_batch_size", "output_throughput")


def _normalized_latency_s(run):
    """The paper's normalized latency: the mean over completed requests of end-to-end latency /
    output tokens, in seconds per token."""
    req = run.requests()
    if req is None:
        return None
    e2el, out = req["e2el_ms"], req["output_tokens"]
    ok = np.isfinite(e2el) & (out > 0)
    if not np.any(ok):
        return None
    return float(np.mean(e2el[ok] / out[ok])) / 1000.0


# name: (function of a run, axis label)
DERIVED = {
    "normalized_latency_s": (_normalized_latency_s,
                             "normalized latency (s/token): the mean over requests of end-to-end "
                             "latency / output tokens"),
}
LABELS = {
    "mean_batch_size": "mean batched requests per step",
    "output_throughput": "output throughput (tokens/s)",
    "request_throughput": "request throughput (requests/s)",
    "mean_num_running": "mean running requests",
}


def metric_value(run, name):
    if name in DERIVED:
        return DERIVED[name][0](run)
    return _metric(run.summary, name)


def metric_label(name):
    if name in DERIVED:
        return DERIVED[name][1]
    return LABELS.get(name, name)


def find_key(sweep, name):
    """A swept key by its full or short name (None when `name` is None)."""
    if name is None:
        return None
    for k in sweep.keys:
        if name in (k, short_key(k)):
            return k
    raise Skipped("sweep %s does not vary '%s' (it varies: %s)" % (
        sweep.name, name, ", ".join(sweep.keys) or "nothing"))


# Profiles in the PagedAttention paper's order: the contiguous baselines from the most to the
# least reserved, then the paged ones.
PROFILE_ORDER = ("orca-max", "orca-pow2", "orca-oracle")


def _values(sweep, key):
    """The values `key` takes, sorted (numbers ascending; profiles in PROFILE_ORDER first)."""
    values = {dict(r.params)[key] for r in sweep.runs}
    first = [v for v in PROFILE_ORDER if v in values] if short_key(key) == "profile" else []
    return first + sorted(values - set(first), key=sort_key)


def pretty(value):
    """A swept value for a legend: a file keeps its name without folder and extension (folder
    names write `lengths/a.csv` as `lengths_a.csv`)."""
    if isinstance(value, str) and os.path.splitext(value)[1] in (".csv", ".jsonl", ".json",
                                                                   ".yaml"):
        return os.path.splitext(value)[0].replace("/", "_").rsplit("_", 1)[-1]
    return fmt_value(value)


def _numeric(values):
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def pick_keys(sweep, x=None, by=None):
    """(x, by): x a numeric swept key with 3+ values (a `rate_per_s` key first), by the key whose
    values are the lines (`engine.profile` when swept, else the first other key; None if none)."""
    if not getattr(sweep, "is_grid", True):
        raise Skipped("sweep %s lists its points (not a grid of its keys)" % sweep.name)
    x = find_key(sweep, x)
    if x is None:
        numeric = [k for k in sweep.keys if _numeric(_values(sweep, k)) and
                   len(_values(sweep, k)) >= 3]
        if not numeric:
            raise Skipped("sweep %s has no numeric key with 3 or more values" % sweep.name)
        x = next((k for k in numeric if short_key(k) == "rate_per_s"), numeric[0])
    elif not _numeric(_values(sweep, x)):
        raise Skipped("swept key %s is not numeric" % x)
    by = find_key(sweep, by)
    if by is None:
        others = [k for k in sweep.keys if k != x]
        by = next((k for k in others if short_key(k) == "profile"), others[0] if others else None)
    if by == x:
        raise Skipped("the x key and the line key must differ")
    return x, by


def _facets(keys, runs, exclude):
    """[(label, runs)] for each combination of the swept `keys` not in `exclude`."""
    rest = [k for k in keys if k not in exclude]
    groups = {}
    for r in runs:
        p = dict(r.params)
        groups.setdefault(tuple(p[k] for k in rest), []).append(r)
    keys = sorted(groups, key=lambda t: [sort_key(v) for v in t])
    return [(", ".join("%s=%s" % (short_key(k), pretty(v)) for k, v in zip(rest, t)),
             groups[t]) for t in keys]


def _panels(n):
    fig, axes = plt.subplots(1, n, figsize=(1.5 + 4.6 * n, 4.4), squeeze=False)
    return fig, list(axes[0])


def _minor_log_label(v, _=None):
    """Minor ticks of a log axis: 2x and 5x a power of ten labelled, the rest not."""
    if v <= 0:
        return ""
    m = v / 10 ** math.floor(math.log10(v) + 1e-9)
    return "%g" % v if abs(m - 2) < 1e-6 or abs(m - 5) < 1e-6 else ""


def metric_lines(sweep, out, formats, metric, x=None, by=None, prefix=""):
    """`metric` against swept key x, one line per value of `by`, one panel per combination of the
    other keys (at most MAX_PANELS), as `prefix`lines_METRIC_vs_X."""
    x, by = pick_keys(sweep, x, by)
    facets = _facets(sweep.keys, sweep.runs, (x, by))
    note = ""
    if len(facets) > MAX_PANELS:
        note = " (first %d of %d panels)" % (MAX_PANELS, len(facets))
        facets = facets[:MAX_PANELS]
    line_values = _values(sweep, by) if by else [None]
    fig, axes = _panels(len(facets))
    drawn = 0
    ys = []
    for ax, (title, runs) in zip(axes, facets):
        for v, color in zip(line_values, colors(len(line_values))):
            pts = []
            for r in runs:
                p = dict(r.params)
                if by and p[by] != v:
                    continue
                y = metric_value(r, metric)
                if y is not None:
                    pts.append((p[x], y))
            if not pts:
                continue
            pts.sort(key=lambda t: sort_key(t[0]))
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=color, lw=1.6, ms=5,
                    label=pretty(v) if by else metric)
            ys += [p[1] for p in pts]
            drawn += 1
        ax.set_xlabel(short_key(x))
        ax.set_title(title or sweep.name)
    if not drawn:
        plt.close(fig)
        raise Skipped("no run of sweep %s has %s" % (sweep.name, metric))
    positive = [y for y in ys if y > 0]
    log_y = bool(positive) and max(positive) / min(positive) >= 100
    xs = [v for v in _values(sweep, x) if v > 0]
    log_x = len(xs) == len(_values(sweep, x)) and max(xs) / min(xs) >= 20
    # Label the x values at least half a doubling apart, the largest first.
    labelled, last = set(), None
    for v in reversed(xs):
        if last is None or math.log2(last / v) >= 0.5:
            labelled.add(v)
            last = v
    for ax in axes:
        if log_y:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(lambda v, _: "%g" % v)
            ax.yaxis.set_minor_formatter(_minor_log_label)
        else:
            ax.set_ylim(bottom=0)
        if log_x:
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs)
            ax.set_xticklabels([fmt_value(v) if v in labelled else "" for v in xs])
            ax.xaxis.set_minor_formatter(lambda *_: "")
        else:
            ax.xaxis.set_major_formatter(thousands)
    name, _, definition = metric_label(metric).partition(":")
    axes[0].set_ylabel(name + (" (log scale)" if log_y else ""))
    h, lab = axes[0].get_legend_handles_labels()
    legend_w = min(0.3, (0.9 + 0.075 * max(len(t) for t in lab)) / fig.get_figwidth())
    fig.legend(h, lab, loc="center left", bbox_to_anchor=(1.0 - legend_w, 0.5), frameon=False,
               title=short_key(by) if by else None)
    fig.suptitle("%s vs %s%s%s" % (name, short_key(x), " (log scale)" if log_x else "",
                                   (", one line per " + short_key(by)) if by else ""))
    stem = "%slines_%s_vs_%s" % (prefix, _slug(metric), _slug(short_key(x)))
    save(fig, out, stem, formats, rect=(0, 0, 1.0 - legend_w, 1))
    return Figure(stem, "%s vs %s" % (name, short_key(x)),
                  "sweep %s: one line per %s%s%s" % (
                      sweep.name, short_key(by) if by else "-",
                      "; " + definition.strip() if definition else "", note))


MIN_LOADED_ROWS = 10


def loaded_breakdown(run):
    """The KV breakdown as shares of the pool, averaged over the recorded steps at which requests
    were waiting (the loaded phase, where memory decides the batch: the ramp-up before the first
    queue and the drain after the last one are left out), and whether it is that average (True)
    or, with fewer than MIN_LOADED_ROWS such rows or no steps.csv, summary.json's mean over all
    recorded steps (False). None when the run has neither."""
    path = run.file("steps.csv")
    if path:
        header = _header(path)
        cols = ["num_waiting"] + ["slots_" + k for k, _, _ in BREAKDOWN]
        if all(c in header for c in cols):
            data = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2,
                              usecols=[header.index(c) for c in cols])
            rows = data[data[:, 0] > 0] if data.size else data
            if rows.shape[0] >= MIN_LOADED_ROWS:
                slots = rows[:, 1:]
                total = slots.sum(axis=1, keepdims=True)
                frac = (slots / np.where(total > 0, total, 1)).mean(axis=0)
                return {k: float(v) for (k, _, _), v in zip(BREAKDOWN, frac)}, True
    kb = run.summary.get("kv_breakdown")
    return (dict(kb), False) if isinstance(kb, dict) else None


def breakdown_by(sweep, out, formats, by=None, x=None, at=None, prefix=""):
    """Stacked bars of the KV breakdown (share of the pool, loaded_breakdown) per value of `by`,
    one panel per combination of the other keys, at x = `at` (default: x's largest value, the
    heaviest load), as `prefix`kv_breakdown_by_BY."""
    x, by = pick_keys(sweep, x, by)
    if by is None:
        raise Skipped("sweep %s varies no key besides %s" % (sweep.name, x))
    xs = _values(sweep, x)
    if at is None:
        at_value = xs[-1]
    else:
        match = [v for v in xs if fmt_value(v) == str(at) or str(v) == str(at)]
        if not match:
            raise Skipped("--at %s: %s takes %s" % (at, short_key(x),
                                                     ", ".join(fmt_value(v) for v in xs)))
        at_value = match[0]
    runs, shares, loaded = [], {}, 0
    for r in sweep.runs:
        if dict(r.params)[x] != at_value:
            continue
        b = loaded_breakdown(r)
        if b is not None:
            runs.append(r)
            shares[id(r)] = b[0]
            loaded += b[1]
    if not runs:
        raise Skipped("no run at %s=%s has a KV breakdown" % (short_key(x), fmt_value(at_value)))
    facets = _facets(sweep.keys, runs, (x, by))[:MAX_PANELS]
    bars = _values(sweep, by)
    height = 1.5 + 0.55 * len(bars)
    fig, axes = plt.subplots(1, len(facets), figsize=(1.5 + 5.2 * len(facets), height),
                             squeeze=False, sharey=True)
    axes = list(axes[0])
    shown = [b for b in BREAKDOWN if any(shares[id(r)].get(b[0], 0) > 0 for r in runs)]
    for ax, (title, rs) in zip(axes, facets):
        by_value = {dict(r.params)[by]: shares[id(r)] for r in rs}
        y = np.arange(len(bars))[::-1]
        left = np.zeros(len(bars))
        for key, label, color in shown:
            vals = np.array([by_value[b].get(key, 0.0) if b in by_value else 0.0 for b in bars])
            ax.barh(y, vals, left=left, color=color, label=label, height=0.7, edgecolor="white",
                    linewidth=0.5)
            for yi, l, v in zip(y, left, vals):
                if v >= 0.05:
                    ax.text(l + v / 2, yi, "%.1f" % (100 * v), ha="center", va="center",
                            fontsize=8, color="black" if key == "free" else "white")
            left += vals
        ax.set_yticks(y)
        ax.set_yticklabels([pretty(b) for b in bars])
        ax.set_xlim(0, 1)
        percent_axis(ax, "x")
        ax.grid(axis="y", visible=False)
        ax.set_title(title or sweep.name)
        ax.set_xlabel("share of the KV pool")
    h, lab = axes[0].get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=len(lab), frameon=False,
               bbox_to_anchor=(0.5, 0.0))
    over = ("mean over the steps with requests waiting" if loaded == len(runs) else
            "mean over steps with requests waiting (%d of %d runs; the others: all steps)" % (
                loaded, len(runs)) if loaded else "mean over all recorded steps")
    fig.suptitle("KV memory breakdown per %s at %s=%s\n(%% of the pool, %s)" % (
        short_key(by), short_key(x), fmt_value(at_value), over))
    stem = "%skv_breakdown_by_%s" % (prefix, _slug(short_key(by)))
    save(fig, out, stem, formats, rect=(0, 0.5 / height, 1, 1))
    return Figure(stem, "KV breakdown per %s" % short_key(by),
                  "sweep %s at %s=%s, %s: token states, reservation, internal and external "
                  "fragmentation, free" % (sweep.name, short_key(x), fmt_value(at_value), over))
