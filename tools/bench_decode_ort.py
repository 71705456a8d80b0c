#!/usr/bin/env python3
"""The engine's GPT-2 decoding beside ONNX Runtime and PyTorch: prefill tokens/s (one forward over a
--prompt-token prompt) and decode tokens/s (--new tokens, one at a time, each reading the KV cache),
batch 1, greedy, on the same GPT-2 folder (default: the 124M GPT-2-small-shaped folder that
`build/bench_models` generates, random weights).

The engine is `hf_run`, f32, `--weights bf16` and `--weights int8` (its own timing line: "N tokens in
T s (...; prompt of P tokens in S s; ...)"). bf16 has no ORT counterpart on the CPU: its row is
set beside ORT f32.
ONNX Runtime runs a graph exported here with torch.onnx.export from a plain torch GPT-2 with the
KV cache as explicit inputs and outputs (the folder's weights; checked against transformers' logits
before any timing), f32 and ORT's dynamic int8 (quantize_dynamic, QInt8 weights). PyTorch is
transformers' GPT2LMHeadModel with its cache. Each thread count runs all of them one after the
other for --rounds rounds; the table holds the medians over rounds.

Decoding reads every weight once per token, and the KV cache: a second table gives the bytes a
decoding step reads (the Linear weights and the tied head in the format's bytes, plus keys and
values at the mean context of the timed tokens) times tokens/s, against the machine's bandwidth
measured in the same run by a STREAM triad (a = b + s·c on 64 MiB f32 arrays, torch.add with
alpha and out=, one kernel; 3 arrays' bytes per pass as STREAM counts them; the best of 10 passes, as
STREAM reports), at each thread count.

    build/bench_models --reps 1 --loads 1          # generates /tmp/hh_gpt2_124m once
    python3 tools/bench_decode_ort.py --engine build/hf_run --threads 1,2 --rounds 3
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time


def ints(s):
    return [int(x) for x in s.split(",") if x]


def twin(hf):
    """A plain torch GPT-2 over `hf`'s modules: (ids (1,L), past_k, past_v (layers,1,H,P,D)) ->
    (the last position's logits (1,V), present_k, present_v (layers,1,H,P+L,D))."""
    import torch

    class Gpt2KV(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.t, self.head = m.transformer, m.lm_head
            self.H = m.config.n_head

        def forward(self, ids, past_k, past_v):
            t, H = self.t, self.H
            P, L = past_k.shape[3], ids.shape[1]
            x = t.wte(ids) + t.wpe(torch.arange(L) + P)
            C = x.shape[-1]
            D = C // H
            # (L, P+L): query i sees key j <= P + i
            allowed = torch.arange(P + L)[None, :] <= (torch.arange(L) + P)[:, None]
            ks, vs = [], []
            for i, blk in enumerate(t.h):
                q, k, v = blk.attn.c_attn(blk.ln_1(x)).split(C, dim=2)
                q, k, v = (z.view(1, L, H, D).transpose(1, 2) for z in (q, k, v))
                k = torch.cat([past_k[i], k], dim=2)
                v = torch.cat([past_v[i], v], dim=2)
                ks.append(k)
                vs.append(v)
                s = (q @ k.transpose(-1, -2)) / (D ** 0.5)
                a = torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1) @ v
                x = x + blk.attn.c_proj(a.transpose(1, 2).reshape(1, L, C))
                x = x + blk.mlp(blk.ln_2(x))
            return self.head(t.ln_f(x[:, -1])), torch.stack(ks), torch.stack(vs)

    return Gpt2KV(hf).eval()


def export(folder, out_dir, prompt):
    """The ONNX files (f32, int8) of the twin, written once into out_dir."""
    import numpy as np
    import torch
    import transformers
    from onnxruntime.quantization import QuantType, quantize_dynamic

    f32, i8 = os.path.join(out_dir, "gpt2_kv.onnx"), os.path.join(out_dir, "gpt2_kv_int8.onnx")
    if os.path.exists(f32) and os.path.exists(i8):
        return f32, i8
    os.makedirs(out_dir, exist_ok=True)
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    m = twin(hf)
    cfg = hf.config
    D = cfg.n_embd // cfg.n_head
    empty = torch.zeros(cfg.n_layer, 1, cfg.n_head, 0, D)
    ids = torch.tensor([prompt])
    with torch.no_grad():  # the twin computes transformers' logits, prefill and one step
        ref = hf(ids).logits[0]
        last, k, v = m(ids[:, :-1], empty, empty)
        step, _, _ = m(ids[:, -1:], k, v)
    err = max(float((last[0] - ref[-2]).abs().max()), float((step[0] - ref[-1]).abs().max()))
    if not err < 1e-3:
        sys.exit(f"error: the torch twin differs from transformers' logits by {err}")
    past = torch.zeros(cfg.n_layer, 1, cfg.n_head, 3, D)
    torch.onnx.export(m, (ids[:, :2], past, past), f32, input_names=["ids", "past_k", "past_v"],
                      output_names=["logits", "present_k", "present_v"],
                      dynamic_axes={"ids": {1: "l"}, "past_k": {3: "p"}, "past_v": {3: "p"},
                                    "present_k": {3: "t"}, "present_v": {3: "t"}},
                      opset_version=17, dynamo=False)
    quantize_dynamic(f32, i8, weight_type=QuantType.QInt8)
    np.save(os.path.join(out_dir, "check.npy"), np.array([err]))
    return f32, i8


def ort_run(path, threads, prompt, new, cfg):
    """(prefill seconds, decode seconds for `new` greedy tokens) of ORT on `path`."""
    import numpy as np
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    D = cfg.n_embd // cfg.n_head
    empty = np.zeros((cfg.n_layer, 1, cfg.n_head, 0, D), np.float32)
    ids = np.array([prompt], np.int64)
    s.run(None, {"ids": ids[:, :8], "past_k": empty, "past_v": empty})  # warm-up
    t0 = time.perf_counter()
    logits, k, v = s.run(None, {"ids": ids, "past_k": empty, "past_v": empty})
    t1 = time.perf_counter()
    for _ in range(new):
        nxt = np.array([[int(logits[0].argmax())]], np.int64)
        logits, k, v = s.run(None, {"ids": nxt, "past_k": k, "past_v": v})
    return t1 - t0, time.perf_counter() - t1


def torch_run(hf, threads, prompt, new):
    import torch

    torch.set_num_threads(threads)
    ids = torch.tensor([prompt])
    with torch.no_grad():
        hf(ids[:, :8])  # warm-up
        t0 = time.perf_counter()
        out = hf(ids, use_cache=True)
        t1 = time.perf_counter()
        cache = out.past_key_values
        for _ in range(new):
            nxt = out.logits[:, -1:].argmax(-1)
            out = hf(nxt, past_key_values=cache, use_cache=True)
            cache = out.past_key_values
    return t1 - t0, time.perf_counter() - t1


def engine_run(hf_run, folder, threads, prompt, new, weights="f32"):
    cmd = [hf_run, "--model", folder, "--ids", ",".join(map(str, prompt)), "--max-new-tokens", str(new),
           "--temperature", "0", "--stop-at-eos", "false", "--threads", str(threads), "--weights", weights]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"error: {' '.join(cmd[:3])} ... failed:\n{r.stderr}")
    m = re.search(r"(\d+) tokens in ([0-9.]+) s \([^;]*; prompt of (\d+) tokens in ([0-9.]+) s", r.stdout + r.stderr)
    if not m or int(m.group(1)) != new:
        sys.exit(f"error: no timing line with {new} tokens in hf_run's output:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return float(m.group(4)), float(m.group(2))


def triad_gbs(threads, reps=10):
    """STREAM triad bandwidth (GB/s) at `threads` threads: the best of `reps` passes, as STREAM reports
    it (the limit; on this VM the median of two-thread passes moved by 2x between runs)."""
    import torch

    torch.set_num_threads(threads)
    n = 16 * 1024 * 1024  # 64 MiB per array
    a, b, c = torch.empty(n), torch.rand(n), torch.rand(n)
    torch.add(b, c, alpha=3.0, out=a)  # warm-up (pages touched)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.add(b, c, alpha=3.0, out=a)
        times.append(time.perf_counter() - t0)
    return 3 * 4 * n / min(times) / 1e9


def step_bytes(hf, weights, prompt, new):
    """Bytes one decoding step reads on average: every matrix a Linear (or the tied head) multiplies
    by, in the format's bytes (int8: one scale per output channel as well), plus f32 keys and values
    at the mean context of the `new` timed tokens."""
    per = {"f32": 4, "bf16": 2, "int8": 1}[weights]
    total = 0
    for name, p in hf.named_parameters():
        if p.dim() == 2 and "wpe" not in name:  # the position table: one row per token
            total += p.numel() * per + (p.shape[0] * 4 if weights == "int8" else 0)
    cfg = hf.config
    context = prompt + (new + 1) / 2
    return total + cfg.n_layer * 2 * cfg.n_embd * 4 * context


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", required=True, help="the hf_run binary")
    ap.add_argument("--model", default="/tmp/hh_gpt2_124m", help="a GPT-2 HF folder (bench_models writes this one)")
    ap.add_argument("--onnx-dir", default="", help="where the ONNX files go (default: <model>_onnx)")
    ap.add_argument("--prompt", type=int, default=256, help="prompt tokens (prefill)")
    ap.add_argument("--new", type=int, default=64, help="greedy tokens decoded after the prompt")
    ap.add_argument("--threads", type=ints, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.model, "config.json")):
        sys.exit(f"error: --model {a.model}: no config.json (run build/bench_models once to generate it)")
    import torch
    import transformers

    prompt = [100 + (7 * i) % 5000 for i in range(a.prompt)]
    f32, i8 = export(a.model, a.onnx_dir or a.model.rstrip("/") + "_onnx", prompt)
    hf = transformers.AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).eval()
    cfg = hf.config
    runs = {
        "engine": lambda t: engine_run(a.engine, a.model, t, prompt, a.new),
        "engine bf16": lambda t: engine_run(a.engine, a.model, t, prompt, a.new, "bf16"),
        "engine int8": lambda t: engine_run(a.engine, a.model, t, prompt, a.new, "int8"),
        "ORT f32": lambda t: ort_run(f32, t, prompt, a.new, cfg),
        "ORT int8": lambda t: ort_run(i8, t, prompt, a.new, cfg),
        "PyTorch": lambda t: torch_run(hf, t, prompt, a.new),
    }
    print(f"GPT-2 {sum(p.numel() for p in hf.parameters()) / 1e6:.1f}M ({a.model}), batch 1, prompt {a.prompt}, "
          f"{a.new} new tokens, medians of {a.rounds} rounds (tokens/s)", flush=True)
    print("| threads | weights | prefill: engine | ORT | PyTorch | engine / ORT | decode: engine | ORT | PyTorch "
          "| engine / ORT |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    decode = {}
    for t in a.threads:
        got = {name: [] for name in runs}
        for _ in range(a.rounds):
            for name, fn in runs.items():
                p, d = fn(t)
                got[name].append((a.prompt / p, a.new / d))
        med = {n: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for n, v in got.items()}
        pt = med["PyTorch"]
        for w, eng, ort in (("f32", "engine", "ORT f32"), ("bf16", "engine bf16", "ORT f32"),
                            ("int8", "engine int8", "ORT int8")):
            (ep, ed), (op, od) = med[eng], med[ort]
            torch_p, torch_d = (f"{pt[0]:.1f}", f"{pt[1]:.1f}") if w == "f32" else ("-", "-")
            label = "bf16 (vs ORT f32)" if w == "bf16" else w
            print(f"| {t} | {label} | {ep:.1f} | {op:.1f} | {torch_p} | {ep / op:.2f}× | {ed:.1f} | {od:.1f} | {torch_d} "
                  f"| {ed / od:.2f}× |", flush=True)
            decode[(t, w)] = ed
    print("\nDecoding against the measured bandwidth (bytes per step: weights + KV cache at the mean context)")
    print("| threads | triad GB/s | weights | MB per step | decode tokens/s | GB/s read | % of triad |")
    print("|---|---|---|---|---|---|---|")
    for t in a.threads:
        bw = triad_gbs(t)
        for w in ("f32", "bf16", "int8"):
            mb = step_bytes(hf, w, a.prompt, a.new) / 1e6
            gbs = mb * decode[(t, w)] / 1e3
            print(f"| {t} | {bw:.1f} | {w} | {mb:.1f} | {decode[(t, w)]:.1f} | {gbs:.1f} | {100 * gbs / bw:.0f}% |",
                  flush=True)

if __name__ == "__main__":
    main()
