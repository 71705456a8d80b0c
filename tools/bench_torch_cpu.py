#!/usr/bin/env python3
"""PyTorch counterpart of apps/bench_ops: the same GEMM shapes and ops, the same table and
--json schema, so the two can be compared side by side (CPU, or a GPU with --device cuda).

    python3 tools/bench_torch_cpu.py [--threads 1,2] [--reps 7] [--json FILE] [--compare HH_JSON]
                                     [--device cpu|cuda[:N]]

--compare reads bench_ops' --json output: its measured FMA peaks give the "%peak" columns here,
and "hh/torch" columns show hedgehog's throughput relative to torch per row (wall and CPU-time).
As in bench_ops, every row also reports a CPU-time rate, work / (process CPU seconds / threads),
which stays meaningful when other jobs share the cores.
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


def time_median(fn, reps, sync=lambda: None):
    """(median wall seconds, median process CPU seconds) after WARMUP runs; sync() waits for the
    device before the clock starts and before it stops."""
    for _ in range(WARMUP):
        fn()
    ws, cs = [], []
    for _ in range(reps):
        sync()
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        sync()
        cs.append(time.process_time() - c0)
        ws.append(time.perf_counter() - t0)
    return statistics.median(ws), statistics.median(cs)


def pct(x, peak):
    return f"{100.0 * x / peak:6.1f}%" if peak else f"{'n/a':>7}"


def ratio(ours, theirs):
    return f"{ours / theirs:8.2f}x" if ours and theirs else f"{'n/a':>9}"


def main():
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=positive_list, default=[1, 2], help="comma-separated thread counts")
    p.add_argument("--reps", type=positive_int, default=7, help="timed repetitions per row (median)")
    p.add_argument("--json", metavar="FILE", help="write machine-readable results here")
    p.add_argument("--compare", metavar="HH_JSON", help="bench_ops --json output to compare against")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N] (threads do not apply on a GPU)")
    p.add_argument("--gemm-dtypes", default="f32",
                   help="comma list of GEMM dtypes, f32 and/or bf16 (as bench_ops --gemm-dtypes)")
    args = p.parse_args()
    gemm_dtypes = args.gemm_dtypes.split(",")
    if any(d not in ("f32", "bf16") for d in gemm_dtypes):
        p.error(f"--gemm-dtypes expects f32 and/or bf16, got '{args.gemm_dtypes}'")

    hh = None
    if args.compare:
        try:
            with open(args.compare) as f:
                hh = json.load(f)
        except (OSError, ValueError) as e:
            sys.stderr.write(f"error: cannot read --compare file '{args.compare}': {e}\n")
            sys.exit(2)
    from torch_bench_common import setup_torch, write_json
    torch, dev = setup_torch(args.device, None)
    import torch.nn.functional as F
    gpu = dev.type == "cuda"
    if gpu:
        torch.backends.cuda.matmul.allow_tf32 = False  # exact f32, as hedgehog's default
        args.threads = [0]
    sync = (lambda: torch.cuda.synchronize(dev)) if gpu else (lambda: None)
    set_threads = (lambda t: None) if gpu else torch.set_num_threads

    peaks = {int(k): v for k, v in (hh or {}).get("fma_peak_gflops", {}).items()}
    peaks_cpu = {int(k): v for k, v in (hh or {}).get("fma_peak_cpu_gflops", {}).items()}
    hh_gemm = {(r["name"], r.get("dtype", "f32"), r["threads"]): r for r in (hh or {}).get("gemm", [])}
    hh_ops = {(r["name"], r["threads"]): r for r in (hh or {}).get("ops", [])}
    out = {"library": f"torch {torch.__version__}", "dtype": "f32", "reps": args.reps, "warmup": WARMUP,
           "device": args.device,
           "fma_peak_gflops": {str(k): v for k, v in peaks.items()},
           "fma_peak_cpu_gflops": {str(k): v for k, v in peaks_cpu.items()}}

    print(f"torch {torch.__version__} {args.device} benchmark, f32, median of {args.reps} runs after {WARMUP} warm-ups")
    if peaks:
        print(f"\nFMA peak (measured by bench_ops, {args.compare})")
        print(f"  {'threads':>7} {'wall GFLOP/s':>14} {'cpu-time GFLOP/s':>18}")
        for t in args.threads:
            if t in peaks:
                print(f"  {t:7d} {peaks[t]:14.1f} {peaks_cpu.get(t, 0.0):18.1f}")
    cmp_hdr = f" {'hh/torch':>9} {'(cpu)':>9}" if hh else ""
    print(f"\n{'GEMM (into preallocated C)':<28} {'threads':>7} {'ms':>9} {'GFLOP/s':>9} {'%peak':>7} "
          f"{'cpu GF/s':>9} {'%peak':>7}{cmp_hdr}")
    g = torch.Generator().manual_seed(42)
    rows = []
    for dtype_name, name, bt, m, k, n in [(d, *case) for d in gemm_dtypes for case in GEMM_CASES]:
        dt = torch.bfloat16 if dtype_name == "bf16" else torch.float32
        a = (torch.rand(bt, m, k, generator=g) * 2 - 1).to(dev, dt)
        b = (torch.rand(bt, k, n, generator=g) * 2 - 1).to(dev, dt)
        if bt == 1:  # a single matrix product: 2-d operands, as a Linear layer's GEMM
            a, b = a[0], b[0]
        c = torch.empty(*a.shape[:-1], n, device=dev, dtype=dt)
        label = name if dtype_name == "f32" else name + " bf16"
        gflop = 2.0 * bt * m * k * n / 1e9
        for t in args.threads:
            set_threads(t)
            wall, cpu = time_median(lambda: torch.matmul(a, b, out=c), args.reps, sync)
            gf = gflop / wall
            gfc = gf if gpu else gflop / (cpu / t)
            ref = hh_gemm.get((name, dtype_name, t))
            cmp_s = f" {ratio(ref and ref['gflops'], gf)} {ratio(ref and ref.get('cpu_gflops'), gfc)}" if hh else ""
            print(f"{label:<28} {t:7d} {wall * 1e3:9.2f} {gf:9.1f} {pct(gf, peaks.get(t))} "
                  f"{gfc:9.1f} {pct(gfc, peaks_cpu.get(t))}{cmp_s}")
            rows.append({"name": name, "dtype": dtype_name, "batch": bt, "m": m, "k": k, "n": n, "threads": t, "ms": wall * 1e3,
                         "gflops": gf, "cpu_gflops": gfc,
                         "pct_peak": 100.0 * gf / peaks[t] if peaks.get(t) else None,
                         "cpu_pct_peak": 100.0 * gfc / peaks_cpu[t] if peaks_cpu.get(t) else None})
    out["gemm"] = rows

    x = (torch.rand(ROWS, COLS, generator=g) * 4 - 2).to(dev)
    y = (torch.rand(ROWS, COLS, generator=g) * 4 - 2).to(dev)
    w = (torch.rand(COLS, generator=g) + 0.5).to(dev)
    bias = (torch.rand(COLS, generator=g) - 0.5).to(dev)
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
    print(f"\n{'op on (4096x2048) f32':<28} {'threads':>7} {'ms':>9} {'GB/s':>9} {'cpu GB/s':>9}{cmp_hdr}")
    op_rows = []
    with torch.no_grad():
        for name, nbytes, fn in ops:
            for t in args.threads:
                set_threads(t)
                wall, cpu = time_median(fn, args.reps, sync)
                gbs = nbytes / wall / 1e9
                gbc = gbs if gpu else nbytes / (cpu / t) / 1e9
                ref = hh_ops.get((name, t))
                cmp_s = f" {ratio(ref and ref.get('gbs'), gbs)} {ratio(ref and ref.get('cpu_gbs'), gbc)}" if hh else ""
                print(f"{name:<28} {t:7d} {wall * 1e3:9.2f} {gbs:9.1f} {gbc:9.1f}{cmp_s}")
                op_rows.append({"name": name, "threads": t, "ms": wall * 1e3, "gbs": gbs, "cpu_gbs": gbc})
    out["ops"] = op_rows

    if args.json:
        write_json(args.json, out)


if __name__ == "__main__":
    main()
