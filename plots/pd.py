#!/usr/bin/python3
"""Figures of prefill/decode disaggregated runs (`cluster.prefill_replicas` / `decode_replicas`;
sim/OUTPUTS.md and shared/spec/cluster-routing.md §7, §10).

    MPLBACKEND=Agg /usr/bin/python3 plots/pd.py RUN_OR_SWEEP_DIR [-o OUT_DIR] [--format png,svg]
        [--ttft-slo-ms MS] [--tpot-slo-ms MS] [--attainment FRACTION]

One P/D run -> `pd_ttft_breakdown`: TTFT as the sum of its seven parts (requests.csv `ttft_*`:
proxy hops, waiting on P, P's prefill, D's queue, the KV read, D's wait for the step after the
read, D's first-token step), mean per part over all requests and per TTFT percentile band, and per
request over arrival time.

A sweep of layouts x request rates (scenarios/pd-ratio.yaml) -> `pd_goodput`: per layout (xPyD or
aggregated, from summary.json) the SLO attainment (the share of requests whose TTFT and TPOT both
meet their targets; refused and aborted requests miss) against the swept rate, and the goodput:
DistServe's, the highest swept rate whose attainment is at least `--attainment` (default 0.9).
The targets are plot options, the same for every scenario (defaults below, stated in the figure).
Run by `kvsim plot` for P/D runs and sweeps; standalone, it draws only these figures (OUT_DIR
defaults to RUN_OR_SWEEP_DIR/plots). Exit status: 0 done, 1 a figure failed, 2 bad input.
"""

import argparse
import csv
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from common import Figure, Skipped, colors, percent_axis, plt, save  # noqa: E402
from rundata import DataError, fmt_value, short_key  # noqa: E402

# The seven TTFT parts of a P/D request (requests.csv), in the order they happen, with their
# legend names and fixed colours (P's parts warm, the transfer violet, D's cool).
TTFT_PARTS = [
    ("ttft_proxy_ms", "proxy hops", "#bdbdbd"),
    ("ttft_p_queue_ms", "P queue", "#fdae6b"),
    ("ttft_prefill_ms", "P prefill", "#e6550d"),
    ("ttft_d_queue_ms", "D queue (until the step allocating the blocks)", "#9ecae1"),
    ("ttft_transfer_ms", "KV read (handshake, setup, bytes)", "#756bb1"),
    ("ttft_d_wait_ms", "D wait (read end to the step sampling)", "#6baed6"),
    ("ttft_first_token_ms", "D first-token step", "#08519c"),
]
# TTFT percentile bands of the breakdown bars (lower bound inclusive).
BANDS = [(0, 50), (50, 90), (90, 99), (99, 100)]

# Default service-level objectives of the goodput figure (DistServe, OSDI'24: "goodput" is the
# highest rate at which a target share of requests meets both). An interactive chat service on a
# 7-8B model on one datacenter GPU: the first token within a second (several times a 2,000-token
# prefill), then 40 tokens/s per request (TPOT 25 ms, about three times an unloaded decode step).
DEFAULT_TTFT_SLO_MS = 1000.0
DEFAULT_TPOT_SLO_MS = 25.0
DEFAULT_ATTAINMENT = 0.9

# Swept keys that make a layout (the rest, less the rate, tell layouts apart too).
LAYOUT_KEYS = ("cluster.replicas", "cluster.prefill_replicas", "cluster.decode_replicas")


def is_pd(run):
    """A P/D run: summary.json's num_prefill_replicas > 0."""
    try:
        return int(run.summary.get("num_prefill_replicas", 0) or 0) > 0
    except (TypeError, ValueError):
        return False


