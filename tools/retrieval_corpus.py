#!/usr/bin/env python3
"""Synthetic retrieval text for the teacher of scripts/convert_llm_demo (issue 34 item 3): keys and
values stated in prose inside filler, asked back later, at distances up to the teacher's context.

  python3 tools/retrieval_corpus.py --out FILE --bytes N [--context 1024] [--seed 0] CORPUS_FILES...

Writes about N bytes of documents (UTF-8, one blank line between documents) to FILE, atomically.
A document is ~L bytes, L log-uniform in [--min-bytes, --context * --fill]: short ones put the key
and its question close together (much copying signal per token), long ones up to the context apart.
Kinds, drawn at random:
  passkey    a head line, filler, "The pass key is K. Remember it. K is the pass key." at a random
             depth, filler, "What is the pass key? The pass key is K." (K: 5 digits, sometimes 4-7)
  needles    1-4 lines "One of the special magic numbers for W is: N." spread over filler, then
             questions about some of them, each answered: "What is the special magic number for W
             mentioned in the provided text? The special magic number for W mentioned in the
             provided text is N." (N: 7 digits, sometimes 5-8)
  needleforms  2-4 needle lines, then every one asked, each in one of four forms from "The special
             magic number for W is N." to RULER's question: a curriculum over the distance between the
             asked word and the answer (6 to 34 bytes); tried for the multi-key needle (README)
  facts      1-4 facts in other prose ("The code of the red door is N.", "W's number is N."), then
             questions, each answered in the same words
  repeat     (a copying drill, as tools/copy_twin.py's copy data: a small model learns to copy from
             dense examples long before it does from retrieval alone) 1-3 random strings of
             [a-z0-9], each said 2-4 times in a row ("Say it again: s. Again: s."), little filler between
--kinds sets the share of each kind (default passkey:1,needles:1,facts:1,repeat:4: the drill by
documents; its documents are short, so it is about a third of the bytes).
The filler is text of the corpus files (fortunes: their '%' separators dropped), only from the part
`train_lm prepare` trains on (each file's first bytes before its last round(--valid-fraction * size);
tools/convert_llm_demo.py splits holds out the same tail), so no held-out byte is seen; or, in a
quarter of the documents, a few plain sentences repeated (the key is then the only surprise).
Heads, words and phrasings are varied: the evaluation's templates (experiments/eval/
retrieval_eval.cpp) are among them, its filler sentences are not.
Standard library only.
"""
import argparse
import math
import os
import random
import sys

WORDS = ("harbor lantern meadow copper violin glacier orchard compass falcon pebble saffron thistle quartz marble "
         "willow cobalt ember juniper tundra canyon river candle garden silver window anchor basket cactus dolphin "
         "forest hammer island jacket kettle ladder mirror needle oyster pepper rabbit saddle tiger umbrella valley "
         "walnut yellow zebra almond bramble cinder dagger engine feather goblet harvest igloo jasmine kernel lemon "
         "mango nectar olive parrot quiver ribbon sparrow tulip velvet wagon").split()
COLOURS = "red blue green yellow black white orange purple grey brown".split()
THINGS = "door box gate safe locker vault chest drawer cabinet room".split()
PASSKEY_HEADS = (
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the important information there.",
    "A pass key is hidden in the text below. Remember it: you will be asked for it at the end.",
    "Read the following text carefully and remember the pass key in it.",
    "",
)
NEEDLE_HEADS = (
    "Some special magic numbers are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the numbers afterwards.",
    "Magic numbers are hidden in this text. Memorize them; questions follow.",
    "",
)
PLAIN = ("The day is long.", "The road goes on.", "Cats sleep a lot.", "Rain falls in spring.", "Time goes by.",
         "The river runs to the sea.", "Trees grow slowly.", "Birds sing at dawn.", "Stars come out at night.")


def number(rng, usual, lo, hi):
    n = usual if rng.random() < 0.7 else rng.randint(lo, hi)
    return str(rng.randint(1, 9)) + "".join(str(rng.randint(0, 9)) for _ in range(n - 1))


