#!/usr/bin/env python3
"""Helpers of scripts/convert_llm_demo (standard library only).

  splits CORPUS_FILES... --out DIR --valid-fraction F
      The fortune files as a WikiText-style folder (wiki.{train,valid,test}.raw) that convert_gpt2
      reads. The held-out text is the tail of each file that `train_lm prepare` held out for the
      teacher (the last round(F * bytes) bytes), moved forward to the next line start so no UTF-8
      character is cut and no byte the teacher trained on is evaluated; its first half of lines goes
      to valid, the rest to test. Files that are not UTF-8 are skipped (convert_gpt2 reads UTF-8).
  tokenizer FOLDER
      Writes vocab.json + merges.txt for train_lm's byte-level tokenizer into a model folder that
      an older train_lm exported without them (data::write_byte_tokenizer_files writes the same
      files now): GPT-2 byte-level BPE with no merges, byte b ->
      id b (GPT-2's byte-to-character table), <|endoftext|> = 256, so convert_gpt2, eval_lm, hf_run
      and transformers tokenize exactly as train_lm did.
  ids --count N --vocab V --seed S
      N random token ids in [0, V - 1) (no <|endoftext|>), comma-separated: the decode benchmark's
      prompt (decoding speed does not depend on the text).
  table --out DIR --window W --lengths L1,L2,L3 --decode-context C --short-context S
      Reads DIR/convert/<run>/results.json (perplexity), DIR/passkey/<row>/<length>/results.json and
      DIR/decode/<context>/<row>/run*/results.json (hf_run: the fastest run), prints one table and writes DIR/results.md
      and results.json.
"""
import argparse
import json
import os
import random
import sys

# The rows of the table: (key, recipe, convert run folder or None for the teacher, converted row).
ROWS = [
    ("teacher", "softmax teacher (train_lm)", None, None),
    ("hedgehog", "Hedgehog (paper: linear, xent transfer)", "linear", "hedgehog"),
    ("hybrid16", "hybrid Hedgehog W=16 (mse transfer)", "hybrid16", "hybrid-hedgehog"),
    ("hybrid64", "hybrid Hedgehog W=64 (mse transfer)", "hybrid64", "hybrid-hedgehog"),
    ("hybrid16_logit", "hybrid W=16 + logit distillation", "hybrid16_logit", "hybrid-hedgehog"),
    ("hybrid16_softmax1", "hybrid W=16 + 1 softmax layer kept", "hybrid16_softmax1", "hybrid-hedgehog"),
    ("elu", "1+ELU (floor: linear, xent transfer)", "linear", "elu"),
]


def cut_at_line(data, at):
    """The first line start at or after byte `at` (len(data) when none)."""
    if at <= 0:
        return 0
    nl = data.find(b"\n", at - 1)
    return len(data) if nl < 0 else nl + 1


