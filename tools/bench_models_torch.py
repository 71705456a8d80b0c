#!/usr/bin/env python3
"""PyTorch twin of apps/bench_models: load time and forward tokens/s of the same HF folder.

Usage: python3 tools/bench_models_torch.py [--dir /tmp/hh_gpt2_124m] [--batch 1] [--seq 256] [--threads 2]
Run build/bench_models first (it writes the folder). Needs torch, transformers (tooling only).
"""
import argparse
import json
import statistics
import time

import torch
import transformers as tf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/hh_gpt2_124m")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--loads", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    loads = []
    for _ in range(a.loads):
        t0 = time.perf_counter()
        model = tf.GPT2LMHeadModel.from_pretrained(a.dir, attn_implementation="sdpa").to(a.device).eval()
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()
        loads.append(time.perf_counter() - t0)
    n = sum(p.numel() for p in model.parameters())
    print(f"load {a.dir}: {n / 1e6:.1f}M parameters, median {statistics.median(loads):.3f} s "
          f"over {a.loads} loads (first {loads[0]:.3f} s)")
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, model.config.vocab_size, (a.batch, a.seq), generator=g).to(a.device)
    times = []
    with torch.inference_mode():
        model(ids)
        for _ in range(a.reps):
            if a.device.startswith("cuda"):
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            model(ids)
            if a.device.startswith("cuda"):
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(f"forward B={a.batch} L={a.seq}: median {med:.3f} s, {a.batch * a.seq / med:.0f} tokens/s "
          f"(torch {torch.__version__}, {torch.get_num_threads()} threads)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"load_seconds_median": statistics.median(loads), "load_seconds_first": loads[0],
                       "batch": a.batch, "seq": a.seq, "forward_seconds_median": med,
                       "tokens_per_second": a.batch * a.seq / med, "threads": torch.get_num_threads()}, f, indent=2)


if __name__ == "__main__":
    main()
