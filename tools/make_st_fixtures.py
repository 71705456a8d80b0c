#!/usr/bin/env python3
"""Builds the tiny sentence-transformers fixtures in tests/fixtures/hf/ (tooling only; the C++ tests
read the files): a 2-layer BertModel over the WordPiece tokenizer fixture, saved by
SentenceTransformer.save with its modules, and the vectors SentenceTransformer.encode gives.

  st-tiny-mean  Transformer + Pooling(mean) + Normalize, max_seq_length 24 (long texts truncate)
  st-tiny-cls   Transformer + Pooling(cls), no Normalize
  st-tiny-max   Transformer + Pooling(max), no Normalize

Each folder gets expected.json: {"texts": [...], "embeddings": [[...], ...]} (f32 values as floats).
The texts mix lengths (padding inside a batch), accents, a pair of near-paraphrases and one text
longer than max_seq_length.

Usage: python3 tools/make_st_fixtures.py [out_dir]   (pip install torch transformers sentence-transformers)
"""
import json
import os
import shutil
import sys
import tempfile

import torch
import transformers as tf
from sentence_transformers import SentenceTransformer
from sentence_transformers import models as stm

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "tests", "fixtures", "hf")
TOK = os.path.join(HERE, "..", "tests", "fixtures", "tokenizers", "bert")

TEXTS = [
    "A gripping, well-made film.",
    "A well-made and gripping film.",
    "Les hérissons dorment l'hiver.",
    "short",
    "The quick brown fox jumps over the lazy dog while the hedgehog sleeps under a pile of leaves "
    "in the garden, dreaming of beetles, worms and the long winter ahead of it.",
]


def base_model(folder):
    torch.manual_seed(11)
    tok = tf.BertTokenizerFast(vocab_file=os.path.join(TOK, "vocab.txt"), tokenizer_file=os.path.join(TOK, "tokenizer.json"))
    cfg = tf.BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=24, max_position_embeddings=64, type_vocab_size=2, initializer_range=0.3,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = tf.BertModel(cfg, add_pooling_layer=False).eval()
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)


def build(base, name, mode, normalize):
    word = stm.Transformer(base, max_seq_length=24)
    mods = [word, stm.Pooling(word.get_word_embedding_dimension(), pooling_mode=mode)]
    if normalize:
        mods.append(stm.Normalize())
    st = SentenceTransformer(modules=mods, device="cpu")
    path = os.path.join(OUT, name)
    shutil.rmtree(path, ignore_errors=True)
    st.save(path)
    os.remove(os.path.join(path, "README.md"))  # the generated model card: not needed by the tests
    emb = st.encode(TEXTS, batch_size=8, convert_to_numpy=True)
    with open(os.path.join(path, "expected.json"), "w") as f:
        json.dump({"texts": TEXTS, "pooling": mode, "normalize": normalize,
                   "embeddings": [[float(x) for x in row] for row in emb]}, f, indent=1, ensure_ascii=False)
    return path


if __name__ == "__main__":
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        base_model(tmp)
        for name, mode, norm in (("st-tiny-mean", "mean", True), ("st-tiny-cls", "cls", False),
                                 ("st-tiny-max", "max", False)):
            p = build(tmp, name, mode, norm)
            print(p, sorted(os.listdir(p)))
