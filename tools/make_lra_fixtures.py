#!/usr/bin/env python3
"""Writes the small LRA fixtures under tests/fixtures/lra/ (Python standard library only).

One folder per task, in the layout of the LRA release (data/lra.h), with a few records each.
tests/data/test_lra.cpp checks exact tokens and labels computed from the rules written here, so
change both together. Run from the repository root: python3 tools/make_lra_fixtures.py
"""
import os
import struct
import zlib

ROOT = os.path.join("tests", "fixtures", "lra")


def write(path, data):
    path = os.path.join(ROOT, path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))


# ---- ListOps: a tree is (operator, [arguments]) or a digit; the release string gives an
# operator of n arguments n+1 opening parentheses: "( ( ( [MAX 2 ) 9 ) ] )". ----
def listops_string(t):
    if isinstance(t, int):
        return str(t)
    op, args = t
    s = "( " * (len(args) + 1) + op + " " + listops_string(args[0]) + " )"
    for a in args[1:]:
        s += " " + listops_string(a) + " )"
    return s + " ] )"


def listops_value(t):
    if isinstance(t, int):
        return t
    op, args = t
    v = sorted(listops_value(a) for a in args)
    if op == "[MAX":
        return v[-1]
    if op == "[MIN":
        return v[0]
    if op == "[SM":
        return sum(v) % 10
    n = len(v)  # [MED: the median, truncated
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) // 2


def listops_file(trees):
    rows = ["Source\tTarget"] + [listops_string(t) + "\t" + str(listops_value(t)) for t in trees]
    return "".join(r + "\r\n" for r in rows)  # Python's csv writer ends lines with \r\n


write("listops/basic_train.tsv", listops_file([
    ("[MAX", [2, 9]),                                   # 9
    ("[SM", [3, ("[MIN", [4, 7]), 8]),                  # (3 + 4 + 8) % 10 = 5
    ("[MED", [1, 5, 2, 8]),                             # (2 + 5) // 2 = 3
]))
write("listops/basic_val.tsv", listops_file([("[MIN", [6, ("[MAX", [0, 3]), 4])]))  # 3
write("listops/basic_test.tsv", listops_file([("[MED", [7, 1, 9])]))             # 7

# ---- Text: "label<TAB>text", the text is bytes (UTF-8 here) and may hold tabs ----
write("text/train.tsv", "1\tGreat film!\n0\tBad\tplot, caf\u00e9 food.\n")
write("text/val.tsv", "0\tmeh\n")
write("text/test.tsv", "1\tloved it\n")

# ---- Retrieval: "label<TAB>id1<TAB>id2<TAB>text1<TAB>text2", no header, labels as floats ----
write("retrieval/new_aan_pairs.train.tsv", "1.0\tP01-1001\tP02-2002\tabc\txy\n0.0\tP03-3003\tP04-4004\t\"q\"\tz\n")
write("retrieval/new_aan_pairs.eval.tsv", "0\tE1\tE2\tdoc one\tdoc two\n")
write("retrieval/new_aan_pairs.test.tsv", "1\tT1\tT2\tleft\tright\n")


# ---- Image: CIFAR-10 binary, one record per file. Record r (0-4 in data_batch_1..5) has label
# r + 3 and pixel value (r * 31 + c * 70 + i * 5) % 256 for channel c, index i; the test record
# is grey: R = G = B = i % 256, label 6. ----
def cifar_record(label, pixel):
    return bytes([label]) + bytes(pixel(c, i) for c in range(3) for i in range(1024))


for r in range(5):
    write("image/data_batch_%d.bin" % (r + 1), cifar_record(r + 3, lambda c, i, r=r: (r * 31 + c * 70 + i * 5) % 256))
write("image/test_batch.bin", cifar_record(6, lambda c, i: i % 256))


# ---- Pathfinder: 32x32 8-bit grey PNGs; image k has pixel (x, y) = (x * 8 + y + k) % 256 and
# label k % 2. Metadata files 0, 2 and 10 (numeric order differs from name order) list 4, 3
# and 3 images; images live in imgs/<file number>/sample_<j>.png. ----
def grey_png(width, height, pixel):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + bytes(pixel(x, y) for x in range(width)) for y in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


k = 0
for number, count in ((0, 4), (2, 3), (10, 3)):
    lines = []
    for j in range(count):
        name = "sample_%d.png" % j
        write("pathfinder/curv_contour_length_14/imgs/%d/%s" % (number, name),
              grey_png(32, 32, lambda x, y, k=k: (x * 8 + y + k) % 256))
        lines.append("imgs/%d %s %d %d 1.0 14 4 2 0.5 1 1\n" % (number, name, j, k % 2))
        k += 1
    write("pathfinder/curv_contour_length_14/metadata/%d.npy" % number, "".join(lines))