def _read_columns(path, wanted, optional=()):
    """requests.csv as {column: [cell text]} for `wanted` (all required) and `optional`."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = [c.strip() for c in next(reader, [])]
        missing = [c for c in wanted if c not in header]
        if missing:
            raise Skipped("%s has no %s column%s" % (path, ", ".join(missing),
                                                     "s" if len(missing) > 1 else ""))
        cols = list(wanted) + [c for c in optional if c in header]
        idx = [header.index(c) for c in cols]
        out = {c: [] for c in cols}
        for line, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) < len(header):
                raise DataError("%s:%d: %d cells, the header has %d" % (path, line, len(row),
                                                                       len(header)))
            for c, i in zip(cols, idx):
                out[c].append(row[i])
    return out


def _floats(cells, path, column):
    try:
        return np.array([float(c) if c != "" else np.nan for c in cells], dtype=np.float64)
    except ValueError:
        raise DataError("%s: a value of %s is not a number" % (path, column))


def ttft_parts(run):
    """The requests whose TTFT has its seven parts: {arrival_s, ttft_ms, parts (n x 7, ms),
    d_only (served on D alone: no prefill replica), max_gap_ms (largest |sum of parts - ttft|)}."""
    path = run.file("requests.csv")
    if not path:
        raise Skipped("no requests.csv in %s" % run.path)
    names = [p for p, _, _ in TTFT_PARTS]
    cols = _read_columns(path, ["arrival_s", "ttft_ms"] + names, ["prefill_replica"])
    arrival = _floats(cols["arrival_s"], path, "arrival_s")
    ttft = _floats(cols["ttft_ms"], path, "ttft_ms")
    parts = np.column_stack([_floats(cols[p], path, p) for p in names]) if arrival.size else \
        np.zeros((0, len(names)))
    ok = np.isfinite(ttft) & np.all(np.isfinite(parts), axis=1)
    d_only = np.array([c == "" for c in cols.get("prefill_replica", [""] * arrival.size)],
                      dtype=bool)
    arrival, ttft, parts, d_only = arrival[ok], ttft[ok], parts[ok], d_only[ok]
    if ttft.size == 0:
        raise Skipped("%s: no request with a TTFT breakdown" % path)
    order = np.argsort(arrival, kind="stable")
    gap = float(np.max(np.abs(parts.sum(axis=1) - ttft)))
    return {"arrival_s": arrival[order], "ttft_ms": ttft[order], "parts": parts[order],
            "d_only": d_only[order], "max_gap_ms": gap}


def band_means(ttft, parts):
    """[(label, n, mean parts)] for all requests, then for each TTFT percentile band of BANDS
    (requests ranked by TTFT; band [a, b) holds ranks floor(a n / 100) .. floor(b n / 100) - 1,
    the last band up to n)."""
    n = ttft.size
    rank = np.argsort(ttft, kind="stable")
    out = [("all (mean)", n, parts.mean(axis=0))]
    for a, b in BANDS:
        lo = int(math.floor(a * n / 100.0))
        hi = n if b == 100 else int(math.floor(b * n / 100.0))
        sel = rank[lo:hi]
        label = "p%d-p%d" % (a, b) if b < 100 else "> p%d" % a
        out.append((label, int(sel.size), parts[sel].mean(axis=0) if sel.size else
                    np.zeros(parts.shape[1])))
    return out


def ttft_breakdown(run, out, formats, max_points=3000):
    """Stacked bars of the seven TTFT parts: the mean over all requests and over each TTFT
    percentile band; and per request over arrival time (bucket means when there are many)."""
    if not is_pd(run):
        raise Skipped("not a P/D run (no num_prefill_replicas in %s/summary.json)" % run.path)
    d = ttft_parts(run)
    ttft, parts, t = d["ttft_ms"], d["parts"], d["arrival_s"]
    n = ttft.size
    if d["max_gap_ms"] > 1e-3 + 1e-5 * float(np.max(ttft)):
        sys.stderr.write("kvsim plot: warning: %s: the TTFT parts differ from ttft_ms by up to "
                         "%.6f ms\n" % (run.path, d["max_gap_ms"]))
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 5.4), gridspec_kw={"width_ratios": [2, 3]})
    bands = band_means(ttft, parts)
    x = np.arange(len(bands))
    bottom = np.zeros(len(bands))
    for j, (_, label, color) in enumerate(TTFT_PARTS):
        v = np.array([b[2][j] for b in bands])
        ax.bar(x, v, 0.65, bottom=bottom, color=color, label=label, edgecolor="white", lw=0.5)
        bottom += v
    for i, total in enumerate(bottom):
        ax.text(i, total, "%s ms" % _ms(total), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x)
    ax.set_xticklabels(["%s\n%d req" % (b[0], b[1]) for b in bands])
    ax.set_ylabel("TTFT (ms), mean per part")
    ax.set_ylim(0, max(1e-9, float(bottom.max())) * 1.12)
    ax.set_title("mean TTFT parts, all requests and by TTFT percentile")
    # Per request over arrival time: means of consecutive requests when there are more than fit.
    k = max(1, int(math.ceil(n / float(max(10, min(max_points, 300))))))
    starts = np.arange(0, n, k)
    counts = np.minimum(starts + k, n) - starts
    tx = np.add.reduceat(t, starts) / counts
    ys = [np.add.reduceat(parts[:, j], starts) / counts for j in range(parts.shape[1])]
    bx.stackplot(tx, ys, colors=[c for _, _, c in TTFT_PARTS], lw=0)
    bx.plot(tx, np.add.reduceat(ttft, starts) / counts, color="black", lw=0.6, label="TTFT")
    bx.set_xlabel("arrival time (s)")
    bx.set_ylabel("TTFT (ms)" + (", mean of %d consecutive requests" % k if k > 1 else ""))
    bx.set_ylim(0, None)
    bx.set_title("per request, in arrival order")
    bx.legend(loc="upper left", frameon=False)
    s = run.summary
    d_only = int(d["d_only"].sum())
    fig.suptitle("%s\nTTFT of %dP%dD (%s), %d requests%s; mean KV read %s ms, %s transfers" % (
        run.name, int(s.get("num_prefill_replicas", 0)), int(s.get("num_decode_replicas", 0)),
        s.get("router_policy", "?"), n,
        ", %d served on D alone" % d_only if d_only else "",
        _ms(float(s.get("mean_kv_transfer_ms", float("nan")))), s.get("kv_transfers", "?")))
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, frameon=False, fontsize=8,
               title="TTFT parts, bottom to top", title_fontsize=8)
    save(fig, out, "pd_ttft_breakdown", formats, rect=(0, 0.12, 1, 0.93))
    return Figure("pd_ttft_breakdown", "TTFT breakdown (P/D)",
                  "TTFT as the sum of its parts (requests.csv ttft_*): proxy hops, P queue, P "
                  "prefill, D queue, KV read, D wait, D first-token step; mean per part over all "
                  "requests and per TTFT percentile band, and per request over arrival time "
                  "(the parts add up to ttft_ms within %.6f ms)" % d["max_gap_ms"])


def kv_transfers(run, out, formats, max_points=3000):
    """The KV reads of a P/D run (transfers.csv): each read's duration over its start time, by
    its `concurrent` (the reads sharing its link), and the CDFs of the durations and of the lag
    from a read's end to the D step end that saw it."""
    if not is_pd(run):
        raise Skipped("not a P/D run (no num_prefill_replicas in %s/summary.json)" % run.path)
    path = run.file("transfers.csv")
    if not path:
        raise Skipped("no transfers.csv in %s" % run.path)
    cols = _read_columns(path, ["bytes", "start_s", "end_s", "seen_s", "concurrent"])
    start = _floats(cols["start_s"], path, "start_s")
    if start.size == 0:
        raise Skipped("%s: no transfer (every request served on D alone?)" % path)
    dur = (_floats(cols["end_s"], path, "end_s") - start) * 1e3
    lag = _floats(cols["seen_s"], path, "seen_s") * 1e3 - (start * 1e3 + dur)
    conc = _floats(cols["concurrent"], path, "concurrent")
    nbytes = _floats(cols["bytes"], path, "bytes")
    from common import cdf_points

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    idx = np.unique(np.linspace(0, start.size - 1, min(start.size, max_points)).astype(np.int64))
    sc = ax.scatter(start[idx], dur[idx], c=conc[idx], s=6, cmap="viridis", lw=0)
    cb = fig.colorbar(sc, ax=ax, pad=0.01)
    cb.set_label("transfers.csv concurrent (reads sharing the link)")
    ax.set_xlabel("read start (s)")
    ax.set_ylabel("read duration (ms, end_s - start_s)")
    ax.set_ylim(0, None)
    ax.set_title("each KV read")
    for v, label, c in ((dur, "read duration", "#756bb1"), (lag, "read end to the D step end "
                                                            "that sees it", "#6baed6")):
        x, y = cdf_points(v)
        bx.plot(x, y, color=c, lw=1.5, label=label)
    bx.set_xlabel("ms")
    bx.set_ylabel("share of reads")
    bx.set_ylim(0, 1.02)
    percent_axis(bx)
    bx.legend(loc="lower right", frameon=False)
    bx.set_title("CDFs")
    s = run.summary
    fig.suptitle("%s: %d KV reads, %.3g GiB in all, mean %s ms, p99 %s ms (transfer model: "
                 "the spec's defaults unless cluster.router.pd sets them)" % (
                     run.name, start.size, float(nbytes.sum()) / 2 ** 30,
                     _ms(float(s.get("mean_kv_transfer_ms", np.mean(dur)))),
                     _ms(float(s.get("p99_kv_transfer_ms", np.percentile(dur, 99))))),
                 fontsize=10)
    save(fig, out, "pd_transfers", formats, rect=(0, 0, 1, 0.95))
    return Figure("pd_transfers", "KV reads (P/D)",
                  "Each KV read's duration over time by the reads sharing its link "
                  "(transfers.csv), and the CDFs of the durations and of the lag to the D step "
                  "end that sees a read complete")