class Filler:
    """Random runs of the corpus's training text, or plain sentences repeated."""

    def __init__(self, texts):
        self.texts = [t for t in texts if len(t) > 200]
        assert self.texts, "error: the corpus files hold no text to use as filler"
        self.weights = [len(t) for t in self.texts]

    def text(self, rng, n, plain):
        if n <= 0:
            return ""
        if plain:
            pool = rng.sample(PLAIN, rng.randint(1, 4))
            out = []
            while sum(len(s) + 1 for s in out) < n:
                out.append(rng.choice(pool))
            return " ".join(out)
        t = rng.choices(self.texts, self.weights)[0]
        start = rng.randrange(0, max(1, len(t) - n))
        s = t[start:start + n]
        # Whole words at both ends.
        a = s.find(" ")
        b = s.rfind(" ")
        return s[a + 1:b] if 0 <= a < b else s


def place(rng, filler_bytes, lines, sep, filler, plain):
    """Filler of ~filler_bytes with `lines` at random depths (kept in order), joined by sep."""
    cuts = sorted(rng.random() for _ in lines)
    parts, at = [], 0.0
    for c, line in zip(cuts, lines):
        parts.append(filler.text(rng, int((c - at) * filler_bytes), plain))
        parts.append(line)
        at = c
    parts.append(filler.text(rng, int((1 - at) * filler_bytes), plain))
    return sep.join(p for p in parts if p)


def passkey_doc(rng, size, filler, plain):
    key = number(rng, 5, 4, 7)
    head = rng.choice(PASSKEY_HEADS)
    line = (f"The pass key is {key}. Remember it. {key} is the pass key." if rng.random() < 0.7
            else f"The pass key is {key}.")
    q = "What is the pass key? The pass key is " + key + "."
    sep = "\n" if rng.random() < 0.6 else " "
    body = place(rng, size - len(head) - len(line) - len(q), [line], sep, filler, plain)
    return sep.join(p for p in (head, body, q) if p)


def needles_doc(rng, size, filler, plain):
    k = rng.randint(1, 4)
    words = rng.sample(WORDS, k)
    nums = [number(rng, 7, 5, 8) for _ in words]
    lines = [f"One of the special magic numbers for {w} is: {n}." for w, n in zip(words, nums)]
    asked = rng.sample(range(k), rng.randint(1, k))
    qs = [f"What is the special magic number for {words[i]} mentioned in the provided text? "
          f"The special magic number for {words[i]} mentioned in the provided text is {nums[i]}." for i in asked]
    head = rng.choice(NEEDLE_HEADS)
    body = place(rng, size - len(head) - sum(map(len, lines)) - sum(map(len, qs)), lines, " ", filler, plain)
    return " ".join(p for p in [head, body] + qs if p)


# The question forms of `needleforms`, shortest first: the asked word is 6 bytes before the number's
# first digit in the needle line and 34 in RULER's question (the last form); the shorter forms bridge
# the distance, so the word match forms on near questions first.
NEEDLE_FORMS = (
    "The special magic number for {w} is {n}.",
    "What is the special magic number for {w}? The special magic number for {w} is {n}.",
    "The special magic number for {w} mentioned in the text is {n}.",
    "What is the special magic number for {w} mentioned in the provided text? "
    "The special magic number for {w} mentioned in the provided text is {n}.",
)


def needleforms_doc(rng, size, filler, plain):
    k = rng.choice((2, 3, 4, 4, 4))
    words = rng.sample(WORDS, k)
    nums = [number(rng, 7, 5, 8) for _ in words]
    lines = [f"One of the special magic numbers for {w} is: {n}." for w, n in zip(words, nums)]
    asked = rng.sample(range(k), k)
    form = lambda: NEEDLE_FORMS[min(rng.randrange(6), 3)]  # noqa: E731  RULER's form half the time
    qs = [form().format(w=words[i], n=nums[i]) for i in asked]
    head = rng.choice(NEEDLE_HEADS)
    body = place(rng, size - len(head) - sum(map(len, lines)) - sum(map(len, qs)), lines, " ", filler, plain)
    return " ".join(p for p in [head, body] + qs if p)


