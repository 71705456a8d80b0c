"""hedgehog.load on a quantized folder (nn/models/hf_int8.h; hf_run --save-quantized writes them):
it goes through load_hf_model, so the folder runs with its int8 weights (close to the f32 model,
not equal to it), and a hostile scale raises naming the tensor. The folder is written here with
numpy in the documented layout (the C++ tests check hf_run's own folders bit for bit)."""
import json
import os
import shutil

import numpy as np
import pytest

IDS = [[3, 14, 15, 9, 2, 6, 5, 35]]
LINEARS = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def write_quantized_gpt2(src, dst, edit_scale=None):
    st = pytest.importorskip("safetensors.numpy")
    os.makedirs(dst)
    for name in os.listdir(src):
        if name != "model.safetensors":
            shutil.copy(os.path.join(src, name), dst)
    tensors = {}
    for name, t in st.load_file(os.path.join(src, "model.safetensors")).items():
        if not name.endswith(LINEARS):
            tensors[name] = t
            continue
        w = np.ascontiguousarray(t.T.astype(np.float32))  # Conv1D (in, out) -> the Linear's (out, in)
        amax = np.abs(w).max(axis=1).astype(np.float32)
        scale = (amax / np.float32(127)).astype(np.float32)
        q = np.clip(np.rint(w * (np.float32(127) / amax)[:, None]), -127, 127).astype(np.int8)
        if edit_scale is not None and name == "transformer.h.0.attn.c_attn.weight":
            scale = scale.copy()
            scale[1] = edit_scale
        tensors[name] = q
        tensors[name + "_scale"] = scale
    st.save_file(tensors, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    config["model_type"] = "hedgehog_gpt2"
    config["quantization_config"] = {"quant_method": "hedgehog_int8", "bits": 8}
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f)


def test_load_runs_a_quantized_folder_in_int8(hh, fixture_dir, tmp_path):
    folder = str(tmp_path / "q")
    write_quantized_gpt2(fixture_dir("gpt2-tiny"), folder)
    f32 = hh.load(fixture_dir("gpt2-tiny")).logits(IDS)
    q = hh.load(folder).logits(IDS)
    assert q.shape == f32.shape
    assert np.isfinite(q).all()
    err = np.abs(q - f32).max() / np.abs(f32).max()
    assert 0 < err < 0.05  # int8 weights and activations (test_int8_model.cpp: 0.014-0.018 on this model)


@pytest.mark.parametrize("bad, message", [(float("nan"), "holds nan at element 1"), (0.0, "holds 0 at element 1"),
                                          (-1.0, "holds -1 at element 1")])
def test_a_hostile_scale_raises(hh, fixture_dir, tmp_path, bad, message):
    folder = str(tmp_path / "q")
    write_quantized_gpt2(fixture_dir("gpt2-tiny"), folder, edit_scale=bad)
    with pytest.raises(hh.Error, match="scale tensor 'transformer.h.0.attn.c_attn.weight_scale' " + message):
        hh.load(folder)


def test_load_asks_a_quantized_folder_for_its_own_format_only(hh, fixture_dir, tmp_path):
    folder = str(tmp_path / "q")
    write_quantized_gpt2(fixture_dir("gpt2-tiny"), folder)
    assert np.array_equal(hh.load(folder, weights="int8").logits(IDS), hh.load(folder).logits(IDS))
    for other in ("f32", "bf16"):
        with pytest.raises(hh.Error, match="weights " + other + ": .* holds int8 weights"):
            hh.load(folder, weights=other)
