"""Figures of one run folder: KV memory over time, usage and queues, hit rate, latency CDFs,
preemptions and evictions."""

import numpy as np
from matplotlib.ticker import MaxNLocator

from common import (BREAKDOWN, Figure, Skipped, cdf_points, latency_axis, percent_axis, plt, save,
                    thousands)


def _time_axis(steps):
    """x values and label: simulated seconds, or the step number when time does not advance
    (cache_only mode)."""
    t = steps["time_s"]
    if t.size > 1 and float(t[-1]) > float(t[0]):
        return t, "simulated time (s)"
    return steps["step"], "step"


def _cache_only(run):
    return run.summary.get("mode") == "cache_only"


def _need_steps(run, max_points):
    steps = run.steps(max_points)
    if steps is None:
        if run.file("steps.csv"):
            raise Skipped("steps.csv in %s has no rows%s" % (
                run.path, " (cache_only mode has no steps)" if _cache_only(run) else ""))
        raise Skipped("no steps.csv in %s" % run.path)
    return steps


def _note(steps):
    if steps["bucket"] > 1:
        return " (%d steps, each point averages %d)" % (steps["num_rows"], steps["bucket"])
    return ""


def kv_breakdown(run, out, formats, max_points):
    steps = _need_steps(run, max_points)
    x, xlabel = _time_axis(steps)
    total = sum(steps["slots_" + k] for k, _, _ in BREAKDOWN)
    total = np.where(total > 0, total, 1.0)
    layers, labels, cols = [], [], []
    for key, label, color in BREAKDOWN:
        frac = steps["slots_" + key] / total
        if key == "external_fragmentation" and not np.any(frac > 0):
            continue  # always 0 for paged allocation: keep the legend short
        mean = run.summary.get("kv_breakdown", {}).get(key)
        layers.append(frac)
        labels.append("%s%s" % (label, "" if mean is None else " (mean %.1f%%)" % (100 * mean)))
        cols.append(color)
    fig, ax = plt.subplots(figsize=(10, 4.8))
    ax.stackplot(x, *layers, labels=labels, colors=cols, linewidth=0)
    ax.set_xlim(float(x[0]), float(x[-1]) if x[-1] > x[0] else float(x[0]) + 1)
    ax.set_ylim(0, 1)
    percent_axis(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("share of KV pool token slots")
    cap = run.capacity_tokens
    ax.set_title("%s: KV memory breakdown over time%s" % (
        run.label, "" if cap is None else " (pool = {:,} token slots)".format(cap)))
    h, lab = ax.get_legend_handles_labels()
    ax.legend(h[::-1], lab[::-1], loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    save(fig, out, "kv_breakdown", formats)
    return Figure("kv_breakdown", "KV memory breakdown",
                  "Token slots of the pool by state (PagedAttention taxonomy)" + _note(steps))


def _abort_times(run):
    """Sorted times (s) of the run's client aborts (arrival + e2el of its `abort` rows)."""
    req = run.requests()
    if req is None:
        return np.array([])
    mask = np.array([r == "abort" for r in req["finish_reason"]], dtype=bool)
    t = req["arrival_s"][mask] + req["e2el_ms"][mask] / 1000.0
    return np.sort(t[np.isfinite(t)])


def kv_usage_queue(run, out, formats, max_points):
    steps = _need_steps(run, max_points)
    x, xlabel = _time_axis(steps)
    s = run.summary
    overloaded = s.get("overloaded") is True
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 5.6), sharex=True)
    ax1.plot(x, steps["kv_cache_usage_perc"], color="#1f77b4", lw=1.2,
             label="KV cache usage (vLLM, cached-free counts as free)")
    ax1.set_ylim(0, 1.05)
    percent_axis(ax1)
    ax1.set_ylabel("KV cache usage")
    ax1.legend(loc="lower right", frameon=False)
    ax1.set_title("%s: KV cache usage and scheduler queues%s"
                  % (run.label, " (OVERLOADED)" if overloaded else ""))
    ax2.plot(x, steps["num_running"], color="#2ca02c", lw=1.2, label="running")
    ax2.plot(x, steps["num_waiting"], color="#d62728", lw=1.2, label="waiting")
    caption = "vLLM's kv_cache_usage_perc, and running / waiting requests" + _note(steps)
    aborts = _abort_times(run) if xlabel.startswith("simulated") else np.array([])
    if aborts.size:
        ax2.step(np.concatenate(([float(x[0])], aborts)), np.arange(aborts.size + 1),
                 where="post", color="#9467bd", lw=1.2, label="aborted by clients (cumulative)")
        caption += "; %s requests aborted by their clients (purple, cumulative)" % (
            "{:,}".format(aborts.size))
    if overloaded:
        a, c = float(s.get("arrival_rate_per_s", 0)), float(s.get("completion_rate_per_s", 0))
        lo, hi = s.get("overload_window_start_s"), s.get("overload_window_end_s")
        if lo is not None and hi is not None:
            ax2.axvspan(float(lo), float(hi), color="#d62728", alpha=0.08, lw=0)
        ax2.text(0.01, 0.95, "overloaded: arrivals %.2f/s > completions %.2f/s (shaded: measured)"
                 % (a, c), transform=ax2.transAxes, ha="left", va="top", color="#d62728",
                 fontsize=9)
        caption += ("; OVERLOADED: requests arrive at %.2f/s and complete at %.2f/s over the "
                    "shaded window, the waiting queue grows through the run" % (a, c))
    ax2.set_ylabel("requests")
    ax2.set_ylim(bottom=0)
    ax2.set_xlabel(xlabel)
    ax2.legend(loc="upper right", frameon=False)
    save(fig, out, "kv_usage_queue", formats)
    return Figure("kv_usage_queue", "KV usage, running and waiting", caption)


