#!/usr/bin/env python3
"""Which attention heads of a causal LM retrieve a passkey: the retrieval score of Wu et al. 2024
("Retrieval Head Mechanistically Explains Long-Context Factuality"), teacher-forced.

    python3 tools/retrieval_heads.py MODEL_FOLDER [--lengths 256,1024] [--trials 10] [--seed 0]

Prompts in the template of eval_lm's passkey task, with filler sentences of this tool's own (a head line, filler sentences, "The pass key is K. Remember it.
K is the pass key." at a random depth, filler, "What is the pass key? The pass key is"), followed by
" K" itself (teacher forcing). For each answer token and each head: a hit when the head's most
attended position (from the position that predicts the token) holds the same token inside the key
line; a head's score is its hits over all answer tokens. Prints the layer x head table and each
layer's best head; the last line is the layers ordered by their best head ("layers by retrieval
score: 1,3,0,2"); scripts/convert_llm_demo's KEEP_LAYERS takes layers chosen from it.
Needs torch and transformers (tools/ only); the folder is an HF causal-LM folder with a tokenizer.
"""
import argparse
import os
import random
import sys

FILLER = ("The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
          "The river runs past the mill. A dog sleeps by the door. ")


def prompt(rng, tok, length):
    """(ids, answer token positions, key line span in characters) for a prompt of ~length tokens."""
    key = str(rng.randint(10000, 99999))
    head = "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it."
    line = f"The pass key is {key}. Remember it. {key} is the pass key."
    q = "What is the pass key? The pass key is"
    fixed = len(tok(f"{head}\n{line}\n{q} {key}")["input_ids"])
    per = max(1, len(tok(FILLER)["input_ids"]))
    n = max(0, (length - fixed) // per)
    before = rng.randint(0, n)
    text = head + "\n" + FILLER * before + "\n" + line + "\n" + FILLER * (n - before) + "\n" + q
    start = text.index(line)
    full = text + " " + key
    enc = tok(full, return_offsets_mapping=True)
    answer = [i for i, (a, b) in enumerate(enc["offset_mapping"]) if a > len(text)]  # the key, not the space
    return enc["input_ids"], answer, (start, start + len(line)), enc["offset_mapping"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--lengths", default="256,1024")
    ap.add_argument("--trials", type=int, default=10, help="prompts per length")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if not os.path.isfile(os.path.join(a.model, "config.json")):
        sys.exit(f"error: {a.model}: no config.json (an HF model folder is expected)")
    try:
        lengths = [int(x) for x in a.lengths.split(",")]
    except ValueError:
        sys.exit(f"error: --lengths: '{a.lengths}' is not a comma list of integers")
    if a.trials < 1 or any(n < 64 for n in lengths):
        sys.exit("error: --trials must be >= 1 and every --lengths value >= 64")
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        sys.exit(f"error: this tool needs torch and transformers (pip): {e}")
    try:
        tok = AutoTokenizer.from_pretrained(a.model)
    except (ValueError, OSError):  # train_lm's folders: GPT-2 vocab.json + merges.txt, no tokenizer_config.json
        from transformers import GPT2TokenizerFast
        tok = GPT2TokenizerFast.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, attn_implementation="eager").eval()
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    hits = torch.zeros(layers, heads)
    total = 0
    rng = random.Random(a.seed)
    for n in lengths:
        for _ in range(a.trials):
            ids, answer, (lo, hi), offsets = prompt(rng, tok, n)
            with torch.no_grad():
                att = model(torch.tensor([ids]), output_attentions=True).attentions  # layers x (1, H, L, L)
            in_key = [lo <= s and e <= hi for s, e in offsets]
            for t in answer:
                for layer in range(layers):
                    top = att[layer][0, :, t - 1].argmax(-1)  # (H,): the most attended position
                    for h in range(heads):
                        j = int(top[h])
                        hits[layer, h] += float(in_key[j] and ids[j] == ids[t])
                total += 1
    score = hits / max(total, 1)
    print(f"retrieval score (hits / {total} answer tokens; lengths {a.lengths}, {a.trials} prompts each)")
    print("| layer | " + " | ".join(f"head {h}" for h in range(heads)) + " | best |")
    print("|---|" + "---|" * (heads + 1))
    for layer in range(layers):
        print(f"| {layer} | " + " | ".join(f"{x:.2f}" for x in score[layer].tolist()) +
              f" | {score[layer].max().item():.2f} |")
    order = sorted(range(layers), key=lambda i: -score[i].max().item())
    print("layers by retrieval score: " + ",".join(str(i) for i in order))
    return 0


if __name__ == "__main__":
    sys.exit(main())
