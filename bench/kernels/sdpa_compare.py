#!/usr/bin/env python3
"""PyTorch SDPA on contiguous KV: the dense-KV bar of kernels.md §9.6 for bench_kernels --mode gpu.

Times torch.nn.functional.scaled_dot_product_attention (flash backend by default) with
q[B, Hq, q_len, D], k/v[B, Hkv, ctx, D] (token-major memory, as FlashAttention reads it),
enable_gqa=True: is_causal=False for decode, a bottom-right causal mask (causal_lower_right) for
q_len > 1. CUDA events around each call, warm-up, a >= 256 MB buffer written before every rep
(cold L2, and enough GPU work to hide Python's launch overhead), median/p10/p90 of the reps.

Shapes: with --shapes-from BENCH_CSV (a bench_kernels --mode gpu CSV), exactly that file's shapes
and its measured copy/read ceilings; otherwise the same built-in list as bench_kernels (worked
example, G sweep, §9 grid, long single sequences, append rows). The CSV has bench_kernels'
columns (backend = sdpa_<backend>, block_size 0, pages "contiguous"), so the two join on the
shape key (dtype, batch, context_tokens, q_len, num_q_heads, num_kv_heads, head_size); --join OUT
writes that join with SDPA's time and the speed-up of each kvsim row.

Without PyTorch or a CUDA device it prints one "skipped" line and exits 0.
"""

import argparse
import csv
import sys

SHAPE_KEY = ("dtype", "batch", "context_tokens", "q_len", "num_q_heads", "num_kv_heads", "head_size")
COLUMNS = ("backend,case,dtype,batch,context_tokens,q_len,num_q_heads,num_kv_heads,head_size,"
           "block_size,pages,path,path_forced,splits,median_us,p10_us,p90_us,bytes,gbps,"
           "pct_read_roof,pct_copy,pct_spec,tflops,out_nonfinite").split(",")
MAX_BYTES = 4.5e9  # bench_kernels' cap on a grid case


def builtin_shapes(quick):
    """The shapes of bench_kernels --mode gpu (bench/kernels/bench_gpu.cu), as (case, key) pairs."""
    shapes = []
    for dtype in ("f16", "bf16"):
        shapes.append(("worked_example", (dtype, 64, 4096, 1, 32, 8, 128)))
    for b in ([64] if quick else [8, 64]):
        for hq in (8, 16, 32, 64, 128):
            shapes.append(("gqa_paths", ("bf16", b, 4096, 1, hq, 8, 128)))
    heads = [(32, 8, 128, "llama3_8b"), (64, 8, 128, "llama3_70b"), (8, 1, 128, "70b_tp8"),
             (32, 32, 128, "mha"), (32, 8, 64, "d64"), (16, 8, 256, "d256")]
    batches = [1, 64] if quick else [1, 8, 32, 64, 128, 256]
    contexts = [512, 4096] if quick else [128, 512, 1024, 4096, 16384, 32768]
    for hq, hkv, d, name in heads:
        for b in batches:
            for ctx in contexts:
                key = ("bf16", b, ctx, 1, hq, hkv, d)
                if compulsory_bytes(key) <= MAX_BYTES:
                    shapes.append(("grid_" + name, key))
        if quick:
            break
    for ctx in (65536, 131072):
        shapes.append(("long_single", ("bf16", 1, ctx, 1, 32, 8, 128)))
    for q_len in (4, 8):
        shapes.append(("append", ("bf16", 64, 4096, q_len, 32, 8, 128)))
    return shapes


def compulsory_bytes(key):
    """K+V of every context token plus Q and O (contiguous KV: no block tables)."""
    dtype, b, ctx, q_len, hq, hkv, d = key
    elt = 2 if dtype in ("f16", "bf16") else 4
    return 2.0 * b * ctx * hkv * d * elt + 2.0 * b * q_len * hq * d * elt


def attention_flops(key):
    dtype, b, ctx, q_len, hq, hkv, d = key
    keys = sum(ctx - q_len + i + 1 for i in range(q_len))
    return 4.0 * b * keys * hq * d


