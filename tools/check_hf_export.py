#!/usr/bin/env python3
"""Checks that converted folders written by the engine (a Llama, Mistral, Qwen2, Qwen3, GPT-2, BERT
or ViT whose attention was swapped for a feature map or, decoders only, a hybrid mixer:
model.safetensors, config.json with a "hedgehog" section and an auto_map, modeling_hedgehog.py) load
in transformers and compute the engine's outputs.

For each decoder FOLDER: transformers.AutoModelForCausalLM.from_pretrained(FOLDER,
trust_remote_code=True) must load with no missing, unexpected or mismatched keys and run the
hedgehog attention classes; its logits for --ids are compared with the engine's, which come from
`hf_run --model FOLDER --ids ... --hidden-states --out DIR` (DIR/logits.npy), to --tol.
For an encoder FOLDER (model_type hedgehog_bert / hedgehog_vit) the class is its auto_map's head
(AutoModelForSequenceClassification, AutoModelForImageClassification, else AutoModel), compared to
--encoder-tol: BERT's class logits (a classifier) and last hidden state for --ids (a bare BertModel:
for a text), and, when the folder has a tokenizer, the mean-pooled last hidden states of a padded
batch of texts (hf_run --task embed --input: padded keys must contribute nothing); ViT's class
logits and last hidden state for a deterministic image (a binary PPM hf_run reads, its pixel values
computed here as the engine's preprocessing does).
Exit status 0 when every folder agrees, 1 otherwise, 77 when torch or transformers cannot be
imported (the CTest skips then).

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
# The padded batch of the BERT check: lengths differ, so every row but the longest is padded.
TEXTS = ["the cat sat on the mat", "a dog", "hello world, this is a somewhat longer sentence than the others",
         "one more line of text"]


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


def check(folder, ids, hf_run, tol, encoder_tol):
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    mixer = config.get("hedgehog", {}).get("mixer", "softmax")
    if "auto_map" not in config or not os.path.exists(os.path.join(folder, "modeling_hedgehog.py")):
        print(f"FAIL {folder}: no auto_map / modeling_hedgehog.py (not a converted folder)")
        return False
    if config.get("model_type") in ENCODERS:
        return check_encoder(folder, config, ids, hf_run, encoder_tol)
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


# ---- encoders (BERT, ViT) ----

ENCODERS = {"hedgehog_bert": "AutoModelForSequenceClassification", "hedgehog_vit": "AutoModelForImageClassification"}


def run_hf_run(hf_run, folder, args):
    """hf_run --model folder ARGS --out TMP: (results.json, {name: array} of its .npy files)."""
    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        cmd = [hf_run, "--model", folder, *args, "--out", out]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
        with open(os.path.join(out, "results.json")) as f:
            results = json.load(f)
        arrays = {n: np.load(os.path.join(out, n)).astype("float64") for n in os.listdir(out) if n.endswith(".npy")}
        return results, arrays


def compare(name, ours, theirs, tol, problems):
    """max |ours - theirs| (both as float64 numpy), a problem when shapes differ or it exceeds tol."""
    import numpy as np

    ours, theirs = np.asarray(ours, dtype="float64"), np.asarray(theirs, dtype="float64")
    if ours.shape != theirs.shape:
        problems.append(f"{name}: shapes differ: transformers {theirs.shape}, engine {ours.shape}")
        return float("inf")
    diff = float(abs(ours - theirs).max())
    if not diff <= tol:
        problems.append(f"{name}: max |difference| {diff:.3g} > {tol:g}")
    return diff


def load_encoder(folder, config):
    """(the model of the folder's head class, problems)."""
    import torch
    import transformers

    key = ENCODERS[config["model_type"]]
    auto = getattr(transformers, key if key in config["auto_map"] else "AutoModel")
    problems = []
    model, info = auto.from_pretrained(folder, trust_remote_code=True, output_loading_info=True, dtype=torch.float32)
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        keys = sorted(str(x) for x in info.get(k) or [])
        if k == "missing_keys":  # a bare model's pooler, when the folder has none: unused by the engine too
            keys = [x for x in keys if not x.startswith("pooler.")]
        if keys:
            problems.append(f"{k}: {keys}")
    if not [m for m in model.modules() if type(m).__name__.startswith("Hedgehog") and hasattr(m, "feature_map")]:
        problems.append(f"transformers built {type(model).__name__} without the hedgehog attention classes")
    return model.eval(), problems


def has_tokenizer(folder):
    return any(os.path.exists(os.path.join(folder, n)) for n in ("tokenizer.json", "vocab.txt"))


def check_bert(folder, config, ids, hf_run, tol, problems):
    import torch
    from transformers import AutoTokenizer

    model, problems[:0] = load_encoder(folder, config)
    encoder = getattr(model, "bert", model)
    classifier = encoder is not model
    diffs = {}
    with torch.no_grad():
        if classifier:  # the class logits and last hidden state of --ids
            results, arrays = run_hf_run(hf_run, folder, ["--ids", ",".join(map(str, ids)), "--task", "classify",
                                                          "--hidden-states"])
            x = torch.tensor([ids])
            diffs["logits"] = compare("logits", [results["logits"]], model(input_ids=x).logits, tol, problems)
            diffs["hidden"] = compare("last hidden state", arrays["hidden_states.npy"],
                                      encoder(input_ids=x).last_hidden_state, tol, problems)
        tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=True) if has_tokenizer(folder) else None
        if tok is None:
            if not classifier:
                problems.append("a bare BertModel folder without a tokenizer: nothing to compare")
            return diffs
        if not classifier:  # the last hidden state of one text
            results, arrays = run_hf_run(hf_run, folder, ["--text", TEXTS[0], "--task", "embed", "--hidden-states"])
            enc = tok([TEXTS[0]], return_tensors="pt")
            diffs["hidden"] = compare("last hidden state", arrays["hidden_states.npy"],
                                      encoder(**enc).last_hidden_state, tol, problems)
        # The padded batch: mean of the real tokens' last hidden states (hf_run --task embed).
        with tempfile.TemporaryDirectory() as tmp:
            texts = os.path.join(tmp, "texts.txt")
            with open(texts, "w") as f:
                f.write("\n".join(TEXTS) + "\n")
            # (hf_run's --normalize false is refused: "not declared as a boolean flag"; the folder's
            # choice, in results.json, is applied below instead)
            results, arrays = run_hf_run(hf_run, folder, ["--task", "embed", "--input", texts, "--pooling", "mean",
                                                          "--batch", str(len(TEXTS))])
        if tok.pad_token is None and "[PAD]" in tok.get_vocab():  # a tokenizer.json alone (the engine pads alike)
            tok.pad_token = "[PAD]"
        enc = tok(TEXTS, padding=True, truncation=True, max_length=config["max_position_embeddings"],
                  return_tensors="pt")
        if bool(enc["attention_mask"].all()):
            problems.append("the padded batch has no padding")
        h = encoder(**enc).last_hidden_state
        real = enc["attention_mask"].to(h.dtype).unsqueeze(-1)
        pooled = (h * real).sum(1) / real.sum(1).clamp(min=1e-9)
        if results.get("normalize"):
            pooled = pooled / pooled.norm(dim=1, keepdim=True).clamp(min=1e-12)
        diffs["padded"] = compare("padded batch (mean pooled)", arrays["embeddings.npy"], pooled, tol, problems)
    return diffs


