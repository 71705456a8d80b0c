#!/usr/bin/env python3
"""Builds the tiny HF model fixtures in tests/fixtures/hf/ (tooling only; the C++ tests read the files).

Each fixture folder is what `save_pretrained` writes (config.json, model.safetensors or a sharded
model.safetensors.index.json + shards), plus `reference.safetensors`: the inputs fed to transformers
and the outputs it produced (f32). The configurations exercise the awkward cases of issue 9:

  bert-tiny       BertForSequenceClassification, token types, a padded attention mask
  gpt2-tiny       GPT2LMHeadModel, 5 heads of 8 (an unusual head count), gelu_new, tied head
  gpt2-tiny-bf16  the same family with bf16 weights (references from the bf16 weights upcast to f32)
  vit-tiny        ViTForImageClassification at 40x40 (not 224) with 8x8 patches; image.png + pixel_values
  llama-tiny      LlamaForCausalLM, GQA (4 heads, 2 KV heads), rope_theta 500000, untied head, sharded
  llama-tiny-f16  f16 weights, tied head, rope_theta 25000 written the transformers-4 way (top-level
                  "rope_theta", "rope_scaling": null), as Llama-2 folders on the hub have it
  llama-tiny-tok  a 1-layer Llama over the SentencePiece-BPE tokenizer fixture (tokenizer.json in the
                  folder): text in, text out (the references hold the prompt's ids and the greedy text)
  bert-tiny-tok   a 1-layer BERT over the WordPiece fixture (vocab.txt, tokenizer.json): a text pair in
  mistral-tiny    MistralForCausalLM, GQA, untied, sliding_window 5 (inputs of 11 tokens, 12 generated
                  after a 5-token prompt: the window matters in forward and in decoding)
  qwen2-tiny      Qwen2ForCausalLM over the Qwen2-style tokenizer fixture (tokenizers/qwen2): q/k/v
                  biases, tied head, rope_theta 1e6, use_sliding_window with sliding_window 4 and
                  max_window_layers 1 (layer 0 full, layer 1 sliding); expected.json: a text's ids
  qwen3-tiny      Qwen3ForCausalLM: q_norm/k_norm, head_dim 12 with hidden_size 32 and 4 heads, GQA,
                  untied, rope_parameters {rope_theta 20000}
  RoPE scaling (rope()): each over inputs of 2 x 40-56 tokens, past the context the scaling is about,
  head_dim 16 (so llama3's medium band and yarn's ramp cover some frequencies), 20 greedy tokens;
  references loaded back from the written folder (so transformers reads the config.json the engine
  reads), plus `step_logits`: the inputs fed one token at a time through transformers' KV cache.
    llama-tiny-llama3    rope_parameters llama3 (factor 8, low/high_freq_factor 1/4, original 32)
    llama-tiny-yarn      the transformers-4 spelling: top-level rope_theta, rope_scaling {"type": "yarn"}
                         with beta_fast 16, beta_slow 2, mscale 0.8 / mscale_all_dim 0.5, truncate false
    qwen2-tiny-dynamic   rope_parameters dynamic (factor 2) over max_position_embeddings 32: inputs of
                         56 tokens; a 24-token prompt whose 20 new tokens cross position 32
    mistral-tiny-linear  rope_scaling {"type": "linear", "factor": 2} (transformers 4), sliding_window 16
    qwen3-tiny-yarn      rope_parameters yarn as Qwen3 documents it (factor 4, original 32)
  rope_inv_freq.json: transformers' inverse frequencies and attention scaling for more parameter sets
  (each variant, yarn's optional keys, dynamic below and above max_position_embeddings).

Weights are random (initializer_range 0.1) plus noise on every parameter, so layer norms, biases and
nonlinearities all matter. Decoder references also hold `generated_ids`: greedy generation of
`max_new_tokens` tokens with transformers' own KV cache.

Usage: python3 tools/make_hf_fixtures.py [out_dir] [--only name,...]
       (pip install torch transformers safetensors pillow numpy; --only: e.g. mistral,qwen2,qwen3)
"""
import json
import os
import shutil
import sys

import numpy as np
import torch
import transformers as tf
from safetensors.torch import save_file

ARGS = [a for a in sys.argv[1:] if not a.startswith("--only")]
ONLY = [a.split("=", 1)[1].split(",") for a in sys.argv[1:] if a.startswith("--only=")]
OUT = ARGS[0] if ARGS else os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "hf")


