#!/usr/bin/env python3
"""Writes the tiny GLUE fixtures of convert_bert's tests (tests/fixtures/glue/), in the official
files' layouts: CoLA (no header, 4 columns), MRPC and STS-B (with their headers). The sentences are
made here from small word lists (no GLUE text is copied): CoLA's unacceptable rows are acceptable
ones with the words scrambled; MRPC's paraphrases swap words for synonyms; STS-B scores the word
overlap of a pair on [0, 5].

With --model it also writes tests/fixtures/glue/bert-tiny-stsb: bert-tiny-tok (tests/fixtures/hf)
with a one-output regression head (num_labels 1), for STS-B (needs torch and transformers).

    python3 tools/make_glue_fixtures.py [--model]
"""
import argparse
import os
import random
import shutil

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "glue")

SUBJECTS = ["the hedgehog", "a small dog", "my sister", "the old farmer", "our teacher", "the quiet child",
            "a tired nurse", "the new pilot"]
VERBS = ["found", "painted", "carried", "watched", "bought", "cleaned", "opened", "sold"]
OBJECTS = ["the red box", "a long letter", "the wooden door", "a warm coat", "the big garden", "a broken clock",
           "the green boat", "an empty bag"]
PLACES = ["in the morning", "near the river", "after dinner", "at the market", "before the storm",
          "on the hill", "during the week", "by the station"]
SYNONYMS = {"found": "discovered", "carried": "took", "watched": "observed", "bought": "purchased",
            "big": "large", "small": "little", "old": "elderly", "quiet": "silent", "tired": "weary",
            "morning": "early day", "near": "close to", "box": "crate", "coat": "jacket", "door": "gate"}


def sentence(rng):
    return f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(PLACES)}"


def paraphrase(s):
    return " ".join(SYNONYMS.get(w, w) for w in s.split())


def scramble(rng, s):
    words = s.split()
    while True:
        rng.shuffle(words)
        t = " ".join(words)
        if t != s:
            return t


def write(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(line + "\n" for line in lines))


def cola(rng, n):
    rows = []
    for i in range(n):
        s = sentence(rng)
        ok = i % 3 != 0  # about two thirds acceptable, as in CoLA
        text = s.capitalize() + "." if ok else scramble(rng, s).capitalize() + "."
        rows.append(f"hh{i % 7:02d}\t{int(ok)}\t{'' if ok else '*'}\t{text}")
    return rows


def mrpc(rng, n):
    rows = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
    for i in range(n):
        a = sentence(rng)
        same = i % 3 != 0
        b = paraphrase(a) if same else sentence(rng)
        rows.append(f"{int(same)}\t{100000 + 2 * i}\t{100001 + 2 * i}\t{a.capitalize()} .\t{b.capitalize()} .")
    return rows


def stsb(rng, n, split):
    rows = ["index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"]
    for i in range(n):
        a = sentence(rng)
        words = a.split()
        keep = rng.randint(0, len(words))
        mixed = words[:keep] + sentence(rng).split()[keep:]
        b = " ".join(mixed)
        wa, wb = set(words), set(mixed)
        score = 5.0 * len(wa & wb) / len(wa | wb)
        rows.append(f"{i}\tmain-captions\tMSRvid\t2012{split}\t{i:04d}\tnone\tnone\t{a.capitalize()}.\t"
                    f"{b.capitalize()}.\t{score:.3f}")
    return rows


def regression_model():
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    src = os.path.join(ROOT, "tests", "fixtures", "hf", "bert-tiny-tok")
    dst = os.path.join(OUT, "bert-tiny-stsb")
    cfg = BertConfig.from_pretrained(src)
    cfg.num_labels = 1
    cfg.id2label = {0: "LABEL_0"}
    cfg.label2id = {"LABEL_0": 0}
    torch.manual_seed(7)
    model = BertForSequenceClassification.from_pretrained(src, config=cfg, ignore_mismatched_sizes=True)
    model.save_pretrained(dst)
    for name in ("vocab.txt", "tokenizer.json"):
        shutil.copy(os.path.join(src, name), os.path.join(dst, name))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="store_true", help="also write the STS-B regression model fixture")
    args = ap.parse_args()
    rng = random.Random(10)
    write(os.path.join(OUT, "CoLA", "train.tsv"), cola(rng, 48))
    write(os.path.join(OUT, "CoLA", "dev.tsv"), cola(rng, 16))
    write(os.path.join(OUT, "MRPC", "train.tsv"), mrpc(rng, 40))
    write(os.path.join(OUT, "MRPC", "dev.tsv"), mrpc(rng, 16))
    write(os.path.join(OUT, "STS-B", "train.tsv"), stsb(rng, 32, "train"))
    write(os.path.join(OUT, "STS-B", "dev.tsv"), stsb(rng, 12, "test"))
    if args.model:
        regression_model()


if __name__ == "__main__":
    main()
