#!/usr/bin/env python3
"""Builds the real-size whole-model fixtures in tests/fixtures/real_size/ (tooling only; the C++ test
tests/nn/models/test_real_size.cpp reads the files). The tiny fixtures of tests/fixtures/hf/ run a
handful of tokens, so the kernels' parallel splits, chunks and tiles above those sizes went
unchecked there (issue 41: a reduction dropped rows past 128 when a batch had many rows). These
models are small by having few layers, not short inputs:

  st-wide-mean  SentenceTransformer: a 1-layer BERT with hidden 260 (two 256-column blocks of the
                reductions, as all-MiniLM-L6-v2's 384), Pooling(mean) + Normalize, max_seq_length
                256, over 32 texts of 200 to 300 tokens (the longest truncated to 256).
                expected.json: the texts; expected.safetensors: "embeddings" (32,260), what
                SentenceTransformer.encode(texts, batch_size=32) gives. The weights are stored in
                f16 (half the file); the reference ran in f32 on exactly those rounded weights.
  gpt2-1k, llama-1k, mistral-1k (sliding_window 300), qwen2-1k, qwen3-1k
                2 layers, hidden 32, a 1,024-token context. reference.safetensors: input_ids (8,1024)
                and the f32 logits transformers gives at positions 0, 63, 127, ..., 1023 (8,17,V)
                ("positions" holds them).
  gpt2-1k, llama-1k also grad.safetensors: the loss and every parameter's gradient of one training
                step at batch 32 x 256 tokens (next-token cross-entropy, a few labels -100), computed
                in f64 by tools/make_grad_goldens.py's run().

Usage: python3 tools/make_real_size_fixtures.py [out_dir]
       (pip install torch transformers sentence-transformers safetensors)
"""
import json
import os
import random
import shutil
import sys
import tempfile

import torch
import transformers as tf
from safetensors.torch import load_file, save_file
from sentence_transformers import SentenceTransformer
from sentence_transformers import models as stm

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_grad_goldens as goldens  # noqa: E402  (its run(): the f64 gradient golden)
from make_hf_fixtures import perturb  # noqa: E402  (noise on every parameter, as the tiny fixtures)

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "tests", "fixtures", "real_size")
BERT_VOCAB = os.path.join(HERE, "..", "tests", "fixtures", "tokenizers", "bert", "vocab.txt")
CONTEXT, BATCH = 1024, 8
POSITIONS = [0] + list(range(63, CONTEXT, 64))  # 17 positions: the first, then every 64th token's last
TRAIN_BATCH, TRAIN_LEN = 32, 256


