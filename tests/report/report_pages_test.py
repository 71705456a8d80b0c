#!/usr/bin/env python3
"""The apps' report pages as a browser draws them (CTest hh_report_pages; issue 35 item 4).

Writes small runs of the apps that make a report page (convert_demo: a conversion report per part
with heat maps and curves; hf_run --out with a long generated-id line; lra; ar_probe) into a
temporary folder, opens every report.html and every figure (*.svg) in headless Chromium and
measures them through the DevTools protocol:
  - a page must not be wider than the window (a long line of ids or text runs off the page);
  - every text of a figure (title, tick labels, axis labels, legend) must lie inside the figure's
    box, as the browser lays it out (a clipped title: "ehog: KL(teacher || ...").
Exit 77 (CTest's skip) with "skipped: no chromium" when no Chromium is installed.

    python3 tests/report/report_pages_test.py BUILD_DIR SOURCE_DIR
    HH_REPORT_SCREENSHOTS=DIR python3 tests/report/report_pages_test.py ...   # also saves each page as a PNG
"""
import base64
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from devtools import chromium, new_tab, require_chromium  # noqa: E402

require_chromium()

WINDOW_WIDTH = 1024  # px: a page must fit this wide a window (a laptop's half screen)
SLACK = 0.5          # px: sub-pixel rounding of text boxes


# Every <text> of the figure whose box leaves the figure's: [text, [x0, y0, x1, y1], the figure's size].
FIGURE_OVERFLOWS = """(() => {
  const svg = document.documentElement, vb = svg.viewBox.baseVal;
  const w = vb && vb.width ? vb.width : svg.width.baseVal.value, h = vb && vb.height ? vb.height : svg.height.baseVal.value;
  const out = [];
  for (const t of svg.querySelectorAll('text')) {
    // The text's box in the figure's coordinates: its own box through its transform (a rotated
    // axis label's box turns with it).
    const b = t.getBBox(), m = t.getCTM(), xs = [], ys = [];
    for (const [x, y] of [[b.x, b.y], [b.x + b.width, b.y], [b.x, b.y + b.height], [b.x + b.width, b.y + b.height]]) {
      const p = new DOMPoint(x, y).matrixTransform(m);
      xs.push(p.x);
      ys.push(p.y);
    }
    const box = [Math.min(...xs), Math.min(...ys), Math.max(...xs), Math.max(...ys)];
    if (box[0] < -%(slack)s || box[1] < -%(slack)s || box[2] > w + %(slack)s || box[3] > h + %(slack)s)
      out.push([t.textContent, box.map(v => Math.round(v * 10) / 10), [w, h]]);
  }
  return out;
})()""" % {"slack": SLACK}

# The page's width beyond the window's, and the widest element that makes it (tag and text start).
PAGE_OVERFLOW = """(() => {
  const over = document.documentElement.scrollWidth - window.innerWidth;
  let widest = null;
  if (over > 0)
    for (const e of document.body.querySelectorAll('*')) {
      const r = e.getBoundingClientRect();
      if (r.right > window.innerWidth && (!widest || r.right > widest[2]))
        widest = [e.tagName, (e.textContent || '').slice(0, 60), Math.round(r.right)];
    }
  return [over, widest];
})()"""


