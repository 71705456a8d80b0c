#!/usr/bin/env python3
"""bench_embed beside ONNX Runtime and PyTorch: sentences/s of mean-pooled sentence embeddings from
the same BERT-family folder (default: the MiniLM-shaped folder `build/bench_embed` generates; the
real all-MiniLM-L6-v2 with --model), at each batch, length and thread count. The ONNX file is
exported here with torch.onnx.export (BertModel + mean pooling, dynamic batch and length) and
quantized with ORT's dynamic int8 quantization (quantize_dynamic, QInt8 weights). Every
configuration runs the engine (a bench_embed process for that configuration), ORT f32, ORT int8
and PyTorch one after the other, for --rounds rounds; the table holds the medians over rounds of
each one's median over --reps runs. The engine runs its f32 and int8 weights (bench_embed
--weights f32,int8, back to back in the one process). Fidelity: cosine of ORT int8's embeddings to
PyTorch's (f32) on the benchmark's ids; the engine's int8-to-f32 cosine on held-out inputs is
bench_embed's own figure.

    build/bench_embed --batch 1 --seq 64 --threads 1 --reps 1     # generates /tmp/hh_minilm_shaped
    python3 tools/bench_embed_ort.py --engine build/bench_embed --rounds 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def ints(s):
    return [int(x) for x in s.split(",") if x]


def export(folder, out_dir):
    import torch
    import transformers
    from onnxruntime.quantization import QuantType, quantize_dynamic

    f32, i8 = os.path.join(out_dir, "model.onnx"), os.path.join(out_dir, "model_int8.onnx")
    if os.path.exists(f32) and os.path.exists(i8):
        return f32, i8
    model = transformers.AutoModel.from_pretrained(folder).eval()

    class Pooled(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids, mask):
            h = self.m(input_ids=ids, attention_mask=mask).last_hidden_state
            w = mask.unsqueeze(-1).to(h.dtype)
            return (h * w).sum(1) / w.sum(1).clamp(min=1e-9)

    ids = torch.randint(1000, 2000, (2, 16))
    torch.onnx.export(Pooled(model), (ids, torch.ones_like(ids)), f32, input_names=["ids", "mask"],
                      output_names=["embedding"], dynamic_axes={"ids": {0: "b", 1: "l"}, "mask": {0: "b", 1: "l"}},
                      opset_version=17, dynamo=False)
    quantize_dynamic(f32, i8, weight_type=QuantType.QInt8)
    return f32, i8


def timed(fn, reps):
    fn()  # warm-up
    s = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        s.append(time.perf_counter() - t0)
    return statistics.median(s)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="/tmp/hh_minilm_shaped")
    ap.add_argument("--engine", default="build/bench_embed")
    ap.add_argument("--batch", default="1,32")
    ap.add_argument("--seq", default="64,256")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--onnx-dir", default="", help="where the ONNX files go (default: beside the model)")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    import numpy as np
    import onnxruntime as ort
    import torch
    import transformers

    if not os.path.exists(os.path.join(a.model, "config.json")):
        sys.exit(f"error: {a.model}/config.json: no such folder (run {a.engine} once to generate it)")
    onnx_dir = a.onnx_dir or os.path.join(a.model, "onnx")
    os.makedirs(onnx_dir, exist_ok=True)
    f32_path, i8_path = export(a.model, onnx_dir)
    model = transformers.AutoModel.from_pretrained(a.model).eval()
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    configs = [(t, b, l) for t in ints(a.threads) for b in ints(a.batch) for l in ints(a.seq)]
    results = {c: {"engine": [], "engine_int8": [], "ort_f32": [], "ort_int8": [], "torch": []} for c in configs}
    fidelity, engine_cos = {}, None
    for r in range(a.rounds):
        for t in ints(a.threads):
            so = ort.SessionOptions()
            so.intra_op_num_threads, so.inter_op_num_threads = t, 1
            sess = {k: ort.InferenceSession(p, so, providers=["CPUExecutionProvider"])
                    for k, p in (("ort_f32", f32_path), ("ort_int8", i8_path))}
            torch.set_num_threads(t)
            for b in ints(a.batch):
                for l in ints(a.seq):
                    rng = np.random.default_rng(b * 1000 + l)
                    ids = rng.integers(1000, cfg["vocab_size"], (b, l), dtype=np.int64)
                    mask = np.ones_like(ids)
                    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
                        subprocess.run([a.engine, "--model", a.model, "--batch", str(b), "--seq", str(l), "--threads",
                                        str(t), "--reps", str(a.reps), "--weights", "f32,int8", "--json", tmp.name],
                                       check=True, stdout=subprocess.DEVNULL)
                        doc = json.load(open(tmp.name))
                    for row in doc["rows"]:
                        key = "engine" if row["weights"] == "f32" else "engine_int8"
                        results[(t, b, l)][key].append(row["sentences_per_second"])
                    engine_cos = doc.get("int8_cosine_min", engine_cos)
                    feeds = {"ids": ids, "mask": mask}
                    for k, s in sess.items():
                        sec = timed(lambda: s.run(None, feeds), a.reps)
                        results[(t, b, l)][k].append(b / sec)
                    tids, tmask = torch.from_numpy(ids), torch.from_numpy(mask)

                    def torch_embed():
                        with torch.inference_mode():
                            h = model(input_ids=tids, attention_mask=tmask).last_hidden_state
                            return h.mean(1)

                    results[(t, b, l)]["torch"].append(b / timed(torch_embed, a.reps))
                    if r == 0 and t == ints(a.threads)[0]:
                        ref = torch_embed().numpy()
                        q = sess["ort_int8"].run(None, feeds)[0]
                        cos = (q * ref).sum(1) / np.linalg.norm(q, axis=1) / np.linalg.norm(ref, axis=1)
                        fidelity[(b, l)] = float(cos.min())
    print(f"{a.model}: sentences/s, medians of {a.rounds} rounds (each the median of {a.reps} runs)\n")
    print("| threads | batch | seq | engine f32 | ORT f32 | engine int8 | ORT int8 | PyTorch | f32: engine / ORT | "
          "int8: engine / ORT | engine f32 / PyTorch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    out = []
    for c in configs:
        m = {k: statistics.median(v) for k, v in results[c].items()}
        print(f"| {c[0]} | {c[1]} | {c[2]} | {m['engine']:.1f} | {m['ort_f32']:.1f} | {m['engine_int8']:.1f} | "
              f"{m['ort_int8']:.1f} | {m['torch']:.1f} | {m['engine'] / m['ort_f32']:.2f}× | "
              f"{m['engine_int8'] / m['ort_int8']:.2f}× | {m['engine'] / m['torch']:.2f}× |")
        out.append({"threads": c[0], "batch": c[1], "seq": c[2], **m})
    print("\nORT int8 embedding cosine to f32 (min over the batch): " +
          ", ".join(f"batch {b} seq {l}: {v:.4f}" for (b, l), v in sorted(fidelity.items())))
    if engine_cos is not None:
        print(f"engine int8 embedding cosine to engine f32 (min over 32 held-out inputs): {engine_cos:.5f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": a.model, "rows": out, "engine_int8_cosine_min": engine_cos,
                       "int8_cosine_min": {f"{b}x{l}": v for (b, l), v in fidelity.items()}}, f, indent=2)


if __name__ == "__main__":
    main()
