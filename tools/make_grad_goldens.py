#!/usr/bin/env python3
"""Writes the whole-model gradient goldens in tests/fixtures/grad_goldens/ (tooling only; CI never runs
Python: tests/nn/models/test_grad_goldens.cpp reads the files), as llm.c's test_gpt2 checks its backward.

For each tiny HF fixture of tests/fixtures/hf/ (made by tools/make_hf_fixtures.py; the weights are
read from there, not drawn again) transformers computes, in f64 (the f32 weights upcast):

  gpt2-tiny   GPT2LMHeadModel (tied head)      next-token cross-entropy; row 0 ends in 3 ignored labels (-100)
  llama-tiny  LlamaForCausalLM (GQA, untied)   next-token cross-entropy; row 1 ends in 4 ignored labels (-100)
  qwen3-tiny  Qwen3ForCausalLM (q/k norms, head_dim 12)   the same loss; row 0 ends in 2 ignored labels
  bert-tiny   BertForSequenceClassification    cross-entropy on 3 labels; token types, a padded attention mask
  vit-tiny    ViTForImageClassification        cross-entropy on 5 labels; the two reference images

then loss.backward(), and saves <name>.safetensors holding
  the inputs as the model takes them (input_ids, labels; token_type_ids, attention_mask; pixel_values),
  "loss"                 f64 (1): the mean cross-entropy over the labels that are not -100,
  "grad.<HF name>"       f32, every parameter of model.named_parameters() (tied weights once, as torch
                         lists them) in HF's own layout (GPT-2's Conv1D weights are (in, out)).
The loss is computed here as transformers defines it (causal LMs: logits[:, :-1] against labels[:, 1:],
mean over labels != -100) but in f64, because transformers' own loss casts the logits to f32; the
script checks that it equals the model's own `loss` output to f32 precision.
Gradients are stored as f32 (rounding the f64 values: 6e-8 relative), which halves the files.
Parameter names are the checkpoint's (model.safetensors), which the engine's importer uses: newer
transformers rename some modules in memory (5.x ViT: vit.layers.N.attention.q_proj for the file's
vit.encoder.layer.N.attention.attention.query), so each parameter is matched to the one file tensor
holding exactly its values (the weights are random, so the match is unique; the script checks it).
transformers computes a few steps in f32 even in an f64 model (the eager attention softmax of ViT
and Llama, Llama's RMSNorm and RoPE angles); `exact_f64()` runs those steps in f64 for the golden,
so every golden is f64 throughout (the script prints how much this moved the gradients).

Usage: python3 tools/make_grad_goldens.py [out_dir] [--only=name,...]
  made with: python 3.11.7, torch 2.15.0 (the +cu132 wheel, run on the CPU), transformers 5.24.0,
  safetensors 0.8.0 (pip install torch transformers safetensors)
"""
import contextlib
import glob
import os
import sys

import torch
import torch.nn.functional as F
import transformers as tf
from safetensors.torch import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
HF = os.path.join(HERE, "..", "tests", "fixtures", "hf")
ARGS = [a for a in sys.argv[1:] if not a.startswith("--only=")]
ONLY = [n for a in sys.argv[1:] if a.startswith("--only=") for n in a.split("=", 1)[1].split(",")]
OUT = ARGS[0] if ARGS else os.path.join(HERE, "..", "tests", "fixtures", "grad_goldens")


def load(cls, folder, dtype):
    model = cls.from_pretrained(folder, attn_implementation="eager")
    return model.to(dtype).eval()  # eval: no dropout (the fixtures' dropout rates are 0 anyway)


@contextlib.contextmanager
def exact_f64():
    """Runs transformers' f32-only steps in the model's dtype (f64): same formulas, no f32 rounding."""
    from transformers.models.llama import modeling_llama as ml
    from transformers.models.qwen3 import modeling_qwen3 as mq
    softmax = torch.nn.functional.softmax

    def softmax_keep_f64(x, dim=None, _stacklevel=3, dtype=None):
        if dtype == torch.float32 and x.dtype == torch.float64:
            dtype = None
        return softmax(x, dim=dim, dtype=dtype)

    def rms_norm(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    def rotary(self, x, position_ids):
        assert self.rope_type == "default"
        base = self.config.rope_parameters["rope_theta"]
        dim = getattr(self.config, "head_dim", None) or self.config.hidden_size // self.config.num_attention_heads
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        freqs = position_ids[..., None].to(torch.float64) * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)

    classes = ((ml.LlamaRMSNorm, ml.LlamaRotaryEmbedding), (mq.Qwen3RMSNorm, mq.Qwen3RotaryEmbedding))
    saved = [(norm.forward, rope.forward) for norm, rope in classes]
    torch.nn.functional.softmax = softmax_keep_f64
    for norm, rope in classes:
        norm.forward, rope.forward = rms_norm, rotary
    try:
        yield
    finally:
        torch.nn.functional.softmax = softmax
        for (norm, rope), (f, g) in zip(classes, saved):
            norm.forward, rope.forward = f, g


