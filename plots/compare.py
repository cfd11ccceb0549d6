"""Figures across runs: hit rate vs cache capacity, KV memory breakdown bars, latency table and
CDF overlays, and a sweep's metric heatmaps over two swept keys."""

import csv
import os
import re

import numpy as np
from matplotlib.ticker import MaxNLocator

from common import (BREAKDOWN, Figure, Skipped, cdf_points, colors, latency_axis, percent_axis,
                    plt, save, thousands, with_commas)
from rundata import CAPACITY_KEYS, fmt_value, short_key, sort_key

MAX_CDF_LINES = 20


def _scenario_label(run):
    """The run's label without the keys that only change capacity: one line per scenario."""
    rest = [(k, v) for k, v in run.params if short_key(k) not in CAPACITY_KEYS]
    if run.params:
        prefix = getattr(run, "group", "")
        label = ", ".join("%s=%s" % (short_key(k), fmt_value(v)) for k, v in rest)
        if not label:
            return prefix or getattr(run, "sweep_name", "") or "all runs"
        return (prefix + ": " if prefix else "") + label
    return run.name


def hit_rate_vs_capacity(runs, out, formats):
    groups = {}
    off = 0
    for r in runs:
        cap = r.capacity_tokens
        if cap is None or "prefix_cache_hit_rate" not in r.summary:
            continue
        if (r.summary.get("enable_prefix_caching") is False
                or r.summary.get("prefix_cache_queries") == 0):
            off += 1  # no lookups: a hit rate of 0 would only flatten the plot
            continue
        groups.setdefault(_scenario_label(r), []).append(r)
    groups = {k: v for k, v in groups.items() if len({r.capacity_tokens for r in v}) >= 2}
    if not groups:
        raise Skipped("no scenario has runs at two or more cache capacities")
    fig, ax = plt.subplots(figsize=(9, 5))
    caps = []
    order = sorted(groups.items(), key=lambda kv: (getattr(kv[1][0], "group", ""),
                                                   [sort_key(v) for _, v in kv[1][0].params],
                                                   kv[0]))
    markers = "osD^vP*X"
    for i, ((label, rs), color) in enumerate(zip(order, colors(len(groups)))):
        rs = sorted(rs, key=lambda r: r.capacity_tokens)
        x = [r.capacity_tokens for r in rs]
        caps += x
        ax.plot(x, [r.summary["prefix_cache_hit_rate"] for r in rs], "-", marker=markers[i % 8],
                color=color, lw=1.8, ms=7 - 0.5 * (i % 4), label=label)
        if all("first_lookup_hit_rate" in r.summary for r in rs):
            ax.plot(x, [r.summary["first_lookup_hit_rate"] for r in rs], "x--", color=color,
                    lw=1, alpha=0.7)
    spread = max(caps) / max(1, min(caps))
    if spread >= 100:  # decades: 10k, 100k, 1M
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(thousands)
    elif spread >= 4:  # a few doublings: 2,048, 4,096, ...
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(with_commas)
    else:
        ax.xaxis.set_major_formatter(with_commas)
    ax.xaxis.set_minor_formatter(lambda v, _: "")
    if len(groups) <= 2:  # few lines: label the points with their values
        for line in ax.get_lines():
            if line.get_linestyle() != "-":
                continue
            xs, ys = line.get_data()
            if len(xs) <= 12:
                for xv, yv in zip(xs, ys):
                    ax.annotate("%.1f%%" % (100 * yv), (xv, yv), xytext=(0, 7),
                                textcoords="offset points", ha="center", fontsize=8,
                                color=line.get_color())
    ax.set_xlabel("KV cache capacity (token slots = num_gpu_blocks x block_size)")
    ax.set_ylabel("prefix cache hit rate (tokens)")
    ax.set_ylim(0, 1.0)
    percent_axis(ax)
    ax.set_title("Prefix cache hit rate vs cache capacity\n"
                 "(solid: all lookups, dashed: first lookup only)")
    ax.legend(title="scenario", loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    save(fig, out, "hit_rate_vs_capacity", formats)
    return Figure("hit_rate_vs_capacity", "Hit rate vs cache capacity",
                  "One line per scenario; capacity in token slots" +
                  ("; %d runs without prefix caching left out" % off if off else ""))


def kv_breakdown_bars(runs, out, formats):
    rs = [r for r in runs if isinstance(r.summary.get("kv_breakdown"), dict)
          and r.summary.get("num_steps", 1) != 0]
    if not rs:
        raise Skipped("no run has a kv_breakdown averaged over steps (cache_only runs have none)")
    keys = [(k, label, c) for k, label, c in BREAKDOWN
            if k != "external_fragmentation"
            or any(r.summary["kv_breakdown"].get(k, 0) > 0 for r in rs)]
    used_keys = [kc for kc in keys if kc[0] not in ("cached_free", "free")]
    n = len(rs)
    # Top to bottom in run order, with a gap wherever the first swept key (or the sweep) changes.
    pos, prev = [], None
    for r in rs:
        key = (getattr(r, "group", ""), repr(r.params[0][1]) if r.params else r.name)
        step = 0.0 if prev is None else (1.0 if key == prev or not r.params else 1.5)
        pos.append((pos[-1] if pos else 0.0) + step)
        prev = key
    span = pos[-1] + 1 if pos else 1
    y = span - 1 - np.array(pos)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 1.6 + 0.42 * span), sharey=True)
    for ax, subset, normalise in ((ax1, keys, False), (ax2, used_keys, True)):
        left = np.zeros(n)
        denom = np.ones(n)
        if normalise:
            denom = np.array([sum(r.summary["kv_breakdown"].get(k, 0.0) for k, _, _ in subset)
                              for r in rs])
            denom = np.where(denom > 0, denom, 1.0)
        for key, label, color in subset:
            vals = np.array([r.summary["kv_breakdown"].get(key, 0.0) for r in rs]) / denom
            ax.barh(y, vals, left=left, color=color, label=label, height=0.7,
                    edgecolor="white", linewidth=0.5)
            for yi, l, v in zip(y, left, vals):
                if v >= 0.08:
                    ax.text(l + v / 2, yi, "%.0f%%" % (100 * v), ha="center", va="center",
                            fontsize=8, color="white" if key != "free" else "black")
            left += vals
        ax.set_xlim(0, 1)
        ax.set_ylim(-0.6, span - 0.4)
        percent_axis(ax, "x")
        ax.grid(axis="y", visible=False)
    ax1.set_yticks(y)
    ax1.set_yticklabels([r.label for r in rs])
    ax1.set_xlabel("share of the KV pool (mean over steps)")
    ax1.set_title("Whole pool")
    ax2.set_xlabel("share of allocated memory (mean over steps)")
    ax2.set_title("Allocated memory only: where it goes")
    h, lab = ax1.get_legend_handles_labels()
    height = 1.6 + 0.42 * span
    fig.legend(h, lab, loc="lower center", ncol=len(lab), frameon=False,
               bbox_to_anchor=(0.5, 0.0))
    fig.suptitle("KV memory breakdown per scenario (token states, reservation, fragmentation)")
    save(fig, out, "kv_breakdown_bars", formats, rect=(0, 0.45 / height, 1, 1))
    return Figure("kv_breakdown_bars", "KV memory breakdown per scenario",
                  "Mean share of pool token slots (left) and of allocated slots (right)")


