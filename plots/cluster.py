"""Figures of cluster runs (`cluster.replicas` > 1; sim/OUTPUTS.md, "Cluster runs"): per run, the
requests each replica was routed over time with each replica's hit rate, and each replica's KV
usage and queue over time (from replicas/<r>/steps.csv, timed runs); per sweep, the cluster-wide
first-lookup hit rate and the load imbalance against the replica count, one line per router."""

import csv
import os

import numpy as np

from common import Figure, Skipped, colors, percent_axis, plt, save, thousands
from rundata import DataError, load_steps


def is_cluster(run):
    return int(run.summary.get("num_replicas", 1) or 1) > 1 and "replicas" in run.summary


def _need_cluster(run):
    if not is_cluster(run):
        raise Skipped("not a cluster run (no num_replicas > 1 in %s/summary.json)" % run.path)


def _routed_over_time(run):
    """(times, replica) of every request routed, in arrival order, from requests.csv's
    `replica` column (refused requests, with an empty replica, left out); in a P/D run from
    `prefill_replica` and `decode_replica` (a request counts on both of its replicas)."""
    path = run.file("requests.csv")
    if not path:
        raise Skipped("no requests.csv in %s" % run.path)
    t, rep = [], []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = [c.strip() for c in next(reader, [])]
        cols = ["replica"] if "replica" in header else ["prefill_replica", "decode_replica"]
        if any(c not in header for c in cols) or "arrival_s" not in header:
            raise Skipped("%s has no replica column" % path)
        ia = header.index("arrival_s")
        irs = [header.index(c) for c in cols]
        for line, row in enumerate(reader, start=2):
            for ir in irs:
                if not row or row[ir] == "":
                    continue
                try:
                    t.append(float(row[ia]))
                    rep.append(int(row[ir]))
                except (ValueError, IndexError):
                    raise DataError("%s:%d: malformed row" % (path, line))
    if not t:
        raise Skipped("%s: no routed request" % path)
    t = np.asarray(t)
    rep = np.asarray(rep, dtype=np.int64)
    order = np.argsort(t, kind="stable")
    return t[order], rep[order]


def replica_requests(run, out, formats, max_points):
    """Requests routed to each replica over time (cumulative), and each replica's requests and
    first-lookup hit rate (summary.json `replicas`)."""
    _need_cluster(run)
    t, rep = _routed_over_time(run)
    reps = run.summary["replicas"]
    n = len(reps)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    cols = colors(n)
    # Sample the cumulative counts at most max_points times.
    idx = np.unique(np.linspace(0, t.size - 1, min(t.size, max_points)).astype(np.int64))
    for r in range(n):
        cum = np.cumsum(rep == r)
        role = reps[r].get("role", "mixed") if isinstance(reps[r], dict) else "mixed"
        ax.plot(t[idx], cum[idx], color=cols[r], lw=1.2,
                label="replica %d%s" % (r, "" if role == "mixed" else " (%s)" % role))
    ax.set_xlabel("arrival time (s)")
    ax.set_ylabel("requests routed (cumulative)")
    ax.yaxis.set_major_formatter(thousands)
    npre = int(run.summary.get("num_prefill_replicas", 0) or 0)
    ax.set_title("%s: requests per replica (%s, %s; load imbalance %.3f)" % (
        run.name, run.summary.get("router_policy", "?"),
        "%d prefill + %d decode replicas" % (npre, n - npre) if npre else "%d replicas" % n,
        run.summary.get("load_imbalance_requests", float("nan"))))
    if n <= 16:
        ax.legend(loc="upper left", ncol=2 if n > 8 else 1, frameon=False)
    x = np.arange(n)
    routed = [int(r.get("requests_routed", 0)) for r in reps]
    hit = [float(r.get("first_lookup_hit_rate", 0.0)) for r in reps]
    bx.bar(x, routed, color=cols, alpha=0.55)
    bx.set_xlabel("replica")
    bx.set_ylabel("requests routed (bars)")
    bx.yaxis.set_major_formatter(thousands)
    hx = bx.twinx()
    hx.plot(x, hit, "o-", color="black", lw=1.2, ms=4, label="first-lookup hit rate")
    total = run.summary.get("first_lookup_hit_rate")
    if total is not None:
        hx.axhline(float(total), color="black", ls=":", lw=1,
                   label="cluster-wide %.4f" % float(total))
    hx.set_ylim(0, max(1e-9, max(hit + [float(total or 0)])) * 1.15)
    percent_axis(hx)
    hx.set_ylabel("first-lookup hit rate (line)")
    hx.grid(False)
    hx.legend(loc="lower right", frameon=False)
    if n <= 32:
        bx.set_xticks(x)
    bx.set_title("per replica")
    save(fig, out, "replica_requests", formats)
    return Figure("replica_requests", "Requests per replica",
                  "Requests routed to each replica over time (requests.csv `replica`), and each "
                  "replica's requests and first-lookup hit rate (summary.json `replicas`)")