def _ms(v):
    if not math.isfinite(v):
        return "?"
    return "%.0f" % v if abs(v) >= 100 else "%.3g" % v


# --- goodput ----------------------------------------------------------------------------------

def request_latencies(run):
    """(ttft_ms, tpot_ms) of every request of requests.csv as the targets judge them: a request
    that did not finish (refused, aborted) has TTFT and TPOT +inf; a finished one-token request
    has no TPOT, 0 here (it meets any TPOT target)."""
    path = run.file("requests.csv")
    if not path:
        raise Skipped("no requests.csv in %s" % run.path)
    cols = _read_columns(path, ["ttft_ms", "tpot_ms", "finish_reason"])
    if not cols["finish_reason"]:
        raise Skipped("%s: no requests" % path)
    ttft = _floats(cols["ttft_ms"], path, "ttft_ms")
    tpot = _floats(cols["tpot_ms"], path, "tpot_ms")
    done = np.array([r in ("length", "stop") for r in cols["finish_reason"]], dtype=bool)
    ttft = np.where(done & np.isfinite(ttft), ttft, np.inf)
    tpot = np.where(done, np.nan_to_num(tpot, nan=0.0), np.inf)
    return ttft, tpot


def attainment_of(lat, ttft_slo_ms, tpot_slo_ms):
    """(both, ttft only, tpot only): the shares of requests meeting the targets (<=)."""
    ttft, tpot = lat
    ok_ttft, ok_tpot = ttft <= ttft_slo_ms, tpot <= tpot_slo_ms
    return (float(np.mean(ok_ttft & ok_tpot)), float(np.mean(ok_ttft)), float(np.mean(ok_tpot)))


