#!/usr/bin/env python3
"""Loads a train_lm export (an HF GPT-2 folder) with transformers and prints its greedy continuation
and the logits of the last prompt position, to compare with the engine's (`hf_run --model FOLDER
--ids ... --temperature 0 --stop-at-eos false`). A linear run's folder loads through the
modeling_hedgehog.py it carries (trust_remote_code; tools/check_hf_export.py compares the logits);
an older folder with a "hedgehog" section but no auto_map is refused (transformers would run softmax).

    python3 tools/check_lm_export.py out/train_lm/softmax/model --ids 10,20,30 --new 8
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--ids", default="10,20,30")
    ap.add_argument("--new", type=int, default=8)
    a = ap.parse_args()
    import torch
    import transformers as tf

    with open(f"{a.folder}/config.json") as f:
        config = json.load(f)
    if "hedgehog" in config and "auto_map" not in config:
        sys.exit("error: this folder has a linear attention (a 'hedgehog' section) but no auto_map to "
                 "modeling_hedgehog.py (an older export); transformers would run softmax")
    if "auto_map" in config:
        model = tf.AutoModelForCausalLM.from_pretrained(a.folder, trust_remote_code=True).eval()
    else:
        model = tf.GPT2LMHeadModel.from_pretrained(a.folder).eval()
    ids = torch.tensor([[int(x) for x in a.ids.split(",")]])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=a.new, do_sample=False, pad_token_id=0,
                             eos_token_id=None)
        logits = model(ids).logits[0, -1]
    print("generated ids:", json.dumps(out[0, ids.shape[1]:].tolist()).replace(" ", ""))
    print("last logits[:5]:", [round(float(x), 6) for x in logits[:5]])


if __name__ == "__main__":
    main()
