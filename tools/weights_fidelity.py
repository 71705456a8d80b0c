#!/usr/bin/env python3
"""Fidelity of the engine's inference weight formats (hf_run --weights f32 | bf16 | int8) on a decoder:
the same held-out text through `hf_run --hidden-states` once per format (the logits of every
position), then per format the perplexity of the text's next tokens and the top-1 agreement of each
position's argmax with f32's. Windows of --window tokens (the model's trained context) cover the
text one after the other.

    python3 tools/weights_fidelity.py --engine build/hf_run --model out/convert_llm_demo/teacher/softmax/model \\
        --text /usr/share/common-licenses/GPL-3 --chars 20000
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", required=True, help="the hf_run binary")
    ap.add_argument("--model", required=True, help="a decoder's HF folder")
    ap.add_argument("--text", required=True, help="a held-out text file")
    ap.add_argument("--chars", type=int, default=20000, help="characters of the text used")
    ap.add_argument("--window", type=int, default=256, help="tokens per forward (the trained context)")
    ap.add_argument("--formats", default="f32,bf16,int8")
    a = ap.parse_args()
    import numpy as np

    if not os.path.exists(os.path.join(a.model, "config.json")):
        sys.exit(f"error: --model {a.model}: no config.json")
    text = open(a.text, encoding="utf-8", errors="replace").read()[: a.chars]
    formats = a.formats.split(",")
    if formats[0] != "f32":
        sys.exit("error: --formats: f32 first (the reference of the agreement)")

    def logits_of(fmt, prompt_ids):
        with tempfile.TemporaryDirectory() as d:
            cmd = [a.engine, "--model", a.model, "--ids", ",".join(map(str, prompt_ids)), "--max-new-tokens", "1",
                   "--temperature", "0", "--hidden-states", "--weights", fmt, "--out", d]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"error: {' '.join(cmd[:3])} ... --weights {fmt} failed:\n{r.stderr[-2000:]}")
            return np.load(os.path.join(d, "logits.npy"))[0].astype(np.float64)  # (L, V)

    # The text's ids: hf_run's own tokenizer (a run with --prompt writes them into results.json), in
    # pieces of about 2,000 characters cut at a line break (under any model's position limit).
    ids, pieces, rest = [], [], text
    while rest:
        cut = rest.rfind("\n", 0, 2000) + 1 if len(rest) > 2000 else len(rest)
        pieces.append(rest[: cut or 2000])
        rest = rest[cut or 2000:]
    for piece in pieces:
        with tempfile.TemporaryDirectory() as d:
            r = subprocess.run([a.engine, "--model", a.model, "--prompt", piece, "--max-new-tokens", "1",
                                "--temperature", "0", "--out", d], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"error: tokenizing --text with {a.engine} failed:\n{r.stderr[-2000:]}")
            ids += json.load(open(os.path.join(d, "results.json")))["prompt_ids"]
    windows = [ids[i:i + a.window] for i in range(0, len(ids) - 1, a.window) if len(ids[i:i + a.window]) > 1]
    nll = {f: 0.0 for f in formats}
    agree = {f: 0 for f in formats}
    count = 0
    for w in windows:
        ref = None
        for f in formats:
            lg = logits_of(f, w)[:-1]  # position i predicts w[i + 1]
            lse = np.log(np.exp(lg - lg.max(1, keepdims=True)).sum(1)) + lg.max(1)
            nll[f] += float((lse - lg[np.arange(len(w) - 1), w[1:]]).sum())
            top = lg.argmax(1)
            if ref is None:
                ref = top
            agree[f] += int((top == ref).sum())
        count += len(w) - 1
    print(f"{a.model}: {count} next tokens of {a.text} in {len(windows)} windows of {a.window}")
    print("| weights | perplexity | change vs f32 | top-1 agreement with f32 | positions that differ |")
    print("|---|---|---|---|---|")
    base = math.exp(nll["f32"] / count)
    for f in formats:
        ppl = math.exp(nll[f] / count)
        print(f"| {f} | {ppl:.4f} | {100 * (ppl / base - 1):+.3f}% | {100 * agree[f] / count:.2f}% | {count - agree[f]} |")


if __name__ == "__main__":
    main()
