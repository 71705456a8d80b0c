#!/usr/bin/env python3
"""Writes tests/fixtures/delta/*.safetensors: fla's naive PyTorch references of the (gated) delta rule
on random inputs, with their outputs and gradients (tooling only; CI never runs Python:
tests/ops/test_delta_attention.cpp reads the files and compares hh::delta_attention_*).

The references are fla-core 0.6.0's own functions (flash-linear-attention, MIT licence, Songlin Yang,
Yu Zhang, Zhiyuan Li et al.), from the wheel at .whl/fla_core-0.6.0-py3-none-any.whl:
  fla/ops/gated_delta_rule/naive.py  naive_recurrent_gated_delta_rule, naive_chunk_gated_delta_rule
  fla/ops/delta_rule/naive.py        delta_rule_recurrence, delta_rule_chunkwise
They are loaded by path with importlib, not with `import fla`: the package's __init__ pulls in its
Triton kernels, and neither triton nor einops is installed on this CPU machine. naive.py needs only
`einops.rearrange` for the two patterns 'b h (n c) d -> b h n c d' and 'b h n c d -> b h (n c) d', so
a stub of exactly those two (a reshape) is put in sys.modules['einops'] first; any other pattern
raises. Nothing of fla's arithmetic is copied or changed.

fla's conventions, and how the engine's op maps onto them (the test does the mapping):
  * gated_delta_rule/naive takes q, k, v as (B,T,H,D) and beta, g as (B,T,H); the engine's op takes
    (B,H,L,D) and (B,H,L): the test permutes. g is log α (<= 0), the engine's log_alpha.
  * naive_recurrent_gated_delta_rule(q, k, v, beta, g, ...) but naive_chunk_gated_delta_rule(q, k, v,
    g, beta, ...): the chunk version swaps beta and g. Both are called with keywords here.
  * the scale multiplies q, default 1/sqrt(K) in both (the engine's scale = -1).
  * neither naive function L2-normalizes q or k (fla's kernels do so only with
    use_qk_l2norm_in_kernel=True); the script normalizes q and k itself, as Gated DeltaNet's layer
    does, and stores the normalized tensors, which are the op's inputs.
  * the state h is (B,H,K,V), initial_state and the final state alike; o = hᵀ (scale q).
  * delta_rule/naive takes (B,H,T,D) (the engine's layout), beta (B,H,T), no gate (α = 1), and always
    scales q by K^-0.5; delta_rule_chunkwise needs T a multiple of its chunk size and has no
    initial state.
  * precision: the naive functions cast their inputs to f32 and compute in f32 (the recurrent gated
    one calls .to(torch.float32); the others .float()). The inputs are drawn in f32 and stored as
    f32, so the engine reads exactly the values fla used; the outputs and gradients are fla's f32
    results. For the recurrent gated reference the script also runs the same naive code in f64
    (its module's `torch` seen through a proxy whose float32 is float64: `.to(torch.float32)` then
    keeps f64) and stores that as "*_f64" tensors, so the test can check to f64 precision as well.
    The script prints how far fla's f32 results are from that f64 run: the f32 test tolerance.

Each file holds the inputs, "w_o" and "w_s" (the loss is sum(o * w_o) + sum(final_state * w_s), or
sum(o * w_o) where there is no final state), "o", "final_state" and "grad.<input>" for every input.

Usage: python3 tools/make_delta_fixtures.py [path/to/fla_core-0.6.0-py3-none-any.whl] [out_dir]
  made with: python 3.11.7, torch 2.15.0 (CPU), safetensors 0.8.0, fla-core 0.6.0 (the wheel)
"""
import importlib.util
import os
import sys
import tempfile
import types
import zipfile

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
WHEEL = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", ".whl", "fla_core-0.6.0-py3-none-any.whl")
OUT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "..", "tests", "fixtures", "delta")


def einops_stub():
    """einops.rearrange for the two patterns fla's naive.py uses, nothing else."""
    def rearrange(x, pattern, **sizes):
        if pattern == "b h (n c) d -> b h n c d":
            c = sizes["c"]
            return x.reshape(x.shape[0], x.shape[1], x.shape[2] // c, c, x.shape[3])
        if pattern == "b h n c d -> b h (n c) d":
            return x.reshape(x.shape[0], x.shape[1], x.shape[2] * x.shape[3], x.shape[4])
        raise NotImplementedError(f"einops stub: pattern {pattern!r}")
    m = types.ModuleType("einops")
    m.rearrange = rearrange
    return m


def load_naive(root, rel, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(root, rel))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class F64Torch(types.ModuleType):
    """torch as the naive module sees it, with float32 (and float) meaning float64."""
    def __init__(self):
        super().__init__("torch")
        self.float32 = torch.float64
        self.float = torch.float64

    def __getattr__(self, name):
        return getattr(torch, name)


def run(fn, inputs, grads, loss_w):
    """fn(**inputs with grads) -> (o, S); returns o, S and d loss / d input for every name in grads."""
    xs = {n: (t.clone().requires_grad_(True) if n in grads else t) for n, t in inputs.items()}
    o, S = fn(**xs)
    loss = (o * loss_w["w_o"]).sum()
    if S is not None and "w_s" in loss_w:
        loss = loss + (S * loss_w["w_s"]).sum()
    loss.backward()
    return o.detach(), None if S is None else S.detach(), {n: xs[n].grad.detach() for n in grads}


def rel(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-3)).item()


