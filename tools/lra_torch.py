#!/usr/bin/env python3
"""PyTorch twin of hedgehog's LRA model and training step (apps/lra, nn/lra_classifier.h), for the
speed comparison of issue 12. Tooling only: nothing in the build or the tests uses it.

    python3 tools/lra_torch.py --attention softmax|hedgehog|elu --len 4000 --batch 2 [--steps 5]
        [--two-documents] [--threads N] [--device cpu|cuda]

Model (as hedgehog builds it): token embedding (vocab 257) and learned positions, both N(0, 0.02);
2 pre-LN blocks (LayerNorm -> attention -> dropout -> residual; LayerNorm -> Linear 64->128, GELU,
Linear 128->64 -> dropout -> residual), 2 heads x 32, q/k/v/o projections with bias, dropout 0.1;
final LayerNorm, mean pooling over the key mask, Linear 64->classes (10). Attention: softmax
(F.scaled_dot_product_attention with the key mask) or a linear map in the non-causal form
y = φ(q)ᵀS / (φ(q)ᵀz + 1e-6) with padded keys zeroed: elu (elu+1) or hedgehog (per-head W = I, b = 0,
φ = [softmax(z), softmax(-z)]). One step = forward, cross-entropy, backward, AdamW (lr 1e-4,
eps 1e-6, wd 0). Rows are padded: row i has len - 7·i real tokens (at least 1).

Prints one JSON line: steps/s (median of --steps timed steps after 2 warm-up steps) and the peak
memory: on CUDA torch.cuda.max_memory_allocated above the level before the first step; on the CPU
the growth of the process's peak RSS (getrusage ru_maxrss) over the level after the model and the
batch were built (tracemalloc cannot see torch's allocator). Run one configuration per process so
the peak belongs to it.
"""
import argparse
import json
import math
import resource
import statistics
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--attention", default="softmax", choices=["softmax", "hedgehog", "elu"])
    p.add_argument("--len", type=int, default=256)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--two-documents", action="store_true", help="retrieval's two-tower model")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    if a.len < 1 or a.batch < 1 or a.steps < 1:
        sys.exit("error: --len, --batch and --steps must be positive")
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda: not available")
    torch.manual_seed(0)
    DIM, HIDDEN, HEADS, HD, VOCAB, CLASSES = 64, 128, 2, 32, 257, 10

    class Hedgehog(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.eye(HD).repeat(HEADS, 1, 1))
            self.b = nn.Parameter(torch.zeros(HEADS, HD))

        def forward(self, x):  # (B,H,L,D)
            z = torch.einsum("bhld,hdf->bhlf", x, self.w) + self.b[None, :, None, :]
            return torch.cat([torch.softmax(z, -1), torch.softmax(-z, -1)], -1)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(DIM, HEADS * HD) for _ in range(4))
            self.fm = Hedgehog() if a.attention == "hedgehog" else None

        def forward(self, x, mask):
            B, L, _ = x.shape
            q, k, v = (t(x).view(B, L, HEADS, HD).transpose(1, 2) for t in (self.q, self.k, self.v))
            if a.attention == "softmax":
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
            else:
                phi = self.fm if self.fm is not None else (lambda t: F.elu(t) + 1)
                pq, pk = phi(q), phi(k) * mask[:, None, :, None]
                S = torch.einsum("bhlf,bhld->bhfd", pk, v)
                z = pk.sum(2)
                y = torch.einsum("bhlf,bhfd->bhld", pq, S) / (torch.einsum("bhlf,bhf->bhl", pq, z)[..., None] + 1e-6)
            return self.o(y.transpose(1, 2).reshape(B, L, HEADS * HD))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
            self.attn = Attention()
            self.mlp = nn.Sequential(nn.Linear(DIM, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, DIM))
            self.drop = nn.Dropout(0.1)

        def forward(self, x, mask):
            x = x + self.drop(self.attn(self.n1(x), mask))
            return x + self.drop(self.mlp(self.n2(x)))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.pos = nn.Embedding(VOCAB, DIM), nn.Embedding(a.len, DIM)
            nn.init.normal_(self.embed.weight, std=0.02)
            nn.init.normal_(self.pos.weight, std=0.02)
            self.blocks = nn.ModuleList([Block(), Block()])
            self.norm = nn.LayerNorm(DIM)

        def forward(self, ids, mask):
            h = self.embed(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
            for b in self.blocks:
                h = b(h, mask)
            h = self.norm(h)
            m = mask[..., None].to(h.dtype)
            return (h * m).sum(1) / m.sum(1).clamp(min=1)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = Encoder()
            if a.two_documents:
                self.head = nn.Sequential(nn.Linear(4 * DIM, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))
            else:
                self.head = nn.Linear(DIM, CLASSES)

        def forward(self, ids, mask):
            if not a.two_documents:
                return self.head(self.enc(ids, mask))
            x1, x2 = self.enc(ids, mask), self.enc(ids.flip(0), mask.flip(0))
            return self.head(torch.cat([x1, x2, x1 * x2, x1 - x2], -1))

    model = Model().to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-6, weight_decay=0.0)
    lens = [max(1, a.len - 7 * i) for i in range(a.batch)]
    ids = torch.zeros(a.batch, a.len, dtype=torch.long)
    mask = torch.zeros(a.batch, a.len, dtype=torch.bool)
    for i, n in enumerate(lens):
        ids[i, :n] = torch.randint(1, VOCAB, (n,))
        mask[i, :n] = True
    ids, mask = ids.to(dev), mask.to(dev)
    labels = torch.randint(0, CLASSES, (a.batch,), device=dev)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(ids, mask), labels)
        loss.backward()
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return loss.item()

    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base_cuda = torch.cuda.memory_allocated()
    times = []
    for i in range(2 + a.steps):
        t0 = time.perf_counter()
        loss = step()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    if not math.isfinite(loss):
        sys.exit("error: non-finite loss")
    if dev.type == "cuda":
        peak = (torch.cuda.max_memory_allocated() - base_cuda) / 2**20
        how = "torch.cuda.max_memory_allocated above the level before the first step"
    else:
        peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base_rss) / 1024.0
        how = "peak RSS growth (ru_maxrss) over the level after model and batch were built"
    print(json.dumps({"framework": "torch " + torch.__version__, "device": str(dev), "threads": torch.get_num_threads(),
                      "attention": a.attention, "len": a.len, "batch": a.batch, "two_documents": a.two_documents,
                      "steps_per_s": 1.0 / statistics.median(times), "peak_mib": peak, "peak_how": how}))


if __name__ == "__main__":
    main()
