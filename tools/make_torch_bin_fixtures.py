#!/usr/bin/env python3
"""Writes the PyTorch checkpoint (.bin) fixtures under tests/fixtures/torch_bin/ (committed; rerun
only to change them): small state dicts saved with torch.save (zip format and the legacy format),
each with a safetensors twin holding the same tensors (contiguous copies), a sharded pair with
pytorch_model.bin.index.json, the bert-tiny and gpt2-tiny HF fixtures' weights as pytorch_model.bin
(gpt2 with lm_head sharing wte's storage, in the legacy format), and hostile
files the reader must refuse (a GLOBAL naming os.system, a truncated zip, a storage whose size lies,
deep nesting, a compressed entry, a view past its storage, an unknown opcode).
Usage: python3 tools/make_torch_bin_fixtures.py"""
import io
import json
import os
import struct
import zipfile

import torch
from safetensors.torch import load_file, save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "torch_bin")
HOSTILE = os.path.join(OUT, "hostile")


def twin(tensors, path):
    """The same tensors as a safetensors file (clones: safetensors refuses shared storage)."""
    save_file({k: v.detach().clone().contiguous() for k, v in tensors.items()}, path)


def save_pair(name, tensors, legacy=False):
    torch.save(tensors, os.path.join(OUT, name + ".bin"), _use_new_zipfile_serialization=not legacy)
    twin(tensors, os.path.join(OUT, name + ".safetensors"))


