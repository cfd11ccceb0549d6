"""index.html: the figures beside the summary table, so a person can look rather than read."""

import html
import os

SINGLE_SECTIONS = [
    ("Run", ["name", "seed", "profile", "mode", "block_size", "num_gpu_blocks",
             "enable_prefix_caching"]),
    ("Requests", ["completed", "rejected", "aborted", "aborted_output_tokens",
                  "total_input_tokens", "total_output_tokens", "duration", "request_throughput",
                  "output_throughput", "total_token_throughput", "overloaded",
                  "arrival_rate_per_s", "completion_rate_per_s"]),
    ("Latency (ms)", ["mean_ttft_ms", "p50_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
                      "p99_tpot_ms", "mean_itl_ms", "p99_itl_ms", "mean_e2el_ms", "p99_e2el_ms",
                      "mean_queue_ms", "p99_queue_ms"]),
    ("Prefix cache", ["prefix_cache_queries", "prefix_cache_hits", "prefix_cache_hit_rate",
                      "first_lookup_hit_rate"]),
    ("KV cache", ["num_preemptions", "num_evictions", "num_blocks_allocated", "num_steps",
                  "mean_kv_cache_usage_perc", "max_kv_cache_usage_perc", "mean_num_running",
                  "mean_num_waiting"]),
]
UNITS = {"duration": "s", "request_throughput": "req/s", "output_throughput": "tok/s",
         "total_token_throughput": "tok/s", "arrival_rate_per_s": "req/s",
         "completion_rate_per_s": "req/s"}
PERCENT = ("prefix_cache_hit_rate", "first_lookup_hit_rate", "mean_kv_cache_usage_perc",
           "max_kv_cache_usage_perc")

COMPARE_COLUMNS = [
    ("prefix_cache_hit_rate", "hit rate"), ("first_lookup_hit_rate", "first-lookup hit rate"),
    ("num_preemptions", "preempt."), ("num_evictions", "evictions"),
    ("p99_ttft_ms", "p99 TTFT (ms)"), ("p99_tpot_ms", "p99 TPOT (ms)"),
    ("output_throughput", "output tok/s"), ("mean_kv_cache_usage_perc", "mean KV usage"),
    ("kv_breakdown.token_states", "token states"),
    ("kv_breakdown.internal_fragmentation", "internal frag."),
    ("kv_breakdown.reservation", "reservation"),
]

CSS = """
body { font-family: system-ui, sans-serif; margin: 1.2em; color: #222; }
h1 { font-size: 1.4em; margin: 0 0 0.2em 0; }
.sub { color: #666; margin-bottom: 1em; font-size: 0.9em; }
.layout { display: grid; grid-template-columns: minmax(0, 3fr) minmax(320px, 2fr); gap: 1.5em;
          align-items: start; }
.figures figure { margin: 0 0 1.5em 0; border: 1px solid #ddd; border-radius: 6px; padding: 0.6em;
                  background: #fff; }
.figures img { width: 100%; height: auto; }
figcaption { font-size: 0.85em; color: #555; }
figcaption b { color: #222; }
.side { position: sticky; top: 0.5em; max-height: 97vh; overflow: auto; }
table { border-collapse: collapse; font-size: 0.85em; width: 100%; }
th, td { border-bottom: 1px solid #e4e4e4; padding: 3px 6px; text-align: right;
         white-space: nowrap; }
th { background: #e8eef7; position: sticky; top: 0; }
td.k, th.k { text-align: left; }
tr.sec td { background: #f4f4f4; font-weight: bold; text-align: left; }
.skipped { font-size: 0.85em; color: #8a5a00; }
"""


def _fmt(key, v):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, float):
        if key in PERCENT or key.startswith("kv_breakdown."):
            return "%.2f%%" % (100 * v)
        return "%.4g" % v if abs(v) < 1e4 else "{:,.0f}".format(v)
    if isinstance(v, int):
        return "{:,}".format(v)
    return str(v)


def _get(summary, key):
    v = summary
    for part in key.split("."):
        if not isinstance(v, dict):
            return None
        v = v.get(part)
    return v