def vit_image(folder, config, path):
    """Writes a deterministic image (binary PPM) to path; its pixel values (1,3,H,W) as the engine's
    preprocessing (data/image.cpp: rescale in f64, cast to f32, normalize in f32) gives them."""
    import numpy as np

    size = config["image_size"]
    pre = {}
    if os.path.exists(os.path.join(folder, "preprocessor_config.json")):
        with open(os.path.join(folder, "preprocessor_config.json")) as f:
            pre = json.load(f)
    want = pre.get("size") or {}
    if pre.get("do_resize", True) and (want.get("height", size), want.get("width", size)) != (size, size):
        raise RuntimeError(f"preprocessor_config.json resizes to {want}, not image_size {size}: not checked")
    y, x, c = np.meshgrid(np.arange(size), np.arange(size), np.arange(3), indexing="ij")
    rgb = ((x * 7 + y * 13 + c * 50 + (x * y) % 17) % 256).astype(np.uint8)  # (H,W,3)
    with open(path, "wb") as f:
        f.write(f"P6\n{size} {size}\n255\n".encode() + rgb.tobytes())
    v = rgb.astype(np.float64).transpose(2, 0, 1)
    if pre.get("do_rescale", True):
        v = v * float(pre.get("rescale_factor", 1.0 / 255.0))
    v = v.astype(np.float32)
    if pre.get("do_normalize", True):
        mean = np.asarray(pre.get("image_mean", [0.5] * 3), dtype=np.float32).reshape(3, 1, 1)
        std = np.asarray(pre.get("image_std", [0.5] * 3), dtype=np.float32).reshape(3, 1, 1)
        v = (v - mean) / std
    return v[None]


