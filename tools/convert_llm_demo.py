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
  table --out DIR --window W --lengths L1,L2,.. --decode-context C --short-context S [--tasks passkey,..]
        [--rows KEY,..]
      Reads DIR/convert/<run>/results.json (perplexity; the layers kept as softmax and each layer's
      KL-selection score or transfer error), DIR/<task>/<row>/<length>/results.json (eval_lm) and
      DIR/decode/<context>/<row>/run*/results.json (hf_run: the fastest run), prints one table (a column per
      task and length where the task's prompt fits; the lengths it does not fit are said below it) and the
      layer choices, and writes DIR/results.md, results.csv and results.json.
"""
import argparse
import json
import os
import random
import re
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
] + [  # the recall table's rows (a retrieval teacher, issue 34)
    (f"hybrid16_{by}{k}", f"hybrid W=16 + {k} softmax layer{'s' if k > 1 else ''} by {name}", f"hybrid16_{by}{k}",
      "hybrid-hedgehog")
     for k in (1, 2) for by, name in (("kl", "KL"), ("transfer", "transfer error"), ("every", "every-Nth"))]

TASK_NAMES = {"passkey": "passkey", "niah_multikey": "multi-key NIAH", "vt": "variable tracking"}


def recipe_of(key):
    """(recipe, run, row) of a table key: one of ROWS, or hybrid16_layers_I_J_... (KEEP_LAYERS: the
    hybrid W = 16 keeping layers I, J, ... softmax, given by hand); None for an unknown key."""
    for k, recipe, run, row in ROWS:
        if k == key:
            return recipe, run, row
    m = re.fullmatch(r"hybrid16_layers((?:_\d+)+)", key)
    if m:
        layers = m.group(1)[1:].split("_")
        return (f"hybrid W=16 + softmax layer{'s' if len(layers) > 1 else ''} {','.join(layers)} (by hand)", key,
                "hybrid-hedgehog")
    return None


def cut_at_line(data, at):
    """The first line start at or after byte `at` (len(data) when none)."""
    if at <= 0:
        return 0
    nl = data.find(b"\n", at - 1)
    return len(data) if nl < 0 else nl + 1


def mixed(train_parts, mix_file, ratio):
    """The training parts with the documents of mix_file (blank-line separated) interleaved: after each
    ~4 KB piece of corpus text (cut at line starts) come documents until ratio times the corpus bytes so
    far, so any prefix of the split (convert_gpt2 --max-train-tokens) holds the mix the teacher saw."""
    docs = [d + b"\n\n" for d in open(mix_file, "rb").read().split(b"\n\n") if d.strip()]
    corpus = b"".join(p if p.endswith(b"\n") or not p else p + b"\n" for p in train_parts)
    out, at, seen, used, di = [], 0, 0, 0, 0
    while at < len(corpus):
        end = cut_at_line(corpus, min(len(corpus), at + 4096))
        end = len(corpus) if end <= at else end
        out.append(corpus[at:end] if corpus[at:end].endswith(b"\n") else corpus[at:end] + b"\n")
        seen += end - at
        at = end
        while di < len(docs) and used < ratio * seen:
            out.append(docs[di])
            used += len(docs[di])
            di += 1
    return [b"".join(out)]


def splits(args):
    for flag, path in (("--mix-train", args.mix_train), ("--mix-valid", args.mix_valid)):
        if path and not os.path.isfile(path):
            sys.exit(f"error: {flag}: {path} does not exist")
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
    if args.mix_train:
        train = mixed(train, args.mix_train, args.mix)
    if args.mix_valid:  # held-out documents of the same kinds: the students' validation is their training mix
        valid = mixed(valid, args.mix_valid, args.mix)
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


def convert_result(out, run, row):
    """(the teacher's test perplexity, the row's result) of a convert_gpt2 run; None for what is missing."""
    r = load(os.path.join(out, "convert", run, "results.json"))
    if r is None:
        return None, None
    for x in r["rows"]:
        if x["feature_map"] == row and x.get("status") == "ok":
            return r["teacher"]["perplexity"], x
    return r["teacher"]["perplexity"], None


def convert_row(out, run, row):
    teacher, x = convert_result(out, run, row)
    return teacher, None if x is None else x["test"]["perplexity"]


def fastest(folder):
    """The hf_run result of folder/run*/ with the most tokens/s (None when there is none)."""
    runs = [load(os.path.join(folder, r, "results.json")) for r in sorted(os.listdir(folder))] \
        if os.path.isdir(folder) else []
    runs = [r for r in runs if r is not None]
    return max(runs, key=lambda r: r["tokens_per_second"]) if runs else None


def retrieval(out, task, key, length):
    d = os.path.join(out, task, key, str(length))
    r = load(os.path.join(d, "results.json"))
    if r is not None:
        return {"accuracy": r["accuracy"], "correct": r["correct"], "count": r["count"]}
    err = os.path.join(d, "error.txt")
    if os.path.exists(err):
        return {"error": open(err).read().strip()}
    return None


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def layer_choice(x):
    """A converted row's kept softmax layers and per-layer scores (None when it keeps none)."""
    if x is None or not x.get("softmax_layers"):
        return None
    c = {"kept": x["softmax_layers"], "by": x.get("softmax_choice", "")}
    if "kl_select" in x:
        c["kl_all_linear"] = x["kl_select"]["all_linear"]
        c["layer_kl"] = x["kl_select"]["layer_kl"]
        c["kl_drop"] = x["kl_select"]["score"]
    if "layer_error" in x:
        c["transfer_error"] = x["layer_error"]
    return c


def table(args):
    lengths = [int(x) for x in args.lengths.split(",")]
    tasks = [t for t in args.tasks.split(",") if t]
    keys = [k for k in args.rows.split(",") if k]
    unknown = [k for k in keys if recipe_of(k) is None]
    if unknown:
        sys.exit(f"error: --rows: unknown row(s) {', '.join(unknown)} (known: {', '.join(k for k, *_ in ROWS)}, "
                 "hybrid16_layers_I_J...)")
    recipes = {k: recipe_of(k) for k in keys}
    rows, teacher_ppl = [], None
    for key in keys:
        recipe, run, row = recipes[key]
        ppl, choice = None, None
        if run is None:
            for k2 in keys:
                if recipes[k2][1] is not None:
                    teacher_ppl, _ = convert_row(args.out, recipes[k2][1], "x")
                    if teacher_ppl is not None:
                        break
            ppl = teacher_ppl
        else:
            _, x = convert_result(args.out, run, row)
            ppl = None if x is None else x["test"]["perplexity"]
            choice = layer_choice(x)
        dec = fastest(os.path.join(args.out, "decode", str(args.decode_context), key))
        short = fastest(os.path.join(args.out, "decode", str(args.short_context), key))
        r = {
            "key": key, "recipe": recipe, "test_perplexity": ppl,
            "decode_tokens_per_second": dec["tokens_per_second"] if dec else None,
            "decode_peak_mib": dec["decode_peak_bytes"] / 2**20 if dec and "decode_peak_bytes" in dec else None,
            "decode_context": len(dec["prompt_ids"]) + len(dec["generated_ids"]) if dec else None,
            "short_tokens_per_second": short["tokens_per_second"] if short else None,
            "short_peak_mib": short["decode_peak_bytes"] / 2**20 if short and "decode_peak_bytes" in short else None,
        }
        for t in tasks:
            r[t] = {str(n): retrieval(args.out, t, key, n) for n in lengths}
        if choice is not None:
            r["softmax_layers"] = choice
        rows.append(r)
    for r in rows:
        p = r["test_perplexity"]
        r["gap_to_teacher"] = None if p is None or teacher_ppl is None else p - teacher_ppl
    t_dec = rows[0]["decode_tokens_per_second"] if rows else None
    for r in rows:
        d = r["decode_tokens_per_second"]
        r["decode_speedup_vs_teacher"] = None if d is None or not t_dec else d / t_dec

    def cell(r, t, n):
        c = r[t][str(n)]
        if c is None:
            return "-"
        if "error" in c:
            return "n/a"
        return f"{c['correct']}/{c['count']}" if t == "passkey" else f"{100 * c['accuracy']:.0f}%"

    # A (task, length) column where no row's prompt fits is left out and said below the table.
    w = args.window
    cols = [(t, n) for t in tasks for n in lengths
            if len(tasks) == 1 or any(r[t][str(n)] is None or "error" not in r[t][str(n)] for r in rows)]
    too_short = [(t, n) for t in tasks for n in lengths if (t, n) not in cols]
    label = lambda n: f"{n // w}×W" if n % w == 0 and n // w in (1, 4, 16) else "full"  # noqa: E731
    head = (["recipe", "test ppl", "gap"] +
            [f"{TASK_NAMES.get(t, t)} {n} ({label(n)})" if len(tasks) > 1 else f"{t} {n} ({n // w}×W{w})"
             for t, n in cols] +
            [f"decode tok/s @{args.decode_context}", "×teacher", f"decode MiB @{args.short_context}",
             f"decode MiB @{args.decode_context}"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["recipe"], fmt(r["test_perplexity"], ".3f"),
                 "-" if r["key"] == "teacher" else fmt(r["gap_to_teacher"], "+.3f")]
        cells += [cell(r, t, n) for t, n in cols]
        cells += [fmt(r["decode_tokens_per_second"], ".1f"), fmt(r["decode_speedup_vs_teacher"], ".2f"),
                  fmt(r["short_peak_mib"], ".2f"), fmt(r["decode_peak_mib"], ".2f")]
        lines.append("| " + " | ".join(cells) + " |")
    md = "\n".join(lines) + "\n"
    if len(tasks) == 1:  # the single-task table: one n/a note, as before
        notes = [c["error"] for r in rows for c in r[tasks[0]].values() if c and "error" in c]
        if notes:
            md += "\nn/a: " + sorted(set(notes))[0] + "\n"
    elif too_short:
        md += "\nNot run (the prompt does not fit): " + ", ".join(f"{TASK_NAMES.get(t, t)} at {n}" for t, n in too_short)
        md += f". W = {w}; passkey counts correct of trials, the other tasks RULER's string-match score.\n"
    choices = [r for r in rows if "softmax_layers" in r]
    if choices:
        md += "\n| recipe | kept softmax | per-layer score |\n|---|---|---|\n"
        for r in choices:
            c = r["softmax_layers"]
            if "kl_drop" in c:
                score = "KL drop " + ", ".join(f"L{i} {x:.4f}" for i, x in enumerate(c["kl_drop"]))
                score += f" (all-linear KL {c['kl_all_linear']:.4f})"
            elif c["by"] == "list":
                score = "given (--softmax-layer-list)"
            elif "transfer_error" in c:
                score = "transfer error " + ", ".join(f"L{i} {x:.4g}" for i, x in enumerate(c["transfer_error"]))
            else:
                score = "-"
            md += f"| {r['recipe']} | {','.join(str(k) for k in c['kept'])} | {score} |\n"
    print(md, end="")
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(md)
    with open(os.path.join(args.out, "results.csv"), "w") as f:  # one row per recipe (tools/seed_spread.py)
        # The recall table adds each shown (task, length) column's accuracy (a fraction; empty where not run).
        extra = list(cols) if len(tasks) > 1 else []
        f.write("key,recipe,test_perplexity,gap_to_teacher" + "".join(f",{t}_{n}" for t, n in extra) + "\n")
        num = lambda x: "" if x is None else format(x, ".6f")  # noqa: E731
        acc = lambda c: num(c["accuracy"]) if c and "error" not in c else ""  # noqa: E731
        for r in rows:
            gap = "" if r["key"] == "teacher" else num(r["gap_to_teacher"])
            f.write(f"{r['key']},\"{r['recipe']}\",{num(r['test_perplexity'])},{gap}" +
                    "".join(f",{acc(r[t][str(n)])}" for t, n in extra) + "\n")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"window": w, "passkey_lengths": lengths, "tasks": tasks, "decode_context": args.decode_context,
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
    s.add_argument("--mix-train", help="documents (blank-line separated) interleaved into the training split")
    s.add_argument("--mix-valid", help="other documents (not in --mix-train) interleaved into the validation split; "
                   "the test split stays the corpus alone")
    s.add_argument("--mix", type=float, default=1.0, help="--mix-train / --mix-valid bytes per corpus byte")
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
    s.add_argument("--tasks", default="passkey")
    s.add_argument("--rows", default="teacher,hedgehog,hybrid16,hybrid64,hybrid16_logit,hybrid16_softmax1,elu")
    a = p.parse_args()
    {"splits": splits, "tokenizer": tokenizer, "ids": ids, "table": table}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