def slo_attainment(run, ttft_slo_ms, tpot_slo_ms):
    """(both, ttft only, tpot only, requests) over every request of requests.csv: a request meets
    the TTFT target when it finished (length or stop) with ttft_ms <= the target, the TPOT target
    when also tpot_ms <= it (a one-token request has no TPOT and meets it). Refused and aborted
    requests miss both."""
    lat = request_latencies(run)
    return attainment_of(lat, ttft_slo_ms, tpot_slo_ms) + (int(lat[0].size),)


def _rate_key(sweep):
    keys = [k for k in sweep.keys if short_key(k) == "rate_per_s"]
    if not keys:
        raise Skipped("sweep %s does not sweep a request rate (workload.arrival.rate_per_s)" %
                      sweep.name)
    return keys[0]


def layout_label(run, other_keys=()):
    """`1P3D`, `4 aggregated` (from summary.json), then the run's other swept values."""
    s = run.summary
    if is_pd(run):
        label = "%dP%dD" % (int(s["num_prefill_replicas"]), int(s.get("num_decode_replicas", 0)))
    else:
        label = "%d aggregated" % int(s.get("num_replicas", 1) or 1)
    params = dict(run.params)
    extra = ["%s=%s" % (short_key(k), fmt_value(params[k])) for k in other_keys if k in params]
    return ", ".join([label] + extra)


