#!/usr/bin/env python3
"""Mean and spread over seeds of a results.csv table: one CSV per seed (the same rows, keyed by a
column), e.g. what `scripts/seeds` leaves in OUT/seed_N/.../results.csv. Prints a Markdown table:
per row, for each asked column, "mean ± sd (min-max)" over the seeds (sd: the sample standard
deviation), and the number of seeds ("-" where every seed left the cell empty, as a teacher's
"swapped"). A row missing from a seed's file, or a non-numeric cell in an asked column, is an error
naming the file.

    python3 tools/seed_spread.py --key model --columns test,recover,kl_mean --percent test,recover \\
        out/seeds/convert_demo/seed_*/ar/results.csv
"""
import argparse
import csv
import math
import sys


def read(path, key):
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        sys.exit(f"error: {path}: {e.strerror}")
    if not rows or key not in rows[0]:
        sys.exit(f"error: {path}: no rows, or no column '{key}'")
    return {r[key]: r for r in rows}, [r[key] for r in rows]


def cell(values, percent, digits):
    scale = 100.0 if percent else 1.0
    v = [x * scale for x in values]
    mean = sum(v) / len(v)
    sd = math.sqrt(sum((x - mean) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0
    f = f"{{:.{digits}f}}"
    return f"{f.format(mean)} ± {f.format(sd)} ({f.format(min(v))}-{f.format(max(v))})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="one results.csv per seed")
    ap.add_argument("--key", required=True, help="the column naming a row (model, feature_map)")
    ap.add_argument("--columns", required=True, help="comma list of numeric columns")
    ap.add_argument("--percent", default="", help="columns shown x100")
    ap.add_argument("--digits", type=int, default=2)
    a = ap.parse_args()
    columns = [c for c in a.columns.split(",") if c]
    percent = set(c for c in a.percent.split(",") if c)
    tables, order = [], None
    for path in a.files:
        table, keys = read(path, a.key)
        order = order or keys
        for k in order:
            if k not in table:
                sys.exit(f"error: {path}: no row '{k}' (the first file has it)")
        for c in columns:
            if c not in next(iter(table.values())):
                sys.exit(f"error: {path}: no column '{c}'")
        tables.append((path, table))
    lines = [f"| {a.key} | " + " | ".join(columns) + " | seeds |", "|---" * (len(columns) + 2) + "|"]
    for k in order:
        cells = []
        for c in columns:
            texts = [(path, table[k][c]) for path, table in tables]
            if all(t == "" for _, t in texts):  # a column the row has no value in (a teacher's "swapped")
                cells.append("-")
                continue
            vals = []
            for path, text in texts:
                try:
                    vals.append(float(text))
                except ValueError:
                    sys.exit(f"error: {path}: row '{k}', column '{c}': '{text}' is not a number")
            cells.append(cell(vals, c in percent, a.digits))
        lines.append(f"| {k} | " + " | ".join(cells) + f" | {len(tables)} |")
    print("\n".join(lines))

if __name__ == "__main__":
    main()
