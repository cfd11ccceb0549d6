#!/usr/bin/env python3
"""Writes the length presets of scenarios/lengths/ (read by `workload.lengths`).

    python3 scripts/gen_length_presets.py [OUT_DIR]     (default: scenarios/lengths)

Each preset is a CSV of (prompt_tokens, output_tokens) rows with the mean lengths the
PagedAttention paper (SOSP'23, §6.1) reports for its datasets:

    sharegpt-like   mean prompt 161.31, mean output 337.99
    alpaca-like     mean prompt  19.31, mean output  58.45

The datasets themselves are not shipped (licences, size); these are synthetic stand-ins:
  - each length is lognormal (heavy right tail), prompt and output independent, with the log's
    standard deviation SIGMA below (a choice: the paper gives means and histograms only);
  - a pair is kept only if prompt <= 1024 and prompt + output <= 2048, the filter vLLM's
    benchmark_serving.py applies to ShareGPT (OPT's context is 2048 tokens), so a preset never
    asks for more than the model's context; rejected pairs are redrawn;
  - the lognormal location (mu) of each length is then solved (bisection) so that the kept
    rows' mean matches the paper's mean to 0.005 token.
Deterministic: the draws come from Python's random.Random(seed).random() (whose output the
language keeps stable across versions) through Box-Muller, so rerunning writes the same bytes.
"""

import math
import os
import random
import sys

ROWS = 10000
PROMPT_CAP = 1024
CONTEXT = 2048

# name: (seed, prompt mean, prompt sigma, output mean, output sigma)
PRESETS = {
    "sharegpt-like": (161, 161.31, 1.2, 337.99, 1.0),
    "alpaca-like": (19, 19.31, 0.7, 58.45, 0.9),
}


def normals(seed, n):
    """n pairs of independent standard normals (Box-Muller on random())."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        u1 = 1.0 - rng.random()  # (0, 1]
        u2 = rng.random()
        r = math.sqrt(-2.0 * math.log(u1))
        out.append((r * math.cos(2 * math.pi * u2), r * math.sin(2 * math.pi * u2)))
    return out


def rows_for(zs, mu_p, s_p, mu_o, s_o):
    rows = []
    for zp, zo in zs:
        p = max(1, int(round(math.exp(mu_p + s_p * zp))))
        o = max(1, int(round(math.exp(mu_o + s_o * zo))))
        if p <= PROMPT_CAP and p + o <= CONTEXT:
            rows.append((p, o))
            if len(rows) == ROWS:
                return rows
    raise RuntimeError("not enough draws kept; raise the candidate count")


def mean(rows, k):
    return sum(r[k] for r in rows) / len(rows)


def solve(seed, mp, sp, mo, so):
    zs = normals(seed, 4 * ROWS)
    # Start from the untruncated lognormal's location, then bisect each mu in turn.
    mu = [math.log(mp) - sp * sp / 2, math.log(mo) - so * so / 2]
    target = [mp, mo]
    for _ in range(20):
        for k in (0, 1):
            lo, hi = mu[k] - 2.0, mu[k] + 2.0
            for _ in range(60):
                mu[k] = (lo + hi) / 2
                m = mean(rows_for(zs, mu[0], sp, mu[1], so), k)
                if m < target[k]:
                    lo = mu[k]
                else:
                    hi = mu[k]
        rows = rows_for(zs, mu[0], sp, mu[1], so)
        if all(abs(mean(rows, k) - target[k]) < 0.005 for k in (0, 1)):
            return rows, mu
    raise RuntimeError("means did not converge")


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "scenarios", "lengths")
    os.makedirs(out_dir, exist_ok=True)
    for name, (seed, mp, sp, mo, so) in PRESETS.items():
        rows, mu = solve(seed, mp, sp, mo, so)
        path = os.path.join(out_dir, name + ".csv")
        with open(path, "w", newline="") as f:
            f.write("prompt_tokens,output_tokens\n")
            for p, o in rows:
                f.write("%d,%d\n" % (p, o))
        ps = sorted(r[0] for r in rows)
        os_ = sorted(r[1] for r in rows)
        print("%s: %d rows, mean prompt %.4f (median %d, p99 %d, max %d), mean output %.4f "
              "(median %d, p99 %d, max %d); mu = %.6f, %.6f" % (
                  path, len(rows), mean(rows, 0), ps[len(ps) // 2], ps[len(ps) * 99 // 100],
                  ps[-1], mean(rows, 1), os_[len(os_) // 2], os_[len(os_) * 99 // 100], os_[-1],
                  mu[0], mu[1]))


if __name__ == "__main__":
    main()