def _layout_order(run):
    s = run.summary
    return (1 if is_pd(run) else 0, int(s.get("num_prefill_replicas", 0) or 0),
            int(s.get("num_replicas", 1) or 1))


def goodput_curves(sweep, ttft_slo_ms, tpot_slo_ms):
    """{layout label: [(rate, both, ttft only, tpot only, requests, (ttft, tpot) arrays)] by
    rate}, layouts in order (aggregated first, then by prefill replicas)."""
    key = _rate_key(sweep)
    others = [k for k in sweep.keys if k != key and k not in LAYOUT_KEYS]
    curves, order = {}, {}
    for r in sweep.runs:
        if not r.path or not r.file("requests.csv"):
            continue
        rate = dict(r.params).get(key)
        if not isinstance(rate, (int, float)):
            continue
        label = layout_label(r, others)
        lat = request_latencies(r)
        both, t1, t2 = attainment_of(lat, ttft_slo_ms, tpot_slo_ms)
        curves.setdefault(label, []).append((float(rate), both, t1, t2, int(lat[0].size), lat))
        order.setdefault(label, _layout_order(r))
    if not curves:
        raise Skipped("sweep %s: no run folder with a requests.csv and a swept rate" % sweep.name)
    for pts in curves.values():
        pts.sort(key=lambda p: p[0])
    return {k: curves[k] for k in sorted(curves, key=lambda k: (order[k], k))}


def goodput(points, attainment=DEFAULT_ATTAINMENT):
    """DistServe's goodput of one layout: the highest swept rate whose SLO attainment (both
    targets) is at least `attainment`; 0 when no rate reaches it."""
    ok = [p[0] for p in points if p[1] >= attainment - 1e-12]
    return max(ok) if ok else 0.0


def goodput_at(points, ttft_slo_ms, tpot_slo_ms, attainment=DEFAULT_ATTAINMENT):
    """The goodput of one layout's points (goodput_curves) under other targets."""
    return goodput([(p[0], attainment_of(p[5], ttft_slo_ms, tpot_slo_ms)[0]) for p in points],
                   attainment)


def sweep_goodput(sweep_path, ttft_slo_ms=DEFAULT_TTFT_SLO_MS, tpot_slo_ms=DEFAULT_TPOT_SLO_MS,
                  attainment=DEFAULT_ATTAINMENT):
    """{layout label: goodput} of the sweep folder at `sweep_path` (for scripts and tests)."""
    from rundata import one_sweep

    curves = goodput_curves(one_sweep(sweep_path), ttft_slo_ms, tpot_slo_ms)
    return {k: goodput(v, attainment) for k, v in curves.items()}


def is_pd_sweep(sweep):
    return any(is_pd(r) for r in sweep.runs)