def gated_case(gdr, gdr64, out):
    torch.manual_seed(0)
    B, T, H, K, V, BT = 2, 37, 2, 8, 6, 8  # T = 37: not a multiple of the chunk (naive chunk pads)
    q = F.normalize(torch.randn(B, T, H, K), dim=-1)
    k = F.normalize(torch.randn(B, T, H, K), dim=-1)
    v = torch.randn(B, T, H, V)
    beta = torch.rand(B, T, H).sigmoid()
    g = F.logsigmoid(torch.randn(B, T, H) * 2 - 1)  # log α in about (-6, 0): some strong decays
    h0 = torch.randn(B, H, K, V)
    w = {"w_o": torch.randn(B, T, H, V), "w_s": torch.randn(B, H, K, V)}
    inputs = {"q": q, "k": k, "v": v, "beta": beta, "g": g, "initial_state": h0}
    names = list(inputs)

    def rec(mod):
        return lambda **x: mod.naive_recurrent_gated_delta_rule(output_final_state=True, **x)

    o, S, gr = run(rec(gdr), inputs, names, w)
    o64, S64, gr64 = run(rec(gdr64), {n: t.double() for n, t in inputs.items()}, names,
                         {n: t.double() for n, t in w.items()})
    assert o64.dtype == torch.float64 and S64.dtype == torch.float64, "the f64 proxy did not take"
    print(f"gated recurrent: fla f32 vs the same code in f64: o {rel(o, o64):.2e}, S {rel(S, S64):.2e}, "
          + ", ".join(f"d{n} {rel(gr[n], gr64[n]):.2e}" for n in names))
    oc, Sc, grc = run(lambda **x: gdr.naive_chunk_gated_delta_rule(chunk_size=BT, output_final_state=True, **x),
                      inputs, names, w)
    print(f"gated chunk (BT = {BT}) vs gated recurrent, both fla f32: o {rel(oc, o):.2e}, S {rel(Sc, S):.2e}")
    t = dict(inputs)
    t.update(w)
    t.update({"o": o, "final_state": S, "o_f64": o64, "final_state_f64": S64, "o_chunk": oc,
              "final_state_chunk": Sc})
    for n in names:
        t["grad." + n] = gr[n]
        t["grad_f64." + n] = gr64[n]
        t["grad_chunk." + n] = grc[n]
    save_file({n: x.contiguous() for n, x in t.items()}, os.path.join(out, "gated_delta_rule.safetensors"),
              metadata={"chunk_size": str(BT), "source": "fla-core 0.6.0 fla/ops/gated_delta_rule/naive.py"})


def delta_case(dr, out):
    torch.manual_seed(1)
    B, H, T, K, V, BT = 2, 3, 32, 8, 4, 8
    q = F.normalize(torch.randn(B, H, T, K), dim=-1)
    k = F.normalize(torch.randn(B, H, T, K), dim=-1)
    v = torch.randn(B, H, T, V)
    beta = torch.rand(B, H, T).sigmoid()
    h0 = torch.randn(B, H, K, V)
    w = {"w_o": torch.randn(B, H, T, V), "w_s": torch.randn(B, H, K, V)}
    inputs = {"q": q, "k": k, "v": v, "beta": beta, "initial_state": h0}
    names = list(inputs)
    o, S, gr = run(lambda **x: dr.delta_rule_recurrence(output_final_state=True, **x), inputs, names, w)
    ci = {n: inputs[n] for n in ("q", "k", "v", "beta")}
    oc, Sc, grc = run(lambda **x: dr.delta_rule_chunkwise(chunk_size=BT, **x), ci, list(ci), {"w_o": w["w_o"]})
    print(f"delta rule: chunkwise (no initial state, BT = {BT}) output norm {oc.norm():.3f}, final state norm "
          f"{Sc.norm():.3f}")
    t = dict(inputs)
    t.update(w)
    t.update({"o": o, "final_state": S, "o_chunk": oc, "final_state_chunk": Sc})
    for n in names:
        t["grad." + n] = gr[n]
    for n in ci:
        t["grad_chunk." + n] = grc[n]
    save_file({n: x.contiguous() for n, x in t.items()}, os.path.join(out, "delta_rule.safetensors"),
              metadata={"chunk_size": str(BT), "source": "fla-core 0.6.0 fla/ops/delta_rule/naive.py"})


def main():
    os.makedirs(OUT, exist_ok=True)
    sys.modules["einops"] = einops_stub()
    with tempfile.TemporaryDirectory() as root:
        with zipfile.ZipFile(WHEEL) as z:
            z.extractall(root)
        gdr = load_naive(root, "fla/ops/gated_delta_rule/naive.py", "fla_gdr_naive")
        gdr64 = load_naive(root, "fla/ops/gated_delta_rule/naive.py", "fla_gdr_naive_f64")
        gdr64.torch = F64Torch()
        dr = load_naive(root, "fla/ops/delta_rule/naive.py", "fla_dr_naive")
    gated_case(gdr, gdr64, OUT)
    delta_case(dr, OUT)


if __name__ == "__main__":
    main()
