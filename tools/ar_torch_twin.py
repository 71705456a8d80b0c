#!/usr/bin/env python3
"""A PyTorch twin of ar_probe's small model, to tell a training-recipe problem from an engine bug.

Same task layout as data/associative_recall (keys in [0, V/2), values in [V/2, V), a fresh
key->value map per sequence, the query at the end, dense targets on repeated keys), same model
(pre-LN decoder, half-split RoPE, GELU MLP of 2x width, untied head, nn.Linear's init, embeddings
N(0, 0.02)) and recipe (AdamW, 50-step warmup, grad clip 1.0). The data come from NumPy, not
Philox, so runs are comparable in distribution, not bit for bit. Prints test accuracy on the
query every 200 steps.

    python3 tools/ar_torch_twin.py --vocab 16 --seq-len 32 --attn softmax --steps 3000
    python3 tools/ar_torch_twin.py --style safari --vocab 18 --targets all --attn hedgehog --steps 9000

docs/ARCHITECTURE.md ("The AR demo's size") quotes runs of this script. Tooling only: the C++
build and tests never need it.
"""
import argparse
import math
import sys
import time


def make_data(rng, n, vocab, length):
    import numpy as np
    keys = vocab // 2
    pairs = (length - 1) // 2
    x = np.zeros((n, length), np.int64)
    y = np.full((n, length), -100, np.int64)
    for i in range(n):
        value_of = rng.permutation(keys) + keys
        pos = 0
        if length % 2 == 0:  # a leading value keeps the query at the last position
            x[i, 0] = value_of[rng.integers(keys)]
            pos = 1
        first = pos
        for _ in range(pairs):
            k = rng.integers(keys)
            x[i, pos], x[i, pos + 1] = k, value_of[k]
            pos += 2
        q = x[i, first + 2 * rng.integers(pairs)]
        x[i, length - 1], y[i, length - 1] = q, value_of[q]
    return x, y


def make_safari_data(rng, n, vocab, length):
    """data/associative_recall's safari style: values drawn with replacement, '=>' before the query."""
    import numpy as np
    keys = (vocab - 2) // 2
    values = vocab - 2 - keys
    pairs = (length - 2) // 2
    x = np.zeros((n, length), np.int64)
    y = np.full((n, length), -100, np.int64)
    for i in range(n):
        value_of = rng.integers(values, size=keys) + keys
        pos = 0
        if length % 2 == 1:
            x[i, 0] = value_of[rng.integers(keys)]
            pos = 1
        present = []
        for _ in range(pairs):
            k = rng.integers(keys)
            x[i, pos], x[i, pos + 1] = k, value_of[k]
            pos += 2
            if k not in present:
                present.append(k)
        q = present[rng.integers(len(present))]
        x[i, length - 2], x[i, length - 1], y[i, length - 1] = vocab - 2, q, value_of[q]
    return x, y


