#!/usr/bin/env python3
"""A PyTorch twin of `train_lm train` (experiments/lm/lm_train.cpp), to tell an engine bug from an
optimisation problem: the same model, data, windows, optimiser and schedule, in transformers.

  model      transformers' GPT2LMHeadModel from a train_lm run's model/ folder (config.json and
             weights: run `train_lm train --steps 1 --warmup 1` for the initial weights, as the
             first step's learning rate is 0), or freshly initialised from its config.json as
             experiments/lm/lm_model.cpp does (N(0, 0.02), c_proj N(0, 0.02/sqrt(2 n_layer)), biases 0)
  data       the prepared token shards (data/token_shards.h: "HHTOKEN1", u16/u32 ids), train split
  windows    data::WindowSampler: window i starts at splitmix64(mix(seed) + (i+1) * golden) mod
             (size - context); step s takes windows s*batch .. s*batch+batch-1 (one rank, no
             accumulation); inputs the first `context` ids, targets the next ones
  optimiser  AdamW (torch's, decoupled decay) with train/optim.cpp's decay_groups (tensors of
             2+ dimensions decay, the rest do not), betas (0.9, beta2), eps 1e-8
  schedule   train/schedule.cpp: step s (0-based) uses lr * s / warmup during the warmup, then
             constant or cosine to min_lr 0; global grad-norm clipping before the step

Prints and writes (--out, JSONL) the loss of every step, like train_lm's metrics.jsonl.

Usage: python3 tools/copy_twin.py --data DIR --model RUN/softmax/model [--fresh] --context 128
         --batch 16 --steps 2000 --lr 3e-3 --warmup 0.05 --schedule constant --out twin.jsonl
  made with: python 3.11.7, torch 2.15.0 (CPU), transformers 5.24.0
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import transformers as tf

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix(x):
    """splitmix64's finalizer (data/token_shards.cpp: splitmix64_mix)."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


class WindowSampler:
    def __init__(self, ids, context, seed):
        self.ids, self.context = ids, context
        self.key = mix(seed & M64)
        self.range = len(ids) - context
        self.limit = M64 - (M64 % self.range + 1) % self.range

    def start(self, i):
        x = mix((self.key + ((i + 1) * GOLDEN)) & M64)
        while x > self.limit:
            x = mix(x)
        return x % self.range

    def rows(self, first, count):
        """(count, context + 1) int64."""
        w = self.context + 1
        return torch.from_numpy(np.stack([self.ids[s:s + w] for s in map(self.start, range(first, first + count))])
                                .astype(np.int64))


def read_split(folder, split):
    parts, k = [], 0
    while os.path.exists(path := os.path.join(folder, f"{split}_{k:05d}.bin")):
        raw = open(path, "rb").read()
        assert raw[:8] == b"HHTOKEN1", path
        width = int.from_bytes(raw[12:16], "little")
        count = int.from_bytes(raw[24:32], "little")
        parts.append(np.frombuffer(raw[32:], dtype="<u2" if width == 2 else "<u4", count=count))
        k += 1
    assert parts, f"error: no {split}_00000.bin in {folder}"
    return np.concatenate(parts)


def lr_at(step, a, warmup_steps):
    if step < warmup_steps:
        return a.lr * step / warmup_steps
    if a.schedule == "constant":
        return a.lr
    progress = min(1.0, (step - warmup_steps) / max(1, a.steps - warmup_steps))
    return a.min_lr + (a.lr - a.min_lr) * 0.5 * (1 + math.cos(math.pi * progress))


def fresh_init(model, seed):
    g = torch.Generator().manual_seed(seed)
    n_layer = model.config.n_layer
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".ln_" in name or name.startswith("transformer.ln_f"):
                continue
            if name.endswith(".bias"):
                p.zero_()
            else:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02
                p.copy_(torch.randn(p.shape, generator=g) * std)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--model", required=True, help="an HF GPT-2 folder (train_lm's model/)")
    ap.add_argument("--fresh", action="store_true", help="draw fresh weights (only the folder's config.json)")
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr", type=float, default=0.0)
    ap.add_argument("--warmup", type=float, default=0.05)
    ap.add_argument("--schedule", choices=["constant", "cosine"], default="cosine")
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)

    ids = read_split(a.data, "train")
    sampler = WindowSampler(ids, a.context, a.seed)
    if a.fresh:
        model = tf.GPT2LMHeadModel(tf.GPT2Config.from_pretrained(a.model))
        fresh_init(model, a.seed)
    else:
        model = tf.GPT2LMHeadModel.from_pretrained(a.model, attn_implementation="eager")
    model.train()
    decay = [p for _, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for _, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, a.beta2), eps=1e-8)
    warmup_steps = int(a.warmup) if a.warmup >= 1 else round(a.warmup * a.steps)
    log = open(a.out, "w") if a.out else None
    t0 = time.time()
    for step in range(a.steps):
        lr = lr_at(step, a, warmup_steps)
        for g in opt.param_groups:
            g["lr"] = lr
        rows = sampler.rows(step * a.batch, a.batch)  # (batch, context+1)
        x, y = rows[:, :-1], rows[:, 1:]
        logits = model(input_ids=x).logits  # (batch, context, V)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        rec = {"split": "train", "step": step + 1, "loss": loss.item(), "lr": lr}
        if log:
            log.write(json.dumps(rec) + "\n")
            log.flush()
        if (step + 1) % 50 == 0 or step < 5:
            print(f"step {step + 1} loss {loss.item():.4f} lr {lr:.2e} ({time.time() - t0:.0f}s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