def perturb(model, scale=0.05, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return model


def fresh(folder):
    path = os.path.join(OUT, folder)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def save(model, folder, refs, dtype=None, **kw):
    """Saves the model (optionally cast to dtype); references are computed from the saved weights."""
    path = fresh(folder)
    if dtype is not None:
        model = model.to(dtype)
    model.save_pretrained(path, safe_serialization=True, **kw)
    model = model.float()  # the reference runs in f32 on exactly the stored (rounded) weights
    out = refs(model)
    save_file({k: v.detach().clone().contiguous() for k, v in out.items()}, os.path.join(path, "reference.safetensors"),
              metadata={"transformers": tf.__version__, "torch": torch.__version__})
    return path


def greedy(model, ids, new):
    gen = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, num_beams=1,
                         pad_token_id=0, attention_mask=torch.ones_like(ids))
    return gen


def bert():
    torch.manual_seed(1)
    cfg = tf.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=37, max_position_embeddings=64, type_vocab_size=2, num_labels=3,
                        hidden_act="gelu", layer_norm_eps=1e-12, initializer_range=0.1,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, attn_implementation="eager")
    model = perturb(tf.BertForSequenceClassification(cfg).eval(), seed=1)
    ids = torch.tensor([[2, 17, 33, 4, 56, 71, 3], [2, 9, 88, 3, 45, 0, 0]], dtype=torch.int64)
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 0, 0]], dtype=torch.int64)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]], dtype=torch.int64)

    def refs(m):
        with torch.no_grad():
            o = m(input_ids=ids, token_type_ids=types, attention_mask=mask, output_hidden_states=True)
        return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "logits": o.logits,
                "last_hidden_state": o.hidden_states[-1]}

    save(model, "bert-tiny", refs)


def gpt2():
    for folder, dtype, seed in (("gpt2-tiny", None, 2), ("gpt2-tiny-bf16", torch.bfloat16, 3)):
        torch.manual_seed(seed)
        cfg = tf.GPT2Config(vocab_size=101, n_positions=32, n_embd=40, n_layer=2, n_head=5,
                            activation_function="gelu_new", layer_norm_epsilon=1e-5, initializer_range=0.1,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager",
                            bos_token_id=100, eos_token_id=100)
        model = perturb(tf.GPT2LMHeadModel(cfg).eval(), seed=seed)
        ids = torch.tensor([[5, 17, 99, 42, 3, 64, 8, 21, 77], [1, 2, 3, 4, 5, 6, 7, 8, 9]], dtype=torch.int64)

        def refs(m):
            with torch.no_grad():
                o = m(input_ids=ids, output_hidden_states=True)
                gen = greedy(m, ids[:1, :4], 12)
            return {"input_ids": ids, "logits": o.logits, "last_hidden_state": o.hidden_states[-1],
                    "prompt_ids": ids[:1, :4], "generated_ids": gen}

        save(model, folder, refs, dtype=dtype)


def vit():
    from PIL import Image
    torch.manual_seed(4)
    cfg = tf.ViTConfig(image_size=40, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=37, hidden_act="gelu", layer_norm_eps=1e-12,
                       initializer_range=0.1, num_labels=5, hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0, attn_implementation="eager")
    model = perturb(tf.ViTForImageClassification(cfg).eval(), seed=4)
    rng = np.random.default_rng(4)
    # A smooth image with some noise (a real-looking input for the PNG path), 40x40 RGB.
    yy, xx = np.mgrid[0:40, 0:40]
    img = np.stack([(xx * 6) % 256, (yy * 6) % 256, ((xx + yy) * 3) % 256], axis=-1).astype(np.float64)
    img = np.clip(img + rng.normal(0, 20, img.shape), 0, 255).astype(np.uint8)
    proc = tf.ViTImageProcessor(size={"height": 40, "width": 40}, do_resize=True, image_mean=[0.5] * 3,
                                image_std=[0.5] * 3)
    pix_png = proc(images=Image.fromarray(img), return_tensors="pt")["pixel_values"]
    pix_rand = torch.randn(1, 3, 40, 40)
    pixels = torch.cat([pix_png, pix_rand], 0)

    def refs(m):
        with torch.no_grad():
            o = m(pixel_values=pixels, output_hidden_states=True)
        return {"pixel_values": pixels, "logits": o.logits, "last_hidden_state": o.hidden_states[-1]}

    path = save(model, "vit-tiny", refs)
    Image.fromarray(img).save(os.path.join(path, "image.png"))
    proc.save_pretrained(path)


