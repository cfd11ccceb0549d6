"""What a CPU tier for the KV cache buys: hit rate and TTFT against the tier's size, LRU against
ARC, and against the host link's bandwidth.

    /usr/bin/python3 plots/cpu_offload.py SWEEP_DIR [-o OUT_DIR] [--format png,svg]

SWEEP_DIR is the folder `kvsim sweep scenarios/cpu-offload.yaml` writes (any sweep over
cache.kv_offloading_size works; the policy and the link are read from each run's point, with
vLLM's and the GPU preset's defaults where a point leaves them out). The figure,
OUT_DIR/cpu_offload.png (OUT_DIR defaults to SWEEP_DIR/plots), has three panels: the first-lookup
hit rate (GPU prefix cache and CPU tier together, token-weighted) and the CPU tier's share of it;
mean and p99 TTFT; and, for the tier size swept over the host link, mean TTFT against the link's
bandwidth. The run without a tier is the dashed line in each panel. A second figure,
OUT_DIR/cpu_offload_timeline.png, follows one tier run (the LRU point of the middle size, or
--run NAME) over time from its steps.csv: the tier's blocks in use, and the GPU blocks stored,
loaded and evicted from the tier and the bytes moved each way, per second."""

import argparse
import csv
import os
import sys

from matplotlib.ticker import FuncFormatter

from common import plt, save
from rundata import DataError, one_sweep

DEFAULT_LINK = 64e9  # the H100 preset's host_link_bytes_per_s


def _point(run):
    p = dict(run.params)
    size = p.get("cache.kv_offloading_size")
    if size in ("~", "null", ""):  # the point without a tier (`kv_offloading_size: null`)
        size = None
    policy = p.get("cache.kv_offloading_eviction_policy") or "lru"
    link = p.get("hardware.host_link_bytes_per_s") or DEFAULT_LINK
    return size, str(policy), float(link)


def _cpu_share(run):
    """The CPU tier's share of the prompt tokens: its hit tokens over all prompt tokens."""
    t = run.summary.get("kv_offload") or {}
    prompt = run.summary.get("total_input_tokens") or 0
    return (t.get("cpu_hit_tokens", 0) / prompt) if prompt else 0.0


def draw(sweep, out, formats):
    base = None
    lines = {}  # policy -> [(GiB, run)] at the default link
    links = []  # (GB/s, run) at the size swept over the link
    for run in sweep.runs:
        size, policy, link = _point(run)
        if size is None:
            base = run
        elif link == DEFAULT_LINK:
            lines.setdefault(policy, []).append((float(size), run))
        else:
            links.append((link / 1e9, run))
    if not lines:
        raise DataError("%s: no run with cache.kv_offloading_size" % sweep.path)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    ax_hit, ax_ttft, ax_link = axes
    colors = {"lru": "#1f77b4", "arc": "#d62728"}
    for policy, pts in sorted(lines.items()):
        pts.sort(key=lambda p: p[0])
        xs = [p[0] for p in pts]
        c = colors.get(policy, "#555555")
        ax_hit.plot(xs, [r.summary["first_lookup_hit_rate"] for _, r in pts], "o-", color=c,
                    label="%s: GPU + CPU tier" % policy.upper())
        ax_hit.plot(xs, [_cpu_share(r) for _, r in pts], "o:", color=c,
                    label="%s: from the CPU tier" % policy.upper())
        ax_ttft.plot(xs, [r.summary["mean_ttft_ms"] for _, r in pts], "o-", color=c,
                     label="%s mean" % policy.upper())
        ax_ttft.plot(xs, [r.summary["p99_ttft_ms"] for _, r in pts], "s--", color=c, alpha=0.6,
                     label="%s p99" % policy.upper())
    if base is not None:
        ax_hit.axhline(base.summary["first_lookup_hit_rate"], color="k", ls="--", lw=1,
                       label="no tier")
        ax_ttft.axhline(base.summary["mean_ttft_ms"], color="k", ls="--", lw=1,
                        label="no tier, mean")
        ax_link.axhline(base.summary["mean_ttft_ms"], color="k", ls="--", lw=1, label="no tier")
    for ax in (ax_hit, ax_ttft):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("CPU tier (GiB of host memory, --kv-offloading-size)")
    ax_hit.set_ylabel("first-lookup hit rate (tokens)")
    ax_hit.set_ylim(0, 1)
    ax_hit.set_title("hit rate")
    ax_ttft.set_ylabel("TTFT (ms)")
    ax_ttft.set_yscale("log")
    ax_ttft.set_title("time to first token")
    if links:
        size = next(s for s, _, _ in (_point(r) for _, r in links))
        same = [(s, r) for s, r in lines.get("lru", []) if s == float(size)]
        links += [(DEFAULT_LINK / 1e9, r) for _, r in same]
        links.sort(key=lambda p: p[0])
        ax_link.plot([p[0] for p in links], [r.summary["mean_ttft_ms"] for _, r in links], "o-",
                     color=colors["lru"], label="%s GiB LRU tier, mean" % size)
        ax_link.set_xscale("log", base=2)
        ax_link.set_xlabel("host link (GB/s per direction)")
        ax_link.set_ylabel("mean TTFT (ms)")
        ax_link.set_title("where PCIe limits it")
    else:
        ax_link.set_visible(False)
    for ax in axes:
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
        if ax.get_visible():
            ax.legend(loc="best")
    fig.suptitle("%s: what a CPU tier buys" % sweep.name)
    save(fig, out, "cpu_offload", formats)
    return os.path.join(out, "cpu_offload.%s" % formats[0])


