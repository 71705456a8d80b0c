#!/usr/bin/env python3
"""Checks that converted decoder folders written by the engine (a Llama or GPT-2 whose attention was
swapped for a feature map or a hybrid mixer: model.safetensors, config.json with a "hedgehog"
section and an auto_map, modeling_hedgehog.py) load in transformers and compute the engine's logits.

For each FOLDER: transformers.AutoModelForCausalLM.from_pretrained(FOLDER, trust_remote_code=True)
must load with no missing, unexpected or mismatched keys and run the hedgehog attention classes;
its logits for --ids are compared with the engine's, which come from `hf_run --model FOLDER --ids
... --hidden-states --out DIR` (DIR/logits.npy). Exit status 0 when every folder agrees to --tol
(max abs difference), 1 otherwise, 77 when torch or transformers cannot be imported (the CTest
skips then).

    python3 tools/check_hf_export.py out/convert_llama/model --hf-run build/hf_run
    python3 tools/check_hf_export.py --all build/hf_export --hf-run build/hf_run
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77  # CTest's SKIP_RETURN_CODE
DEFAULT_IDS = "3,14,15,9,2,6,5,35,8,9,7,9"  # the doctests' ids (tests/nn/models/test_hf_export.cpp)


def parse_ids(text):
    return [int(x) for x in text.split(",") if x.strip()]


def transformers_logits(folder, ids):
    """(logits (L,V) as float64 numpy, problems: list of strings) of transformers on `folder`."""
    import torch
    from transformers import AutoModelForCausalLM

    problems = []
    model, info = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, output_loading_info=True,
                                                       dtype=torch.float32)
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(key):
            problems.append(f"{key}: {sorted(str(k) for k in info[key])}")
    mixers = [m for m in model.modules() if type(m).__name__.startswith("Hedgehog") and hasattr(m, "feature_map")]
    if not mixers:
        problems.append(f"transformers built {type(model).__name__} without the hedgehog attention classes")
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    return logits.double().numpy(), problems


def engine_logits(folder, ids, hf_run):
    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        cmd = [hf_run, "--model", folder, "--ids", ",".join(map(str, ids)), "--max-new-tokens", "0",
               "--hidden-states", "--out", out]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
        return np.load(os.path.join(out, "logits.npy"))[0].astype("float64")


def check(folder, ids, hf_run, tol):
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    mixer = config.get("hedgehog", {}).get("mixer", "softmax")
    if "auto_map" not in config or not os.path.exists(os.path.join(folder, "modeling_hedgehog.py")):
        print(f"FAIL {folder}: no auto_map / modeling_hedgehog.py (not a converted decoder folder)")
        return False
    hf, problems = transformers_logits(folder, ids)
    ours = engine_logits(folder, ids, hf_run)
    if hf.shape != ours.shape:
        problems.append(f"logits shapes differ: transformers {hf.shape}, engine {ours.shape}")
        diff = float("inf")
    else:
        diff = float(abs(hf - ours).max())
        if not diff <= tol:
            problems.append(f"max |logit difference| {diff:.3g} > {tol:g}")
    status = "ok  " if not problems else "FAIL"
    print(f"{status} {folder} ({config.get('model_type')}, {mixer}): max |diff| {diff:.3g}")
    for p in problems:
        print(f"     {p}")
    return not problems


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="*")
    ap.add_argument("--all", default="", help="check every sub-folder of this folder (sorted)")
    ap.add_argument("--ids", default=DEFAULT_IDS, help="token ids, comma-separated")
    ap.add_argument("--hf-run", default="build/hf_run", help="the engine's hf_run binary")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest max |logit difference| accepted")
    a = ap.parse_args()
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"skipped: python3 cannot import torch/transformers/numpy ({e})")
        return SKIP
    folders = list(a.folders)
    if a.all:
        folders += [os.path.join(a.all, d) for d in sorted(os.listdir(a.all)) if os.path.isdir(os.path.join(a.all, d))]
    if not folders:
        print("error: no folder given (FOLDER ... or --all DIR)")
        return 2
    ids = parse_ids(a.ids)
    ok = True
    for folder in folders:
        try:
            ok = check(folder, ids, a.hf_run, a.tol) and ok
        except Exception as e:  # a folder that does not load is a failed check, the others still run
            print(f"FAIL {folder}: {type(e).__name__}: {e}")
            ok = False
    print(f"{len(folders)} folder(s): {'all agree' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