def llama():
    torch.manual_seed(5)
    cfg = tf.LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                         rms_norm_eps=1e-6, rope_theta=500000.0, tie_word_embeddings=False, initializer_range=0.1,
                         hidden_act="silu", attn_implementation="eager", bos_token_id=1, eos_token_id=2)
    model = perturb(tf.LlamaForCausalLM(cfg).eval(), seed=5)
    ids = torch.tensor([[1, 15, 27, 88, 4, 61, 33, 9, 50, 12, 70], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]],
                       dtype=torch.int64)

    def refs(m):
        with torch.no_grad():
            o = m(input_ids=ids, output_hidden_states=True)
            gen = greedy(m, ids[:1, :5], 12)
        return {"input_ids": ids, "logits": o.logits, "last_hidden_state": o.hidden_states[-1],
                "prompt_ids": ids[:1, :5], "generated_ids": gen}

    save(model, "llama-tiny", refs, max_shard_size="20KB")

    torch.manual_seed(6)
    cfg = tf.LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                         rms_norm_eps=1e-5, rope_theta=25000.0, tie_word_embeddings=True, initializer_range=0.1,
                         hidden_act="silu", attn_implementation="eager", bos_token_id=1, eos_token_id=2)
    model = perturb(tf.LlamaForCausalLM(cfg).eval(), seed=6)
    path = save(model, "llama-tiny-f16", refs, dtype=torch.float16)
    # The transformers-4 spelling of the same configuration (Llama-2 folders on the hub look like this).
    cpath = os.path.join(path, "config.json")
    with open(cpath) as f:
        c = json.load(f)
    rp = c.pop("rope_parameters", None) or {}
    c["rope_theta"] = rp.get("rope_theta", 25000.0)
    c["rope_scaling"] = None
    with open(cpath, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)


def with_tokenizers():
    """Tiny models whose vocabularies are the tokenizer fixtures (tools/make_tokenizer_fixtures.py)."""
    tokdir = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "tokenizers")
    torch.manual_seed(7)
    tok = tf.PreTrainedTokenizerFast(tokenizer_file=os.path.join(tokdir, "llama", "tokenizer.json"))
    cfg = tf.LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True, initializer_range=0.3,
                         hidden_act="silu", attn_implementation="eager", bos_token_id=1, eos_token_id=2)
    model = perturb(tf.LlamaForCausalLM(cfg).eval(), seed=7)
    prompt = "The hedgehog is"
    ids = torch.tensor([[1] + tok.encode(prompt, add_special_tokens=False)], dtype=torch.int64)

    def refs(m):
        with torch.no_grad():
            gen = greedy(m, ids, 8)
        return {"prompt_ids": ids, "generated_ids": gen}

    path = save(model, "llama-tiny-tok", refs)
    shutil.copy(os.path.join(tokdir, "llama", "tokenizer.json"), path)
    with torch.no_grad():
        gen = greedy(model.float(), ids, 8)
    with open(os.path.join(path, "expected.json"), "w") as f:
        json.dump({"prompt": prompt, "prompt_ids": ids[0].tolist(), "generated_ids": gen[0, ids.shape[1]:].tolist(),
                   "text": tok.decode(gen[0].tolist(), skip_special_tokens=True)}, f, indent=1, ensure_ascii=False)

    torch.manual_seed(8)
    btok = tf.PreTrainedTokenizerFast(tokenizer_file=os.path.join(tokdir, "bert", "tokenizer.json"))
    cfg = tf.BertConfig(vocab_size=len(btok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=24, max_position_embeddings=64, type_vocab_size=2, num_labels=2,
                        initializer_range=0.3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                        attn_implementation="eager", id2label={0: "NEGATIVE", 1: "POSITIVE"},
                        label2id={"NEGATIVE": 0, "POSITIVE": 1})
    model = perturb(tf.BertForSequenceClassification(cfg).eval(), seed=8)
    enc = btok("A gripping, well-made film.", "Les hérissons dorment l'hiver.", return_tensors="pt",
               return_token_type_ids=True)

    def brefs(m):
        with torch.no_grad():
            o = m(**enc)
        return {"input_ids": enc["input_ids"], "token_type_ids": enc["token_type_ids"],
                "attention_mask": enc["attention_mask"], "logits": o.logits}

    path = save(model, "bert-tiny-tok", brefs)
    for name in ("vocab.txt", "tokenizer.json"):
        shutil.copy(os.path.join(tokdir, "bert", name), path)


def decoder_refs(ids, prompt_len, new):
    def refs(m):
        with torch.no_grad():
            o = m(input_ids=ids, output_hidden_states=True)
            gen = greedy(m, ids[:1, :prompt_len], new)
        return {"input_ids": ids, "logits": o.logits, "last_hidden_state": o.hidden_states[-1],
                "prompt_ids": ids[:1, :prompt_len], "generated_ids": gen}
    return refs


DEC_IDS = torch.tensor([[1, 15, 27, 88, 4, 61, 33, 9, 50, 12, 70], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]],
                       dtype=torch.int64)