def _mark_run_value(ax, x_last, final):
    """A dotted line at the run's summary value (a fraction), labelled at the right end."""
    if final is None:
        return
    ax.axhline(final, color="#08519c", ls=":", lw=1)
    ax.annotate("run: %.1f%%" % (100 * final), (x_last, final), xytext=(-4, 4),
                textcoords="offset points", ha="right", va="bottom", color="#08519c")


def _first_lookup_hit_rate(run):
    """Per-request hit rate for runs without steps (cache_only): first-lookup hit tokens / prompt
    tokens over requests in completion order, windowed and cumulative."""
    req = run.requests()
    if req is None:
        raise Skipped("no steps.csv and no requests.csv in %s" % run.path)
    ok = np.array([r != "rejected" for r in req["finish_reason"]], dtype=bool)
    hits = np.nan_to_num(req["first_lookup_hit_tokens"][ok])
    prompt = np.nan_to_num(req["prompt_tokens"][ok])
    n = hits.size
    if n == 0 or prompt.sum() == 0:
        raise Skipped("no request with prompt tokens in %s" % run.path)
    ch, cp = np.cumsum(hits), np.cumsum(prompt)
    window = max(1, n // 50)
    lo = np.arange(n) - window
    dh = ch - np.where(lo >= 0, ch[np.maximum(lo, 0)], 0.0)
    dp = cp - np.where(lo >= 0, cp[np.maximum(lo, 0)], 0.0)
    x = np.arange(1, n + 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        windowed = np.where(dp > 0, dh / np.where(dp > 0, dp, 1), np.nan)
        cumulative = ch / np.where(cp > 0, cp, 1)
    fig, ax = plt.subplots(figsize=(10, 4.2))
    ax.plot(x, windowed, color="#9ecae1", lw=1.0, label="windowed (last %d requests)" % window)
    ax.plot(x, cumulative, color="#08519c", lw=2.0, label="cumulative")
    _mark_run_value(ax, x[-1], run.summary.get("first_lookup_hit_rate"))
    ax.set_ylim(0, 1.02)
    ax.set_xlim(1, max(2, n))
    percent_axis(ax)
    ax.xaxis.set_major_formatter(thousands)
    ax.set_xlabel("requests, in completion order")
    ax.set_ylabel("first-lookup hit rate (tokens)")
    ax.set_title("%s: prefix cache hit rate per request (hit tokens / prompt tokens)" % run.label)
    ax.legend(loc="upper left", frameon=True, framealpha=0.9)
    return fig


def prefix_hit_rate(run, out, formats, max_points):
    if run.steps(max_points) is None and run.requests() is not None:
        fig = _first_lookup_hit_rate(run)
        save(fig, out, "prefix_hit_rate", formats)
        return Figure("prefix_hit_rate", "Prefix cache hit rate",
                      "No steps in this run: first-lookup hit rate over requests (requests.csv)")
    steps = _need_steps(run, max_points)
    if not np.any(steps["cum_prefix_queries"] > 0):
        raise Skipped("no prefix cache lookups in %s (prefix caching off?)" % run.path)
    x, xlabel = _time_axis(steps)
    fig, ax = plt.subplots(figsize=(10, 4.2))
    ax.plot(x, steps["hit_rate_window"], color="#9ecae1", lw=1.0,
            label="windowed (last %s steps)" % "{:,}".format(steps["window_steps"]))
    ax.plot(x, steps["hit_rate_cum"], color="#08519c", lw=2.0, label="cumulative")
    _mark_run_value(ax, x[-1], run.summary.get("prefix_cache_hit_rate"))
    ax.set_ylim(0, 1.02)
    percent_axis(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("prefix cache hit rate (tokens)")
    ax.set_title("%s: prefix cache hit rate (hit tokens / queried tokens)" % run.label)
    ax.legend(loc="upper left", frameon=True, framealpha=0.9)
    save(fig, out, "prefix_hit_rate", formats)
    return Figure("prefix_hit_rate", "Prefix cache hit rate",
                  "Hits / queries in tokens, counted at every lookup" + _note(steps))


LATENCIES = [("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2el_ms", "end-to-end latency"),
             ("queue_ms", "queueing (arrival to first scheduled)")]


def _ms(v):
    return "{:,.0f}".format(v) if abs(v) >= 100 else "%.3g" % v


def latency_cdfs(run, out, formats, max_points):
    req = run.requests()
    if req is None:
        if run.file("requests.csv"):
            raise Skipped("requests.csv in %s has no rows" % run.path)
        raise Skipped("no requests.csv in %s" % run.path)
    if not np.any(req["finished"] & np.isfinite(req["e2el_ms"])):
        if _cache_only(run):
            raise Skipped("no latencies in %s (cache_only mode does not time requests)" % run.path)
        raise Skipped("no finished request in %s (all %d rejected)" % (run.path,
                                                                      len(req["finish_reason"])))
    fig, axes = plt.subplots(2, 2, figsize=(10, 6.4))
    for ax, (col, name) in zip(axes.flat, LATENCIES):
        finite = req[col][req["finished"] & np.isfinite(req[col])]
        v, y = cdf_points(finite)
        if v.size == 0:
            ax.text(0.5, 0.5, "no values", ha="center", va="center", transform=ax.transAxes)
        else:
            ax.plot(v, y, color="#1f77b4", lw=1.5)
            for q, ls in ((0.5, "--"), (0.99, ":")):
                val = float(np.quantile(finite, q))
                ax.axvline(val, color="gray", ls=ls, lw=1,
                           label="p%d = %s ms" % (round(q * 100), _ms(val)))
            ax.legend(loc="lower right", frameon=True, fontsize=8)

        ax.set_xlabel("%s (ms)" % name)
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1.02)
        latency_axis(ax, finite)
        ax.set_title("%s CDF (%d requests)" % (name.split(" (")[0], finite.size))
    fig.suptitle("%s: request latency distributions" % run.label)
    save(fig, out, "latency_cdf", formats)
    n_rej = sum(1 for r in req["finish_reason"] if r == "rejected")
    n_abort = sum(1 for r in req["finish_reason"] if r == "abort")
    excluded = ", ".join(t for t in ("%d rejected" % n_rej if n_rej else "",
                                     "%d aborted" % n_abort if n_abort else "") if t)
    return Figure("latency_cdf", "Latency CDFs",
                  "TTFT, TPOT, E2E and queueing over finished requests"
                  + (" (%s requests excluded)" % excluded if excluded else ""))


def preemptions_evictions(run, out, formats, max_points):
    steps = _need_steps(run, max_points)
    x, xlabel = _time_axis(steps)
    fig, axes = plt.subplots(3, 1, figsize=(10, 6.6), sharex=True)
    series = [("preemptions", "preemptions", "#d62728"),
              ("evictions", "evictions (cached blocks reused)", "#ff7f0e"),
              ("blocks_allocated", "blocks allocated", "#1f77b4")]
    for ax, (col, name, color) in zip(axes, series):
        ax.plot(x, steps["cum_" + col], color=color, lw=1.8)
        ax.set_ylabel("cumulative count")
        total = int(steps["cum_" + col][-1])
        ax.set_ylim(0, max(1.0, total * 1.05))
        ax.yaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
        ax.yaxis.set_major_formatter(thousands)
        if total == 0:
            ax.text(0.5, 0.5, "none in this run", transform=ax.transAxes, ha="center",
                    va="center", color="dimgray")
        ax.set_title("%s (total %s)" % (name, "{:,}".format(total)), loc="left", fontsize=10)
    axes[-1].set_xlabel(xlabel)
    fig.suptitle("%s: preemptions, evictions and block allocations over time" % run.label)
    save(fig, out, "preemptions_evictions", formats)
    return Figure("preemptions_evictions", "Preemptions and evictions",
                  "Cumulative counts of the per-step counters of steps.csv")


def sharing_share(steps):
    """KV memory saved by sharing per point: (blocks the running sequences' tables hold - blocks
    in use) / table blocks, NaN where nothing runs."""
    table = steps["blocks_without_sharing"]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(table > 0, (table - steps["blocks_used"]) / np.where(table > 0, table, 1),
                        np.nan)


def v0_swap_sharing(run, out, formats, max_points):
    """vLLM V0 runs: the queues with the swapped one, GPU and CPU pool usage, cumulative swaps,
    copy-on-write copies and preemptions by mode, and the KV memory saved by sharing."""
    if "num_preemptions_swap" not in run.summary:
        return []  # not a vLLM V0 run: nothing to draw, nothing missing
    steps = _need_steps(run, max_points)
    if not steps.get("v0"):
        raise Skipped("steps.csv in %s has no vLLM V0 columns" % run.path)
    x, xlabel = _time_axis(steps)
    s = run.summary
    fig, axes = plt.subplots(4, 1, figsize=(10, 10), sharex=True)
    ax = axes[0]
    for col, name, color in [("num_running", "running", "#1f77b4"),
                             ("num_waiting", "waiting", "#ff7f0e"),
                             ("num_swapped", "swapped (on CPU)", "#9467bd")]:
        ax.plot(x, steps[col], color=color, lw=1.3, label=name)
    ax.set_ylabel("requests")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title("queues (mean swapped %.2f, max %d)" % (s.get("mean_num_swapped", 0),
                                                         s.get("max_num_swapped", 0)),
                 loc="left", fontsize=10)
    ax = axes[1]
    ax.plot(x, steps["kv_cache_usage_perc"], color="#1f77b4", lw=1.3, label="GPU pool")
    ax.plot(x, steps["cpu_cache_usage_perc"], color="#9467bd", lw=1.3,
            label="CPU swap space (%s blocks)" % "{:,}".format(int(s.get("num_cpu_blocks", 0))))
    ax.set_ylim(0, 1.02)
    percent_axis(ax)
    ax.set_ylabel("usage")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title("KV cache usage (vLLM's gpu/cpu_cache_usage_perc)", loc="left", fontsize=10)
    ax = axes[2]
    for col, name, color, style in [("swapped_out_blocks", "blocks swapped out", "#9467bd", "-"),
                                    ("swapped_in_blocks", "blocks swapped in", "#8c564b", "--"),
                                    ("cow_copies", "copy-on-write copies", "#2ca02c", "-"),
                                    ("preemptions_swap", "preemptions by swap", "#d62728", "-"),
                                    ("preemptions_recompute", "preemptions by recompute",
                                     "#ff7f0e", "-")]:
        ax.plot(x, steps["cum_" + col], color=color, ls=style, lw=1.3,
                label="%s (%s)" % (name, "{:,}".format(int(steps["cum_" + col][-1]))))
    ax.set_ylabel("cumulative count")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(thousands)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title("swaps, copies and preemptions", loc="left", fontsize=10)
    ax = axes[3]
    ax.plot(x, sharing_share(steps), color="#2ca02c", lw=1.3)
    ax.set_ylim(bottom=0)
    percent_axis(ax)
    ax.set_ylabel("saved share")
    ax.set_title("KV memory saved by sharing: (table blocks - blocks used) / table blocks "
                 "(run: %.1f%%)" % (100 * s.get("kv_sharing_saved_share", 0.0)),
                 loc="left", fontsize=10)
    axes[-1].set_xlabel(xlabel)
    fig.suptitle("Swapping, copy-on-write and sharing (vLLM V0)%s\n%s" % (_note(steps), run.label),
                 fontsize=11)
    save(fig, out, "v0_swap_sharing", formats)
    return Figure("v0_swap_sharing", "Swapping and sharing (vLLM V0)",
                  "Queues with the swapped one, GPU and CPU pool usage, cumulative swaps, "
                  "copy-on-write copies and preemptions by mode, KV memory saved by sharing")


def group_label(key, group):
    """'g0: sliding window 128 (18 layers)' from a summary.json kv_cache_groups entry."""
    kind = group.get("kind", "?")
    text = kind.replace("_", " ")
    if kind == "sliding_window":
        text += " %s" % group.get("sliding_window", "?")
    elif kind == "chunked_local":
        text += " %s" % group.get("attention_chunk_size", "?")
    if group.get("num_layers"):
        text += " (%d layers)" % group["num_layers"]
    return "%s: %s" % (key, text)


GROUP_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                "#bcbd22", "#17becf", "#d62728"]


def kv_groups(run, out, formats, max_points):
    """Runs of several KV cache groups (vllm-0.20 with a hybrid model): each group's share of
    the one pool over time, and its mean KV breakdown."""
    groups = run.summary.get("kv_cache_groups")
    if not groups:
        return []  # one KV cache group: nothing to draw, nothing missing
    steps = _need_steps(run, max_points)
    if steps.get("num_groups", 0) != len(groups):
        raise Skipped("steps.csv in %s has columns for %d KV cache groups, summary.json %d"
                      % (run.path, steps.get("num_groups", 0), len(groups)))
    x, xlabel = _time_axis(steps)
    usable = max(1.0, float(run.summary.get("num_gpu_blocks", 1)) - 1)
    keys = sorted(groups, key=lambda k: int(k[1:]))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12.5, 5.8),
                                   gridspec_kw={"width_ratios": [3, 2]})
    layers = [steps["%s_blocks" % k] / usable for k in keys]
    labels = ["%s (mean %.1f%%)" % (group_label(k, groups[k]),
                                    100 * groups[k].get("mean_kv_cache_usage_perc", 0))
              for k in keys]
    cols = [GROUP_COLORS[i % len(GROUP_COLORS)] for i in range(len(keys))]
    ax1.stackplot(x, *layers, labels=labels, colors=cols, linewidth=0, alpha=0.85)
    ax1.plot(x, steps["kv_cache_usage_perc"], color="black", lw=0.8, ls="--",
             label="pool usage (vLLM)")
    ax1.set_xlim(float(x[0]), float(x[-1]) if x[-1] > x[0] else float(x[0]) + 1)
    ax1.set_ylim(0, 1.02)
    percent_axis(ax1)
    ax1.set_xlabel(xlabel)
    ax1.set_ylabel("share of the pool's blocks")
    ax1.set_title("blocks held by each KV cache group", loc="left", fontsize=10)
    ax1.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=8, frameon=False,
               ncol=2)
    parts = [b for b in BREAKDOWN if b[0] not in ("external_fragmentation", "free")]
    y = np.arange(len(keys))
    left = np.zeros(len(keys))
    for key, label, color in parts:
        v = np.array([groups[k].get("kv_breakdown", {}).get(key, 0.0) for k in keys])
        ax2.barh(y, v, left=left, color=color, label=label, height=0.6)
        left += v
    ax2.set_yticks(y)
    ax2.set_yticklabels([group_label(k, groups[k]) for k in keys], fontsize=8)
    ax2.invert_yaxis()
    ax2.set_xlim(0, max(0.05, float(left.max()) * 1.15))
    percent_axis(ax2, "x")
    ax2.set_xlabel("mean share of the pool's token slots")
    ax2.set_title("mean KV breakdown by group", loc="left", fontsize=10)
    ax2.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=8, frameon=False,
               ncol=2)
    fig.suptitle("%s: KV cache groups in one pool of %s blocks%s" % (
        run.label, "{:,}".format(int(usable + 1)), _note(steps)), fontsize=11)
    save(fig, out, "kv_groups", formats, rect=(0, 0, 1, 0.95))
    return Figure("kv_groups", "KV cache groups",
                  "Each KV cache group's blocks in the shared pool over time (a sliding-window "
                  "group holds only its window's blocks), and its mean breakdown" + _note(steps))


FIGURES = [kv_breakdown, kv_usage_queue, kv_groups, prefix_hit_rate, latency_cdfs,
           preemptions_evictions, v0_swap_sharing]