def fresh(name):
    path = os.path.join(OUT, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def st_wide_mean():
    """The embedding path at hf_run's default batch (32) and MiniLM-like widths."""
    words = []
    with open(BERT_VOCAB, encoding="utf-8") as f:
        for line in f:
            w = line.strip()
            if w.isascii() and w.isalpha() and w.islower() and len(w) > 2:
                words.append(w)
    words = words[:195]
    with tempfile.TemporaryDirectory() as tmp:
        vocab = os.path.join(tmp, "vocab.txt")
        with open(vocab, "w", encoding="utf-8") as f:
            f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
        tok = tf.BertTokenizerFast(vocab_file=vocab, model_max_length=256)
        torch.manual_seed(41)
        cfg = tf.BertConfig(vocab_size=len(tok), hidden_size=260, num_hidden_layers=1, num_attention_heads=4,
                            intermediate_size=32, max_position_embeddings=256, type_vocab_size=2,
                            initializer_range=0.1, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        model = perturb(tf.BertModel(cfg, add_pooling_layer=False).eval(), seed=41)
        with torch.no_grad():  # the weights as f16 stores them, so the f32 reference uses exactly those
            for p in model.parameters():
                p.copy_(p.half().float())
        base = os.path.join(tmp, "base")
        model.save_pretrained(base, safe_serialization=True)
        tok.save_pretrained(base)
        word = stm.Transformer(base, max_seq_length=256)
        st = SentenceTransformer(modules=[word, stm.Pooling(word.get_word_embedding_dimension(), "mean"),
                                          stm.Normalize()], device="cpu").float()
        rng = random.Random(41)
        # 32 texts of 198-298 words (each word one token, plus [CLS] and [SEP]); the longest truncate.
        lengths = [198 + (i * 97) % 101 for i in range(32)]
        texts = [" ".join(rng.choice(words) for _ in range(n)) for n in lengths]
        emb = st.encode(texts, batch_size=32, convert_to_tensor=True).float()
        n_tok = [len(tok(t)["input_ids"]) for t in texts]
        path = fresh("st-wide-mean")
        st.save(path)
    readme = os.path.join(path, "README.md")
    if os.path.exists(readme):
        os.remove(readme)
    # The weights in f16 (the names and layout st.save wrote).
    weights = load_file(os.path.join(path, "model.safetensors"))
    save_file({k: v.half().contiguous() for k, v in weights.items()}, os.path.join(path, "model.safetensors"),
              metadata={"format": "pt"})
    save_file({"embeddings": emb.contiguous()}, os.path.join(path, "expected.safetensors"),
              metadata={"transformers": tf.__version__, "torch": torch.__version__})
    with open(os.path.join(path, "expected.json"), "w") as f:
        json.dump({"texts": texts, "tokens_before_truncation": n_tok}, f, indent=0)
    print(f"st-wide-mean: 32 texts of {min(n_tok)}-{max(n_tok)} tokens, embeddings {tuple(emb.shape)}")


def decoder(name, cls, cfg, seed, grads=False):
    torch.manual_seed(seed)
    model = perturb(cls(cfg).eval(), seed=seed)
    path = fresh(name)
    model.save_pretrained(path, safe_serialization=True)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, cfg.vocab_size, (BATCH, CONTEXT), generator=g, dtype=torch.int64)
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    pos = torch.tensor(POSITIONS, dtype=torch.int64)
    save_file({"input_ids": ids, "positions": pos, "logits": logits[:, pos].contiguous()},
              os.path.join(path, "reference.safetensors"),
              metadata={"transformers": tf.__version__, "torch": torch.__version__})
    print(f"{name}: logits at {len(POSITIONS)} positions of ({BATCH},{CONTEXT})")
    if grads:
        tids = torch.randint(0, cfg.vocab_size, (TRAIN_BATCH, TRAIN_LEN), generator=g, dtype=torch.int64)
        labels = tids.clone()
        labels[0, -3:] = -100
        labels[TRAIN_BATCH - 1, -5:] = -100
        goldens.run(name, cls, {"input_ids": tids}, labels, causal=True, folder=path,
                    path=os.path.join(path, "grad.safetensors"))


def decoders():
    common = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=CONTEXT, initializer_range=0.1, hidden_act="silu",
                  attn_implementation="eager", bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    decoder("gpt2-1k", tf.GPT2LMHeadModel,
            tf.GPT2Config(vocab_size=101, n_positions=CONTEXT, n_embd=40, n_layer=2, n_head=5,
                          activation_function="gelu_new", layer_norm_epsilon=1e-5, initializer_range=0.1,
                          resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager",
                          bos_token_id=100, eos_token_id=100), seed=2, grads=True)
    decoder("llama-1k", tf.LlamaForCausalLM,
            tf.LlamaConfig(rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                           **common), seed=4, grads=True)
    decoder("mistral-1k", tf.MistralForCausalLM,
            tf.MistralConfig(rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=300, **common), seed=9)
    decoder("qwen2-1k", tf.Qwen2ForCausalLM,
            tf.Qwen2Config(rms_norm_eps=1e-6, rope_theta=1000000.0, use_sliding_window=False, **common), seed=10)
    decoder("qwen3-1k", tf.Qwen3ForCausalLM,
            tf.Qwen3Config(rms_norm_eps=1e-6, head_dim=12, attention_bias=False,
                           rope_parameters={"rope_type": "default", "rope_theta": 20000.0}, **common), seed=11)


if __name__ == "__main__":
    torch.set_num_threads(2)
    os.makedirs(OUT, exist_ok=True)
    st_wide_mean()
    decoders()
