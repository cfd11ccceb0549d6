#!/usr/bin/python3
"""Draw kvsim run folders: one run's figures, or comparisons across runs and sweeps.

    kvsim plot RUN_DIR... [-o OUT_DIR]
    MPLBACKEND=Agg /usr/bin/python3 plots/kvsim_plot.py RUN_DIR... [-o OUT_DIR]

One run folder -> RUN_DIR/plots/ (KV memory breakdown, KV usage and queues, prefix hit rate,
latency CDFs, preemptions and evictions). Several run folders, or a sweep folder -> comparisons
(hit rate vs capacity, breakdown bars, latency table and CDF overlays, headline metric bars, KV
usage / hit rate / preemption timelines, sweep heatmaps, metrics against a numeric swept key with
one line per value of another, breakdown bars per value) in
./plots-compare/ (SWEEP_DIR/plots/ for a single sweep). Prefill/decode disaggregated runs add
their TTFT breakdown and KV reads, and a sweep of them the goodput per layout (plots/pd.py).
Every figure is written as PNG and SVG,
with an index.html showing them beside the summary table. Needs matplotlib: use Debian's
/usr/bin/python3 (apt-get install python3-matplotlib).
Exit status: 0 done, 1 a figure failed, 2 bad input.
"""

import argparse
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _die(msg, status=2):
    sys.stderr.write("kvsim plot: error: %s\n" % msg)
    sys.exit(status)


def _parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="kvsim plot", description=__doc__.split("\n\n")[0].split("\n")[0],
        epilog="Folders: a run folder holds summary.json; a sweep folder holds run folders "
               "named key=value,... and sweep.csv.")
    ap.add_argument("paths", nargs="+", metavar="RUN_DIR",
                    help="run folders (or summary.json files) and sweep folders")
    ap.add_argument("-o", "--out", metavar="OUT_DIR",
                    help="output folder (default: RUN_DIR/plots for one run or one sweep, "
                         "./plots-compare for several)")
    ap.add_argument("--format", default="png,svg",
                    help="comma-separated image formats (default: png,svg)")
    ap.add_argument("--max-points", type=int, default=3000,
                    help="steps.csv rows are averaged into at most this many points (default 3000)")
    ap.add_argument("--heatmap-keys", metavar="ROWS,COLS",
                    help="the two swept keys a sweep heatmap is drawn over (full or short names, "
                         "e.g. block_size,enable_prefix_caching; default: the first two)")
    ap.add_argument("--lines", metavar="METRIC[,METRIC...]",
                    help="sweep line figures: each metric (a summary.json key such as "
                         "output_throughput or kv_breakdown.free, or normalized_latency_s) "
                         "against a numeric swept key (default: normalized_latency_s, "
                         "mean_batch_size, output_throughput); 'none' draws none")
    ap.add_argument("--x", metavar="KEY",
                    help="the numeric swept key on the x axis of the line figures and where "
                         "the breakdown bars are taken (default: a rate_per_s key, else the "
                         "first numeric key with 3+ values)")
    ap.add_argument("--by", metavar="KEY",
                    help="the swept key whose values are the lines and the breakdown bars "
                         "(default: engine.profile when swept, else the first other key)")
    ap.add_argument("--at", metavar="VALUE",
                    help="the value of the x key the breakdown bars are drawn at (default: its "
                         "largest)")
    ap.add_argument("--ttft-slo-ms", type=float, metavar="MS",
                    help="P/D sweeps' goodput figure: the TTFT target (default 1000)")
    ap.add_argument("--tpot-slo-ms", type=float, metavar="MS",
                    help="P/D sweeps' goodput figure: the TPOT target (default 25)")
    ap.add_argument("--attainment", type=float, metavar="FRACTION",
                    help="P/D sweeps' goodput figure: the share of requests that must meet both "
                         "targets (default 0.9, DistServe's)")
    ap.add_argument("--per-run", action="store_true",
                    help="when comparing, also draw each run's own figures under OUT_DIR/runs/")
    ap.add_argument("-q", "--quiet", action="store_true", help="print only errors")
    return ap.parse_args(argv)


def _unique_labels(runs):
    seen = {}
    for r in runs:
        seen.setdefault(r.label, []).append(r)
    for label, rs in seen.items():
        if len(rs) > 1:
            for r in rs:
                base = os.path.basename(os.path.normpath(r.path)) if r.path else ""
                r.display = "%s (%s)" % (label, base) if base and base != label else label
    # Still equal (same folder name twice): number them.
    seen = {}
    for r in runs:
        seen.setdefault(r.label, []).append(r)
    for label, rs in seen.items():
        if len(rs) > 1:
            for i, r in enumerate(rs):
                r.display = "%s #%d" % (label, i + 1)


