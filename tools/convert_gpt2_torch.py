#!/usr/bin/env python3
"""PyTorch twin of convert_gpt2's stage 1 (attention distillation), for distillation tokens/s on the same
machine (tooling only; the build never needs it).

Loads an HF GPT-2 folder with transformers, runs its blocks by hand with a Hedgehog feature map per
head in every attention (phi(x) = [softmax(xW + b), softmax(-(xW + b))], W (H, D, D) identity-initialized,
tied for queries and keys), the student's quadratic-form weights propagating to the next layer as
in the engine, and trains only the maps with the soft cross-entropy to the softmax weights (summed
over layers and heads; AdamW lr 1e-2, wd 0), on lm_blocks windows of a WikiText file. The logits are
computed too (the engine's task forward does), then dropped.

Usage: python3 tools/convert_gpt2_torch.py --model DIR --data DIR --context 128 --batch 8 --steps 6
"""
import argparse
import math
import os
import time

import torch
import transformers as tf
from tokenizers import ByteLevelBPETokenizer, Tokenizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = tf.GPT2LMHeadModel.from_pretrained(args.model).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    if os.path.exists(os.path.join(args.model, "tokenizer.json")):
        tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    else:
        tok = ByteLevelBPETokenizer(os.path.join(args.model, "vocab.json"), os.path.join(args.model, "merges.txt"))
    ids = tok.encode(open(os.path.join(args.data, "wiki.train.raw"), encoding="utf-8").read()).ids
    L = args.context
    n_win = (len(ids) - 1) // L
    windows = torch.tensor([ids[k * L:k * L + L] for k in range(n_win)])
    cfg = model.config
    H, D = cfg.n_head, cfg.n_embd // cfg.n_head
    maps = [(torch.eye(D).repeat(H, 1, 1).requires_grad_(), torch.zeros(H, 1, D, requires_grad=True))
            for _ in range(cfg.n_layer)]
    opt = torch.optim.AdamW([t for m in maps for t in m], lr=1e-2, weight_decay=0.0)
    causal = torch.tril(torch.ones(L, L, dtype=torch.bool))

    def phi(x, w, b):  # x (B,H,L,D)
        z = torch.einsum("bhld,hdf->bhlf", x, w) + b.unsqueeze(0)
        return torch.cat([torch.softmax(z, -1), torch.softmax(-z, -1)], -1)

    def step(x_ids):
        tr = model.transformer
        pos = torch.arange(x_ids.shape[1])
        h = tr.wte(x_ids) + tr.wpe(pos)
        loss = 0.0
        for layer, blk in enumerate(tr.h):
            a = blk.ln_1(h)
            q, k, v = blk.attn.c_attn(a).split(cfg.n_embd, dim=2)
            q, k, v = (t.view(t.shape[0], L, H, D).transpose(1, 2) for t in (q, k, v))
            with torch.no_grad():
                s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
                teacher = torch.softmax(s.masked_fill(~causal, float("-inf")), -1)
            w, b = maps[layer]
            pq, pk = phi(q, w, b), phi(k, w, b)
            a_lin = (pq @ pk.transpose(-1, -2)) * causal
            weights = a_lin / (a_lin.sum(-1, keepdim=True) + 1e-6)
            loss = loss + (-(teacher * torch.log(weights.clamp_min(1e-12))).sum(-1).mean((0, 2))).sum()
            y = (weights @ v).transpose(1, 2).reshape(h.shape)
            h = h + blk.attn.c_proj(y)
            h = h + blk.mlp(blk.ln_2(h))
        model.lm_head(tr.ln_f(h))  # the task forward's logits (unused here)
        return loss

    order = torch.randperm(n_win)
    t0, tokens, done = None, 0, 0
    for s in range(args.steps + 1):  # step 0 is a warm-up, not timed
        rows = order[(s * args.batch) % n_win:][:args.batch]
        if len(rows) == 0:
            rows = order[:args.batch]
        loss = step(windows[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if s == 0:
            t0 = time.perf_counter()
            continue
        tokens += rows.numel() * L
        done += 1
    sec = time.perf_counter() - t0
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}: {done} steps of {args.batch} x {L} tokens, "
          f"last loss {loss.item():.3f}, {tokens / sec:.0f} distillation tokens/s")


if __name__ == "__main__":
    main()
