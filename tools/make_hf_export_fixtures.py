#!/usr/bin/env python3
"""Writes tests/fixtures/hf/export/logits.safetensors: the logits transformers computes, through the
folder's modeling_hedgehog.py, for the tiny converted Llama / GPT-2 folders the engine saves (the
doctest "hf export: write the converted folders for the python check" writes them; its sibling
test compares the engine's logits with this file, so the agreement is checked without python).
Each tensor is named "<family>/<case>" (e.g. "llama-tiny/hybrid-hedgehog-w4"), shape (1, 12, V), f32,
for the ids of tools/check_hf_export.py. Every folder must also pass check_hf_export's load checks
(no missing/unexpected keys) and agree with hf_run to 1e-4, or nothing is written.

    python3 tools/make_hf_export_fixtures.py --build build
"""
import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_hf_export  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build", help="build folder with hh_tests and hf_run")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.normpath(os.path.join(here, "..", "tests", "fixtures", "hf", "export",
                                                                   "logits.safetensors")))
    a = ap.parse_args()
    import torch
    from safetensors.torch import save_file

    ids = check_hf_export.parse_ids(check_hf_export.DEFAULT_IDS)
    hf_run = os.path.join(a.build, "hf_run")
    tensors = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, HH_HF_EXPORT_DIR=tmp)
        subprocess.run([os.path.join(a.build, "hh_tests"), "-tc=hf export: write*", "--no-skip"], env=env, check=True)
        for name in sorted(os.listdir(tmp)):
            folder = os.path.join(tmp, name)
            if not check_hf_export.check(folder, ids, hf_run, 1e-4):
                sys.exit(f"error: {folder} does not agree with transformers; no fixture written")
            logits, problems = check_hf_export.transformers_logits(folder, ids)
            assert not problems, problems
            family, case = name.split("-tiny-", 1)
            tensors[f"{family}-tiny/{case}"] = torch.from_numpy(logits).float().unsqueeze(0).contiguous()
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    save_file(tensors, a.out, metadata={"format": "pt", "ids": ",".join(map(str, ids))})
    os.chmod(a.out, 0o644)
    print(f"wrote {len(tensors)} tensors to {a.out}")


if __name__ == "__main__":
    main()