def goodput_figure(sweep, out, formats, prefix="", ttft_slo_ms=DEFAULT_TTFT_SLO_MS,
                   tpot_slo_ms=DEFAULT_TPOT_SLO_MS, attainment=DEFAULT_ATTAINMENT, curves=None):
    """SLO attainment against the request rate per layout, the goodput per layout, and the
    goodput under other targets: the TPOT target moved at the TTFT target, and the other way
    round (where the answer to "which layout" changes)."""
    if curves is None:
        curves = goodput_curves(sweep, ttft_slo_ms, tpot_slo_ms)
    top_rate = max(p[0] for pts in curves.values() for p in pts)
    tpot_grid = np.geomspace(tpot_slo_ms / 4, tpot_slo_ms * 4, 65)
    ttft_grid = np.geomspace(ttft_slo_ms / 4, ttft_slo_ms * 4, 65)
    fig, axes = plt.subplots(2, 2, figsize=(13, 9.5))
    (ax, gx), (tx, px) = axes
    cols = colors(len(curves))
    marks = "os^Dv<>x"
    goods = []
    for i, ((label, pts), c) in enumerate(zip(curves.items(), cols)):
        rate = np.array([p[0] for p in pts])
        g = goodput(pts, attainment)
        goods.append((label, g, c))
        m = marks[i % len(marks)]
        ax.plot(rate, [p[1] for p in pts], "-", marker=m, color=c, ms=5, label=label)
        if g > 0:
            ax.plot([g], [next(p[1] for p in pts if p[0] == g)], marker=m, ms=12, mfc="none",
                    mec=c, mew=2)
        # Goodput under other targets, one target moved at a time (ties overlap: the widths
        # and markers tell them apart).
        lw = max(0.8, 2.6 - 0.45 * i)
        gp = [goodput_at(pts, ttft_slo_ms, t, attainment) for t in tpot_grid]
        tx.plot(tpot_grid, gp, drawstyle="steps-post", color=c, lw=lw, label=label, marker=m,
                markevery=(i, 8), ms=5, mfc="none")
        gt = [goodput_at(pts, t, tpot_slo_ms, attainment) for t in ttft_grid]
        px.plot(ttft_grid, gt, drawstyle="steps-post", color=c, lw=lw, label=label, marker=m,
                markevery=(i, 8), ms=5, mfc="none")
    slo = "TTFT <= %s ms and TPOT <= %s ms" % (_ms(ttft_slo_ms), _ms(tpot_slo_ms))
    ax.axhline(attainment, color="grey", ls="--", lw=1)
    ax.set_ylim(-0.02, 1.04)
    percent_axis(ax)
    ax.set_xlabel("request rate (requests/s)")
    ax.set_ylabel("requests meeting both targets")
    ax.set_title("SLO attainment: %s\n(circled: the goodput, the highest rate at >= %g%%)" % (
        slo, 100 * attainment))
    ax.legend(loc="lower left", frameon=False)
    for a, target, what, other in ((tx, tpot_slo_ms, "TPOT", "TTFT <= %s ms" % _ms(ttft_slo_ms)),
                                   (px, ttft_slo_ms, "TTFT", "TPOT <= %s ms" % _ms(tpot_slo_ms))):
        a.set_xscale("log")
        a.axvline(target, color="grey", ls="--", lw=1)
        a.set_xticks(_nice_ticks(target / 4, target * 4))
        a.xaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
        a.xaxis.set_minor_formatter(FuncFormatter(lambda *_: ""))
        a.set_xlabel("%s target (ms, log scale; dashed: the figure's)" % what)
        a.set_ylabel("goodput (requests/s)")
        a.set_ylim(0, top_rate * 1.05)
        a.set_title("goodput against the %s target (%s)" % (what, other))
        a.legend(loc="upper left" if what == "TPOT" else "upper right", frameon=False)
    y = np.arange(len(goods))
    gx.barh(y, [g for _, g, _ in goods], color=[c for _, _, c in goods], alpha=0.8)
    top = max([g for _, g, _ in goods] + [1e-9])
    for i, (label, g, _) in enumerate(goods):
        gx.text(g + 0.01 * top, i, _goodput_text(g, top_rate), va="center", fontsize=9)
    gx.set_yticks(y)
    gx.set_yticklabels([label for label, _, _ in goods])
    gx.invert_yaxis()
    gx.set_xlim(0, top * 1.45)
    gx.set_xlabel("goodput (requests/s, the swept rates)")
    gx.set_title("goodput per layout (%g%% of requests meet both)" % (100 * attainment))
    fig.suptitle("%s: goodput by layout (DistServe's definition; targets are plot options "
                 "--ttft-slo-ms, --tpot-slo-ms, --attainment)" % sweep.name, fontsize=11)
    stem = prefix + "pd_goodput"
    save(fig, out, stem, formats, rect=(0, 0, 1, 0.97))
    caption = "Goodput per layout (%s for %g%% of requests): %s" % (
        slo, 100 * attainment, "; ".join("%s %s" % (label, _goodput_text(g, top_rate))
                                          for label, g, _ in goods))
    return Figure(stem, "Goodput by P/D layout", caption)


def _nice_ticks(lo, hi):
    """1, 2, 5 x 10^k within [lo, hi]."""
    k = math.floor(math.log10(lo))
    out = []
    while 10 ** k <= hi:
        out += [m * 10 ** k for m in (1, 2, 5) if lo <= m * 10 ** k <= hi]
        k += 1
    return out