def splits(args):
    train, valid, test = [], [], []
    skipped = []
    for path in args.files:
        data = open(path, "rb").read()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            skipped.append(path)
            continue
        n_valid = int(len(data) * args.valid_fraction + 0.5)  # train_lm prepare: llround(n * fraction)
        cut = cut_at_line(data, len(data) - n_valid)
        held = data[cut:]
        mid = cut_at_line(held, len(held) // 2)
        train.append(data[:cut])
        valid.append(held[:mid])
        test.append(held[mid:])
    os.makedirs(args.out, exist_ok=True)
    for name, parts in (("train", train), ("valid", valid), ("test", test)):
        with open(os.path.join(args.out, f"wiki.{name}.raw"), "wb") as f:
            for p in parts:
                f.write(p if p.endswith(b"\n") or not p else p + b"\n")
    sizes = {n: os.path.getsize(os.path.join(args.out, f"wiki.{n}.raw")) for n in ("train", "valid", "test")}
    print(f"wrote {args.out}: " + ", ".join(f"{n} {s} bytes" for n, s in sizes.items()) +
          (f"; skipped {len(skipped)} non-UTF-8 file(s)" if skipped else ""))


def bytes_to_unicode():
    """GPT-2's table: every byte as a printable character (openai/gpt-2 encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def tokenizer(args):
    table = bytes_to_unicode()
    vocab = {table[b]: b for b in range(256)}
    vocab["<|endoftext|>"] = 256
    with open(os.path.join(args.folder, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(args.folder, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
    print(f"wrote {args.folder}/vocab.json and merges.txt (byte-level, 257 tokens)")


def ids(args):
    rng = random.Random(args.seed)
    print(",".join(str(rng.randrange(args.vocab - 1)) for _ in range(args.count)))


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def convert_row(out, run, row):
    r = load(os.path.join(out, "convert", run, "results.json"))
    if r is None:
        return None, None
    for x in r["rows"]:
        if x["feature_map"] == row and x.get("status") == "ok":
            return r["teacher"]["perplexity"], x["test"]["perplexity"]
    return r["teacher"]["perplexity"], None


def fastest(folder):
    """The hf_run result of folder/run*/ with the most tokens/s (None when there is none)."""
    runs = [load(os.path.join(folder, r, "results.json")) for r in sorted(os.listdir(folder))] \
        if os.path.isdir(folder) else []
    runs = [r for r in runs if r is not None]
    return max(runs, key=lambda r: r["tokens_per_second"]) if runs else None


def passkey(out, key, length):
    d = os.path.join(out, "passkey", key, str(length))
    r = load(os.path.join(d, "results.json"))
    if r is not None:
        return {"accuracy": r["accuracy"], "correct": r["correct"], "count": r["count"]}
    err = os.path.join(d, "error.txt")
    if os.path.exists(err):
        return {"error": open(err).read().strip()}
    return None


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def table(args):
    lengths = [int(x) for x in args.lengths.split(",")]
    rows, teacher_ppl = [], None
    for key, recipe, run, row in ROWS:
        ppl = None
        if run is None:
            for _, _, r2, _ in ROWS[1:]:
                teacher_ppl, _ = convert_row(args.out, r2, "x")
                if teacher_ppl is not None:
                    break
            ppl = teacher_ppl
        else:
            _, ppl = convert_row(args.out, run, row)
        dec = fastest(os.path.join(args.out, "decode", str(args.decode_context), key))
        short = fastest(os.path.join(args.out, "decode", str(args.short_context), key))
        rows.append({
            "key": key, "recipe": recipe, "test_perplexity": ppl,
            "passkey": {str(n): passkey(args.out, key, n) for n in lengths},
            "decode_tokens_per_second": dec["tokens_per_second"] if dec else None,
            "decode_peak_mib": dec["decode_peak_bytes"] / 2**20 if dec and "decode_peak_bytes" in dec else None,
            "decode_context": len(dec["prompt_ids"]) + len(dec["generated_ids"]) if dec else None,
            "short_tokens_per_second": short["tokens_per_second"] if short else None,
            "short_peak_mib": short["decode_peak_bytes"] / 2**20 if short and "decode_peak_bytes" in short else None,
        })
    for r in rows:
        p = r["test_perplexity"]
        r["gap_to_teacher"] = None if p is None or teacher_ppl is None else p - teacher_ppl
    t_dec = rows[0]["decode_tokens_per_second"]
    for r in rows:
        d = r["decode_tokens_per_second"]
        r["decode_speedup_vs_teacher"] = None if d is None or not t_dec else d / t_dec

    def pk(r, n):
        c = r["passkey"][str(n)]
        if c is None:
            return "-"
        if "error" in c:
            return "n/a"
        return f"{c['correct']}/{c['count']}"

    w = args.window
    head = (["recipe", "test ppl", "gap"] + [f"passkey {n} ({n // w}×W{w})" for n in lengths] +
            [f"decode tok/s @{args.decode_context}", "×teacher", f"decode MiB @{args.short_context}",
             f"decode MiB @{args.decode_context}"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["recipe"], fmt(r["test_perplexity"], ".3f"),
                 "-" if r["key"] == "teacher" else fmt(r["gap_to_teacher"], "+.3f")]
        cells += [pk(r, n) for n in lengths]
        cells += [fmt(r["decode_tokens_per_second"], ".1f"), fmt(r["decode_speedup_vs_teacher"], ".2f"),
                  fmt(r["short_peak_mib"], ".2f"), fmt(r["decode_peak_mib"], ".2f")]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [n for r in rows for c in r["passkey"].values() if c and "error" in c for n in [c["error"]]]
    md = "\n".join(lines) + "\n"
    if notes:
        md += "\nn/a: " + sorted(set(notes))[0] + "\n"
    print(md, end="")
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(md)
    with open(os.path.join(args.out, "results.csv"), "w") as f:  # one row per recipe (tools/seed_spread.py)
        f.write("key,recipe,test_perplexity,gap_to_teacher\n")
        num = lambda x: "" if x is None else format(x, ".6f")  # noqa: E731
        for r in rows:
            gap = "" if r["key"] == "teacher" else num(r["gap_to_teacher"])
            f.write(f"{r['key']},\"{r['recipe']}\",{num(r['test_perplexity'])},{gap}\n")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"window": w, "passkey_lengths": lengths, "decode_context": args.decode_context,
                   "short_context": args.short_context, "rows": rows},
                  f, indent=2)
        f.write("\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("splits")
    s.add_argument("files", nargs="+")
    s.add_argument("--out", required=True)
    s.add_argument("--valid-fraction", type=float, default=0.05)
    s = sub.add_parser("tokenizer")
    s.add_argument("folder")
    s = sub.add_parser("ids")
    s.add_argument("--count", type=int, required=True)
    s.add_argument("--vocab", type=int, required=True)
    s.add_argument("--seed", type=int, default=0)
    s = sub.add_parser("table")
    s.add_argument("--out", required=True)
    s.add_argument("--window", type=int, required=True)
    s.add_argument("--lengths", required=True)
    s.add_argument("--decode-context", type=int, required=True)
    s.add_argument("--short-context", type=int, required=True)
    a = p.parse_args()
    {"splits": splits, "tokenizer": tokenizer, "ids": ids, "table": table}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