def file_names(model, folder):
    """parameter name -> the checkpoint's name of the tensor holding exactly its values."""
    stored = {}
    for f in glob.glob(os.path.join(folder, "model*.safetensors")):
        stored.update(load_file(f))
    out = {}
    for n, p in model.named_parameters():
        hits = [k for k, t in stored.items() if t.shape == p.shape and torch.equal(t.to(p.dtype), p.detach())]
        assert len(hits) == 1, (folder, n, hits)
        out[n] = hits[0]
    assert len(set(out.values())) == len(out), folder
    return out


def causal_loss(logits, labels):
    """transformers' ForCausalLMLoss (mean over labels != -100 after the shift), in the logits' dtype."""
    v = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, v), labels[:, 1:].reshape(-1), ignore_index=-100)


def run(name, cls, inputs, labels, causal, folder=None, path=None):
    """Loss and gradients in f64 (the golden; also as stock transformers computes it) and in f32.
    The model is read from `folder` (default: tests/fixtures/hf/<name>), the golden written to `path`
    (default: <OUT>/<name>.safetensors)."""
    folder = folder or os.path.join(HF, name)
    out = {}
    for key, dtype in (("golden", torch.float64), ("stock f64", torch.float64), ("f32", torch.float32)):
        model = load(cls, folder, dtype)
        names = file_names(model, folder)
        feed = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in inputs.items()}
        with exact_f64() if key == "golden" else contextlib.nullcontext():
            o = model(**feed, labels=labels)
        logits = o.logits
        loss = causal_loss(logits, labels) if causal else F.cross_entropy(logits, labels)
        # Our loss is transformers' own (which computes it in f32).
        assert abs(loss.item() - o.loss.item()) <= 1e-5 * max(1.0, abs(loss.item())), (name, loss.item(), o.loss.item())
        model.zero_grad()
        loss.backward()
        missing = [n for n, p in model.named_parameters() if p.grad is None]
        assert not missing, (name, missing)
        out[key] = (loss.detach(), {names[n]: p.grad.detach().clone() for n, p in model.named_parameters()})
    loss64, g64 = out["golden"]
    # Spread of the other runs around the golden: max |g - golden| over the tensor's max |golden|,
    # with 1e-3 of the largest gradient as the floor (the key biases' gradients are 0 in exact arithmetic).
    floor = 1e-3 * max(g.abs().max().item() for g in g64.values())
    print(f"{name}: loss {loss64.item():.12f}, {len(g64)} gradients, {sum(g.numel() for g in g64.values())} values")
    for key in ("stock f64", "f32"):
        loss, g = out[key]
        worst = max(((g[n].double() - w).abs().max().item() / max(w.abs().max().item(), floor), n)
                    for n, w in g64.items())
        print(f"  {key}: loss relative error {abs(loss.item() - loss64.item()) / loss64.item():.2e}, "
              f"worst gradient {worst[0]:.2e} ({worst[1]})")

    tensors = {k: v.contiguous() for k, v in inputs.items()}
    tensors["labels"] = labels.contiguous()
    tensors["loss"] = loss64.reshape(1).double().contiguous()
    for n, g in g64.items():
        tensors["grad." + n] = g.float().contiguous()
    path = path or os.path.join(OUT, name + ".safetensors")
    model_dir = os.path.relpath(os.path.abspath(folder), os.path.join(HERE, ".."))
    save_file(tensors, path, metadata={"transformers": tf.__version__, "torch": torch.__version__,
                                        "model": model_dir, "dtype": "float64"})
    print(f"  -> {path} ({os.path.getsize(path) / 1024:.0f} KiB)")


def main():
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    ref = lambda name: load_file(os.path.join(HF, name, "reference.safetensors"))

    def gpt2():
        ids = ref("gpt2-tiny")["input_ids"]  # (2,9)
        labels = ids.clone()
        labels[0, -3:] = -100
        run("gpt2-tiny", tf.GPT2LMHeadModel, {"input_ids": ids}, labels, causal=True)

    def llama():
        ids = ref("llama-tiny")["input_ids"]  # (2,11)
        labels = ids.clone()
        labels[1, -4:] = -100
        run("llama-tiny", tf.LlamaForCausalLM, {"input_ids": ids}, labels, causal=True)

    def qwen3():
        ids = ref("qwen3-tiny")["input_ids"]  # (2,11)
        labels = ids.clone()
        labels[0, -2:] = -100
        run("qwen3-tiny", tf.Qwen3ForCausalLM, {"input_ids": ids}, labels, causal=True)

    def bert():
        r = ref("bert-tiny")  # (2,7); row 1 has two padded positions
        run("bert-tiny", tf.BertForSequenceClassification,
            {"input_ids": r["input_ids"], "token_type_ids": r["token_type_ids"], "attention_mask": r["attention_mask"]},
            torch.tensor([2, 0], dtype=torch.int64), causal=False)

    def vit():
        r = ref("vit-tiny")  # (2,3,40,40)
        run("vit-tiny", tf.ViTForImageClassification, {"pixel_values": r["pixel_values"]},
            torch.tensor([4, 1], dtype=torch.int64), causal=False)

    jobs = {"gpt2-tiny": gpt2, "llama-tiny": llama, "qwen3-tiny": qwen3, "bert-tiny": bert, "vit-tiny": vit}
    for name in ONLY or jobs:
        jobs[name]()


if __name__ == "__main__":
    main()