def replica_kv_usage(run, out, formats, max_points):
    """Each replica's KV cache usage and running + waiting requests over time, from
    replicas/<r>/steps.csv."""
    _need_cluster(run)
    if run.summary.get("mode") == "cache_only":
        raise Skipped("cache_only runs have no steps (replicas/<r>/steps.csv are header only)")
    n = len(run.summary["replicas"])
    per = []
    for r in range(n):
        p = os.path.join(run.path, "replicas", str(r), "steps.csv")
        if not os.path.isfile(p):
            raise Skipped("no %s" % p)
        per.append(load_steps(p, max(10, max_points // max(1, n))) or None)
    if not any(s is not None for s in per):
        raise Skipped("the replicas' steps.csv have no rows")
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    cols = colors(n)
    for r, s in enumerate(per):
        if s is None:
            continue
        lab = "replica %d" % r
        ax.plot(s["time_s"], s["kv_cache_usage_perc"], color=cols[r], lw=1, label=lab)
        bx.plot(s["time_s"], s["num_running"] + s["num_waiting"], color=cols[r], lw=1, label=lab)
    ax.set_ylim(0, 1.02)
    percent_axis(ax)
    ax.set_ylabel("KV cache usage")
    ax.set_title("%s: KV usage and requests per replica (%s, %d replicas)" % (
        run.name, run.summary.get("router_policy", "?"), n))
    bx.set_ylabel("running + waiting requests")
    bx.set_xlabel("simulated time (s)")
    if n <= 16:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    save(fig, out, "replica_kv_usage", formats)
    return Figure("replica_kv_usage", "KV usage per replica",
                  "vLLM's kv_cache_usage_perc and running + waiting requests of each replica "
                  "(replicas/<r>/steps.csv)")


def _x_label_pairs(run, line_keys):
    x = run.summary.get("num_replicas")
    label = ", ".join(
        [str(run.summary.get("router_policy", "?"))] +
        ["%s=%s" % (k.rsplit(".", 1)[-1], v) for k, v in run.params if k in line_keys])
    return x, label


def sweep_hit_rate(sweep, out, formats, prefix=""):
    """Cluster-wide first-lookup hit rate (with the replicas' min-max) and the load imbalance
    against the number of replicas, one line per router (and per value of other swept keys)."""
    runs = [r for r in sweep.runs if "num_replicas" in r.summary]
    if not runs:
        raise Skipped("no cluster runs in sweep %s" % sweep.name)
    other = sorted({k for r in runs for k, _ in r.params
                    if k not in ("cluster.replicas", "cluster.router.policy")})
    lines = {}
    for r in runs:
        x, label = _x_label_pairs(r, other)
        lines.setdefault(label, []).append((int(x), r.summary))
    xs = sorted({x for pts in lines.values() for x, _ in pts})
    if len(xs) < 2:
        raise Skipped("sweep %s has fewer than two replica counts" % sweep.name)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 5))
    cols = colors(len(lines))
    marks = "os^Dvx<>"
    for i, ((label, pts), c) in enumerate(zip(sorted(lines.items()), cols)):
        m = marks[i % len(marks)]
        pts.sort(key=lambda p: p[0])
        x = np.array([p[0] for p in pts], dtype=float)
        hit = np.array([float(s.get("first_lookup_hit_rate", np.nan)) for _, s in pts])
        lo = np.array([float(s.get("replica_hit_rate_min", np.nan)) for _, s in pts])
        hi = np.array([float(s.get("replica_hit_rate_max", np.nan)) for _, s in pts])
        # Routers that decide alike (least_requests is round_robin in cache_only) overlap: the
        # markers and widths tell them apart.
        ax.plot(x, hit, "-", marker=m, color=c, lw=2.5 - 0.3 * i, ms=7 - i % 4, mfc="none",
                label=label)
        ax.fill_between(x, lo, hi, color=c, alpha=0.12, lw=0)
        req = np.array([float(s.get("load_imbalance_requests", np.nan)) for _, s in pts])
        tok = np.array([float(s.get("load_imbalance_prompt_tokens", np.nan)) for _, s in pts])
        bx.plot(x, req, "-", marker=m, color=c, lw=2.5 - 0.3 * i, ms=7 - i % 4, mfc="none",
                label=label)
        bx.plot(x, tok, "s--", color=c, lw=1, ms=3, alpha=0.8)
    for a in (ax, bx):
        a.set_xscale("log", base=2)
        a.set_xticks(xs)
        a.set_xticklabels([str(x) for x in xs])
        a.minorticks_off()
        a.set_xlabel("replicas")
    ax.set_ylim(0, None)
    percent_axis(ax)
    ax.set_ylabel("first-lookup hit rate (tokens, all replicas)")
    ax.set_title("%s: hit rate by router and replica count\n(band: the replicas' lowest to "
                 "highest)" % sweep.name)
    ax.legend(loc="best", frameon=False)
    bx.axhline(1.0, color="grey", lw=0.8, ls=":")
    bx.set_ylabel("load imbalance (max / mean)")
    bx.set_title("requests routed (solid), prompt tokens routed (dashed)")
    save(fig, out, prefix + "cluster_hit_rate", formats)
    return Figure(prefix + "cluster_hit_rate", "Hit rate and imbalance by router and replicas",
                  "Cluster-wide first-lookup hit rate (summed hits / summed prompt tokens) and "
                  "max / mean load per replica, against the replica count")


FIGURES = [replica_requests, replica_kv_usage]
