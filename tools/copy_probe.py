#!/usr/bin/env python3
"""How well a train_lm model copies: on lines of a random string s repeated (--style bar: "s|s|s|s",
tools/copy_twin.py's copy data; --style prose: "Say it again: s. Again: s. Again: s. Again: s.",
tools/retrieval_corpus.py's drill), the mean loss and greedy accuracy of the bytes of s in the
repeats (each predictable by copying) and in its first occurrence (random: log 36 = 3.58 nats is
the floor there).

  python3 tools/copy_probe.py --model RUN/softmax/checkpoint.safetensors|RUN/softmax/model
                              [--lines 200] [--seed 123]

The model: a train_lm checkpoint (its weights at that step; the config from its lm.hf_config) or an
HF folder. Lines are drawn here from --seed (not the training data's seed 2), fed one per row
after a newline. Prints one line: step-free summary numbers. GPT-2 or Llama (train_lm --arch llama).
"""
import argparse
import json
import os
import random
import sys

import torch
import torch.nn.functional as F
import transformers as tf
from safetensors import safe_open

ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def load(path):
    if os.path.isdir(path):
        return tf.AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").eval()
    with safe_open(path, "pt") as f:
        config = json.loads(f.metadata()["lm.hf_config"])
        config.pop("hedgehog", None)
        state = {k[len("model."):]: f.get_tensor(k) for k in f.keys() if k.startswith("model.")}
    if config["architectures"] == ["LlamaForCausalLM"]:  # train_lm --arch llama: HF names and layouts as they are
        model = tf.LlamaForCausalLM(tf.LlamaConfig(**config))
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
        model.load_state_dict(state, strict=True)
        return model.eval()
    model = tf.GPT2LMHeadModel(tf.GPT2Config(**config))
    # The engine keeps Linear weights as (out, in); GPT-2's Conv1D as (in, out).
    state = {k: v.t().contiguous() if k.endswith("weight") and any(m in k for m in ("c_attn", "c_proj", "c_fc")) else v
             for k, v in state.items()}
    state["lm_head.weight"] = state["transformer.wte.weight"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k.endswith("attn.bias") or k.endswith("masked_bias") for k in missing), (missing, unexpected)
    return model.eval()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--lines", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--style", choices=["bar", "prose"], default="bar")
    a = ap.parse_args()
    torch.set_num_threads(1)
    model = load(a.model)
    rng = random.Random(a.seed)
    sums = {"first": [0.0, 0, 0], "repeats": [0.0, 0, 0]}  # loss sum, correct, count
    with torch.no_grad():
        for _ in range(a.lines):
            s = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(6, 24)))
            if a.style == "bar":
                parts = ["\n"] + [p for k in range(a.repeats) for p in (["|"] if k else []) + [s]] + ["\n"]
            else:
                parts = ["\n", "Say it again: "] + [p for k in range(a.repeats) for p in ([". Again: "] if k else []) + [s]] + ["."]
            line = "".join(parts)
            kind, seen = [], 0  # per byte: None, "first" or "repeats"
            for p in parts:
                if p == s:
                    kind += ["repeats" if seen else "first"] * len(p)
                    seen += 1
                else:
                    kind += [None] * len(p)
            ids = torch.tensor([list(line.encode())])
            logits = model(input_ids=ids[:, :-1]).logits[0]  # (L-1, V)
            target = ids[0, 1:]
            loss = F.cross_entropy(logits, target, reduction="none")
            correct = logits.argmax(-1) == target
            for i in range(len(target)):  # target i is byte i + 1 of the line
                key = kind[i + 1]
                if key:
                    sums[key][0] += loss[i].item()
                    sums[key][1] += int(correct[i])
                    sums[key][2] += 1
    out = {k: {"loss": v[0] / v[2], "accuracy": v[1] / v[2], "tokens": v[2]} for k, v in sums.items()}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