class Drawer:
    """Runs figure functions, collecting figures, skip reasons and failures."""

    def __init__(self, quiet):
        self.quiet = quiet
        self.failed = 0

    def say(self, msg):
        if not self.quiet:
            print(msg)

    def draw(self, name, fn, figures, skipped, *args):
        from common import Skipped

        try:
            result = fn(*args)
        except Skipped as e:
            skipped.append((name, str(e)))
            self.say("  skipped %s: %s" % (name, e))
            return None
        except Exception as e:  # one broken figure must not lose the others
            self.failed += 1
            skipped.append((name, "failed: %s" % e))
            sys.stderr.write("kvsim plot: %s failed:\n%s" % (name, traceback.format_exc()))
            return None
        extra = None
        if isinstance(result, tuple):
            result, extra = result
        for f in result if isinstance(result, list) else [result]:
            figures.append(f)
            self.say("  %s" % f.stem)
        return extra


def plot_single(run, out, formats, max_points, drawer):
    import cluster
    import pd
    import single_run
    from report import write_index

    figures, skipped = [], []
    drawer.say("%s -> %s" % (run.path, out))
    for fn in single_run.FIGURES:
        drawer.draw(fn.__name__, fn, figures, skipped, run, out, formats, max_points)
    if cluster.is_cluster(run):
        for fn in cluster.FIGURES:
            drawer.draw(fn.__name__, fn, figures, skipped, run, out, formats, max_points)
    if pd.is_pd(run):
        for fn in pd.FIGURES:
            drawer.draw(fn.__name__, fn, figures, skipped, run, out, formats, max_points)
    os.makedirs(out, exist_ok=True)
    write_index(out, "kvsim run: %s" % run.label, os.path.abspath(run.path), figures, skipped,
                [run], single=True)


def _check_lines(lines, sweeps, runs):
    """--x / --by must name a key some sweep varies, and each --lines metric must be a derived
    metric or a number in some run's summary.json (a typo is an error, not an empty figure)."""
    import difflib

    from compare import _metric
    from sweep_lines import DERIVED

    varied = sorted({k for sw in sweeps for k in sw.keys})
    names = set(varied) | {k.rsplit(".", 1)[-1] for k in varied}
    for flag in ("x", "by"):
        key = lines.get(flag)
        if key and key not in names:
            _die("--%s: no sweep varies '%s' (swept keys: %s)" % (flag, key,
                                                                   ", ".join(varied) or "none"))
    known = set(DERIVED)
    for r in runs:
        for k, v in r.summary.items():
            if isinstance(v, dict):
                known |= {"%s.%s" % (k, kk) for kk in v}
            else:
                known.add(k)
    for m in lines.get("metrics", []):
        if m not in DERIVED and not any(_metric(r.summary, m) is not None for r in runs):
            close = difflib.get_close_matches(m, sorted(known), n=1)
            _die("--lines: no run has a metric '%s'%s" % (
                m, " (did you mean '%s'?)" % close[0] if close else ""))