LATENCY_COLUMNS = [
    ("completed", "completed", "%d"),
    ("p50_ttft_ms", "TTFT p50 (ms)", "%.1f"), ("p90_ttft_ms", "TTFT p90 (ms)", "%.1f"),
    ("p99_ttft_ms", "TTFT p99 (ms)", "%.1f"),
    ("p50_tpot_ms", "TPOT p50 (ms)", "%.2f"), ("p99_tpot_ms", "TPOT p99 (ms)", "%.2f"),
    ("p50_e2el_ms", "E2E p50 (ms)", "%.0f"), ("p99_e2el_ms", "E2E p99 (ms)", "%.0f"),
    ("output_throughput", "output tok/s", "%.0f"),
]


def _cell(summary, key, fmt):
    v = summary.get(key)
    if v is None or v == "":
        return "-"
    try:
        return fmt % v
    except TypeError:
        return str(v)


def latency_table(runs, out, formats):
    """latency_table.csv and a rendered table figure, over the runs that time requests."""
    runs = [r for r in runs if r.summary.get("mode") != "cache_only"]
    if not runs:
        raise Skipped("all runs are cache_only: no latencies")
    rows = [[r.label] + [_cell(r.summary, k, f) for k, _, f in LATENCY_COLUMNS] for r in runs]
    header = ["run"] + [h for _, h, _ in LATENCY_COLUMNS]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "latency_table.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["run"] + [k for k, _, _ in LATENCY_COLUMNS])
        for r in runs:
            w.writerow([r.label] + [r.summary.get(k, "") for k, _, _ in LATENCY_COLUMNS])
    label_w = max(len(r[0]) for r in rows)
    fig_w = 2.0 + 0.075 * label_w + 1.0 * len(LATENCY_COLUMNS)
    fig, ax = plt.subplots(figsize=(fig_w, 0.6 + 0.26 * (len(rows) + 1)))
    ax.axis("off")
    table = ax.table(cellText=rows, colLabels=header, cellLoc="right", colLoc="center",
                     bbox=[0, 0, 1, 1])
    table.auto_set_font_size(False)
    table.set_fontsize(8.5)
    table.auto_set_column_width(list(range(len(header))))
    for (row, col), c in table.get_celld().items():
        if row == 0:
            c.set_facecolor("#e8eef7")
            c.set_text_props(weight="bold")
        elif row % 2 == 0:
            c.set_facecolor("#f7f7f7")
        if col == 0 and row > 0:
            c.get_text().set_horizontalalignment("left")
    ax.set_title("Latency percentiles per run (from summary.json)", pad=4)
    save(fig, out, "latency_table", formats)
    return Figure("latency_table", "Latency percentiles",
                  "Also as latency_table.csv"), (header, rows)


