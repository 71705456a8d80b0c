#!/usr/bin/env python3
"""Writes tests/fixtures/lm_twin/: the per-step training losses of train_lm's loop as PyTorch computes
them (tools/copy_twin.py's twin, in f64), which tests/train/test_lm_twin.cpp checks
train::train_language_model against (tooling only; the test never runs Python).

  python3 tools/make_lm_twin_golden.py [--train-lm build/train_lm] [--out tests/fixtures/lm_twin]

  text.txt          the training text (copy lines "s|s|s|s" of random [a-z0-9] strings, seed 5): its
                    bytes are the token ids (train_lm's byte tokenizer, vocabulary 257)
  init.safetensors  the engine's initial weights for the test's model and seed (HF GPT-2 names and
                    layout), taken from `train_lm train --steps 1 --warmup 1` (the first step's
                    learning rate is 0, so the exported weights are the initial ones); the test
                    checks its own initialisation still gives them
  golden.json       the settings and, per step, the loss of transformers' GPT2LMHeadModel in f64
                    trained from init.safetensors on the same windows (data::WindowSampler), AdamW
                    (decay groups), warmup + cosine, gradient clipping (all active: the script checks
                    that clipping happens); and how far the losses move under small mistakes in the
                    loop (decay on every tensor, no clipping, the schedule one step late, windows one
                    token late), which the test's tolerance must be well below
  made with: python 3.11.7, torch 2.15.0 (CPU), transformers 5.24.0
"""
import argparse
import copy
import json
import math
import os
import random
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
import transformers as tf
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from copy_twin import WindowSampler  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SETTINGS = {"layers": 2, "heads": 2, "dim": 16, "mlp": 64, "context": 32, "batch": 4, "steps": 16, "lr": 3e-3,
            "warmup": 4, "schedule": "cosine", "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95, "adam_eps": 1e-8,
            "grad_clip": 0.5, "seed": 0}


def copy_text(n_lines, seed):
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines):
        s = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(rng.randint(6, 24)))
        lines.append("|".join([s] * 4))
    return "\n".join(lines) + "\n"


def engine_init(train_lm, text_path, s):
    with tempfile.TemporaryDirectory() as tmp:
        run = lambda *a: subprocess.run([train_lm, *a], check=True, stdout=subprocess.DEVNULL)
        run("prepare", "--input", text_path, "--out", f"{tmp}/data", "--quiet")
        run("train", "--data", f"{tmp}/data", "--out", f"{tmp}/run", "--attentions", "softmax", "--layers",
            str(s["layers"]), "--heads", str(s["heads"]), "--dim", str(s["dim"]), "--mlp", str(s["mlp"]),
            "--context", str(s["context"]), "--batch", str(s["batch"]), "--steps", "1", "--warmup", "1",
            "--seed", str(s["seed"]), "--samples", "0", "--threads", "1", "--quiet")
        folder = f"{tmp}/run/softmax/model"
        config = tf.GPT2Config.from_pretrained(folder)
        weights = load_file(f"{folder}/model.safetensors")
    return config, weights


def lr_at(step, s, shift=0):
    step = max(0, step - shift)
    if step < s["warmup"]:
        return s["lr"] * step / s["warmup"]
    progress = min(1.0, (step - s["warmup"]) / max(1, s["steps"] - s["warmup"]))
    return s["lr"] * 0.5 * (1 + math.cos(math.pi * progress))


def train(config, weights, ids, s, mistake=None):
    """Per-step losses (f64) and the gradient norms before clipping."""
    model = tf.GPT2LMHeadModel(config).double()
    missing, unexpected = model.load_state_dict({k: v.double() for k, v in weights.items()}, strict=False)
    assert not unexpected and all(k == "lm_head.weight" or k.endswith("attn.bias") for k in missing), (missing, unexpected)
    model.tie_weights()
    model.train()
    decay = [p for _, p in model.named_parameters() if p.dim() >= 2 or mistake == "decay everything"]
    rest = [p for _, p in model.named_parameters() if not (p.dim() >= 2 or mistake == "decay everything")]
    groups = [{"params": decay, "weight_decay": s["weight_decay"]}] + ([{"params": rest, "weight_decay": 0.0}] if rest else [])
    opt = torch.optim.AdamW(groups, lr=s["lr"], betas=(s["beta1"], s["beta2"]), eps=s["adam_eps"])
    sampler = WindowSampler(ids, s["context"] + (1 if mistake == "windows one token late" else 0), s["seed"])
    losses, norms = [], []
    for step in range(s["steps"]):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, s, 1 if mistake == "schedule one step late" else 0)
        rows = sampler.rows(step * s["batch"], s["batch"])
        if mistake == "windows one token late":
            rows = rows[:, 1:]
        x, y = rows[:, :-1], rows[:, 1:]
        logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        clip = 0 if mistake == "no clipping" else s["grad_clip"]
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip if clip > 0 else float("inf"))
        opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
    return losses, norms


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train-lm", default=os.path.join(HERE, "..", "build", "train_lm"))
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "fixtures", "lm_twin"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    s = SETTINGS
    os.makedirs(a.out, exist_ok=True)
    text_path = os.path.join(a.out, "text.txt")
    with open(text_path, "w") as f:
        f.write(copy_text(60, 5))
    ids = np.frombuffer(open(text_path, "rb").read(), dtype=np.uint8).astype(np.int64)
    config, weights = engine_init(a.train_lm, text_path, s)
    losses, norms = train(config, weights, ids, s)
    assert sum(n > s["grad_clip"] for n in norms) >= 3, ("clipping must act in some steps", norms)
    moved = {}
    for mistake in ("decay everything", "no clipping", "schedule one step late", "windows one token late"):
        other, _ = train(config, weights, ids, s, mistake)
        moved[mistake] = max(abs(p - q) / q for p, q in zip(other, losses))
        print(f"  {mistake}: losses move by up to {moved[mistake]:.2e} (relative)")
    save_file({k: v.contiguous() for k, v in weights.items()}, os.path.join(a.out, "init.safetensors"),
              metadata={"from": "train_lm train --steps 1 --warmup 1 (lr 0): the engine's initial weights"})
    golden = {"settings": s, "losses": losses, "grad_norms": norms, "mistakes_move_losses_by": moved,
              "made_with": {"torch": torch.__version__, "transformers": tf.__version__, "dtype": "float64"}}
    with open(os.path.join(a.out, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print(f"losses {losses[0]:.6f} -> {losses[-1]:.6f}; grad norms {min(norms):.3f}..{max(norms):.3f}; wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