def check_vit(folder, config, hf_run, tol, problems):
    import torch

    model, problems[:0] = load_encoder(folder, config)
    encoder = getattr(model, "vit", model)
    classifier = encoder is not model
    diffs = {}
    with tempfile.TemporaryDirectory() as tmp:
        image = os.path.join(tmp, "image.ppm")
        pixels = torch.from_numpy(vit_image(folder, config, image))
        args = ["--image", image, "--hidden-states"]
        args += ["--task", "classify"] if classifier else ["--task", "embed"]
        results, arrays = run_hf_run(hf_run, folder, args)
    with torch.no_grad():
        if classifier:
            diffs["logits"] = compare("logits", [results["logits"]], model(pixel_values=pixels).logits, tol, problems)
        diffs["hidden"] = compare("last hidden state", arrays["hidden_states.npy"],
                                  encoder(pixel_values=pixels).last_hidden_state, tol, problems)
    return diffs


def check_encoder(folder, config, ids, hf_run, tol):
    problems = []
    mixer = config.get("hedgehog", {}).get("mixer", "softmax")
    if config["model_type"] == "hedgehog_bert":
        diffs = check_bert(folder, config, ids, hf_run, tol, problems)
    else:
        diffs = check_vit(folder, config, hf_run, tol, problems)
    status = "ok  " if not problems and diffs else "FAIL"
    worst = max(diffs.values()) if diffs else float("inf")
    parts = ", ".join(f"{k} {v:.3g}" for k, v in diffs.items())
    print(f"{status} {folder} ({config.get('model_type')}, {mixer}): max |diff| {worst:.3g} ({parts})")
    for p in problems:
        print(f"     {p}")
    return not problems and bool(diffs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="*")
    ap.add_argument("--all", default="", help="check every sub-folder of this folder (sorted)")
    ap.add_argument("--ids", default=DEFAULT_IDS, help="token ids, comma-separated")
    ap.add_argument("--hf-run", default="build/hf_run", help="the engine's hf_run binary")
    ap.add_argument("--tol", type=float, default=1e-4, help="decoders: largest max |logit difference| accepted")
    ap.add_argument("--encoder-tol", type=float, default=1e-5,
                    help="BERT, ViT: largest max |difference| of logits and hidden states accepted")
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
            ok = check(folder, ids, a.hf_run, a.tol, a.encoder_tol) and ok
        except Exception as e:  # a folder that does not load is a failed check, the others still run
            print(f"FAIL {folder}: {type(e).__name__}: {e}")
            ok = False
    print(f"{len(folders)} folder(s): {'all agree' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