CDF_PANELS = [("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms)"),
              ("e2el_ms", "end-to-end latency (ms)")]


def latency_cdf_overlay(runs, out, formats):
    rs = [r for r in runs if r.requests() is not None
          and np.any(r.requests()["finished"] & np.isfinite(r.requests()["e2el_ms"]))]
    if not rs:
        raise Skipped("no run has request latencies in a requests.csv (cache_only runs have none)")
    note = ""
    if len(rs) > MAX_CDF_LINES:
        note = " (first %d of %d runs)" % (MAX_CDF_LINES, len(rs))
        rs = rs[:MAX_CDF_LINES]
    fig, axes = plt.subplots(1, 3, figsize=(14, max(4.6, 1.2 + 0.2 * len(rs))))
    for ax, (col, name) in zip(axes, CDF_PANELS):
        plotted = []
        for r, color in zip(rs, colors(len(rs))):
            req = r.requests()
            v, y = cdf_points(req[col][req["finished"]])
            if v.size:
                ax.plot(v, y, color=color, lw=1.4, label=r.label)
                plotted.append(v)
        ax.set_xlabel(name)
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.xaxis.set_major_formatter(thousands)
        latency_axis(ax, np.concatenate(plotted) if plotted else np.array([]))
        ax.set_title(name.split(" (")[0] + " CDF")
    h, lab = axes[0].get_legend_handles_labels()
    longest = max((len(s) for s in lab), default=10)
    legend_w = min(0.45, (0.8 + 0.075 * longest) / 14.0)  # fraction of the 14-inch width
    fig.legend(h, lab, loc="center left", bbox_to_anchor=(1.0 - legend_w, 0.5), frameon=False,
               title="run", fontsize=8)
    fig.suptitle("Request latency CDFs across runs" + note)
    save(fig, out, "latency_cdf_overlay", formats, rect=(0, 0, 1.0 - legend_w, 1))
    return Figure("latency_cdf_overlay", "Latency CDFs across runs", "One line per run" + note)


HEATMAP_METRICS = [
    ("prefix_cache_hit_rate", "prefix cache hit rate", "%.1f%%", 100.0, "viridis"),
    ("p99_ttft_ms", "p99 TTFT (ms)", "%.0f", 1.0, "magma_r"),
    ("output_throughput", "output throughput (tok/s)", "%.0f", 1.0, "viridis"),
    ("num_preemptions", "preemptions", "%d", 1.0, "magma_r"),
    ("mean_kv_cache_usage_perc", "mean KV usage", "%.0f%%", 100.0, "viridis"),
    ("kv_breakdown.internal_fragmentation", "internal fragmentation (share of pool)", "%.2f%%",
     100.0, "magma_r"),
]


