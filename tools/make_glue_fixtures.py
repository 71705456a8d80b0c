#!/usr/bin/env python3
"""Writes the tiny GLUE fixtures of convert_bert's tests (tests/fixtures/glue/), in the official
files' layouts: CoLA (no header, 4 columns), MRPC and STS-B (with their headers). The sentences are
made here from small word lists (CoLA, MRPC, STS-B, MNLI) (no GLUE text is copied): CoLA's unacceptable rows are acceptable
ones with the words scrambled; MRPC's paraphrases swap words for synonyms; STS-B scores the word
overlap of a pair on [0, 5].

MNLI (train, dev_matched, dev_mismatched) pairs a sentence with a paraphrase (entailment), another
sentence (neutral) or its subject replaced by "nobody" (contradiction).

With --model it also writes tests/fixtures/glue/bert-tiny-stsb and bert-tiny-mnli: bert-tiny-tok
(tests/fixtures/hf) with a one-output regression head (STS-B) or a three-class head (MNLI), the new
head drawn by torch (needs torch and transformers).

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


MNLI_LABELS = ["entailment", "neutral", "contradiction"]


def mnli(rng, n, dev):
    cols = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
            "sentence1_parse", "sentence2_parse", "sentence1", "sentence2", "label1"]
    cols += ["label2", "label3", "label4", "label5", "gold_label"] if dev else ["gold_label"]
    rows = ["\t".join(cols)]
    for i in range(n):
        a = sentence(rng)
        label = MNLI_LABELS[i % 3]
        b = paraphrase(a) if label == "entailment" else sentence(rng) if label == "neutral" else "nobody " + \
            " ".join(a.split()[2:])
        labels = [label] * (5 if dev else 1)
        rows.append("\t".join([str(i), str(1000 + i), f"{1000 + i}{label[0]}", "fiction", "(x)", "(y)", "(ROOT x)",
                               "(ROOT y)", a.capitalize() + ".", b.capitalize() + "."] + labels + [label]))
    return rows


def models():
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    src = os.path.join(ROOT, "tests", "fixtures", "hf", "bert-tiny-tok")
    for name, labels in (("bert-tiny-stsb", ["LABEL_0"]), ("bert-tiny-mnli", MNLI_LABELS)):
        dst = os.path.join(OUT, name)
        cfg = BertConfig.from_pretrained(src)
        cfg.num_labels = len(labels)
        cfg.id2label = dict(enumerate(labels))
        cfg.label2id = {n: i for i, n in enumerate(labels)}
        torch.manual_seed(7)
        model = BertForSequenceClassification.from_pretrained(src, config=cfg, ignore_mismatched_sizes=True)
        model.save_pretrained(dst)
        for f in ("vocab.txt", "tokenizer.json"):
            shutil.copy(os.path.join(src, f), os.path.join(dst, f))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="store_true", help="also write the STS-B and MNLI model fixtures")
    args = ap.parse_args()
    rng = random.Random(10)
    write(os.path.join(OUT, "CoLA", "train.tsv"), cola(rng, 48))
    write(os.path.join(OUT, "CoLA", "dev.tsv"), cola(rng, 16))
    write(os.path.join(OUT, "MRPC", "train.tsv"), mrpc(rng, 40))
    write(os.path.join(OUT, "MRPC", "dev.tsv"), mrpc(rng, 16))
    write(os.path.join(OUT, "STS-B", "train.tsv"), stsb(rng, 32, "train"))
    write(os.path.join(OUT, "STS-B", "dev.tsv"), stsb(rng, 12, "test"))
    write(os.path.join(OUT, "MNLI", "train.tsv"), mnli(rng, 30, False))
    write(os.path.join(OUT, "MNLI", "dev_matched.tsv"), mnli(rng, 12, True))
    write(os.path.join(OUT, "MNLI", "dev_mismatched.tsv"), mnli(rng, 9, True))
    if args.model:
        models()


if __name__ == "__main__":
    main()