def mistral():
    torch.manual_seed(9)
    cfg = tf.MistralConfig(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                           rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=5, tie_word_embeddings=False,
                           initializer_range=0.1, hidden_act="silu", attn_implementation="eager",
                           bos_token_id=1, eos_token_id=2)
    model = perturb(tf.MistralForCausalLM(cfg).eval(), seed=9)
    save(model, "mistral-tiny", decoder_refs(DEC_IDS, 5, 12))


def qwen2():
    tokdir = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "tokenizers", "qwen2")
    tok = tf.PreTrainedTokenizerFast(tokenizer_file=os.path.join(tokdir, "tokenizer.json"))
    torch.manual_seed(10)
    cfg = tf.Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
                         use_sliding_window=True, sliding_window=4, max_window_layers=1, initializer_range=0.1,
                         hidden_act="silu", attn_implementation="eager", bos_token_id=0, eos_token_id=0)
    model = perturb(tf.Qwen2ForCausalLM(cfg).eval(), seed=10)
    text = "Hedgehogs (Erinaceinae) sleep 18h a day; café naïve 東京 2024!"
    ids = torch.tensor([tok.encode(text, add_special_tokens=False)], dtype=torch.int64)
    head = ids[:, :11]  # the references' inputs: the text's first 11 tokens, and them reversed
    path = save(model, "qwen2-tiny", decoder_refs(torch.cat([head, head.flip(1)], 0), 5, 12))
    shutil.copy(os.path.join(tokdir, "tokenizer.json"), path)
    with open(os.path.join(path, "expected.json"), "w") as f:
        json.dump({"text": text, "ids": ids[0].tolist()}, f, indent=1, ensure_ascii=False)


def qwen3():
    torch.manual_seed(11)
    cfg = tf.Qwen3Config(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=12, max_position_embeddings=64,
                         rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 20000.0},
                         attention_bias=False, tie_word_embeddings=False, initializer_range=0.1,
                         hidden_act="silu", attn_implementation="eager", bos_token_id=1, eos_token_id=2)
    model = perturb(tf.Qwen3ForCausalLM(cfg).eval(), seed=11)
    save(model, "qwen3-tiny", decoder_refs(DEC_IDS, 5, 12))