def _goodput_text(g, top_rate):
    if g <= 0:
        return "0 (no swept rate)"
    if g >= top_rate:
        return ">= %s req/s (the highest rate swept)" % fmt_value(g)
    return "%s req/s" % fmt_value(g)


def _write_goodput_csv(curves, out, prefix, ttft_slo_ms, tpot_slo_ms, attainment):
    """OUT/<prefix>pd_goodput.csv: layout,rate_per_s,requests,attainment,ttft_attainment,
    tpot_attainment,goodput (the layout's goodput on every row),ttft_slo_ms,tpot_slo_ms,target."""
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, prefix + "pd_goodput.csv")
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, lineterminator="\n")  # a layout with other swept values has commas
        w.writerow(["layout", "rate_per_s", "requests", "attainment", "ttft_attainment",
                    "tpot_attainment", "goodput", "ttft_slo_ms", "tpot_slo_ms", "target"])
        for label, pts in curves.items():
            g = goodput(pts, attainment)
            for rate, both, t1, t2, n, _ in pts:
                w.writerow([label, fmt_value(rate), n, "%.6f" % both, "%.6f" % t1, "%.6f" % t2,
                            fmt_value(g), fmt_value(ttft_slo_ms), fmt_value(tpot_slo_ms),
                            fmt_value(attainment)])
    return path


def goodput_with_table(sweep, out, formats, prefix="", slo=None):
    """The goodput figure and OUT/<prefix>pd_goodput.csv beside it (what kvsim_plot.py calls)."""
    slo = slo or {}
    t, p, a = (slo.get("ttft_slo_ms", DEFAULT_TTFT_SLO_MS),
               slo.get("tpot_slo_ms", DEFAULT_TPOT_SLO_MS),
               slo.get("attainment", DEFAULT_ATTAINMENT))
    curves = goodput_curves(sweep, t, p)
    fig = goodput_figure(sweep, out, formats, prefix, t, p, a, curves)
    _write_goodput_csv(curves, out, prefix, t, p, a)
    return fig


FIGURES = [ttft_breakdown, kv_transfers]


def check_slo_args(ttft_slo_ms, tpot_slo_ms, attainment):
    """The message of a bad target, or None."""
    for name, v in (("--ttft-slo-ms", ttft_slo_ms), ("--tpot-slo-ms", tpot_slo_ms)):
        if not (v > 0 and math.isfinite(v)):
            return "%s must be a positive number of milliseconds, not %s" % (name, v)
    if not (0 < attainment <= 1):
        return "--attainment must be in (0, 1], not %s" % attainment
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(prog="pd.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("path", metavar="RUN_OR_SWEEP_DIR")
    ap.add_argument("-o", "--out", metavar="OUT_DIR")
    ap.add_argument("--format", default="png,svg")
    ap.add_argument("--ttft-slo-ms", type=float, default=DEFAULT_TTFT_SLO_MS)
    ap.add_argument("--tpot-slo-ms", type=float, default=DEFAULT_TPOT_SLO_MS)
    ap.add_argument("--attainment", type=float, default=DEFAULT_ATTAINMENT)
    a = ap.parse_args(sys.argv[1:] if argv is None else argv)
    msg = check_slo_args(a.ttft_slo_ms, a.tpot_slo_ms, a.attainment)
    if msg:
        sys.stderr.write("pd.py: error: %s\n" % msg)
        return 2
    formats = [f.strip() for f in a.format.split(",") if f.strip()] or ["png"]
    from rundata import collect

    try:
        runs, sweeps = collect([a.path])
        out = a.out or os.path.join(a.path, "plots")
        if runs:
            f = ttft_breakdown(runs[0], out, formats)
        else:
            f = goodput_with_table(sweeps[0], out, formats, slo={
                "ttft_slo_ms": a.ttft_slo_ms, "tpot_slo_ms": a.tpot_slo_ms,
                "attainment": a.attainment})
    except DataError as e:
        sys.stderr.write("pd.py: error: %s\n" % e)
        return 2
    except Skipped as e:
        sys.stderr.write("pd.py: nothing drawn: %s\n" % e)
        return 1
    print("%s: %s" % (os.path.join(out, f.stem + "." + formats[0]), f.caption))
    return 0


if __name__ == "__main__":
    sys.exit(main())
