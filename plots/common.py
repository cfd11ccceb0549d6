"""Shared matplotlib setup and figure saving for the kvsim plots."""

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

# The KV memory breakdown (PagedAttention paper taxonomy), bottom to top, with fixed colours.
BREAKDOWN = [
    ("token_states", "token states", "#1f77b4"),
    ("reservation", "reservation", "#ff7f0e"),
    ("internal_fragmentation", "internal fragmentation", "#d62728"),
    ("external_fragmentation", "external fragmentation", "#9467bd"),
    ("cached_free", "cached free (prefix blocks, ref 0)", "#2ca02c"),
    ("free", "free", "#d9d9d9"),
]

plt.rcParams.update({
    "figure.dpi": 110,
    "savefig.dpi": 110,
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "svg.hashsalt": "kvsim",  # deterministic SVG ids
    "svg.fonttype": "none",
})


class Figure:
    """A saved figure: its file stem, a title and a one-line caption for index.html."""

    def __init__(self, stem, title, caption=""):
        self.stem = stem
        self.title = title
        self.caption = caption


class Skipped(Exception):
    """Raised by a figure function that cannot draw (a missing optional file, too few runs)."""


def save(fig, out_dir, stem, formats, rect=None):
    """Writes out_dir/stem.png and .svg (no timestamps, so the same data gives the same files).
    Lays the figure out with tight_layout inside `rect` (figure fraction), the whole figure when
    None: leave room there for a figure-level legend."""
    os.makedirs(out_dir, exist_ok=True)
    fig.tight_layout(rect=rect if rect is not None else (0, 0, 1, 1))
    for ext in formats:
        path = os.path.join(out_dir, "%s.%s" % (stem, ext))
        meta = {"Date": None} if ext == "svg" else {"Software": None}
        fig.savefig(path, format=ext, metadata=meta)
    plt.close(fig)


def percent_axis(ax, axis="y"):
    fmt = FuncFormatter(lambda v, _: "%g%%" % round(100 * v, 4))
    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(fmt)


def thousands(v, _=None):
    """Axis labels like 500, 2.5k, 20k, 1.5M."""
    if abs(v) >= 1e6:
        return "%gM" % round(v / 1e6, 3)
    if abs(v) >= 1e3:
        return "%gk" % round(v / 1e3, 3)
    return "%g" % v


def with_commas(v, _=None):
    """Axis labels like 2,048 and 131,072 (token counts)."""
    return "{:,}".format(int(round(v))) if v == int(v) else "%g" % v


def colors(n):
    """n distinguishable colours (tab10, then tab20, then viridis samples)."""
    if n <= 10:
        return [plt.get_cmap("tab10")(i) for i in range(n)]
    if n <= 20:
        return [plt.get_cmap("tab20")(i) for i in range(n)]
    cmap = plt.get_cmap("viridis")
    return [cmap(i / max(1, n - 1)) for i in range(n)]


def cdf_points(values, max_points=2000):
    """Sorted finite values and their cumulative fractions, thinned to about max_points."""
    import numpy as np

    v = np.sort(values[np.isfinite(values)])
    n = v.size
    if n == 0:
        return v, v
    y = np.arange(1, n + 1) / float(n)
    if n > max_points:
        idx = np.unique(np.linspace(0, n - 1, max_points).astype(np.int64))
        v, y = v[idx], y[idx]
    return v, y


def latency_axis(ax, values):
    """x scale and limits for a latency CDF of `values` (all plotted values, any order): log when
    they span two decades or more (max / 1st percentile of the positive ones), else linear, from 0
    or zoomed in when the values sit far from 0."""
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        ax.set_xlim(left=0)
        return
    lo, hi = float(v.min()), float(v.max())
    pos = v[v > 0]
    if pos.size and hi / max(float(np.percentile(pos, 1)), 1e-9) >= 100:
        ax.set_xscale("log")
        ax.set_xlim(max(float(pos.min()), hi * 1e-5) / 1.2, hi * 1.2)
        ax.xaxis.set_major_formatter(FuncFormatter(thousands))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda *_: ""))
        ax.set_xlabel(ax.get_xlabel() + ", log scale")
    elif hi <= lo:
        ax.set_xlim(left=0)
    elif lo > 0.4 * hi:
        pad = 0.05 * (hi - lo)
        ax.set_xlim(lo - pad, hi + pad)
    else:
        ax.set_xlim(0, hi * 1.02)
