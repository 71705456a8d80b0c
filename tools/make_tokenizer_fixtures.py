#!/usr/bin/env python3
"""Builds tests/fixtures/tokenizers/: a corpus of real text and reference ids from HF `tokenizers`.

Tooling only (the C++ tests read the committed files). Needs: tokenizers, and the GPT-2 BPE ranks
from the openai-whisper source archive:
    pip download openai-whisper --no-deps --no-binary :all: -d /tmp/whisper
    tar xzf /tmp/whisper/openai_whisper-*.tar.gz -C /tmp/whisper
    python3 tools/make_tokenizer_fixtures.py --tiktoken /tmp/whisper/openai_whisper-*/whisper/assets/gpt2.tiktoken

Output (tests/fixtures/tokenizers/):
  corpus.txt          raw bytes, one case per "\n"-separated line (some lines hold invalid UTF-8,
                      \r, \t, \v, \f, U+2028, ...). Text sources: /usr/share/doc READMEs, man pages,
                      Python's test/cjkencodings, glibc's /usr/share/i18n/locales (native names,
                      days, months in many scripts), emoji sentences and whitespace/invalid-byte
                      variants built from those lines.
  gpt2/               vocab.json + merges.txt: the real GPT-2 vocabulary, recovered from the ranks
  bytebpe/            tokenizer.json: a small byte-level BPE trained here (merges as "a b" strings)
  bert/               vocab.txt and tokenizer.json: a small uncased WordPiece trained here
  llama/              tokenizer.json: a small Llama-2-style SentencePiece BPE (byte fallback,
                      merges as [a, b] pairs) trained here
  llama_metaspace/    the same model with a Metaspace pre-tokenizer instead of the normalizer
                      (the layout of newer transformers conversions)
  qwen2/              tokenizer.json: a small Qwen2-style byte-level BPE trained here (NFC normalizer,
                      Qwen2's Split regex then ByteLevel without its own regex, <|endoftext|>,
                      <|im_start|>, <|im_end|>); `--only qwen2` rebuilds just it from the committed corpus
  expected_<name>.jsonl  per corpus line {"ids": [...], "decoded": "..."}: HF encode with special
                      tokens, decode with skip_special_tokens=True ("decoded" is left out when it
                      equals the line), of the line decoded with
                      bytes.decode("utf-8", "replace") (HF takes Python str; the C++ side replaces
                      invalid bytes the same way).
  bert_batch.json     pair/batch encodings (padding, truncation) from HF for the batch API.

The corpus and the GPT-2 files come out byte for byte the same on every run; the trained bert/ and
llama/ vocabularies do not (HF's trainers break ties between equal counts in hash order), so a
rerun rewrites them and their expected ids together. A regenerated set passed the C++ parity
tests as well (0 mismatches) when this was written.
"""
import argparse
import base64
import glob
import gzip
import json
import os
import re
import sys

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "tokenizers")


