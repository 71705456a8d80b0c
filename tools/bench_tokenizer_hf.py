#!/usr/bin/env python3
"""The PyTorch-side twin of apps/bench_tokenizer: HF `tokenizers` on one thread over the same lines.

    RAYON_NUM_THREADS=1 python3 tools/bench_tokenizer_hf.py [--tokenizer DIR] [--file F] [--reps 7] [--repeat 1]
                                                          [--input file|spaces|digits|newlines|english|word] [--size 20000000]

The tokenizer is built as tools/make_tokenizer_fixtures.py builds it (vocab.json + merges.txt with a
ByteLevel pre-tokenizer, or tokenizer.json / vocab.txt as they are). Lines are the file's
"\\n"-separated lines read with bytes.decode("utf-8", "replace"). One untimed pass, then the median
of --reps passes of encode_batch (Rust loops over the lines; no Python call per line), and, for
reference, of a Python loop of encode() per line.

--input other than "file" is one text of --size bytes made exactly as bench_tokenizer makes it
(spaces, newlines, pseudo-random digits, the file repeated as "english", or the file's ASCII letters
repeated as one "word"), encoded in one call; the id counts of the two programs should agree.
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def load(folder):
    if os.path.exists(os.path.join(folder, "tokenizer.json")):
        return Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    if os.path.exists(os.path.join(folder, "vocab.json")):
        tok = Tokenizer(models.BPE.from_file(os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt")))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        tok.add_special_tokens(["<|endoftext|>"])
        return tok
    from tokenizers import BertWordPieceTokenizer
    return BertWordPieceTokenizer(os.path.join(folder, "vocab.txt"))


def generate(kind, size, data):
    """The bytes of a generated input, as bench_tokenizer's generate() makes them."""
    if kind in ("spaces", "newlines"):
        return (b" " if kind == "spaces" else b"\n") * size
    if kind == "digits":
        x, mask, out = 0x9E3779B97F4A7C15, (1 << 64) - 1, bytearray(size)
        for i in range(size):
            x = (x * 6364136223846793005 + 1442695040888963407) & mask
            out[i] = 48 + (x >> 33) % 10
        return bytes(out)
    if kind == "english":
        out = (data * (size // len(data) + 1))[:size]
        last = len(out)  # drop a character the cut left incomplete
        while last > 0 and out[last - 1] & 0xC0 == 0x80:
            last -= 1
        if last > 0:
            lead = out[last - 1]
            n = 4 if lead >= 0xF0 else 3 if lead >= 0xE0 else 2 if lead >= 0xC0 else 1
            if len(out) - (last - 1) < n:
                out = out[:last - 1]
        return out
    if kind == "word":
        letters = bytes(c for c in data if 65 <= c <= 90 or 97 <= c <= 122)
        return (letters * (size // len(letters) + 1))[:size]
    raise SystemExit("error: --input: unknown kind '%s' (file, spaces, digits, newlines, english or word)" % kind)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "tests/fixtures/tokenizers/gpt2"))
    ap.add_argument("--file", default=os.path.join(ROOT, "tests/fixtures/tokenizers/corpus.txt"))
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--input", default="file")
    ap.add_argument("--size", type=int, default=20000000)
    a = ap.parse_args()
    tok = load(a.tokenizer)
    with open(a.file, "rb") as f:
        raw = f.read()
    if a.input == "file":
        lines = [l.decode("utf-8", "replace") for l in raw.split(b"\n")] * a.repeat
        nbytes = sum(len(l) for l in raw.split(b"\n")) * a.repeat
    else:
        text = generate(a.input, a.size, raw)
        lines, nbytes = [text.decode("utf-8", "replace")], len(text)

    def batch():
        return sum(len(e.ids) for e in tok.encode_batch(lines, add_special_tokens=False))

    def loop():
        return sum(len(tok.encode(l, add_special_tokens=False).ids) for l in lines)

    # A generated input is one line: the loop would time the same call again.
    for name, fn in (("encode_batch", batch), ("encode loop", loop))[:1 if a.input != "file" else 2]:
        t0 = time.perf_counter()
        ids = fn()
        cold = time.perf_counter() - t0
        secs = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            fn()
            secs.append(time.perf_counter() - t0)
        s = statistics.median(secs)
        print(("input %s: " % a.input if a.input != "file" else "") + "HF tokenizers (%s, 1 thread): %d lines, %.1f KB, %d ids: %.2f ms per pass, %.2f MB/s, %.2f M ids/s"
              " (first pass: %.2f ms, %.2f MB/s)"
              % (name, len(lines), nbytes / 1e3, ids, s * 1e3, nbytes / s / 1e6, ids / s / 1e6, cold * 1e3, nbytes / cold / 1e6))


if __name__ == "__main__":
    main()
