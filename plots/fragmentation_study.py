"""The fragmentation study's KV breakdown beside the PagedAttention paper's Fig. 2.

    /usr/bin/python3 plots/fragmentation_study.py SWEEP_DIR [-o OUT_DIR] [--at RATE]
                                                  [--format png,svg]

SWEEP_DIR is the folder `kvsim sweep scenarios/fragmentation-study.yaml` writes. The figure,
OUT_DIR/kv_breakdown_by_profile.png (OUT_DIR defaults to SWEEP_DIR/plots, where `kvsim plot`
writes; it replaces that command's generic figure of the same name), has one panel per lengths
file and, per profile, one bar per placement (engine.contiguous_fit: first fit, buddy) at the
highest rate (or --at), each the mean share of the pool over the steps with requests waiting
(sweep_lines.loaded_breakdown, as `kvsim plot` averages), and the paper's Fig. 2 bar beside the
ShareGPT-like ones (hatched). vLLM does not read the placement: its runs give one bar.

The paper's last category is "external fragmentation & others" (every slot not in use); its bars
are drawn with that share in the external-fragmentation colour."""

import argparse
import os
import sys

import numpy as np

from common import BREAKDOWN, percent_axis, plt, save
from rundata import DataError, fmt_value, one_sweep, short_key, sort_key
from sweep_lines import loaded_breakdown, pretty

# Kwon et al., SOSP'23, Fig. 2 (OPT-13B, ShareGPT): % of the KV memory as token states,
# reservation, internal fragmentation, external fragmentation & others.
PAPER_FIG2 = {
    "orca-max": (20.4, 13.3, 57.3, 8.9),
    "orca-pow2": (26.8, 17.9, 13.6, 41.6),
    "orca-oracle": (38.2, 25.2, 0.0, 36.6),
    "vllm": (96.3, 0.0, 0.0, 3.7),
}
PAPER_KEYS = ("token_states", "reservation", "internal_fragmentation", "external_fragmentation")
PAPER_LENGTHS = "sharegpt-like"
CONTIGUOUS = ("orca-max", "orca-pow2", "orca-oracle")
PLACEMENT_LABEL = {"first_fit": "first fit", "best_fit": "best fit", "buddy": "buddy"}


def _key(sweep, short):
    for k in sweep.keys:
        if short_key(k) == short:
            return k
    raise DataError("sweep %s does not vary %s (it varies: %s)" % (
        sweep.name, short, ", ".join(sweep.keys) or "nothing"))


def _paper_row(profile):
    if profile.startswith("vllm"):
        return PAPER_FIG2["vllm"]
    return PAPER_FIG2.get(profile)