def _single_table(run):
    s = run.summary
    out = ["<table>"]
    shown = set()
    for title, keys in SINGLE_SECTIONS:
        out.append('<tr class="sec"><td colspan="2">%s</td></tr>' % html.escape(title))
        for k in keys:
            if k in s:
                shown.add(k)
                unit = UNITS.get(k, "")
                out.append('<tr><td class="k">%s</td><td>%s%s</td></tr>' % (
                    html.escape(k), html.escape(_fmt(k, s[k])), " " + unit if unit else ""))
    kb = s.get("kv_breakdown")
    if isinstance(kb, dict):
        shown.add("kv_breakdown")
        out.append('<tr class="sec"><td colspan="2">KV breakdown (mean share of pool)</td></tr>')
        for k, v in kb.items():
            out.append('<tr><td class="k">%s</td><td>%s</td></tr>' % (
                html.escape(k), html.escape(_fmt("kv_breakdown." + k, v))))
    groups = s.get("kv_cache_groups")
    if isinstance(groups, dict):
        shown.add("kv_cache_groups")
        out.append('<tr class="sec"><td colspan="2">KV cache groups (mean usage, max usage, '
                   'token states)</td></tr>')
        for k in sorted(groups, key=lambda g: int(g[1:]) if g[1:].isdigit() else 0):
            g = groups[k]
            desc = k + ": " + str(g.get("kind", "?")).replace("_", " ")
            for w in ("sliding_window", "attention_chunk_size"):
                if w in g:
                    desc += " %s" % g[w]
            if g.get("num_layers"):
                desc += " (%d layers)" % g["num_layers"]
            vals = "%s, %s, %s" % (
                _fmt("mean_kv_cache_usage_perc", g.get("mean_kv_cache_usage_perc")),
                _fmt("max_kv_cache_usage_perc", g.get("max_kv_cache_usage_perc")),
                _fmt("kv_breakdown.token_states", g.get("kv_breakdown", {}).get("token_states")))
            out.append('<tr><td class="k">%s</td><td>%s</td></tr>' % (html.escape(desc),
                                                                     html.escape(vals)))
    rest = [k for k in s if k not in shown]
    if rest:
        out.append('<tr class="sec"><td colspan="2">Other</td></tr>')
        for k in rest:
            out.append('<tr><td class="k">%s</td><td>%s</td></tr>' % (
                html.escape(k), html.escape(_fmt(k, s[k]))))
    out.append("</table>")
    return "\n".join(out)


def _compare_table(runs, latency):
    out = ['<h3>Summary</h3><table><tr><th class="k">run</th>']
    out += ["<th>%s</th>" % html.escape(h) for _, h in COMPARE_COLUMNS]
    out.append("</tr>")
    for r in runs:
        out.append('<tr><td class="k">%s</td>' % html.escape(r.label))
        out += ["<td>%s</td>" % html.escape(_fmt(k, _get(r.summary, k)))
                for k, _ in COMPARE_COLUMNS]
        out.append("</tr>")
    out.append("</table>")
    if latency:
        header, rows = latency
        out.append('<h3>Latency percentiles</h3><table><tr>')
        out += ['<th%s>%s</th>' % (' class="k"' if i == 0 else "", html.escape(h))
                for i, h in enumerate(header)]
        out.append("</tr>")
        for row in rows:
            out.append("<tr>" + "".join('<td%s>%s</td>' % (' class="k"' if i == 0 else "",
                                                            html.escape(c))
                                        for i, c in enumerate(row)) + "</tr>")
        out.append("</table>")
    return "\n".join(out)


def write_index(out_dir, title, subtitle, figures, skipped, runs, single, latency=None):
    """Writes out_dir/index.html. figures: [Figure]; skipped: [(figure name, reason)]."""
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             "<title>%s</title>" % html.escape(title), "<style>%s</style></head><body>" % CSS,
             "<h1>%s</h1>" % html.escape(title),
             '<div class="sub">%s</div>' % html.escape(subtitle),
             '<div class="layout"><div class="figures">']
    for f in figures:
        png, svg = f.stem + ".png", f.stem + ".svg"
        link = svg if os.path.exists(os.path.join(out_dir, svg)) else png
        parts.append('<figure id="%s"><a href="%s"><img src="%s" alt="%s"></a>'
                     "<figcaption><b>%s</b>: %s</figcaption></figure>" % (
                         html.escape(f.stem), html.escape(link), html.escape(png),
                         html.escape(f.title), html.escape(f.title), html.escape(f.caption)))
    if skipped:
        parts.append('<div class="skipped"><b>Not drawn:</b><ul>')
        parts += ["<li>%s: %s</li>" % (html.escape(n), html.escape(why)) for n, why in skipped]
        parts.append("</ul></div>")
    parts.append('</div><div class="side">')
    parts.append(_single_table(runs[0]) if single else _compare_table(runs, latency))
    parts.append("</div></div></body></html>")
    with open(os.path.join(out_dir, "index.html"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(parts) + "\n")
