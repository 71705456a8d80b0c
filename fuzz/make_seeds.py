#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/ (committed; rerun only to change them).
Valid files in the writer's exact layout plus a few edge cases; each corpus stays well under 200 KB."""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ITEM = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1}


def st(tensors, metadata=None, raw_header=None, pad=True):
    """tensors: [(name, dtype, shape, data bytes)] in data order -> safetensors bytes."""
    hdr = '{"__metadata__":' + json.dumps({"format": "pt", **(metadata or {})}, separators=(",", ":"))
    off, data = 0, b""
    for name, dt, shape, payload in tensors:
        ent = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(payload)]}
        hdr += "," + json.dumps(name) + ":" + json.dumps(ent, separators=(",", ":"))
        off += len(payload)
        data += payload
    hdr += "}"
    if raw_header is not None:
        hdr = raw_header
    h = hdr.encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def write(corpus, name, data):
    path = os.path.join(HERE, "corpus", corpus, name)
    with open(path, "wb") as f:
        f.write(data)


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def safetensors_seeds():
    c = "fuzz_safetensors"
    write(c, "empty", st([]))
    write(c, "every_dtype", st([
        ("f32", "F32", [2, 3], f32(1.5, -2.25, 3, 4, 5, 6)),
        ("f64.scalar", "F64", [], struct.pack("<d", 3.14159)),
        ("bf16", "BF16", [2], b"\x80\x3f\x00\xc0"),
        ("f16", "F16", [2], b"\x00\x3c\x00\xc0"),
        ("i64", "I64", [2], struct.pack("<2q", 1 << 40, -5)),
        ("i32", "I32", [1, 2], struct.pack("<2i", -7, 9)),
        ("u8", "U8", [3], b"\x00\xff\x11"),
        ("bool", "BOOL", [2, 2], b"\x01\x00\x01\x01"),
        ("zero", "F32", [2, 0, 3], b""),
    ], {"note": "seed"}))
    write(c, "model_like", st([(f"layers.{i}.{p}", "F32", [2, 2], f32(*range(4 * i, 4 * i + 4)))
                               for i in range(4) for p in ("weight", "bias")]))
    write(c, "unpadded_ws", st([("x", "F32", [2], f32(1, -3))], raw_header=' \n\t{"x":{"dtype":"F32","shape":[2],'
                               '"data_offsets":[0,8]}} \r\n', pad=False))
    write(c, "offsets_reversed", st([("b", "U8", [1], b"\x02"), ("a", "U8", [1], b"\x01")],
                                    raw_header='{"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]},'
                                               '"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'))
    write(c, "unicode_names", st([("w\u00e9ight.\u4e2d", "U8", [1], b"\x07")], {"k\u00e9y": "v\u00e4l"}))
    # edge cases: rejected inputs near the rules
    write(c, "nul_in_header", st([], raw_header='{}\x00garbage', pad=False))
    write(c, "nested", st([], raw_header='{"w":' + "[" * 70 + "]" * 70 + "}", pad=False))
    write(c, "gap", st([("a", "U8", [1], b"\x01")], raw_header='{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}'))
    write(c, "overflow_shape", st([], raw_header='{"w":{"dtype":"U8","shape":[4294967296,4294967296],'
                                                 '"data_offsets":[0,0]}}'))
    write(c, "bad_bool", st([("m", "BOOL", [2], b"\x01\x02")]))
    write(c, "dup_key", st([], raw_header='{"a":{"dtype":"U8","dtype":"U8","shape":[0],"data_offsets":[0,0]}}'))
    write(c, "huge_length", struct.pack("<Q", 1 << 62) + b"{}")
    write(c, "truncated", st([("x", "F32", [4], f32(1, 2, 3, 4))])[:-3])