def dense_targets(x, y, keys):
    y = y.copy()
    for i in range(x.shape[0]):
        seen = set()
        for p in range(x.shape[1] - 1):
            t = x[i, p]
            if t < keys and x[i, p + 1] >= keys:
                if t in seen:
                    y[i, p] = x[i, p + 1]
                seen.add(t)
    return y


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vocab", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--train-samples", type=int, default=100000)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--schedule", choices=["constant", "cosine"], default="constant")
    p.add_argument("--positions", choices=["rope", "learned"], default="rope")
    p.add_argument("--attn", choices=["softmax", "elu", "hedgehog"], default="softmax")
    p.add_argument("--prev-token-embedding", action="store_true",
                   help="add an embedding of the previous token (skips the induction step)")
    p.add_argument("--style", choices=["pairs", "safari"], default="pairs")
    p.add_argument("--targets", choices=["recall", "all"], default="recall",
                   help="recall: values of repeated keys and the answer; all: every next token")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.style == "pairs" and (a.vocab < 4 or a.vocab % 2 or a.seq_len < 3):
        sys.exit("error: the pairs style needs an even vocab >= 4 and seq-len >= 3")
    if a.style == "safari" and (a.vocab < 6 or a.seq_len < 4):
        sys.exit("error: the safari style needs vocab >= 6 and seq-len >= 4")
    if a.head_dim % 2:
        sys.exit("error: need an even head-dim")
    try:
        import numpy as np
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError as e:
        sys.exit(f"error: PyTorch and NumPy are needed: {e}")

    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    V, L, H, Dh = a.vocab, a.seq_len, a.heads, a.head_dim
    D = H * Dh
    gen = make_safari_data if a.style == "safari" else make_data
    xtr, ytr = gen(rng, a.train_samples, V, L)
    xte, yte = gen(rng, 500, V, L)
    if a.targets == "all":
        ytr[:, :-1] = xtr[:, 1:]
    else:
        ytr = dense_targets(xtr, ytr, (V - 2) // 2 if a.style == "safari" else V // 2)
    xtr, ytr, xte, yte = (torch.tensor(t) for t in (xtr, ytr, xte, yte))

    def rope(x):  # (B,H,L,Dh), half-split pairs (i, i + Dh/2)
        half = x.shape[-1] // 2
        inv = 1.0 / (10000 ** (torch.arange(half) / half))
        ang = torch.arange(x.shape[-2])[:, None] * inv[None]
        c, s = ang.cos(), ang.sin()
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], -1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))
            self.mlp = nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, D))
            if a.attn == "hedgehog":  # per-head feature map, identity init
                self.fw = nn.Parameter(torch.eye(Dh).repeat(H, 1, 1))
                self.fb = nn.Parameter(torch.zeros(H, Dh))

        def phi(self, x):  # (B,H,L,Dh) -> (B,H,L,F)
            if a.attn == "elu":
                return F.elu(x) + 1
            z = torch.einsum("bhld,hdf->bhlf", x, self.fw) + self.fb[None, :, None, :]
            return torch.cat([torch.softmax(z, -1), torch.softmax(-z, -1)], -1)

        def forward(self, x):
            B, T, _ = x.shape
            h = self.n1(x)
            heads = lambda t: t.view(B, T, H, Dh).transpose(1, 2)  # noqa: E731
            q, k, v = heads(self.q(h)), heads(self.k(h)), heads(self.v(h))
            if a.positions == "rope":
                q, k = rope(q), rope(k)
            if a.attn == "softmax":
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:  # quadratic form of causal linear attention
                w = (self.phi(q) @ self.phi(k).transpose(-1, -2)).tril()
                o = (w / w.sum(-1, keepdim=True)) @ v
            x = x + self.o(o.transpose(1, 2).reshape(B, T, D))
            return x + self.mlp(self.n2(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(V, D)
            nn.init.normal_(self.embed.weight, std=0.02)
            self.pos = nn.Embedding(L, D) if a.positions == "learned" else None
            self.prev = nn.Embedding(V + 1, D) if a.prev_token_embedding else None
            for e in (self.pos, self.prev):
                if e is not None:
                    nn.init.normal_(e.weight, std=0.02)
            self.blocks = nn.ModuleList(Block() for _ in range(a.layers))
            self.norm = nn.LayerNorm(D)
            self.head = nn.Linear(D, V, bias=False)

        def forward(self, ids):
            h = self.embed(ids)
            if self.pos is not None:
                h = h + self.pos.weight[: ids.shape[1]]
            if self.prev is not None:  # token t sees the embedding of token t-1 (V = none)
                h = h + self.prev(F.pad(ids, (1, 0), value=V)[:, :-1])
            for b in self.blocks:
                h = b(h)
            return self.head(self.norm(h))

    model = Model()
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)

    def test_accuracy():
        with torch.no_grad():
            return (model(xte)[:, -1].argmax(-1) == yte[:, -1]).float().mean().item()

    t0, step = time.time(), 0
    while step < a.steps:
        order = torch.randperm(xtr.shape[0])
        for i in range(0, xtr.shape[0] - a.batch + 1, a.batch):
            idx = order[i:i + a.batch]
            lr = a.lr * min(1.0, (step + 1) / 50)
            if a.schedule == "cosine":
                lr *= 0.5 * (1 + math.cos(math.pi * step / a.steps))
            for g in opt.param_groups:
                g["lr"] = lr
            loss = F.cross_entropy(model(xtr[idx]).reshape(-1, V), ytr[idx].reshape(-1), ignore_index=-100)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            if step % 200 == 0:
                print(f"step {step} loss {loss.item():.3f} test acc {test_accuracy():.3f} "
                      f"{time.time() - t0:.0f}s", flush=True)
            if step >= a.steps:
                break


if __name__ == "__main__":
    main()
