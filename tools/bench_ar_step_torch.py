#!/usr/bin/env python3
"""PyTorch counterpart of `bench_attention --ar-step`: tokens/s of one training step (forward,
cross-entropy over every position, backward, AdamW) of the paper-preset associative-recall
decoder, per mixer, with the same table and --json keys.

    python3 tools/bench_ar_step_torch.py [--device cpu|cuda] [--threads N] [--ar-mixers softmax,hedgehog]
        [--ar-batch 32] [--ar-len 128] [--reps 3] [--json FILE] [--compare HH_JSON]

The model is hedgehog's DecoderLM as apps/ar_probe --preset paper builds it: vocab 40, token
embedding N(0, 0.02), 4 pre-LN blocks (LayerNorm -> attention -> residual, LayerNorm -> GELU(erf)
MLP 256->512->256 -> residual), 4 heads x 64, dim 256, biases on the projections and the MLP, RoPE
half-split (θ = 10000) on q and k, final LayerNorm, untied lm_head without bias. Mixers: softmax
(F.scaled_dot_product_attention, causal) or hedgehog (per-head identity-initialized W (H,D,D),
b = 0, φ = [softmax(z), softmax(-z)], chunked causal linear attention with chunk 64, eps 1e-6).
AdamW lr 1e-3, weight decay 0. zero_grad runs untimed before each step. Median of --reps steps
after two warm-up steps; peak memory as in bench_attention_torch.py (MiB above what was allocated
before the step: parameters and optimizer state excluded, the step's gradients included).
--compare reads `bench_attention --ar-step --json` output and adds the hh/torch step-time ratio.

--distill-step: the twin of `bench_attention --distill-step`, stage 1 of a conversion on the same
model with the hedgehog map: every weight but the maps frozen (requires_grad False), each attention
computes its quadratic linear weights A = φ(q)φ(k)ᵀ (causal, rows / (sum + 1e-6)) and output A v,
and, without grad, the softmax weights P of the same q, k; the loss is Σ_layers Σ_heads of the soft
cross-entropy −mean_{b,i} Σ_j P log max(A, 1e-12); AdamW lr 1e-2 over the maps.
"""
import argparse
import os
import statistics
import sys
import time

from torch_bench_common import load_compare, setup_torch, write_json  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_attention_torch as bat  # noqa: E402  (feature map, chunked form, memory helpers)

WARMUP = 2
VOCAB, DIM, LAYERS, HEADS, HEAD_DIM, MLP = 40, 256, 4, 4, 64, 512
MIXERS = ("softmax", "hedgehog")


def build_model(torch, mixer, device, distill_losses=None):
    nn, F = torch.nn, torch.nn.functional

    def rope(x):  # x (B,H,L,D), half-split layout
        L, D = x.shape[2], x.shape[3]
        half = D // 2
        inv = 10000.0 ** (-2.0 * torch.arange(half, dtype=torch.float64, device=x.device) / D)
        ang = torch.arange(L, dtype=torch.float64, device=x.device)[:, None] * inv[None, :]
        c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj, self.k_proj = nn.Linear(DIM, HEADS * HEAD_DIM), nn.Linear(DIM, HEADS * HEAD_DIM)
            self.v_proj, self.o_proj = nn.Linear(DIM, HEADS * HEAD_DIM), nn.Linear(HEADS * HEAD_DIM, DIM)
            if mixer == "hedgehog":
                self.fm_weight = nn.Parameter(torch.eye(HEAD_DIM).repeat(HEADS, 1, 1))  # (H,D,D)
                self.fm_bias = nn.Parameter(torch.zeros(HEADS, HEAD_DIM))

        def phi(self, x):
            z = torch.matmul(x, self.fm_weight.unsqueeze(0)) + self.fm_bias[None, :, None, :]
            return torch.cat([torch.softmax(z, -1), torch.softmax(-z, -1)], -1)

        def forward(self, x):
            B, L, _ = x.shape
            heads = lambda t: t.view(B, L, HEADS, HEAD_DIM).transpose(1, 2)  # noqa: E731
            q, k, v = heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x))
            q, k = rope(q), rope(k)
            if distill_losses is not None:  # stage 1: quadratic student weights vs the softmax teacher
                mask = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
                pq, pk = self.phi(q), self.phi(k)
                a = (pq @ pk.transpose(-1, -2)).masked_fill(~mask, 0.0)
                a = a / (a.sum(-1, keepdim=True) + bat.EPS)
                with torch.no_grad():
                    s = (q @ k.transpose(-1, -2)) / HEAD_DIM ** 0.5
                    p_t = torch.softmax(s.masked_fill(~mask, float("-inf")), -1)
                ce = -(p_t * torch.log(a.clamp_min(1e-12))).sum(-1).mean(dim=(0, 2))  # (H)
                distill_losses.append(ce.sum())
                y = a @ v
            elif mixer == "softmax":
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                y = bat.linear_chunked(torch, self.phi(q), self.phi(k), v, 64, bat.EPS)
            return self.o_proj(y.transpose(1, 2).reshape(B, L, HEADS * HEAD_DIM))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
            self.attn = Attention()
            self.fc1, self.fc2 = nn.Linear(DIM, MLP), nn.Linear(MLP, DIM)

        def forward(self, x):
            h = x + self.attn(self.norm1(x))
            return h + self.fc2(F.gelu(self.fc1(self.norm2(h))))

    class DecoderLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, DIM)
            nn.init.normal_(self.embed.weight, std=0.02)
            self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
            self.norm = nn.LayerNorm(DIM)
            self.lm_head = nn.Linear(DIM, VOCAB, bias=False)

        def forward(self, ids):
            h = self.embed(ids)
            for b in self.layers:
                h = b(h)
            return self.lm_head(self.norm(h))

    return DecoderLM().to(device)