# ---------------------------------------------------------------- GPT-2 vocabulary from ranks
def bytes_to_unicode():
    """GPT-2's printable stand-ins for bytes (the same table as the C++ side builds)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def gpt2_from_tiktoken(path, outdir):
    ranks = {}
    with open(path, "rb") as f:
        for line in f:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    b2u = bytes_to_unicode()
    show = lambda bs: "".join(b2u[b] for b in bs)
    vocab = {show(t): r for t, r in ranks.items()}
    vocab["<|endoftext|>"] = len(ranks)
    # A merge's rank is its result's rank; its parts are the split of the token that the BPE
    # itself produces from the merges of lower rank (tiktoken's own procedure).
    merges = []
    for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) == 1:
            continue
        parts = [bytes([b]) for b in tok]
        while True:
            best = None
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < rank and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        assert len(parts) == 2, (tok, parts)
        merges.append(show(parts[0]) + " " + show(parts[1]))
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(outdir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")


def gpt2_hf(outdir):
    bpe = models.BPE.from_file(os.path.join(outdir, "vocab.json"), os.path.join(outdir, "merges.txt"))
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens(["<|endoftext|>"])
    ids = tok.encode("Hello world").ids
    assert ids == [15496, 995], ids
    return tok


# ---------------------------------------------------------------- corpus
def read_text(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        return f.read().decode("utf-8", "replace")


def english_lines(limit, per_file):
    out = []
    for path in sorted(glob.glob("/usr/share/doc/*/README*")):
        if os.path.isdir(path):
            continue
        lines = [l.rstrip("\n") for l in read_text(path).split("\n") if l.strip()]
        out += lines[:per_file]
        if len(out) >= limit:
            break
    return out[:limit]


def man_lines(limit, per_file):
    out = []
    for path in sorted(glob.glob("/usr/share/man/man1/*.gz"))[::7]:
        lines = [l for l in read_text(path).split("\n") if l.strip()]
        out += lines[:per_file]
        if len(out) >= limit:
            break
    return out[:limit]


def cjk_lines():
    import test
    out = []
    for path in sorted(glob.glob(os.path.join(os.path.dirname(test.__file__), "cjkencodings", "*-utf8.txt"))):
        out += [l for l in read_text(path).split("\n") if l.strip()]
    seen, uniq = set(), []
    for l in out:
        if l not in seen:
            seen.add(l)
            uniq.append(l)
    return uniq


def locale_lines():
    out = []
    keys = ("lang_name", "country_name", "day", "abday", "mon", "abmon", "yesstr", "nostr")
    for path in sorted(glob.glob("/usr/share/i18n/locales/*_*")):
        words = []
        for line in read_text(path).split("\n"):
            if line.split(" ")[0].split("\t")[0] in keys:
                for s in re.findall(r'"([^"]*)"', line):
                    words.append(re.sub(r"<U([0-9A-Fa-f]{4,6})>", lambda m: chr(int(m.group(1), 16)), s))
        if words:
            out.append(" ".join(w for w in words if w))
    return out


EMOJI = ["\U0001F600", "\U0001F44D\U0001F3FD", "\U0001F468\u200D\U0001F469\u200D\U0001F467", "\U0001F1EF\U0001F1F5",
         "\u2764\uFE0F", "\U0001F680", "\U0001F9D1\u200D\U0001F4BB", "\u263A", "\U0001F3F3\uFE0F\u200D\U0001F308",
         "\U0001F40D", "\U0001F914", "\u2705", "\U0001F4AF", "1\uFE0F\u20E3"]

ODD_SPACES = ["\t", "  ", "   ", "\u00A0", "\r", "\u2028", "\u3000", "\x0b", "\x0c", "\u2009", "\u200B", "\x1c",
              "\x85", "\r\t ", " \u00A0 ", "\u202F", "\uFEFF"]

INVALID = [b"\xff", b"\xfe\xfe", b"\xc0\xaf", b"\xe2\x82", b"\xed\xa0\x80", b"\xf0\x9f\x98", b"\x80\x81",
           b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xe0\x80\xaf", b"\xc3", b"\xf0\x80"]


def build_corpus():
    eng = english_lines(1300, 40)
    man = man_lines(260, 25)
    cjk = cjk_lines()
    loc = locale_lines()
    lines = [l.encode("utf-8") for l in eng + man + cjk + loc]
    for i in range(120):  # emoji in real sentences
        base = eng[(i * 37) % len(eng)]
        words = base.split(" ")
        k = (i * 7) % (len(words) + 1)
        e = EMOJI[i % len(EMOJI)] * (1 + i % 3)
        glue = "" if i % 4 == 0 else " "
        lines.append((" ".join(words[:k]) + glue + e + glue + " ".join(words[k:])).encode("utf-8"))
    for i in range(260):  # odd whitespace
        base = (eng + cjk + loc)[(i * 53) % len(eng + cjk + loc)]
        sp = ODD_SPACES[i % len(ODD_SPACES)]
        mode = i % 5
        if mode == 0:
            s = base.replace(" ", sp)
        elif mode == 1:
            s = sp + base + sp
        elif mode == 2:
            s = base + " " * (1 + i % 4)
        elif mode == 3:
            s = " " * (1 + i % 3) + base
        else:
            s = sp.join(base.split(" ", 2))
        lines.append(s.encode("utf-8"))
    for i in range(160):  # invalid UTF-8 in real text
        base = (eng + cjk + loc + man)[(i * 71) % len(eng + cjk + loc + man)].encode("utf-8")
        bad = INVALID[i % len(INVALID)]
        k = (i * 13) % (len(base) + 1)
        lines.append(base[:k] + bad + base[k:])
    lines += [b"", b" ", b"  ", b"\t", b"'s 't 're 've 'm 'll 'd 'S 'LL ''s", b"don't I'll we've they're it's",
              b"Hello world<|endoftext|>Next document", b"<|endoftext|>", b"a<|endoftext|><|endoftext|>b",
              b"[CLS] text [SEP] more [MASK] x", b"<s> hello </s> <unk>", b"123 4567 89.5 1,000,000 \xd9\xa3\xd9\xa4",
              b"caf\xc3\xa9 cafe\xcc\x81 \xef\xac\x81 \xe2\x84\xab \xc3\x85ngstr\xc3\xb6m",
              b"x" * 150, ("supercalifragilistic" * 8).encode(), b"\xe4\xb8\xad" * 40]
    para = " ".join(eng[:120]).encode("utf-8")  # one long line (~5 KB): long words for the no-pre-tokenizer BPE
    lines.append(para)
    for l in lines:
        assert b"\n" not in l
    return lines


# ---------------------------------------------------------------- small trained vocabularies
def train_bytebpe(texts, outdir):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tr = trainers.BpeTrainer(vocab_size=1200, special_tokens=["<|endoftext|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, tr)
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, "tokenizer.json")
    tok.save(path)
    # merges as "a b" strings (the older tokenizer.json form; the llama fixture has [a, b] pairs)
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    j["model"]["merges"] = [m if isinstance(m, str) else m[0] + " " + m[1] for m in j["model"]["merges"]]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, indent=1)
    return Tokenizer.from_file(path)


def train_bert(texts, outdir):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                                lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tr = trainers.WordPieceTrainer(vocab_size=3000, special_tokens=special, limit_alphabet=400,
                                   continuing_subword_prefix="##", show_progress=False)
    tok.train_from_iterator(texts, tr)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    os.makedirs(outdir, exist_ok=True)
    tok.save(os.path.join(outdir, "tokenizer.json"))
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    assert [i for _, i in vocab] == list(range(len(vocab)))
    with open(os.path.join(outdir, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t, _ in vocab))
    return tok


def train_llama(texts, outdir):
    # Llama-2's tokenizer.json layout: no pre-tokenizer, normalizer = prepend "▁" + replace " ",
    # BPE with byte_fallback and fuse_unk, <unk>=0 <s>=1 </s>=2, <0x00>..<0xFF> = 3..258.
    t = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    t.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tr = trainers.BpeTrainer(vocab_size=1500, special_tokens=["<unk>", "<s>", "</s>"], limit_alphabet=150,
                             max_token_length=12, show_progress=False)
    t.train_from_iterator(texts, tr)
    j = json.loads(t.to_str())
    trained = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for tok, _ in trained:
        if tok not in vocab:
            vocab[tok] = len(vocab)
    j["model"]["vocab"] = vocab
    j["model"]["merges"] = [m if isinstance(m, list) else m.split(" ") for m in j["model"]["merges"]]
    j["model"]["byte_fallback"] = True
    j["model"]["fuse_unk"] = True
    j["added_tokens"] = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    j["pre_tokenizer"] = None
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    j["post_processor"] = {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, indent=1)
    return Tokenizer.from_file(path)


def llama_metaspace(outdir_src, outdir):
    """The same model in the newer layout transformers' Llama converter writes: no normalizer, a
    Metaspace pre-tokenizer (prepend_scheme "first", split false)."""
    with open(os.path.join(outdir_src, "tokenizer.json"), encoding="utf-8") as f:
        j = json.load(f)
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, indent=1)
    return Tokenizer.from_file(path)


# The pre-tokenizer regex of Qwen2's (and Qwen2.5's, Qwen3's) tokenizer.json.
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")


def train_qwen2(texts, outdir):
    """A byte-level BPE laid out as Qwen2's tokenizer.json: NFC, Split(regex, isolated) + ByteLevel
    (use_regex false), ByteLevel decoder and post-processor, the chat special tokens."""
    from tokenizers import Regex
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tr = trainers.BpeTrainer(vocab_size=800, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, tr)
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, "tokenizer.json")
    tok.save(path)
    tok = Tokenizer.from_file(path)
    # transformers' fast tokenizer over the same file gives the same ids (what a Qwen2 folder loads).
    import transformers
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=path)
    for t in texts:
        assert hf(t)["input_ids"] == tok.encode(t).ids, t
    return tok


def write_expected(name, tok, texts, exact_roundtrip):
    with open(os.path.join(OUT, "expected_%s.jsonl" % name), "w", encoding="utf-8") as f:
        for t in texts:
            ids = tok.encode(t).ids
            dec = tok.decode(ids, skip_special_tokens=True)
            if exact_roundtrip and "<|endoftext|>" not in t and "<s>" not in t and "</s>" not in t and "<unk>" not in t:
                assert dec == t, (name, t, dec)
            row = {"ids": ids}
            if dec != t:  # omitted when the decode gives the line back exactly (the common case)
                row["decoded"] = dec
            f.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")


def bert_batch(tok):
    cases = []
    singles = ["Hello, world!", "A much longer sentence about tokenizers and padding.", "短い", ""]
    pairs = [("How old are you?", "I am six."), ("The first segment is rather long, longer than the second.", "Short."),
             ("x", "A second segment that is much longer than the first one, so it is cut.")]
    for max_len in (None, 8, 12):
        for data, is_pair in ((singles, False), (pairs, True)):
            tok.no_truncation()
            tok.enable_padding(pad_id=tok.token_to_id("[PAD]"), pad_token="[PAD]")
            if max_len is not None:
                tok.enable_truncation(max_length=max_len)
            encs = tok.encode_batch(data)
            cases.append({"pairs": is_pair, "inputs": data, "max_length": max_len,
                          "input_ids": [e.ids for e in encs], "attention_mask": [e.attention_mask for e in encs],
                          "token_type_ids": [e.type_ids for e in encs]})
    tok.no_truncation()
    tok.no_padding()
    with open(os.path.join(OUT, "bert_batch.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiktoken", help="whisper/assets/gpt2.tiktoken from the openai-whisper sdist")
    ap.add_argument("--only", choices=["qwen2"], help="rebuild one trained tokenizer from the committed corpus.txt")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    if args.only == "qwen2":
        with open(os.path.join(OUT, "corpus.txt"), "rb") as f:
            texts = [l.decode("utf-8", "replace") for l in f.read().split(b"\n")]
        write_expected("qwen2", train_qwen2([t for t in texts if t.strip()], os.path.join(OUT, "qwen2")), texts, False)
        return 0
    if not args.tiktoken:
        ap.error("--tiktoken is required (unless --only)")
    lines = build_corpus()
    with open(os.path.join(OUT, "corpus.txt"), "wb") as f:
        f.write(b"\n".join(lines))
    texts = [l.decode("utf-8", "replace") for l in lines]
    train_texts = [t for t in texts if t.strip()]

    gpt2_from_tiktoken(args.tiktoken, os.path.join(OUT, "gpt2"))
    write_expected("gpt2", gpt2_hf(os.path.join(OUT, "gpt2")), texts, True)
    write_expected("bytebpe", train_bytebpe(train_texts, os.path.join(OUT, "bytebpe")), texts, True)
    bert = train_bert(train_texts, os.path.join(OUT, "bert"))
    write_expected("bert", bert, texts, False)
    bert_batch(bert)
    write_expected("llama", train_llama(train_texts, os.path.join(OUT, "llama")), texts, True)
    write_expected("llama_metaspace", llama_metaspace(os.path.join(OUT, "llama"), os.path.join(OUT, "llama_metaspace")),
                   texts, False)
    write_expected("qwen2", train_qwen2(train_texts, os.path.join(OUT, "qwen2")), texts, False)
    print("corpus: %d lines, %d bytes" % (len(lines), sum(len(l) + 1 for l in lines)))


if __name__ == "__main__":
    sys.exit(main())
