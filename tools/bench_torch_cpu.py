#!/usr/bin/env python3
"""PyTorch CPU counterpart of apps/bench_ops: the same GEMM shapes and ops, the same table and
--json schema, so the two can be compared side by side.

    python3 tools/bench_torch_cpu.py [--threads 1,2] [--reps 7] [--json FILE] [--compare HH_JSON]

--compare reads bench_ops' --json output: its measured FMA peaks give the "% peak" column here,
and a "hh/torch" column shows hedgehog's throughput relative to torch per row.
GEMM rows use torch.matmul(a, b, out=c) (preallocated output, as bench_ops does); op rows
allocate their result, as hedgehog's op API does.
"""
import argparse
import json
import statistics
import sys
import time

WARMUP = 2
ROWS, COLS = 4096, 2048
GEMM_CASES = [
    ("(4096x768)·(768x768)", 1, 4096, 768, 768),
    ("(4096x768)·(768x3072)", 1, 4096, 768, 3072),
    ("(4096x3072)·(3072x768)", 1, 4096, 3072, 768),
    ("48x(512x64)·(64x512)", 48, 512, 64, 512),
    ("48x(512x512)·(512x64)", 48, 512, 512, 64),
]


def positive_list(text):
    try:
        vals = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expects positive integers, got '{text}'")
    if not vals or any(v < 1 or v > 4096 for v in vals):
        raise argparse.ArgumentTypeError(f"expects positive integers, got '{text}'")
    return vals


def positive_int(text):
    vals = positive_list(text)
    if len(vals) != 1:
        raise argparse.ArgumentTypeError(f"expects one positive integer, got '{text}'")
    return vals[0]


class Parser(argparse.ArgumentParser):
    def error(self, message):  # "error: ..." and exit status 2, like bench_ops
        sys.stderr.write(f"error: {message}\n")
        self.print_usage(sys.stderr)
        sys.exit(2)


def time_median(fn, reps):
    for _ in range(WARMUP):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=positive_list, default=[1, 2], help="comma-separated thread counts")
    p.add_argument("--reps", type=positive_int, default=7, help="timed repetitions per row (median)")
    p.add_argument("--json", metavar="FILE", help="write machine-readable results here")
    p.add_argument("--compare", metavar="HH_JSON", help="bench_ops --json output to compare against")
    args = p.parse_args()

    hh = None
    if args.compare:
        try:
            with open(args.compare) as f:
                hh = json.load(f)
        except (OSError, ValueError) as e:
            sys.stderr.write(f"error: cannot read --compare file '{args.compare}': {e}\n")
            sys.exit(2)
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        sys.stderr.write(f"error: PyTorch is not importable: {e}\n")
        sys.exit(1)

    peaks = {int(k): v for k, v in (hh or {}).get("fma_peak_gflops", {}).items()}
    hh_gemm = {(r["name"], r["threads"]): r for r in (hh or {}).get("gemm", [])}
    hh_ops = {(r["name"], r["threads"]): r for r in (hh or {}).get("ops", [])}
    out = {"library": f"torch {torch.__version__}", "dtype": "f32", "reps": args.reps, "warmup": WARMUP,
           "fma_peak_gflops": {str(k): v for k, v in peaks.items()}}

    print(f"torch {torch.__version__} CPU benchmark, f32, median of {args.reps} runs after {WARMUP} warm-ups")
    if peaks:
        print(f"\nFMA peak (from {args.compare})")
        for t in args.threads:
            if t in peaks:
                print(f"  {t:2d} thread{' ' if t == 1 else 's'} {peaks[t]:10.1f} GFLOP/s")
    cmp_hdr = f" {'hh/torch':>9}" if hh else ""
    print(f"\n{'GEMM (into preallocated C)':<28} {'threads':>7} {'ms':>10} {'GFLOP/s':>10} {'% peak':>8}{cmp_hdr}")
    g = torch.Generator().manual_seed(42)
    rows = []
    for name, bt, m, k, n in GEMM_CASES:
        a = torch.rand(bt, m, k, generator=g) * 2 - 1
        b = torch.rand(bt, k, n, generator=g) * 2 - 1
        if bt == 1:  # a single matrix product: 2-d operands, as a Linear layer's GEMM
            a, b = a[0], b[0]
        c = torch.empty(*a.shape[:-1], n)
        flops = 2.0 * bt * m * k * n
        for t in args.threads:
            torch.set_num_threads(t)
            sec = time_median(lambda: torch.matmul(a, b, out=c), args.reps)
            gf = flops / sec / 1e9
            pct = 100.0 * gf / peaks[t] if t in peaks and peaks[t] > 0 else None
            pct_s = f"{pct:7.1f}%" if pct is not None else f"{'n/a':>8}"
            ref = hh_gemm.get((name, t))
            cmp_s = f" {ref['gflops'] / gf:8.2f}x" if ref else (f" {'n/a':>9}" if hh else "")
            print(f"{name:<28} {t:7d} {sec * 1e3:10.2f} {gf:10.1f} {pct_s}{cmp_s}")
            rows.append({"name": name, "batch": bt, "m": m, "k": k, "n": n, "threads": t, "ms": sec * 1e3,
                         "gflops": gf, "pct_peak": pct})
    out["gemm"] = rows

    x = torch.rand(ROWS, COLS, generator=g) * 4 - 2
    y = torch.rand(ROWS, COLS, generator=g) * 4 - 2
    w = torch.rand(COLS, generator=g) + 0.5
    bias = torch.rand(COLS, generator=g) - 0.5
    nb = x.numel() * 4.0
    row_b = COLS * 4.0
    ops = [
        ("copy (clone)", 2 * nb, lambda: x.clone()),
        ("add", 3 * nb, lambda: torch.add(x, y)),
        ("mul", 3 * nb, lambda: torch.mul(x, y)),
        ("exp", 2 * nb, lambda: torch.exp(x)),
        ("gelu (erf)", 2 * nb, lambda: F.gelu(x)),
        ("sum over last dim", nb + nb / COLS, lambda: x.sum(-1)),
        ("softmax (last dim)", 2 * nb, lambda: torch.softmax(x, -1)),
        ("layer_norm (last dim)", 2 * nb + 2 * row_b, lambda: F.layer_norm(x, (COLS,), w, bias)),
    ]
    cmp_hdr = f" {'hh/torch':>9}" if hh else ""
    print(f"\n{'op on (4096x2048) f32':<28} {'threads':>7} {'ms':>10} {'GB/s':>10}{cmp_hdr}")
    op_rows = []
    with torch.no_grad():
        for name, nbytes, fn in ops:
            for t in args.threads:
                torch.set_num_threads(t)
                sec = time_median(fn, args.reps)
                gbs = nbytes / sec / 1e9
                ref = hh_ops.get((name, t))
                if hh:
                    cmp_s = f" {ref['gbs'] / gbs:8.2f}x" if ref and ref.get("gbs") else f" {'n/a':>9}"
                else:
                    cmp_s = ""
                print(f"{name:<28} {t:7d} {sec * 1e3:10.2f} {gbs:10.1f}{cmp_s}")
                op_rows.append({"name": name, "threads": t, "ms": sec * 1e3, "gbs": gbs})
    out["ops"] = op_rows

    if args.json:
        try:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=2)
                f.write("\n")
        except OSError as e:
            sys.stderr.write(f"error: cannot write --json file '{args.json}': {e}\n")
            sys.exit(1)


if __name__ == "__main__":
    main()