def main():
    p = bat.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    p.add_argument("--threads", type=bat.nonneg_int, default=0, help="CPU threads (0 = torch's default)")
    p.add_argument("--ar-mixers", type=bat.name_list(MIXERS), default=list(MIXERS))
    p.add_argument("--ar-batch", type=bat.positive_int, default=32)
    p.add_argument("--ar-len", type=bat.positive_int, default=128)
    p.add_argument("--reps", type=bat.positive_int, default=3)
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--compare", metavar="HH_JSON", help="bench_attention --ar-step --json output")
    p.add_argument("--distill-step", action="store_true", help="stage-1 distillation step (hedgehog) instead")
    p.add_argument("--precision", default="f32", choices=("f32", "tf32", "bf16"),
                   help="as bench_attention --precision: bf16 = torch.autocast around forward and loss; "
                        "tf32 = TF32 f32 matmuls (CUDA)")
    args = p.parse_args()

    hh = load_compare(args.compare, lambda r: r["mixer"])
    torch, device = setup_torch(args.device, args.threads)
    if args.precision == "tf32":
        if device.type != "cuda":
            p.error("--precision tf32 is a CUDA matmul mode; on the CPU use f32 or bf16")
        torch.backends.cuda.matmul.allow_tf32 = True
    B, L = args.ar_batch, args.ar_len
    if args.distill_step:
        print("Stage-1 distillation step (feature maps only; quadratic weights vs the softmax teacher), AR model ",
              end="")
    print(f"torch {torch.__version__} AR training step (paper preset: {LAYERS} layers, {HEADS} heads x {HEAD_DIM}, "
          f"dim {DIM}, MLP {MLP}, RoPE, vocab {VOCAB}): {device}, {torch.get_num_threads()} thread(s), batch {B}, "
          f"length {L}, median of {args.reps} after {WARMUP} warm-up steps\n")
    cmp_hdr = f" {'hh/torch':>9}" if hh else ""
    print(f"{'mixer':<12} {'params':>10} {'step ms':>10} {'tok/s':>12} {'peak MiB':>10}{cmp_hdr}")
    rows = []
    mixers = ["hedgehog"] if args.distill_step else args.ar_mixers
    for mixer in mixers:
        torch.manual_seed(0)
        losses = [] if args.distill_step else None
        model = build_model(torch, mixer, device, losses)
        model.train()
        if args.distill_step:
            for name, prm in model.named_parameters():
                prm.requires_grad_(name.endswith("fm_weight") or name.endswith("fm_bias"))
        trainable = [prm for prm in model.parameters() if prm.requires_grad]
        opt = torch.optim.AdamW(trainable, lr=1e-2 if args.distill_step else 1e-3, weight_decay=0.0)
        g = torch.Generator(device="cpu").manual_seed(1)
        ids = torch.randint(0, VOCAB, (B, L), generator=g).to(device)
        targets = torch.randint(0, VOCAB, (B * L,), generator=g).to(device)

        def step():  # gradients were dropped by zero_grad (untimed, before the memory baseline)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
                logits = model(ids)
                if losses is not None:
                    loss = torch.stack(losses).sum()
                    losses.clear()
                else:
                    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets)
            loss.backward()
            opt.step()

        old_warmup, bat.WARMUP = bat.WARMUP, WARMUP
        ms, peak = bat.measure(torch, device, args.reps, lambda: opt.zero_grad(set_to_none=True), step)
        bat.WARMUP = old_warmup
        params = sum(p.numel() for p in model.parameters())
        tps = B * L / (ms * 1e-3)
        cmp_s = ""
        if hh:
            ref = hh.get(mixer)
            cmp_s = f" {ref['step_ms'] / ms:8.2f}x" if ref and ref.get("status") == "ok" else f" {'n/a':>9}"
        print(f"{mixer:<12} {params:10d} {ms:10.1f} {tps:12.0f} {bat.fmt_mib(peak):>10}{cmp_s}", flush=True)
        rows.append({"mixer": mixer, "params": params, "step_ms": ms, "tokens_per_s": tps, "peak_mib": peak,
                     "status": "ok"})
    out = {"library": f"torch {torch.__version__}", "device": str(device), "threads": torch.get_num_threads(),
           "precision": args.precision, "benchmark": "distill_step" if args.distill_step else "ar_step", "batch": B, "length": L, "reps": args.reps, "warmup": WARMUP,
           "results": rows}
    if args.json:
        write_json(args.json, out)
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
