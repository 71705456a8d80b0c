#!/usr/bin/env python3
"""Summarize ar_probe runs for docs/AR_INVESTIGATION.md: one markdown table (a row per run, a
column per feature map: test accuracy %) and an SVG scatter of test accuracy against attention
entropy over every run (the paper's Figure 4 layout).

usage: tools/ar_summary.py --svg docs/ar/entropy_vs_accuracy.svg LABEL=OUT_DIR [LABEL=OUT_DIR ...]

Each OUT_DIR is an ar_probe --out folder (its results.json and config.json are read). Standard
library only.
"""
import argparse
import json
import math
import os
import sys

COLORS = {
    "softmax": "#000000", "elu": "#1f77b4", "performer": "#ff7f0e", "cosformer": "#2ca02c",
    "exp (t=1)": "#9467bd", "exp (t=2)": "#8c564b", "taylor": "#e377c2", "hedgehog": "#d62728",
}


def load(spec):
    if "=" not in spec:
        sys.exit(f"error: '{spec}' is not LABEL=OUT_DIR")
    label, _, path = spec.rpartition("=")
    try:
        with open(os.path.join(path, "results.json")) as f:
            results = json.load(f)
        with open(os.path.join(path, "config.json")) as f:
            config = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"error: {path}: {e}")
    return label, results, config


def table(runs):
    maps = []
    for _, results, _ in runs:
        for r in results:
            if r["feature_map"] not in maps:
                maps.append(r["feature_map"])
    lines = ["| run | counting baseline | " + " | ".join(maps) + " |",
             "|---|---:|" + "---:|" * len(maps)]
    for label, results, config in runs:
        by_map = {r["feature_map"]: r for r in results}
        base = config.get("counting_baseline")
        cells = []
        for m in maps:
            r = by_map.get(m)
            cells.append("" if r is None else f"{100 * r['accuracy']:.1f}" + ("" if r["status"] == "ok" else " (div.)"))
        lines.append(f"| {label} | {'' if base is None else f'{100 * base:.1f}'} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def scatter(runs, path):
    pts = [(r["entropy"], 100 * r["accuracy"], r["feature_map"]) for _, results, _ in runs for r in results
           if math.isfinite(r["entropy"])]
    if not pts:
        sys.exit("error: no results to plot")
    W, H, L, B, T, R = 640, 420, 60, 50, 20, 150
    xmax = max(p[0] for p in pts) * 1.05
    xs = lambda x: L + (W - L - R) * x / xmax
    ys = lambda y: H - B - (H - B - T) * y / 100.0
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>']
    for y in range(0, 101, 20):
        out.append(f'<text x="{L - 6}" y="{ys(y) + 4}" text-anchor="end">{y}</text>')
        out.append(f'<line x1="{L}" y1="{ys(y)}" x2="{W - R}" y2="{ys(y)}" stroke="#ddd"/>')
    step = 0.5 if xmax > 1.5 else 0.25
    x = 0.0
    while x <= xmax:
        out.append(f'<text x="{xs(x)}" y="{H - B + 16}" text-anchor="middle">{x:g}</text>')
        x += step
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 10}" text-anchor="middle">attention entropy (nats)</text>')
    out.append(f'<text x="15" y="{(T + H - B) / 2}" transform="rotate(-90 15 {(T + H - B) / 2})" '
               f'text-anchor="middle">test accuracy (%)</text>')
    for e, a, m in pts:
        out.append(f'<circle cx="{xs(e):.1f}" cy="{ys(a):.1f}" r="4" fill="{COLORS.get(m, "#7f7f7f")}" '
                   f'fill-opacity="0.75"><title>{m}: {a:.1f}%, entropy {e:.3f}</title></circle>')
    seen = []
    for _, _, m in pts:
        if m not in seen:
            seen.append(m)
    for i, m in enumerate(seen):
        y = T + 10 + 18 * i
        out.append(f'<circle cx="{W - R + 20}" cy="{y}" r="4" fill="{COLORS.get(m, "#7f7f7f")}"/>')
        out.append(f'<text x="{W - R + 30}" y="{y + 4}">{m}</text>')
    out.append("</svg>")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(out) + "\n")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--svg", help="write the accuracy-vs-entropy scatter here")
    ap.add_argument("runs", nargs="+", help="LABEL=OUT_DIR")
    a = ap.parse_args()
    runs = [load(s) for s in a.runs]
    print(table(runs))
    if a.svg:
        scatter(runs, a.svg)


if __name__ == "__main__":
    main()