def draw(sweep, out, formats, at=None):
    rate_key = _key(sweep, "rate_per_s")
    profile_key = _key(sweep, "profile")
    lengths_key = _key(sweep, "lengths")
    fit_key = next((k for k in sweep.keys if short_key(k) == "contiguous_fit"), None)
    rates = sorted({dict(r.params)[rate_key] for r in sweep.runs}, key=sort_key)
    at_value = rates[-1] if at is None else next(
        (v for v in rates if fmt_value(v) == str(at) or str(v) == str(at)), None)
    if at_value is None:
        raise DataError("--at %s: rate_per_s takes %s" % (at, ", ".join(fmt_value(v)
                                                                          for v in rates)))
    runs = [r for r in sweep.runs if dict(r.params)[rate_key] == at_value]
    lengths = sorted({dict(r.params)[lengths_key] for r in runs},
                     key=lambda v: (pretty(v) != PAPER_LENGTHS, sort_key(v)))
    profiles = sorted({dict(r.params)[profile_key] for r in runs},
                      key=lambda p: (CONTIGUOUS.index(p) if p in CONTIGUOUS else 9, p))
    fits = sorted({dict(r.params)[fit_key] for r in runs}, key=lambda f: (f != "first_fit", f)) \
        if fit_key else [None]

    # Rows, top to bottom: per profile its placements (one row for a paged profile), then the
    # paper's bar.
    rows = []
    for p in profiles:
        for f in (fits if p in CONTIGUOUS else fits[:1]):
            rows.append((p, f, "%s, %s" % (p, PLACEMENT_LABEL.get(f, f)) if p in CONTIGUOUS
                         and f else p))
        if _paper_row(p):
            rows.append((p, "paper", "%s, paper Fig. 2" % p))
    shares = {}
    for r in runs:
        params = dict(r.params)
        b = loaded_breakdown(r)
        if b is not None:
            shares[(params[lengths_key], params[profile_key],
                    params[fit_key] if fit_key else None)] = b[0]

    shown = [b for b in BREAKDOWN if any(s.get(b[0], 0) > 0 for s in shares.values())
             or b[0] in PAPER_KEYS]
    height = 1.6 + 0.36 * len(rows)
    fig, axes = plt.subplots(1, len(lengths), figsize=(1.8 + 5.6 * len(lengths), height),
                             squeeze=False, sharey=True)
    axes = list(axes[0])
    y = np.arange(len(rows))[::-1]
    for ax, lv in zip(axes, lengths):
        paper_here = pretty(lv) == PAPER_LENGTHS
        left = np.zeros(len(rows))
        for key, label, color in shown:
            vals = np.zeros(len(rows))
            for i, (p, f, _) in enumerate(rows):
                if f == "paper":
                    if paper_here and key in PAPER_KEYS:
                        vals[i] = _paper_row(p)[PAPER_KEYS.index(key)] / 100.0
                else:
                    vals[i] = shares.get((lv, p, f), {}).get(key, 0.0)
            paper = np.array([f == "paper" for _, f, _ in rows])
            for mask, hatch in ((~paper, None), (paper, "//")):
                ax.barh(y[mask], vals[mask], left=left[mask], color=color, height=0.72,
                        edgecolor="white", linewidth=0.5, hatch=hatch,
                        label=label if hatch is None else None)
            for yi, l, v in zip(y, left, vals):
                if v >= 0.05:
                    ax.text(l + v / 2, yi, "%.1f" % (100 * v), ha="center", va="center",
                            fontsize=7.5, color="black" if key == "free" else "white")
            left += vals
        if not paper_here:
            for yi, (_, f, _) in zip(y, rows):
                if f == "paper":
                    ax.text(0.01, yi, "(the paper's Fig. 2 is ShareGPT)", va="center",
                            fontsize=7.5, color="#555555")
        ax.set_yticks(y)
        ax.set_yticklabels([label for _, _, label in rows], fontsize=8.5)
        ax.set_xlim(0, 1)
        percent_axis(ax, "x")
        ax.grid(axis="y", visible=False)
        ax.set_title(pretty(lv))
        ax.set_xlabel("share of the KV pool")
    h, lab = axes[0].get_legend_handles_labels()
    h.append(plt.Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="#555555", hatch="//"))
    lab.append("paper Fig. 2 (last share: external frag. & others)")
    fig.legend(h, lab, loc="lower center", ncol=min(len(lab), 4), frameon=False,
               bbox_to_anchor=(0.5, 0.0), fontsize=8.5)
    fig.suptitle("KV memory breakdown per profile and placement at rate_per_s=%s, beside the "
                 "PagedAttention paper's Fig. 2\n(%% of the pool, mean over the steps with "
                 "requests waiting)" % fmt_value(at_value))
    save(fig, out, "kv_breakdown_by_profile", formats, rect=(0, 0.95 / height, 1, 1))
    return os.path.join(out, "kv_breakdown_by_profile.png")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep", help="the fragmentation study's sweep folder")
    ap.add_argument("-o", "--out", help="output folder (default: SWEEP/plots)")
    ap.add_argument("--at", help="the rate_per_s of the bars (default: the highest)")
    ap.add_argument("--format", default="png,svg", help="png, svg, pdf (comma-separated)")
    args = ap.parse_args(argv)
    formats = [f.strip() for f in args.format.split(",") if f.strip()]
    try:
        sweep = one_sweep(args.sweep)
        path = draw(sweep, args.out or os.path.join(args.sweep, "plots"), formats, args.at)
    except DataError as e:
        print("fragmentation_study.py: %s" % e, file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