def facts_doc(rng, size, filler, plain):
    k = rng.randint(1, 4)
    if rng.random() < 0.5:
        names = [f"the {c} {t}" for c, t in zip(rng.sample(COLOURS, k), rng.sample(THINGS, k))]
        state = lambda n, v: f"The code of {n} is {v}."
        ask = lambda n, v: f"What is the code of {n}? The code of {n} is {v}."
    else:
        names = [w.capitalize() for w in rng.sample(WORDS, k)]
        state = lambda n, v: f"{n}'s number is {v}."
        ask = lambda n, v: f"What is {n}'s number? {n}'s number is {v}."
    vals = [number(rng, rng.randint(3, 8), 3, 8) for _ in names]
    lines = [state(n, v) for n, v in zip(names, vals)]
    asked = rng.sample(range(k), rng.randint(1, k))
    qs = [ask(names[i], vals[i]) for i in asked]
    body = place(rng, size - sum(map(len, lines)) - sum(map(len, qs)), lines, " ", filler, plain)
    return " ".join([body] + qs)


def repeat_doc(rng, size, filler, plain):
    lines = []
    for _ in range(rng.randint(1, 3)):
        w = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(rng.randint(4, 16)))
        n = rng.randint(2, 4)
        lines.append(rng.choice(("Say it again: ", "Repeat after me: ", "Copy this: ", "")) + w + "." +
                     "".join(rng.choice((" Again: ", " Once more: ", " ")) + w + "." for _ in range(n - 1)))
    return place(rng, min(size, 240) - sum(map(len, lines)), lines, " ", filler, plain)  # kept short: dense


KINDS = {"passkey": passkey_doc, "needles": needles_doc, "needleforms": needleforms_doc, "facts": facts_doc,
         "repeat": repeat_doc}


def parse_kinds(text):
    shares = {}
    for item in text.split(","):
        name, _, w = item.partition(":")
        if name not in KINDS:
            sys.exit(f"error: --kinds: unknown kind '{name}' (valid: {', '.join(KINDS)})")
        try:
            shares[name] = float(w) if w else 1.0
        except ValueError:
            sys.exit(f"error: --kinds: share '{w}' of {name} is not a number")
        if not shares[name] >= 0:
            sys.exit(f"error: --kinds: share of {name} must be >= 0")
    if not sum(shares.values()) > 0:
        sys.exit("error: --kinds: every share is 0")
    return shares


def train_part(path, valid_fraction):
    data = open(path, "rb").read()
    n_valid = int(len(data) * valid_fraction + 0.5)  # train_lm prepare: llround(n * fraction)
    text = data[:len(data) - n_valid].decode("utf-8", errors="ignore")
    lines = [ln for ln in text.split("\n") if ln.strip() != "%"]  # fortune separators
    return " ".join(" ".join(lines).split())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="corpus files (the filler)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--bytes", type=int, required=True, help="about how many bytes to write")
    ap.add_argument("--context", type=int, default=1024, help="the teacher's context in tokens (bytes)")
    ap.add_argument("--fill", type=float, default=0.9, help="the longest document as a fraction of the context")
    ap.add_argument("--min-bytes", type=int, default=120, help="the shortest document")
    ap.add_argument("--valid-fraction", type=float, default=0.05, help="train_lm prepare's (the held-out tail)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kinds", default="passkey:1,needles:1,facts:1,repeat:4", help="the kinds' shares")
    a = ap.parse_args()
    if a.bytes < 1:
        sys.exit("error: --bytes must be >= 1")
    if not (a.min_bytes >= 100 and a.min_bytes < a.context * a.fill):
        sys.exit(f"error: --min-bytes {a.min_bytes} must be >= 100 and below --context x --fill")
    for f in a.files:
        if not os.path.isfile(f):
            sys.exit(f"error: corpus file {f} does not exist")
    filler = Filler([train_part(f, a.valid_fraction) for f in a.files])
    rng = random.Random(a.seed)
    shares = parse_kinds(a.kinds)
    names = [k for k in shares if shares[k] > 0]
    lo, hi = math.log(a.min_bytes), math.log(a.context * a.fill)
    docs, total = [], 0
    while total < a.bytes:
        size = int(math.exp(rng.uniform(lo, hi)))
        kind = rng.choices(names, [shares[k] for k in names])[0]
        d = KINDS[kind](rng, size, filler, rng.random() < 0.25)
        docs.append(d)
        total += len(d.encode()) + 2
    tmp = a.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n\n".join(docs) + "\n")
    os.replace(tmp, a.out)
    print(f"wrote {a.out}: {len(docs)} documents, {total} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