def _steps_columns(run, names):
    """steps.csv's time_s and `names` as lists of floats (None without steps.csv)."""
    path = run.file("steps.csv")
    if path is None:
        return None
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if not rows or any(n not in rows[0] for n in names):
        return None
    return {n: [float(r[n]) for r in rows] for n in ["time_s"] + list(names)}


def draw_timeline(sweep, out, formats, name=None):
    """The tier of one run over time; returns the path, or None when no run has tier columns."""
    tiered = [r for r in sweep.runs if _point(r)[0] is not None and _point(r)[2] == DEFAULT_LINK
              and _point(r)[1] == "lru"]
    if name:
        tiered = [r for r in sweep.runs if os.path.basename(os.path.normpath(r.path)) == name]
        if not tiered:
            raise DataError("%s: no run named %s" % (sweep.path, name))
    if not tiered:
        return None
    tiered.sort(key=lambda r: float(_point(r)[0]))
    run = tiered[len(tiered) // 2] if not name else tiered[0]
    cols = _steps_columns(run, ["cpu_tier_blocks_used", "cpu_tier_stored_blocks",
                                "cpu_tier_loaded_blocks", "cpu_tier_evicted_blocks",
                                "bytes_gpu_to_cpu", "bytes_cpu_to_gpu"])
    if cols is None:
        return None
    t = cols["time_s"]
    num_blocks = (run.summary.get("kv_offload") or {}).get("num_cpu_blocks") or 1
    # Counters are per row (since the previous one): rates over each row's interval.
    def rate(name):
        out_ = []
        for i, v in enumerate(cols[name]):
            dt = t[i] - t[i - 1] if i > 0 else t[0]
            out_.append(v / dt if dt > 0 else 0.0)
        return out_
    fig, (ax_use, ax_blocks, ax_bytes) = plt.subplots(3, 1, figsize=(11, 8), sharex=True)
    ax_use.plot(t, [b / num_blocks for b in cols["cpu_tier_blocks_used"]], color="#1f77b4")
    ax_use.set_ylabel("tier blocks in use")
    ax_use.set_ylim(0, 1.05)
    ax_use.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g%%" % round(100 * v)))
    for n, label, c in (("cpu_tier_stored_blocks", "stored", "#2ca02c"),
                        ("cpu_tier_loaded_blocks", "loaded", "#ff7f0e"),
                        ("cpu_tier_evicted_blocks", "evicted from the tier", "#d62728")):
        ax_blocks.plot(t, rate(n), label=label, color=c, lw=0.8)
    ax_blocks.set_ylabel("GPU blocks / s")
    ax_blocks.legend(loc="upper left")
    for n, label, c in (("bytes_gpu_to_cpu", "GPU -> CPU", "#2ca02c"),
                        ("bytes_cpu_to_gpu", "CPU -> GPU", "#ff7f0e")):
        ax_bytes.plot(t, [v / 1e9 for v in rate(n)], label=label, color=c, lw=0.8)
    ax_bytes.set_ylabel("GB/s over the host link")
    ax_bytes.set_xlabel("simulated time (s)")
    ax_bytes.legend(loc="upper left")
    fig.suptitle("%s, %s: the CPU tier over time" % (sweep.name, run.label))
    save(fig, out, "cpu_offload_timeline", formats)
    return os.path.join(out, "cpu_offload_timeline.%s" % formats[0])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep", help="the sweep folder of scenarios/cpu-offload.yaml")
    ap.add_argument("-o", "--out", help="output folder (default: SWEEP/plots)")
    ap.add_argument("--format", default="png,svg", help="png, svg, pdf (comma-separated)")
    ap.add_argument("--run", help="the run folder (a point's name) the timeline follows")
    args = ap.parse_args(argv)
    formats = [f.strip() for f in args.format.split(",") if f.strip()]
    try:
        sweep = one_sweep(args.sweep)
        out = args.out or os.path.join(args.sweep, "plots")
        path = draw(sweep, out, formats)
        timeline = draw_timeline(sweep, out, formats, args.run)
    except DataError as e:
        print("cpu_offload.py: %s" % e, file=sys.stderr)
        return 2
    print(path)
    if timeline:
        print(timeline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