def _metric(summary, key):
    v = summary
    for part in key.split("."):
        if not isinstance(v, dict) or part not in v:
            return None
        v = v[part]
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _slug(text):
    """A file-name-safe form: `block_size=16, x=on` -> `block_size-16_x-on`."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text.replace("=", "-")).strip("_")


def _find_key(sweep, name):
    """A swept key by its full (`cache.block_size`) or short (`block_size`) name."""
    for k in sweep.keys:
        if name in (k, short_key(k)):
            return k
    raise Skipped("--heatmap-keys: sweep %s does not vary '%s' (it varies: %s)" % (
        sweep.name, name, ", ".join(sweep.keys) or "nothing"))


def sweep_heatmaps(sweep, out, formats, axes_keys=None):
    """One figure per combination of the other swept keys (at most 4), each with one heatmap per
    metric over two swept keys: `axes_keys` (rows, columns) or the first two."""
    if len(sweep.keys) < 2:
        raise Skipped("sweep %s varies %d key(s); a heatmap needs two" % (sweep.name,
                                                                           len(sweep.keys)))
    if not sweep.is_grid:
        raise Skipped("sweep %s lists its points (not a grid of its keys)" % sweep.name)
    if axes_keys:
        ka, kb = _find_key(sweep, axes_keys[0]), _find_key(sweep, axes_keys[1])
        if ka == kb:
            raise Skipped("--heatmap-keys: two different keys are needed")
    else:
        ka, kb = sweep.keys[0], sweep.keys[1]
    others = [k for k in sweep.keys if k not in (ka, kb)]
    va = sorted({dict(r.params)[ka] for r in sweep.runs}, key=sort_key)
    vb = sorted({dict(r.params)[kb] for r in sweep.runs}, key=sort_key)
    facets = {}
    for r in sweep.runs:
        p = dict(r.params)
        facets.setdefault(tuple((k, p.get(k)) for k in others), []).append(r)
    figures = []
    facet_keys = sorted(facets, key=lambda f: [sort_key(v) for _, v in f])
    for facet in facet_keys[:4]:
        rs = facets[facet]
        metrics = [m for m in HEATMAP_METRICS if any(_metric(r.summary, m[0]) is not None
                                                     for r in rs)]
        if not metrics:
            continue
        ncols = min(3, len(metrics))
        nrows = (len(metrics) + ncols - 1) // ncols
        cell_w = max(0.55, 0.12 * max(len(fmt_value(v)) for v in vb) + 0.3)
        fig, axes = plt.subplots(nrows, ncols, squeeze=False,
                                 figsize=(ncols * (2.2 + cell_w * len(vb)),
                                          nrows * (1.6 + 0.45 * len(va))))
        for ax in axes.flat[len(metrics):]:
            ax.axis("off")
        for ax, (key, name, fmt, scale, cmap) in zip(axes.flat, metrics):
            grid = np.full((len(va), len(vb)), np.nan)
            for r in rs:
                p = dict(r.params)
                v = _metric(r.summary, key)
                if v is not None:
                    grid[va.index(p[ka]), vb.index(p[kb])] = v * scale
            im = ax.imshow(grid, cmap=cmap, aspect="auto", origin="lower")
            ax.set_xticks(range(len(vb)))
            ax.set_xticklabels([fmt_value(v) for v in vb])
            ax.set_yticks(range(len(va)))
            ax.set_yticklabels([fmt_value(v) for v in va])
            ax.set_xlabel(short_key(kb))
            ax.set_ylabel(short_key(ka))
            ax.set_title(name)
            ax.grid(False)
            finite = grid[np.isfinite(grid)]
            mid = (finite.min() + finite.max()) / 2 if finite.size else 0
            for i in range(len(va)):
                for j in range(len(vb)):
                    if np.isfinite(grid[i, j]):
                        light = (grid[i, j] < mid) == cmap.endswith("_r")
                        ax.text(j, i, fmt % grid[i, j], ha="center", va="center", fontsize=8,
                                color="black" if light else "white")
            cb = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03)
            if "%%" in fmt:
                cb.ax.yaxis.set_major_formatter(lambda v, _: "%g%%" % v)
            else:  # counts, milliseconds, tokens/s: whole numbers are enough
                cb.ax.yaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
                cb.ax.yaxis.set_major_formatter(lambda v, _: "{:,.0f}".format(v))
        suffix = ", ".join("%s=%s" % (short_key(k), fmt_value(v)) for k, v in facet)
        fig.suptitle("Sweep '%s': metrics over %s x %s%s" % (
            sweep.name, short_key(ka), short_key(kb), " (%s)" % suffix if suffix else ""))
        stem = "heatmap_" + _slug(sweep.name)
        if suffix:
            stem += "_" + _slug(suffix.replace(", ", "_"))
        save(fig, out, stem, formats)
        figures.append(Figure(stem, "Sweep heatmap" + (" (%s)" % suffix if suffix else ""),
                              "%s over %s and %s" % (sweep.name, ka, kb)))
    if len(facet_keys) > 4:
        figures[-1].caption += " (first 4 of %d combinations of the other keys)" % len(facet_keys)
    return figures


TIMELINE_PANELS = [
    ("kv_cache_usage_perc", "KV cache usage", True),
    ("hit_rate_cum", "prefix hit rate (cumulative)", True),
    ("cum_preemptions", "preemptions (cumulative)", False),
]
MAX_TIMELINE_LINES = 10


def run_timelines(runs, out, formats, max_points):
    """KV usage, cumulative prefix hit rate and cumulative preemptions over time, one line per run
    (e.g. the same workload under two engine profiles)."""
    rs = [r for r in runs if r.path and r.steps(max_points) is not None]
    if len(rs) < 2:
        raise Skipped("fewer than two runs have a steps.csv")
    note = ""
    if len(rs) > MAX_TIMELINE_LINES:
        note = " (first %d of %d runs)" % (MAX_TIMELINE_LINES, len(rs))
        rs = rs[:MAX_TIMELINE_LINES]
    fig, axes = plt.subplots(len(TIMELINE_PANELS), 1, figsize=(11, 8.2), sharex=True)
    any_time = any(np.any(r.steps(max_points)["time_s"] > 0) for r in rs)
    for r, color in zip(rs, colors(len(rs))):
        st = r.steps(max_points)
        x = st["time_s"] if any_time else st["step"]
        for ax, (col, _, _) in zip(axes, TIMELINE_PANELS):
            ax.plot(x, st[col], color=color, lw=1.2, label=r.label)
    for ax, (_, name, pct) in zip(axes, TIMELINE_PANELS):
        ax.set_ylabel(name)
        if pct:
            ax.set_ylim(0, 1.02)
            percent_axis(ax)
        else:
            ax.set_ylim(bottom=0)
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[-1].set_xlabel("simulated time (s)" if any_time else "step")
    h, lab = axes[0].get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=min(2, len(lab)), frameon=False, fontsize=8,
               bbox_to_anchor=(0.5, 0.0))
    rows = (len(lab) + 1) // 2
    fig.suptitle("Runs over time: KV usage, prefix hit rate, preemptions" + note)
    save(fig, out, "run_timelines", formats, rect=(0, 0.035 * rows + 0.01, 1, 1))
    return Figure("run_timelines", "KV usage, hit rate and preemptions over time",
                  "One line per run" + note)


METRIC_BARS = [
    ("prefix_cache_hit_rate", "prefix cache hit rate", "%.1f%%", 100.0),
    ("mean_kv_cache_usage_perc", "mean KV cache usage", "%.1f%%", 100.0),
    ("num_preemptions", "preemptions", "%d", 1.0),
    ("mean_batch_size", "admitted batch, mean (requests)", "%.1f", 1.0),
    ("p50_ttft_ms", "TTFT p50 (ms)", "%.1f", 1.0),
    ("p99_ttft_ms", "TTFT p99 (ms)", "%.0f", 1.0),
    ("p99_tpot_ms", "TPOT p99 (ms)", "%.2f", 1.0),
    ("max_batch_size", "admitted batch, max (requests)", "%d", 1.0),
]
MAX_BAR_RUNS = 20


def metrics_bars(runs, out, formats):
    """One panel per headline metric, one bar per run, values written on the bars: the numbers a
    comparison of two engine profiles (or any runs) is about."""
    rs = [r for r in runs if any(_metric(r.summary, k) is not None for k, _, _, _ in METRIC_BARS)]
    if len(rs) < 2:
        raise Skipped("fewer than two runs to compare")
    note = ""
    if len(rs) > MAX_BAR_RUNS:
        note = " (first %d of %d runs)" % (MAX_BAR_RUNS, len(rs))
        rs = rs[:MAX_BAR_RUNS]
    metrics = [m for m in METRIC_BARS if any(_metric(r.summary, m[0]) is not None for r in rs)]
    ncols = min(4, len(metrics))
    nrows = (len(metrics) + ncols - 1) // ncols
    label_w = max(len(r.label) for r in rs)
    fig, axes = plt.subplots(nrows, ncols, squeeze=False, sharey=True,
                             figsize=(3.3 * ncols + 0.07 * label_w, 0.9 + nrows * (0.5 + 0.3 * len(rs))))
    for ax in axes.flat[len(metrics):]:
        ax.axis("off")
    y = np.arange(len(rs))[::-1]
    palette = colors(len(rs))
    for ax, (key, name, fmt, scale) in zip(axes.flat, metrics):
        vals = [_metric(r.summary, key) for r in rs]
        shown = [v * scale if v is not None else 0.0 for v in vals]
        ax.barh(y, shown, color=palette, height=0.7)
        top = max(shown) if max(shown) > 0 else 1.0
        for yi, v, s in zip(y, vals, shown):
            ax.text(s + 0.02 * top, yi, "-" if v is None else fmt % s, va="center", fontsize=8)
        ax.set_xlim(0, top * 1.3)
        ax.set_title(name)
        ax.grid(axis="y", visible=False)
        ax.xaxis.set_major_formatter(thousands)
    for row in axes:
        row[0].set_yticks(y)
        row[0].set_yticklabels([r.label for r in rs], fontsize=8)
    fig.suptitle("Headline metrics per run" + note)
    save(fig, out, "metrics_bars", formats)
    return Figure("metrics_bars", "Headline metrics per run",
                  "Hit rate, KV usage, preemptions, admitted batch size, TTFT and TPOT, one bar "
                  "per run" + note)


def _is_v0(run):
    return "num_preemptions_swap" in run.summary


def engine_timelines(runs, out, formats, max_points):
    """vLLM V0 against V1 (or any runs with a V0 one): the waiting and swapped queues, GPU KV usage,
    cumulative preemptions and the KV memory saved by sharing over time, one line per run."""
    rs = [r for r in runs if r.path and r.steps(max_points) is not None]
    if len(rs) < 2 or not any(_is_v0(r) for r in rs):
        raise Skipped("needs two runs with a steps.csv, one of them vLLM V0 (vllm-0.7.2-v0)")
    from single_run import sharing_share

    rs = rs[:MAX_TIMELINE_LINES]
    panels = [("num_waiting", "waiting requests"), ("num_swapped", "swapped requests (CPU)"),
              ("kv_cache_usage_perc", "GPU KV cache usage"),
              ("cum_preemptions", "preemptions (cumulative)"),
              ("sharing", "KV memory saved by sharing")]
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 11), sharex=True)
    for r, color in zip(rs, colors(len(rs))):
        st = r.steps(max_points)
        x = st["time_s"]
        for ax, (col, _) in zip(axes, panels):
            if col == "sharing":
                y = sharing_share(st) if st.get("v0") else np.zeros_like(x)
            elif col in st:
                y = st[col]
            else:  # a V1 run has no swapped queue
                y = np.zeros_like(x)
            ax.plot(x, y, color=color, lw=1.2, label=r.label)
    for ax, (col, name) in zip(axes, panels):
        ax.set_ylabel(name, fontsize=9)
        ax.set_ylim(bottom=0)
        if col in ("kv_cache_usage_perc", "sharing"):
            percent_axis(ax)
        else:
            ax.yaxis.set_major_formatter(thousands)
    axes[-1].set_xlabel("simulated time (s)")
    h, lab = axes[0].get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=1, frameon=False, fontsize=8,
               bbox_to_anchor=(0.5, 0.0))
    fig.suptitle("Engines over time: queues, KV usage, preemptions, memory saved by sharing")
    save(fig, out, "engine_timelines", formats, rect=(0, 0.018 * len(lab) + 0.005, 1, 1))
    return Figure("engine_timelines", "Queues, usage, preemptions and sharing over time",
                  "Waiting and swapped queues, GPU KV usage, cumulative preemptions and the KV "
                  "memory saved by sharing (0 for runs that do not measure it), one line per run")


ENGINE_BARS = [
    ("preemptions", "preemptions: by swap / by recompute", "%d", 1.0),
    ("kv_sharing_saved_share", "KV memory saved by sharing", "%.1f%%", 100.0),
    ("swapped_gib", "swapped out + in (GiB over the host link)", "%.1f", 1.0),
    ("num_cow_copies", "copy-on-write block copies", "%d", 1.0),
    ("mean_ttft_ms", "TTFT mean (ms)", "%.0f", 1.0),
    ("mean_tpot_ms", "TPOT mean (ms)", "%.1f", 1.0),
]


def engine_bars(runs, out, formats):
    """One panel per figure a V0-against-V1 comparison is about, one bar per run: preemptions split
    by mode (V1's are all recompute), KV memory saved by sharing, bytes swapped, copy-on-write
    copies, mean TTFT and TPOT."""
    rs = [r for r in runs if "num_preemptions" in r.summary]
    if len(rs) < 2 or not any(_is_v0(r) for r in rs):
        raise Skipped("needs two runs, one of them vLLM V0 (vllm-0.7.2-v0)")
    rs = rs[:MAX_BAR_RUNS]
    y = np.arange(len(rs))[::-1]
    palette = colors(len(rs))
    label_w = max(len(r.label) for r in rs)
    fig, axes = plt.subplots(2, 3, squeeze=False, sharey=True,
                             figsize=(10 + 0.07 * label_w, 1.4 + 2 * (0.5 + 0.3 * len(rs))))
    for ax, (key, name, fmt, scale) in zip(axes.flat, ENGINE_BARS):
        if key == "preemptions":
            swap = [float(r.summary.get("num_preemptions_swap", 0)) for r in rs]
            total = [float(r.summary["num_preemptions"]) for r in rs]
            rec = [t - s for t, s in zip(total, swap)]
            ax.barh(y, swap, color="#9467bd", height=0.7, label="by swap")
            ax.barh(y, rec, left=swap, color="#ff7f0e", height=0.7, label="by recompute")
            top = max(total) if max(total) > 0 else 1.0
            for yi, s_, r_ in zip(y, swap, rec):
                ax.text(s_ + r_ + 0.02 * top, yi, "%d / %d" % (s_, r_), va="center", fontsize=8)
            ax.legend(loc="lower right", fontsize=7)
        else:
            if key == "swapped_gib":
                vals = [(r.summary["swapped_in_bytes"] + r.summary["swapped_out_bytes"]) / 2**30
                        if _is_v0(r) else None for r in rs]
            else:
                vals = [_metric(r.summary, key) for r in rs]
            shown = [v * scale if v is not None else 0.0 for v in vals]
            ax.barh(y, shown, color=palette, height=0.7)
            top = max(shown) if max(shown) > 0 else 1.0
            for yi, v, s_ in zip(y, vals, shown):
                ax.text(s_ + 0.02 * top, yi, "-" if v is None else fmt % s_, va="center",
                        fontsize=8)
        ax.set_xlim(0, top * 1.35)
        ax.set_title(name, fontsize=10)
        ax.grid(axis="y", visible=False)
        ax.xaxis.set_major_formatter(thousands)
    for row in axes:
        row[0].set_yticks(y)
        row[0].set_yticklabels([r.label for r in rs], fontsize=8)
    fig.suptitle("Engines side by side: preemption, swapping, sharing, latency")
    save(fig, out, "engine_bars", formats)
    return Figure("engine_bars", "Preemptions by mode, sharing, swapping, latency",
                  "One bar per run ('-': the run's engine has no such figure)")