def plot_compare(runs, sweeps, out, formats, max_points, per_run, heatmap_keys, drawer,
                 lines=None, slo=None):
    import cluster
    import pd
    import compare
    import sweep_lines
    from report import write_index

    all_runs = list(runs)
    for sw in sweeps:
        for r in sw.runs:
            if len(sweeps) > 1 or runs:
                r.group = sw.name
                if r.params:
                    r.display = "%s: %s" % (sw.name, r.label)
            all_runs.append(r)
    if not all_runs:
        _die("no runs found in %s" % ", ".join(s.path for s in sweeps))
    _unique_labels(all_runs)
    if heatmap_keys:
        varied = {k for sw in sweeps for key in sw.keys for k in (key, key.rsplit(".", 1)[-1])}
        unknown = [k for k in heatmap_keys if k not in varied]
        if unknown:
            _die("--heatmap-keys: no sweep varies %s (swept keys: %s)" % (
                ", ".join(unknown), ", ".join(sorted({k for sw in sweeps for k in sw.keys}))
                or "none"))
    _check_lines(lines or {}, sweeps, all_runs)
    figures, skipped = [], []
    drawer.say("%d runs -> %s" % (len(all_runs), out))
    drawer.draw("hit_rate_vs_capacity", compare.hit_rate_vs_capacity, figures, skipped,
                all_runs, out, formats)
    drawer.draw("kv_breakdown_bars", compare.kv_breakdown_bars, figures, skipped, all_runs, out,
                formats)
    latency = drawer.draw("latency_table", compare.latency_table, figures, skipped, all_runs, out,
                          formats)
    drawer.draw("latency_cdf_overlay", compare.latency_cdf_overlay, figures, skipped, all_runs,
                out, formats)
    drawer.draw("metrics_bars", compare.metrics_bars, figures, skipped, all_runs, out, formats)
    drawer.draw("engine_timelines", compare.engine_timelines, figures, skipped, all_runs, out,
                formats, max_points)
    drawer.draw("engine_bars", compare.engine_bars, figures, skipped, all_runs, out, formats)
    drawer.draw("run_timelines", compare.run_timelines, figures, skipped, all_runs, out, formats,
                max_points)
    for sw in sweeps:
        drawer.draw("heatmap " + sw.name, compare.sweep_heatmaps, figures, skipped, sw, out,
                    formats, heatmap_keys)
    lines = lines or {}
    for sw in sweeps:
        prefix = "" if len(sweeps) == 1 else compare._slug(sw.name) + "_"
        if any(cluster.is_cluster(r) for r in sw.runs):
            drawer.draw("cluster hit rate %s" % sw.name, cluster.sweep_hit_rate, figures,
                        skipped, sw, out, formats, prefix)
        if pd.is_pd_sweep(sw):
            drawer.draw("P/D goodput %s" % sw.name, pd.goodput_with_table, figures, skipped,
                        sw, out, formats, prefix, slo)
        # A cache_only sweep has no steps, latencies or throughput: its default line figures and
        # breakdown bars would be all zeros.
        cache_only = sw.runs and all(r.summary.get("mode") == "cache_only" for r in sw.runs)
        if cache_only and "metrics" not in lines:
            skipped.append(("lines %s" % sw.name,
                            "a cache_only sweep (no steps or latencies; --lines names metrics)"))
        for metric in lines.get("metrics", [] if cache_only else sweep_lines.DEFAULT_METRICS):
            drawer.draw("lines %s %s" % (sw.name, metric), sweep_lines.metric_lines, figures,
                        skipped, sw, out, formats, metric, lines.get("x"), lines.get("by"),
                        prefix)
        if cache_only:
            skipped.append(("breakdown bars %s" % sw.name, "a cache_only sweep has no steps"))
        else:
            drawer.draw("breakdown bars %s" % sw.name, sweep_lines.breakdown_by, figures, skipped,
                        sw, out, formats, lines.get("by"), lines.get("x"), lines.get("at"),
                        prefix)
    os.makedirs(out, exist_ok=True)
    title = "kvsim comparison: " + ", ".join(
        [s.name for s in sweeps] + [r.label for r in runs][:6] + (["..."] if len(runs) > 6 else []))
    subtitle = "%d runs from %s" % (len(all_runs), ", ".join(
        os.path.abspath(p) for p in [s.path for s in sweeps] + [r.path for r in runs][:6]))
    write_index(out, title, subtitle, figures, skipped, all_runs, single=False, latency=latency)
    if per_run:
        for r in all_runs:
            if r.path:
                plot_single(r, os.path.join(out, "runs", compare._slug(r.label)), formats,
                            max_points, drawer)


def main(argv=None):
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    try:
        import matplotlib  # noqa: F401  (only checking that it imports)
        import numpy  # noqa: F401
    except ImportError as e:
        _die("%s cannot import %s; kvsim plot needs Debian's python3-matplotlib and runs under "
             "/usr/bin/python3 (apt-get install python3-matplotlib)" % (sys.executable, e.name))
    from rundata import DataError, collect

    formats = [f.strip().lower() for f in args.format.split(",") if f.strip()]
    bad = [f for f in formats if f not in ("png", "svg", "pdf")]
    if bad or not formats:
        _die("--format: unknown format(s) %s (allowed: png, svg, pdf)" % ", ".join(bad))
    if "png" not in formats:
        formats.insert(0, "png")  # index.html shows the PNGs
    if args.max_points < 10:
        _die("--max-points must be at least 10")
    heatmap_keys = None
    if args.heatmap_keys:
        heatmap_keys = [k.strip() for k in args.heatmap_keys.split(",")]
        if len(heatmap_keys) != 2 or not all(heatmap_keys):
            _die("--heatmap-keys takes two keys: ROWS,COLS")
    lines = {"x": args.x, "by": args.by, "at": args.at}
    if args.lines:
        metrics = [m.strip() for m in args.lines.split(",") if m.strip()]
        lines["metrics"] = [] if metrics == ["none"] else metrics
    import pd

    slo = {k: v for k, v in (("ttft_slo_ms", args.ttft_slo_ms), ("tpot_slo_ms", args.tpot_slo_ms),
                             ("attainment", args.attainment)) if v is not None}
    msg = pd.check_slo_args(slo.get("ttft_slo_ms", 1.0), slo.get("tpot_slo_ms", 1.0),
                            slo.get("attainment", 1.0))
    if msg:
        _die(msg)
    drawer = Drawer(args.quiet)
    try:
        runs, sweeps = collect(args.paths)
        if len(runs) == 1 and not sweeps:
            out = args.out or os.path.join(runs[0].path, "plots")
            plot_single(runs[0], out, formats, args.max_points, drawer)
        else:
            if args.out:
                out = args.out
            elif len(sweeps) == 1 and not runs:
                out = os.path.join(sweeps[0].path, "plots")
            else:
                out = "plots-compare"
            plot_compare(runs, sweeps, out, formats, args.max_points, args.per_run,
                         heatmap_keys, drawer, lines, slo)
    except DataError as e:
        _die(str(e))
    drawer.say("index: %s" % os.path.join(out, "index.html"))
    return 1 if drawer.failed else 0


if __name__ == "__main__":
    sys.exit(main())
