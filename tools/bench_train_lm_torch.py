#!/usr/bin/env python3
"""PyTorch twin of apps/bench_train_lm: train_lm's GPT training step, timed the same way.

    python3 tools/bench_train_lm_torch.py [--preset small] [--attentions softmax,hedgehog]
        [--batch 16] [--context 256] [--steps 12] [--warmup 3] [--threads N] [--device cuda] [--json FILE]
        [--compare HH_JSON]

The model is train_lm's (train/lm_model.h): GPT-2 pre-LN blocks (wte + wpe, ln_1, c_attn C->3C,
attention, c_proj, ln_2, c_fc, gelu (tanh), c_proj, ln_f, the LM head tied to wte), N(0, 0.02)
weights. Attention: softmax = F.scaled_dot_product_attention(is_causal=True) (torch's fastest CPU
path); hedgehog = the paper's map per head (W (H,D,D) identity-initialised, b = 0,
phi = [softmax(xW+b), softmax(-(xW+b))]) in the chunked causal linear form (chunk 64) of
tools/bench_attention_torch.py. The step: cross-entropy, backward, clip_grad_norm_(1.0), AdamW
(betas 0.9/0.95, wd 0.01 on matrices and embeddings only), zero_grad. Random token windows. The
median of --steps after --warmup; tokens/s = batch * context / step time; peak RSS of the process
(ru_maxrss) as the memory figure (the CPU allocator has no peak counter).
--compare reads bench_train_lm's --json and prints hedgehog / torch tokens/s ratios (> 1: faster).
"""
import argparse
import resource
import statistics
import sys
import time

from torch_bench_common import load_compare, setup_torch, write_json

PRESETS = {"small": (4, 4, 128), "tiny": (2, 2, 32), "paper": (12, 12, 768)}  # layers, heads, dim
CHUNK = 64
EPS = 1e-6


def build(torch, attention, vocab, context, layers, heads, dim):
    nn, F = torch.nn, torch.nn.functional
    hd = dim // heads
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    import bench_attention_torch as bat

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn, self.c_proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            if attention == "hedgehog":
                self.fm_weight = nn.Parameter(torch.eye(hd).repeat(heads, 1, 1))  # (H,D,D)
                self.fm_bias = nn.Parameter(torch.zeros(heads, hd))

        def phi(self, x):  # (B,H,L,D) -> (B,H,L,2D)
            z = torch.matmul(x, self.fm_weight.unsqueeze(0)) + self.fm_bias[None, :, None, :]
            return torch.cat([torch.softmax(z, -1), torch.softmax(-z, -1)], -1)

        def forward(self, x):
            B, L, C = x.shape
            q, k, v = self.c_attn(x).view(B, L, 3, heads, hd).permute(2, 0, 3, 1, 4)
            if attention == "softmax":
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                y = bat.linear_chunked(torch, self.phi(q), self.phi(k), v, CHUNK, EPS)
            return self.c_proj(y.transpose(1, 2).reshape(B, L, C))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.attn = Attention()
            self.c_fc, self.c_proj = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

        def forward(self, x):
            h = x + self.attn(self.ln_1(x))
            return h + self.c_proj(F.gelu(self.c_fc(self.ln_2(h)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
            self.h = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(dim)
            for name, p in self.named_parameters():
                if "fm_" in name or "ln_" in name:
                    continue
                if name.endswith("bias"):
                    nn.init.zeros_(p)
                else:
                    nn.init.normal_(p, std=0.02)

        def forward(self, ids):
            x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
            for b in self.h:
                x = b(x)
            return F.linear(self.ln_f(x), self.wte.weight)

    return GPT()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="small", choices=sorted(PRESETS))
    ap.add_argument("--attentions", default="softmax,hedgehog")
    ap.add_argument("--vocab", type=int, default=257)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    ap.add_argument("--json", default="")
    ap.add_argument("--compare", default="")
    ap.add_argument("--precision", default="f32", choices=("f32", "bf16"),
                    help="bf16: torch.autocast around forward and loss, as bench_train_lm --precision bf16")
    a = ap.parse_args()
    torch, device = setup_torch(a.device, a.threads)
    hh = load_compare(a.compare, lambda r: r["attention"])
    layers, heads, dim = PRESETS[a.preset]
    F = torch.nn.functional
    results = []
    print(f"{'attention':<10} {'params':>10} {'step ms':>12} {'tokens/s':>12} {'hh/torch tok/s':>15}")
    for attention in a.attentions.split(","):
        if attention not in ("softmax", "hedgehog"):
            sys.exit(f"error: --attentions: '{attention}' (this twin has softmax and hedgehog)")
        torch.manual_seed(0)
        model = build(torch, attention, a.vocab, a.context, layers, heads, dim).to(device)
        decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
        other = [p for n, p in model.named_parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": other, "weight_decay": 0.0}],
                                lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
        times = []
        for step in range(a.warmup + a.steps):
            ids = torch.randint(0, a.vocab, (a.batch, a.context + 1), device=device)
            t0 = time.perf_counter()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                logits = model(ids[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, a.vocab), ids[:, 1:].reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss.item()
            if step >= a.warmup:
                times.append(time.perf_counter() - t0)
        step_s = statistics.median(times)
        tps = a.batch * a.context / step_s
        params = sum(p.numel() for p in model.parameters())
        ratio = "-"
        if attention in hh:
            ratio = f"{hh[attention]['tokens_per_s'] / tps:.2f}"
        print(f"{attention:<10} {params:>10} {1e3 * step_s:>12.1f} {tps:>12.0f} {ratio:>15}")
        results.append({"attention": attention, "params": params, "step_ms": 1e3 * step_s, "tokens_per_s": tps})
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"peak RSS of the process: {rss:.1f} MiB")
    if a.json:
        write_json(a.json, {"engine": "torch", "device": str(device), "threads": torch.get_num_threads(), "batch": a.batch,
                            "context": a.context, "preset": a.preset, "precision": a.precision, "results": results, "peak_rss_mib": rss})


if __name__ == "__main__":
    main()
