#!/usr/bin/env python3
"""Writes tests/fixtures/gated/ (tooling only; CI never runs Python: tests/ops/test_gated_attention.cpp
reads the files): fla's naive PyTorch references of gated linear attention on random inputs, with
their outputs and input gradients, to check autograd/ops/gated_attention against.

fla-core 0.6.0 (the wheel at .whl/fla_core-0.6.0-py3-none-any.whl, pip `fla-core`) keeps a naive
reference of each op in fla/ops/*/naive.py. Importing the `fla` package pulls in its Triton kernels
and layers, so the two naive files used here, which import only torch, are loaded by path with
importlib from the unzipped wheel (nothing is copied):
  fla/ops/gla/naive.py        naive_recurrent_gla(q, k, v, gk)  q, k (B,T,H,K), v (B,T,H,V), gk (B,T,H,K)
                              = log α per key channel; o_t = (q_t·K^-1/2)ᵀ S_t, S_t = diag(exp gk_t) S_{t-1} + k_t v_tᵀ
  fla/ops/retention/naive.py  naive_retention(q, k, v)  q, k, v (B,H,T,D); RetNet's per-head decay
                              γ_h = 1 - 2^(-5-h), o = ((q·D^-1/2) kᵀ ⊙ γ^(i-j), j <= i) v
Both compute in f32 (they cast their inputs with .float()), so the references are f32.

Files (every tensor in the engine's layout (B,H,T,·), f32; "do" is the output gradient used, the
others' gradients are of sum(o * do)):
  gla.safetensors        tau16.{q,k,v,gk,o,do,dq,dk,dv,dgk}: gk = logsigmoid(x)/16 (GLA's gate, τ = 16)
                         tau1.{...}: gk = logsigmoid(x) (strong gates)
  retention.safetensors  {q,k,v,o,do,dq,dk,dv}, 3 heads

Usage: python3 tools/make_gated_fixtures.py [wheel_dir] [out_dir]
  wheel_dir: the unzipped wheel (default: unzips .whl/fla_core-0.6.0-py3-none-any.whl into a temporary folder)
  made with: python 3.11.7, torch 2.15.0 (CPU), safetensors 0.8.0, fla-core 0.6.0
"""
import importlib.util
import os
import sys
import tempfile
import zipfile

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WHEEL = os.path.join(ROOT, ".whl", "fla_core-0.6.0-py3-none-any.whl")


def load(wheel_dir, rel, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(wheel_dir, rel))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def grads(fn, inputs, out_shape, gen):
    xs = [x.clone().requires_grad_(True) for x in inputs]
    o = fn(*xs)
    do = torch.randn(out_shape, generator=gen)
    (o * do).sum().backward()
    return o.detach(), do, [x.grad for x in xs]


def bhtd(x):  # (B,T,H,D) -> (B,H,T,D), contiguous
    return x.transpose(1, 2).contiguous()


def main():
    wheel_dir = sys.argv[1] if len(sys.argv) > 1 else None
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "tests", "fixtures", "gated")
    tmp = None
    if wheel_dir is None:
        tmp = tempfile.TemporaryDirectory()
        with zipfile.ZipFile(WHEEL) as z:
            z.extractall(tmp.name)
        wheel_dir = tmp.name
    gla = load(wheel_dir, "fla/ops/gla/naive.py", "fla_gla_naive")
    ret = load(wheel_dir, "fla/ops/retention/naive.py", "fla_retention_naive")
    os.makedirs(out, exist_ok=True)
    gen = torch.Generator().manual_seed(2025)

    # GLA: (B,T,H,K) inputs, T = 23 (no chunk size of the tests divides it but 1 and 23).
    B, T, H, K, V = 2, 23, 2, 4, 5
    tensors = {}
    for tag, tau in (("tau16", 16.0), ("tau1", 1.0)):
        q, k = torch.randn(B, T, H, K, generator=gen), torch.randn(B, T, H, K, generator=gen)
        v = torch.randn(B, T, H, V, generator=gen)
        gk = F.logsigmoid(torch.randn(B, T, H, K, generator=gen)) / tau
        o, do, (dq, dk, dv, dgk) = grads(lambda q, k, v, gk: gla.naive_recurrent_gla(q, k, v, gk)[0], [q, k, v, gk],
                                         (B, T, H, V), gen)
        for name, x in (("q", q), ("k", k), ("v", v), ("gk", gk), ("o", o), ("do", do), ("dq", dq), ("dk", dk),
                        ("dv", dv), ("dgk", dgk)):
            tensors[f"{tag}.{name}"] = bhtd(x.float())
    save_file(tensors, os.path.join(out, "gla.safetensors"), metadata={"format": "pt"})

    # RetNet: (B,H,T,D) inputs, 3 heads (γ = 1 - 2^-5, 1 - 2^-6, 1 - 2^-7).
    B, H, T, D = 2, 3, 23, 4
    q, k, v = (torch.randn(B, H, T, D, generator=gen) for _ in range(3))
    o, do, (dq, dk, dv) = grads(ret.naive_retention, [q, k, v], (B, H, T, D), gen)
    save_file({n: x.float().contiguous() for n, x in (("q", q), ("k", k), ("v", v), ("o", o), ("do", do), ("dq", dq),
                                                        ("dk", dk), ("dv", dv))},
              os.path.join(out, "retention.safetensors"), metadata={"format": "pt"})
    print("wrote", out)


if __name__ == "__main__":
    main()