def json_seeds():
    c = "fuzz_json"
    # even first byte: index files; the harness's folder holds a.safetensors with tensors x, y
    index = {"metadata": {"total_size": 28}, "weight_map": {"x": "a.safetensors", "y": "a.safetensors"}}
    write(c, "index_ok", b"\x00" + json.dumps(index).encode())
    write(c, "index_missing", b"\x00" + json.dumps({"weight_map": {"x": "a.safetensors", "z": "a.safetensors"}}).encode())
    write(c, "index_escape", b"\x00" + json.dumps({"weight_map": {"x": "../a.safetensors"}}).encode())
    write(c, "index_no_map", b"\x00" + b'{"metadata":{}}')
    write(c, "index_nested", b"\x00" + b'{"weight_map":' + b"[" * 80 + b"]" * 80 + b"}")
    # odd first byte: a checkpoint of Linear(2, 3) + AdamW, as save_checkpoint writes it
    w, b = f32(*[0.1 * i for i in range(6)]), f32(0.5, -0.5, 0.25)
    zw, zb = f32(*[0.0] * 6), f32(0, 0, 0)
    tensors = [("model.weight", "F32", [3, 2], w), ("model.bias", "F32", [3], b),
               ("optim.weight.exp_avg", "F32", [3, 2], zw), ("optim.weight.exp_avg_sq", "F32", [3, 2], zw),
               ("optim.bias.exp_avg", "F32", [3], zb), ("optim.bias.exp_avg_sq", "F32", [3], zb)]
    meta = {"hedgehog.format": "hedgehog.checkpoint.v1", "hedgehog.step": "12", "hedgehog.optimizer_steps": "12",
            "rng.data": "7 1024", "config": '{"lr":0.001}'}
    write(c, "ckpt_ok", b"\x01" + st(tensors, meta))
    write(c, "ckpt_bad_step", b"\x01" + st(tensors, {**meta, "hedgehog.step": "twelve"}))
    write(c, "ckpt_bad_rng", b"\x01" + st(tensors, {**meta, "rng.data": "7"}))
    write(c, "ckpt_wrong_shape", b"\x01" + st([("model.weight", "F32", [2, 3], w)] + tensors[1:], meta))
    write(c, "ckpt_no_optim", b"\x01" + st(tensors[:2], meta))
    # 3 mod 4: the same file resumed by train::Trainer (loop state, the run's JSON, best weights)
    state = {"loss_sum": 1.5, "loss_count": 1, "finished": False, "seconds": 0.5, "evaluations": 1,
             "best_step": 1, "early_stopping": [True, 0.0, 0, 0, 1], "divergence": [True, 2.0, 0]}
    run = {**meta, "hedgehog.step": "1", "hedgehog.optimizer_steps": "1", "fz.fingerprint": "{}",
           "trainer.state": json.dumps(state), "fz.run": '{"curve":[1.0]}'}
    best = [("extra.weight", "F32", [3, 2], w), ("extra.bias", "F32", [3], b)]
    write(c, "resume_ok", b"\x03" + st(tensors + best, run))
    write(c, "resume_other_run", b"\x03" + st(tensors + best, {**run, "fz.fingerprint": '{"lr":1}'}))
    write(c, "resume_step_beyond", b"\x03" + st(tensors + best, {**run, "hedgehog.step": "4611686018427387904"}))
    write(c, "resume_bad_state", b"\x03" + st(tensors + best, {**run, "trainer.state": '{"loss_sum":"x"}'}))
    write(c, "resume_no_best", b"\x03" + st(tensors, run))
    # Fixed findings (issue 27): counts of the loop state written as floats (1e300 was cast to
    # int64 with undefined behaviour, 0.5 loaded as 0).
    for name, edit in (("resume_float_count", {"loss_count": 1e300}),
                       ("resume_fractional_count", {"early_stopping": [True, 0.0, 0, 0.5, 1]})):
        write(c, name, b"\x03" + st(tensors + best, {**run, "trainer.state": json.dumps({**state, **edit})}))


def shard(ids, vocab, width=2, count=None, magic=b"HHTOKEN1", version=1):
    """A token shard as data/token_shards.h lays it out."""
    n = len(ids) if count is None else count
    fmt = "<%d%s" % (len(ids), "H" if width == 2 else "I")
    return magic + struct.pack("<IIQQ", version, width, vocab, n) + struct.pack(fmt, *ids)


def token_shards_seeds():
    c = "fuzz_token_shards"
    os.makedirs(os.path.join(HERE, "corpus", c), exist_ok=True)
    meta = {"format": "hedgehog token shards", "version": 1, "tokenizer": "bytes", "vocab_size": 257,
            "eos_id": 256, "bytes_per_id": 2, "shard_tokens": 100000000, "documents": 2,
            "files": ["train_00000.bin"], "tokens": {"train": 12}, "inputs": ["a.txt"]}
    sep = b"\n--shard--\n"
    ids = [104, 101, 108, 108, 111, 256, 119, 111, 114, 108, 100, 256]
    write(c, "ok", json.dumps(meta).encode() + sep + shard(ids, 257))
    write(c, "wide", json.dumps({**meta, "bytes_per_id": 4}).encode() + sep + shard(ids, 257, width=4))
    write(c, "id_too_big", json.dumps(meta).encode() + sep + shard(ids[:-1] + [300], 257))
    write(c, "truncated", json.dumps(meta).encode() + sep + shard(ids, 257)[:-3])
    write(c, "count_lies", json.dumps(meta).encode() + sep + shard(ids, 257, count=1 << 40))
    write(c, "bad_magic", json.dumps(meta).encode() + sep + shard(ids, 257, magic=b"HHTOKEN2"))
    write(c, "eos_out_of_range", json.dumps({**meta, "eos_id": 900}).encode() + sep + shard(ids, 257))
    write(c, "meta_not_object", b"[1,2,3]" + sep + shard(ids, 257))


def flags_seeds():
    c = "fuzz_flags"
    write(c, "ok", b"--epochs\n5\n--lr=0.01\n--quiet\n--name\nrun1\n--maps\nsoftmax,hedgehog,,elu")
    write(c, "bool_value", b"--quiet=no\n--epochs=1000")
    write(c, "help", b"--help")
    write(c, "bad_int", b"--epochs\n12abc")
    write(c, "range", b"--epochs=-1\n--lr\n1e400")
    write(c, "nan", b"--lr=nan\n--epochs= 7")
    write(c, "twice", b"--epochs\n1\n--epochs\n2")
    write(c, "unknown", b"--nonsense\n1")
    write(c, "missing_value", b"--name")
    write(c, "empty_args", b"\n\n--=\n--")


if __name__ == "__main__":
    safetensors_seeds()
    json_seeds()
    flags_seeds()
    token_shards_seeds()