def rope_refs(ids, prompt_len, new):
    """References from the folder as written (a fresh model for each: dynamic RoPE keeps state)."""
    def load(path):
        return tf.AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", dtype=torch.float32).eval()

    def refs(path):
        with torch.no_grad():
            o = load(path)(input_ids=ids, output_hidden_states=True)
            gen = greedy(load(path), ids[:1, :prompt_len], new)
            m, cache, steps = load(path), tf.DynamicCache(), []
            for t in range(ids.shape[1]):
                out = m(input_ids=ids[:, t:t + 1], past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                steps.append(out.logits)
        return {"input_ids": ids, "logits": o.logits, "last_hidden_state": o.hidden_states[-1],
                "prompt_ids": ids[:1, :prompt_len], "generated_ids": gen, "step_logits": torch.cat(steps, 1)}
    return refs


def save_rope(model, folder, refs, old_spelling=False):
    """Saves the model, rewrites config.json the transformers-4 way when asked (top-level rope_theta,
    rope_scaling with "type"), then computes the references from the folder."""
    path = fresh(folder)
    model.save_pretrained(path, safe_serialization=True)
    if old_spelling:
        cpath = os.path.join(path, "config.json")
        with open(cpath) as f:
            c = json.load(f)
        rp = c.pop("rope_parameters")
        c["rope_theta"] = rp.pop("rope_theta")
        rp["type"] = rp.pop("rope_type")
        c["rope_scaling"] = rp
        with open(cpath, "w") as f:
            json.dump(c, f, indent=2, sort_keys=True)
    out = refs(path)
    save_file({k: v.detach().clone().contiguous() for k, v in out.items()}, os.path.join(path, "reference.safetensors"),
              metadata={"transformers": tf.__version__, "torch": torch.__version__})


def rope():
    def ids(seed, length, vocab=97):
        g = torch.Generator().manual_seed(seed)
        return torch.randint(3, vocab, (2, length), generator=g)

    common = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6, tie_word_embeddings=False,
                  initializer_range=0.1, hidden_act="silu", attn_implementation="eager", bos_token_id=1,
                  eos_token_id=2)
    torch.manual_seed(20)
    cfg = tf.LlamaConfig(max_position_embeddings=256, rope_parameters={
        "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 32}, **common)
    save_rope(perturb(tf.LlamaForCausalLM(cfg).eval(), seed=20), "llama-tiny-llama3", rope_refs(ids(20, 48), 8, 20))

    torch.manual_seed(21)
    cfg = tf.LlamaConfig(max_position_embeddings=128, rope_parameters={
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32,
        "beta_fast": 16.0, "beta_slow": 2.0, "mscale": 0.8, "mscale_all_dim": 0.5, "truncate": False}, **common)
    save_rope(perturb(tf.LlamaForCausalLM(cfg).eval(), seed=21), "llama-tiny-yarn", rope_refs(ids(21, 48), 8, 20),
              old_spelling=True)

    torch.manual_seed(22)
    cfg = tf.Qwen2Config(max_position_embeddings=32, rope_parameters={
        "rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, use_sliding_window=False, **common)
    save_rope(perturb(tf.Qwen2ForCausalLM(cfg).eval(), seed=22), "qwen2-tiny-dynamic", rope_refs(ids(22, 56), 24, 20))

    torch.manual_seed(23)
    cfg = tf.MistralConfig(max_position_embeddings=128, sliding_window=16, rope_parameters={
        "rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}, **common)
    save_rope(perturb(tf.MistralForCausalLM(cfg).eval(), seed=23), "mistral-tiny-linear", rope_refs(ids(23, 40), 8, 20),
              old_spelling=True)

    torch.manual_seed(24)
    cfg = tf.Qwen3Config(max_position_embeddings=128, rope_parameters={
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32},
        **common)
    save_rope(perturb(tf.Qwen3ForCausalLM(cfg).eval(), seed=24), "qwen3-tiny-yarn", rope_refs(ids(24, 48), 8, 20))

    # Inverse frequencies and attention scaling straight from ROPE_INIT_FUNCTIONS.
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    cases = []
    for head_dim, max_pos, params, seq_lens in (
            (16, 256, {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 32}, [None]),
            (64, 131072, {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, [None]),
            (16, 128, {"rope_type": "linear", "rope_theta": 10000.0, "factor": 3.0}, [None]),
            (16, 32, {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, [None, 33, 56, 64]),
            (128, 4096, {"rope_type": "dynamic", "rope_theta": 1000000.0, "factor": 3.5}, [5000, 9999]),
            (16, 128, {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                       "original_max_position_embeddings": 32}, [None]),
            (16, 128, {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32,
                       "beta_fast": 16.0, "beta_slow": 2.0, "mscale": 0.8, "mscale_all_dim": 0.5, "truncate": False},
             [None]),
            (128, 131072, {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                           "original_max_position_embeddings": 32768, "attention_factor": 0.9}, [None]),
            (64, 16384, {"rope_type": "yarn", "rope_theta": 10000.0, "factor": None,
                         "original_max_position_embeddings": 4096}, [None])):
        for seq_len in seq_lens:
            cfg = tf.LlamaConfig(hidden_size=head_dim * 2, num_attention_heads=2, head_dim=head_dim,
                                 max_position_embeddings=max_pos, rope_parameters=dict(params))
            arg = None if seq_len is None else torch.tensor(seq_len)
            inv, scale = ROPE_INIT_FUNCTIONS[params["rope_type"]](cfg, "cpu", seq_len=arg)
            cases.append({"head_dim": head_dim, "max_position_embeddings": max_pos, "rope_parameters": params,
                          "seq_len": seq_len or 0, "inv_freq": [float(v) for v in inv.float()],
                          "attention_scaling": float(scale)})
    with open(os.path.join(OUT, "rope_inv_freq.json"), "w") as f:
        json.dump({"transformers": tf.__version__, "cases": cases}, f, indent=1)


ALL = {"bert": bert, "gpt2": gpt2, "vit": vit, "llama": llama, "with_tokenizers": with_tokenizers,
       "mistral": mistral, "qwen2": qwen2, "qwen3": qwen3, "rope": rope}

if __name__ == "__main__":
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    for name in (ONLY[0] if ONLY else ALL):
        ALL[name]()
    total = 0
    for root, _, files in os.walk(OUT):
        for name in files:
            total += os.path.getsize(os.path.join(root, name))
    print(f"fixtures in {OUT}: {total / 1024:.0f} KiB")
