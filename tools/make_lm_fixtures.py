#!/usr/bin/env python3
"""Builds tests/fixtures/wikitext/gpt2-bytes/ (tooling only; the C++ tests read the files).

convert_gpt2 needs a GPT-2 folder with a tokenizer whose ids fit the model; gpt2-tiny (vocab 101)
has none and the real GPT-2 tokenizer has 50257 ids. This folder is a 2-layer GPT2LMHeadModel over a
byte-level BPE of its own: the 256 byte tokens (GPT-2's byte-to-unicode spelling), three merges
("Ġ t", "h e", "Ġt he") and <|endoftext|> = 259, so any UTF-8 text encodes. The model is trained
for a few hundred steps on tests/fixtures/wikitext/wiki.train.raw so that its attention is not
random and the perplexities mean something (the weights are not a language model of any quality).

Usage: python3 tools/make_lm_fixtures.py      (pip install torch transformers tokenizers safetensors)
"""
import json
import os
import shutil

import torch
import transformers as tf
from tokenizers import ByteLevelBPETokenizer

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "wikitext")
OUT = os.path.join(ROOT, "gpt2-bytes")


def byte_to_unicode():
    """GPT-2's printable spelling of each byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    b2u = byte_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    with open(os.path.join(OUT, "vocab.json"), "w") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(OUT, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))

    tok = ByteLevelBPETokenizer(os.path.join(OUT, "vocab.json"), os.path.join(OUT, "merges.txt"))
    text = open(os.path.join(ROOT, "wiki.train.raw"), encoding="utf-8").read()
    ids = torch.tensor(tok.encode(text).ids)

    torch.manual_seed(0)
    cfg = tf.GPT2Config(vocab_size=len(vocab), n_positions=64, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=vocab["<|endoftext|>"], eos_token_id=vocab["<|endoftext|>"],
                        attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0)
    model = tf.GPT2LMHeadModel(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    L = 32
    for step in range(300):
        starts = torch.randint(0, len(ids) - L - 1, (16,))
        x = torch.stack([ids[s:s + L] for s in starts])
        loss = model(x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0 or step == 299:
            print(f"step {step} loss {loss.item():.3f}")
    model.save_pretrained(OUT, safe_serialization=True)
    print("wrote", OUT, "tokens in wiki.train.raw:", len(ids))

    # reference.json: transformers' perplexity of the saved model on wiki.valid.raw with strided
    # windows (context 32, stride 16): window k reads ids[16k : 16k+32] and scores the predictions not
    # scored by an earlier window, so every token after the first is scored once.
    model.eval()
    valid = tok.encode(open(os.path.join(ROOT, "wiki.valid.raw"), encoding="utf-8").read()).ids
    T, ctx, stride = len(valid), 32, 16
    nll, scored, prev_end, b = 0.0, 0, 0, 0
    with torch.no_grad():
        while prev_end < T - 1:
            end = min(b + ctx, T - 1)  # the last position predicted by this window
            x = torch.tensor([valid[b:min(b + ctx, T)]])
            logp = torch.log_softmax(model(x).logits[0].double(), -1)
            for p in range(prev_end + 1, end + 1):
                nll -= logp[p - 1 - b, valid[p]].item()
                scored += 1
            prev_end, b = end, b + stride
    ref = {"context": ctx, "stride": stride, "valid_tokens": T, "valid_scored": scored, "valid_nll": nll / scored,
           "valid_perplexity": float(torch.tensor(nll / scored).exp())}
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    print(ref)


if __name__ == "__main__":
    main()