def valid_fixtures():
    g = torch.Generator().manual_seed(0)
    # Every dtype the reader maps, a scalar and an empty tensor.
    dtypes = {
        "f32": torch.randn(3, 4, generator=g),
        "f16": torch.randn(2, 5, generator=g).half(),
        "bf16": torch.randn(4, 3, generator=g).bfloat16(),
        "f64": torch.randn(2, 2, generator=g).double(),
        "i64": torch.tensor([1 << 40, -5, 7]),
        "i32": torch.tensor([[-7, 9], [3, 0]], dtype=torch.int32),
        "u8": torch.tensor([0, 255, 17], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(2, 0, 3),
    }
    save_pair("dtypes", dtypes)

    # Shared storages and views: a tied pair (the same tensor twice), a slice starting at an
    # offset, a transposed view, a strided column slice, a row of a bf16 matrix, a f16 transpose.
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6) / 8
    half = torch.randn(3, 4, generator=g).half()
    bf = torch.randn(5, 4, generator=g).bfloat16()
    views = {
        "base": base,
        "tied": base,
        "rows": base[1:3],
        "transposed": base.t(),
        "columns": base[:, 1:5:2],
        "half_t": half.t(),
        "bf_row": bf[2],
        "bf_slice": bf[1:4, 1:],
    }
    assert not views["transposed"].is_contiguous() and views["rows"].storage_offset() == 6
    save_pair("views", views)
    save_pair("views_legacy", views, legacy=True)
    save_pair("dtypes_legacy", dtypes, legacy=True)

    # A module's state_dict: an OrderedDict with _metadata (pickled through BUILD).
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3), torch.nn.Linear(3, 2))
    sd = net.state_dict()
    torch.save(sd, os.path.join(OUT, "module.bin"))
    twin(sd, os.path.join(OUT, "module.safetensors"))
    # The same, saved as Parameters (torch._utils._rebuild_parameter) and with pickle protocol 4.
    params = dict(net.named_parameters())
    torch.save(params, os.path.join(OUT, "parameters.bin"))
    twin(params, os.path.join(OUT, "parameters.safetensors"))
    torch.save(sd, os.path.join(OUT, "module_proto4.bin"), pickle_protocol=4)

    # A sharded checkpoint as transformers writes it (plain dicts, an index with a weight_map).
    shard_dir = os.path.join(OUT, "sharded")
    os.makedirs(shard_dir, exist_ok=True)
    shards = [{"a.weight": torch.randn(3, 3, generator=g), "a.bias": torch.randn(3, generator=g)},
              {"b.weight": torch.randn(2, 3, generator=g).half(), "b.bias": torch.zeros(2)}]
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        fname = "pytorch_model-%05d-of-%05d.bin" % (i + 1, len(shards))
        torch.save(shard, os.path.join(shard_dir, fname))
        for k, v in shard.items():
            weight_map[k] = fname
            total += v.numel() * v.element_size()
    with open(os.path.join(shard_dir, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    twin({k: v for s in shards for k, v in s.items()}, os.path.join(OUT, "sharded.safetensors"))

    # bert-tiny's weights as pytorch_model.bin (the test puts it next to a copy of config.json).
    bert = load_file(os.path.join(ROOT, "tests", "fixtures", "hf", "bert-tiny", "model.safetensors"))
    os.makedirs(os.path.join(OUT, "bert-tiny"), exist_ok=True)
    torch.save(bert, os.path.join(OUT, "bert-tiny", "pytorch_model.bin"))
    # gpt2-tiny as transformers' model.state_dict() (lm_head.weight shares wte's storage), in the
    # legacy format, as pytorch_model.bin files of the GPT-2 era were.
    from transformers import AutoModelForCausalLM
    gpt2 = AutoModelForCausalLM.from_pretrained(os.path.join(ROOT, "tests", "fixtures", "hf", "gpt2-tiny"))
    sd = gpt2.state_dict()
    assert sd["lm_head.weight"].data_ptr() == sd["transformer.wte.weight"].data_ptr()
    os.makedirs(os.path.join(OUT, "gpt2-tiny"), exist_ok=True)
    torch.save(sd, os.path.join(OUT, "gpt2-tiny", "pytorch_model.bin"), _use_new_zipfile_serialization=False)


def zip_with(pkl, records=None, compress=False, prefix="archive"):
    """A torch-like zip archive with our own data.pkl bytes (zipfile, STORED unless compress)."""
    buf = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    entries = [("data.pkl", pkl), ("byteorder", b"little")]
    entries += [("data/" + key, data) for key, data in (records or {}).items()]
    entries.append(("version", b"3\n"))
    with zipfile.ZipFile(buf, "w", compression=method) as z:
        for name, data in entries:  # a fixed date: the same bytes on every run
            z.writestr(zipfile.ZipInfo(prefix + "/" + name, date_time=(2020, 1, 1, 0, 0, 0)), data,
                       compress_type=method)
    return buf.getvalue()


def uni(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def tensor_pickle(numel, size, stride, offset=0, storage="FloatStorage", key="0"):
    """{'w': _rebuild_tensor_v2(storage(key, numel), offset, size, stride, False, OrderedDict())}."""
    def tup(xs):
        return b"(" + b"".join(b"J" + struct.pack("<i", x) for x in xs) + b"t"
    pid = b"(" + uni("storage") + b"ctorch\n" + storage.encode() + b"\n" + uni(key) + uni("cpu") + \
        b"J" + struct.pack("<i", numel) + b"tQ"
    return (b"\x80\x02}(" + uni("w") + b"ctorch._utils\n_rebuild_tensor_v2\n(" + pid +
            b"J" + struct.pack("<i", offset) + tup(size) + tup(stride) +
            b"\x89ccollections\nOrderedDict\n)RtRu.")


def hostile_fixtures():
    os.makedirs(HOSTILE, exist_ok=True)

    def write(name, data):
        with open(os.path.join(HOSTILE, name), "wb") as f:
            f.write(data)

    # GLOBAL os system, called with REDUCE (what a malicious checkpoint does).
    write("os_system.bin", zip_with(b"\x80\x02cos\nsystem\n" + uni("echo pwned") + b"\x85R."))
    write("builtins_eval.bin", zip_with(b"\x80\x02cbuiltins\neval\n" + uni("1+1") + b"\x85R."))
    # The same as a legacy (non-zip) file: the magic number's pickle, then the payload.
    write("legacy_os_system.bin", b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19." + b"\x80\x02M\xe9\x03." +
          b"\x80\x02}." + b"\x80\x02cposix\nsystem\n" + uni("echo pwned") + b"\x85R.")
    # A GLOBAL hidden behind STACK_GLOBAL (protocol 4).
    write("stack_global.bin", zip_with(b"\x80\x04\x8c\x02os\x8c\x06system\x93" + uni("id") + b"\x85R."))
    # A real checkpoint cut in half: no end of central directory.
    good = open(os.path.join(OUT, "dtypes.bin"), "rb").read()
    write("truncated.bin", good[: len(good) // 2])
    write("truncated_tail.bin", good[:-10])
    # The storage claims 1000 floats; its record holds 4.
    write("size_lies.bin", zip_with(tensor_pickle(1000, [1000], [1]), {"0": struct.pack("<4f", 1, 2, 3, 4)}))
    # A tensor whose size and stride reach past its (honest) storage.
    write("view_past_storage.bin", zip_with(tensor_pickle(4, [2, 3], [3, 1]), {"0": struct.pack("<4f", 1, 2, 3, 4)}))
    # An offset past the storage's end.
    write("offset_past_storage.bin", zip_with(tensor_pickle(4, [2], [1], offset=3), {"0": struct.pack("<4f", 1, 2, 3, 4)}))
    # A size product that overflows int64.
    write("size_overflow.bin", zip_with(tensor_pickle(4, [1 << 30, 1 << 30, 1 << 30], [0, 0, 0]),
                                        {"0": struct.pack("<4f", 1, 2, 3, 4)}))
    # 2,000 nested lists (2,000 EMPTY_LISTs, each APPENDed into the one below), 2,000 MARKs.
    write("deep_lists.bin", zip_with(b"\x80\x02" + b"]" * 2000 + b"a" * 1999 + b"."))
    write("deep_marks.bin", zip_with(b"\x80\x02" + b"(" * 2000 + b")."))
    # A compressed data.pkl (torch writes every entry STORED).
    write("compressed.bin", zip_with(b"\x80\x02}." + b" " * 200, compress=True))
    # An opcode outside the accepted set (INST, which imports and calls).
    write("unknown_opcode.bin", zip_with(b"\x80\x02ios\nsystem\n."))
    # A pickle that is not a dict of tensors, and one with no STOP.
    write("not_a_dict.bin", zip_with(b"\x80\x02]."))
    write("no_stop.bin", zip_with(b"\x80\x02}"))
    # A BINGET of a memo slot never written, and a string longer than the pickle.
    write("bad_memo.bin", zip_with(b"\x80\x02h\x07."))
    write("long_string.bin", zip_with(b"\x80\x02X\xff\xff\xff\x7fabc."))


def fuzz_seeds():
    """The seed corpus of fuzz/fuzz_torch_bin.cpp: the small fixtures, hostile files, and the raw
    data.pkl of two of them (the harness also wraps each input as data.pkl in a zip of its own)."""
    corpus = os.path.join(ROOT, "fuzz", "corpus", "fuzz_torch_bin")
    os.makedirs(corpus, exist_ok=True)
    for f in os.listdir(corpus):
        os.remove(os.path.join(corpus, f))
    picks = [os.path.join(OUT, n + ".bin") for n in ("dtypes", "views", "views_legacy", "module_proto4", "parameters")]
    picks.append(os.path.join(OUT, "sharded", "pytorch_model-00001-of-00002.bin"))
    picks += [os.path.join(HOSTILE, n) for n in sorted(os.listdir(HOSTILE))]
    for src in picks:
        with open(src, "rb") as f:
            data = f.read()
        with open(os.path.join(corpus, os.path.basename(src)), "wb") as f:
            f.write(data)
    for n in ("views", "module_proto4"):
        z = zipfile.ZipFile(os.path.join(OUT, n + ".bin"))
        pkl = [x for x in z.namelist() if x.endswith("/data.pkl")][0]
        with open(os.path.join(corpus, n + ".data.pkl"), "wb") as f:
            f.write(z.read(pkl))
    # data.pkl bodies that use the harness's records "0".."3" (64 bytes each).
    with open(os.path.join(corpus, "records.data.pkl"), "wb") as f:
        f.write(tensor_pickle(16, [4, 4], [1, 4]))
    with open(os.path.join(corpus, "records_bool.data.pkl"), "wb") as f:
        f.write(tensor_pickle(64, [8, 2], [8, 3], offset=1, storage="BoolStorage", key="2"))


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    valid_fixtures()
    hostile_fixtures()
    fuzz_seeds()
    print("wrote", OUT)