def write_reports(build, source, out):
    """Runs the apps into `out`; returns their pages (each with its figures beside it)."""
    hf = os.path.join(source, "tests", "fixtures", "hf")
    runs = {
        "convert_demo": ["convert_demo", "--ar-train", "200", "--text",
                         os.path.join(source, "tests", "fixtures", "wikitext", "wiki.train.raw"),
                         "--teacher-epochs", "1", "--distill-epochs", "1", "--finetune-epochs", "1",
                         "--feature-map", "paper", "--quiet", "--no-check-teacher"],  # the longest row names
        # 120 generated ids: one line of about 500 characters.
        "hf_run": ["hf_run", "--model", os.path.join(hf, "llama-tiny-yarn"), "--ids", "1,15,27,88,4", "--temperature",
                   "0", "--max-new-tokens", "120"],
        "lra": ["lra", "--preset", "tiny", "--generate", "--quiet", "--tasks", "listops", "--attentions",
                "softmax,hedgehog", "--steps", "20"],
        "ar_probe": ["ar_probe", "--vocab", "8", "--seq-len", "9", "--train-samples", "32", "--test-samples", "8",
                     "--layers", "1", "--heads", "1", "--head-dim", "4", "--quiet", "--epochs", "2",
                     "--feature-map", "softmax,elu,hedgehog,t2r"],
    }
    for name, cmd in runs.items():
        folder = os.path.join(out, name)
        r = subprocess.run([os.path.join(build, cmd[0])] + cmd[1:] + ["--out", folder],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
        if r.returncode != 0:
            raise SystemExit(f"{name} failed (exit {r.returncode}):\n{r.stdout[-3000:]}")
    return sorted(p for name in ("report.html", "index.html")  # ar_probe's page is index.html
                  for p in glob.glob(os.path.join(out, "**", name), recursive=True))


def main():
    build, source = sys.argv[1], sys.argv[2]
    failures = []

    def check(what, ok, detail=""):
        print(("ok    " if ok else "FAIL  ") + what + (f": {detail}" if not ok and detail else ""))
        if not ok:
            failures.append(what)

    shots = os.environ.get("HH_REPORT_SCREENSHOTS", "")  # a folder: each page saved there as a PNG
    if shots:
        os.makedirs(shots, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        pages = write_reports(build, source, os.path.join(tmp, "reports"))
        check("the apps wrote report pages", len(pages) >= 5, str(pages))
        with chromium(tmp, "--hide-scrollbars", f"--window-size={WINDOW_WIDTH},800") as devtools:
            ws = new_tab(devtools)
            ws.call("Page.enable")
            # The checks catch what they look for: a title wider than its figure, a page wider than
            # the window (an unbreakable line of ids), each written here.
            bad_svg, bad_page = os.path.join(tmp, "bad.svg"), os.path.join(tmp, "bad.html")
            with open(bad_svg, "w") as f:
                f.write('<svg xmlns="http://www.w3.org/2000/svg" width="200" height="100" viewBox="0 0 200 100">'
                        '<text x="100" y="22" text-anchor="middle" font-size="15">Hedgehog (untrained): KL(teacher || '
                        'student) per layer and head</text></svg>')
            with open(bad_page, "w") as f:
                f.write("<!doctype html><html><body><pre>" + ",".join(str(i) for i in range(400)) + "</pre></body></html>")
            ws.open(bad_svg)
            check("a title wider than its figure is caught", len(ws.eval(FIGURE_OVERFLOWS)) == 1)
            ws.open(bad_page)
            check("a line wider than the window is caught", ws.eval(PAGE_OVERFLOW)[0] > 0)
            figures = 0
            for page in pages:
                folder = os.path.dirname(page)
                name = os.path.relpath(folder, os.path.join(tmp, "reports"))
                ws.open(page)
                if shots:  # the page as the browser lays it out, whole, for a person to look at
                    ws.call("Emulation.setDeviceMetricsOverride", width=WINDOW_WIDTH, height=800, deviceScaleFactor=1,
                            mobile=False)
                    png = ws.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
                    with open(os.path.join(shots, name.replace("/", "_") + ".png"), "wb") as f:
                        f.write(base64.b64decode(png))
                over, widest = ws.eval(PAGE_OVERFLOW)
                check(f"{name}/{os.path.basename(page)} fits a {WINDOW_WIDTH} px window", over <= 0,
                      f"{over} px wider; widest: {widest}")
                for svg in sorted(glob.glob(os.path.join(folder, "*.svg"))):
                    ws.open(svg)
                    outside = ws.eval(FIGURE_OVERFLOWS)
                    figures += 1
                    check(f"{name}/{os.path.basename(svg)}: every text inside the figure", not outside,
                          "; ".join(f"{t!r} at {b} in {wh}" for t, b, wh in outside[:4]))
            check("figures were measured", figures >= 10, str(figures))
            ws.s.close()
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