def percentile(values, p):
    v = sorted(values)
    return v[min(int(p / 100.0 * (len(v) - 1) + 0.5), len(v) - 1)]


def read_bench_csv(path):
    """(shapes in file order, deduplicated; ceilings {copy, read} in GB/s; all rows)."""
    shapes, seen, ceilings = [], set(), {}
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        if r["backend"].startswith("ceiling_"):
            ceilings[r["backend"][len("ceiling_"):]] = float(r["gbps"])
            continue
        key = tuple(r[k] if k == "dtype" else int(r[k]) for k in SHAPE_KEY)
        if key not in seen:
            seen.add(key)
            shapes.append((r["case"], key))
    return shapes, ceilings, rows


def spec_gbps(name):
    if "H200" in name:
        return 4800.0
    if "H100" in name:
        return 2000.0 if "PCIe" in name else 3350.0
    return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", default="sdpa_gpu.csv", help="output CSV (default sdpa_gpu.csv)")
    ap.add_argument("--shapes-from", metavar="BENCH_CSV",
                    help="time the shapes of this bench_kernels --mode gpu CSV (and use its ceilings)")
    ap.add_argument("--join", metavar="OUT", help="with --shapes-from: write the joined CSV to OUT")
    ap.add_argument("--backends", default="flash",
                    help="SDPA backends timed on every shape: flash,cudnn,efficient,math (default flash)")
    ap.add_argument("--worked-example-backends", default="flash,cudnn,efficient,math",
                    help="backends tried on the worked example (B=64, ctx 4096, 32/8/128), to record "
                         "which accept it")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="built-in shapes: a small subset")
    args = ap.parse_args()
    if args.join and not args.shapes_from:
        ap.error("--join needs --shapes-from")

    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        print(f"sdpa_compare: skipped: torch not available ({e})")
        return 0
    if not torch.cuda.is_available():
        print("sdpa_compare: skipped: torch has no CUDA device")
        return 0
    backend_of = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                  "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
    for name in (args.backends + "," + args.worked_example_backends).split(","):
        if name not in backend_of:
            ap.error(f"unknown backend '{name}' (allowed: {', '.join(backend_of)})")

    if args.shapes_from:
        shapes, ceilings, bench_rows = read_bench_csv(args.shapes_from)
    else:
        shapes, ceilings, bench_rows = builtin_shapes(args.quick), {}, []
    props = torch.cuda.get_device_properties(0)
    spec = spec_gbps(props.name)
    print(f"sdpa_compare: torch {torch.__version__}, {props.name}, {props.multi_processor_count} SMs, "
          f"{len(shapes)} shapes, backends {args.backends}; median of {args.reps} reps")
    flush = torch.empty(max(2 * props.L2_cache_size, 256 << 20), dtype=torch.uint8, device="cuda")
    torch_dtype = {"f16": torch.float16, "bf16": torch.bfloat16}
    try:
        from torch.nn.attention.bias import causal_lower_right
    except ImportError:
        causal_lower_right = None

    def time_us(fn):
        for _ in range(args.warmup):
            fn()
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(args.reps)]
        stops = [torch.cuda.Event(enable_timing=True) for _ in range(args.reps)]
        for i in range(args.reps):
            flush.fill_(i & 0xFF)
            starts[i].record()
            fn()
            stops[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, stops)]

    header = f"{'backend':<16} {'case':<18} {'dtype':<5} {'B':>4} {'ctx':>6} {'q':>2} {'Hq/Hkv':>7} {'D':>4} " \
             f"{'median_us':>10} {'GB/s':>8} {'%copy':>6}"
    print(header)
    out_rows = []
    failures = 0
    for case, key in shapes:
        dtype, b, ctx, q_len, hq, hkv, d = key
        if dtype not in torch_dtype:
            continue
        names = args.backends.split(",")
        if key[1:] == (64, 4096, 1, 32, 8, 128):
            names += [n for n in args.worked_example_backends.split(",") if n not in names]
        torch.manual_seed(0)
        dt = torch_dtype[dtype]
        q = torch.randn(b, q_len, hq, d, device="cuda", dtype=dt).transpose(1, 2)
        k = torch.randn(b, ctx, hkv, d, device="cuda", dtype=dt).transpose(1, 2)
        v = torch.randn(b, ctx, hkv, d, device="cuda", dtype=dt).transpose(1, 2)
        mask = None
        if q_len > 1:
            if causal_lower_right is None:
                print(f"sdpa_compare: {case} q_len={q_len}: no causal_lower_right in this torch, skipped")
                continue
            mask = causal_lower_right(q_len, ctx)
        for name in names:
            def call(name=name):
                with sdpa_kernel([backend_of[name]]):
                    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=False,
                                                          enable_gqa=True)
            try:
                out = call()
                nonfinite = int((~torch.isfinite(out)).sum().item())
                us = time_us(call)
            except (RuntimeError, TypeError, ValueError, NotImplementedError) as e:
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                print(f"sdpa_compare: {name} does not run {case} {key}: {first}")
                if name in args.backends.split(","):
                    failures += 1
                continue
            med = percentile(us, 50)
            nbytes = compulsory_bytes(key)
            gbps = nbytes / (med * 1e3)
            row = {"backend": "sdpa_" + name, "case": case, "dtype": dtype, "batch": b,
                   "context_tokens": ctx, "q_len": q_len, "num_q_heads": hq, "num_kv_heads": hkv,
                   "head_size": d, "block_size": 0, "pages": "contiguous", "path": name,
                   "path_forced": 1, "splits": 0, "median_us": f"{med:.3f}",
                   "p10_us": f"{percentile(us, 10):.3f}", "p90_us": f"{percentile(us, 90):.3f}",
                   "bytes": f"{nbytes:.0f}", "gbps": f"{gbps:.3f}",
                   "pct_read_roof": f"{100 * gbps / ceilings['read']:.2f}" if "read" in ceilings else "0.00",
                   "pct_copy": f"{100 * gbps / ceilings['copy']:.2f}" if "copy" in ceilings else "0.00",
                   "pct_spec": f"{100 * gbps / spec:.2f}" if spec else "0.00",
                   "tflops": f"{attention_flops(key) / (med * 1e6):.4f}", "out_nonfinite": nonfinite}
            out_rows.append(row)
            print(f"{row['backend']:<16} {case:<18} {dtype:<5} {b:>4} {ctx:>6} {q_len:>2} {f'{hq}/{hkv}':>7} "
                  f"{d:>4} {med:>10.1f} {gbps:>8.1f} {row['pct_copy']:>6}")
            if nonfinite:
                print(f"sdpa_compare: {nonfinite} non-finite outputs in the row above")
        del q, k, v
        torch.cuda.empty_cache()

    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(out_rows)
    print(f"wrote {args.csv}")

    if args.join:
        primary = "sdpa_" + args.backends.split(",")[0]  # the backend the kvsim rows are compared with
        sdpa = {tuple(str(r[k]) for k in SHAPE_KEY): r for r in out_rows if r["backend"] == primary}
        joined = []
        for r in bench_rows:
            if r["backend"].startswith("ceiling_"):
                continue
            s = sdpa.get(tuple(r[k] for k in SHAPE_KEY))
            j = dict(r)
            j["sdpa_backend"] = s["backend"] if s else ""
            j["sdpa_median_us"] = s["median_us"] if s else ""
            j["sdpa_gbps"] = s["gbps"] if s else ""
            j["speedup_vs_sdpa"] = f"{float(s['median_us']) / float(r['median_us']):.3f}" if s else ""
            joined.append(j)
        if joined:
            with open(args.join, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(joined[0].keys()))
                w.writeheader()
                w.writerows(joined)
            print(f"wrote {args.join}")
            print("worked example, kvsim paged vs SDPA on contiguous KV:")
            for j in joined:
                if j["case"] == "worked_example" and j["sdpa_median_us"]:
                    print(f"  {j['dtype']:<5} bs={j['block_size']:>2} {j['pages']:<10} {j['path']:<12} "
                          f"kvsim {float(j['median_us']):8.1f} us   {j['sdpa_backend']} "
                          f"{float(j['sdpa_median_us']):8.1f} us   speed-up {j['speedup_vs_sdpa']}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
