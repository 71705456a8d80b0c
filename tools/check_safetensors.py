#!/usr/bin/env python3
"""Cross-checks a safetensors file written by hedgehog against the reference implementation.

Usage:
  HH_SAFETENSORS_OUT=/tmp/all.safetensors ./build/hh_tests -tc="safetensors: round trip*"
  python3 tools/check_safetensors.py /tmp/all.safetensors
  python3 tools/check_safetensors.py --write /tmp/py.safetensors   # a file for the C++ reader

Needs `pip install safetensors numpy` (tooling only; the engine never imports Python).
The Rust deserializer validates the whole file; values are printed via numpy (bf16 as raw bits).
"""
import json
import struct
import sys

import numpy as np
import safetensors
from safetensors.numpy import save_file

NP = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32,
      "U8": np.uint8, "I8": np.int8, "BOOL": np.bool_, "BF16": np.uint16}


def check(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = raw[8:8 + n]
    assert n % 8 == 0, f"header length {n} is not a multiple of 8"
    assert header[:1] == b"{", "header does not start with '{'"
    meta = json.loads(header).get("__metadata__", {})
    assert meta.get("format") == "pt", f"__metadata__ lacks format=pt: {meta}"
    print("metadata:", meta)
    for name, t in safetensors.deserialize(raw):  # raises SafetensorError on any violation
        arr = np.frombuffer(bytes(t["data"]), dtype=NP[t["dtype"]]).reshape(t["shape"])
        if t["dtype"] == "BF16":  # widen the raw bf16 bits to f32 for printing
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        print(f"{name}: {t['dtype']} {t['shape']} {arr.tolist()}")


def write(path):
    save_file({"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, -2], dtype=np.int64),
               "c": np.array(2.5, dtype=np.float64), "m": np.array([True, False])}, path, metadata={"who": "python"})
    print("wrote", path)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        write(sys.argv[2])
    elif len(sys.argv) == 2:
        check(sys.argv[1])
    else:
        sys.exit(__doc__)
