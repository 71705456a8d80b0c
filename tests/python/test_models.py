"""hedgehog.load / Tokenizer: the committed tiny fixtures against transformers and
sentence-transformers; a closed model and bad ids raise."""
import numpy as np
import pytest

IDS = [[3, 14, 15, 9, 2, 6, 5, 35]]


@pytest.mark.parametrize("name", ["gpt2-tiny", "llama-tiny", "mistral-tiny", "qwen2-tiny", "qwen3-tiny"])
def test_logits_match_transformers(hh, fixture_dir, name):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = hh.load(fixture_dir(name))
    ours = model.logits(np.array(IDS, dtype=np.int64))
    ref = transformers.AutoModelForCausalLM.from_pretrained(fixture_dir(name)).eval()
    with torch.no_grad():
        theirs = ref(torch.tensor(IDS)).logits.numpy()
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)
    assert np.array_equal(model.logits(IDS[0]), ours)  # a flat list is one row


def test_generate_is_greedy_argmax_and_text_round_trips(hh, fixture_dir):
    model = hh.load(fixture_dir("llama-tiny-tok"))
    ids = model.generate([1, 5, 9], max_new_tokens=6, stop_at_eos=False)
    assert len(ids) == 6
    seq = [1, 5, 9]
    for token in ids:  # each greedy token is the argmax of the logits of everything before it
        assert token == int(np.argmax(model.logits(seq)[0, -1]))
        seq.append(token)
    text = model.generate("The hedgehog", max_new_tokens=4)
    assert isinstance(text, str)
    tok = hh.Tokenizer(fixture_dir("llama-tiny-tok"))
    assert tok.decode(tok.encode("The hedgehog"), skip_special_tokens=True) == "The hedgehog"


def test_tokenizer_matches_transformers(hh, fixture_dir):
    transformers = pytest.importorskip("transformers")
    ours = hh.Tokenizer(fixture_dir("llama-tiny-tok"))
    theirs = transformers.AutoTokenizer.from_pretrained(fixture_dir("llama-tiny-tok"))
    for text in ["The hedgehog is a small mammal.", "naïve café, 12 345!", "  spaces  "]:
        assert ours.encode(text) == theirs(text)["input_ids"]


def test_embed_matches_sentence_transformers(hh, fixture_dir):
    st = pytest.importorskip("sentence_transformers")
    texts = ["a hedgehog in the garden", "linear attention", "the same sentence twice", "x"]
    ours = hh.load(fixture_dir("st-tiny-mean")).embed(texts, batch=3)
    theirs = st.SentenceTransformer(fixture_dir("st-tiny-mean"), device="cpu").encode(texts)
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


def test_a_converted_mixer_and_choice_scores(hh, fixture_dir):
    soft = hh.load(fixture_dir("llama-tiny-tok"))
    hyb = hh.load(fixture_dir("llama-tiny-tok"), mixer="hybrid-hedgehog", window=4)
    assert hyb.logits(IDS).shape == soft.logits(IDS).shape
    assert not np.allclose(hyb.logits(IDS), soft.logits(IDS))  # the attention was swapped
    scores = soft.score_choices("The hedgehog is", [" small", " a mammal"])
    assert len(scores) == 2 and all(s < 0 for s in scores)


def test_weights_formats_run_and_stay_close_to_f32(hh, fixture_dir):
    f32 = hh.load(fixture_dir("gpt2-tiny")).logits(IDS)
    for fmt, tol in (("bf16", 0.02), ("int8", 0.05)):  # as the C++ tests' bounds (test_int8_model.cpp)
        got = hh.load(fixture_dir("gpt2-tiny"), weights=fmt).logits(IDS)
        err = float(np.abs(got - f32).max() / np.abs(f32).max())
        assert 0 < err < tol, (fmt, err)
    assert np.array_equal(hh.load(fixture_dir("gpt2-tiny"), weights="f32").logits(IDS), f32)
    with pytest.raises(hh.Error, match="weights: unknown weight format 'int4'"):
        hh.load(fixture_dir("gpt2-tiny"), weights="int4")


def test_hostile_calls_raise(hh, fixture_dir):
    with pytest.raises(hh.Error, match="config.json"):
        hh.load(fixture_dir("no-such-folder"))
    with pytest.raises(hh.Error, match="unknown"):
        hh.load(fixture_dir("gpt2-tiny"), mixer="nope")
    model = hh.load(fixture_dir("gpt2-tiny"))
    with pytest.raises(hh.Error, match="rows of different lengths"):
        model.logits([[1, 2], [3]])
    with pytest.raises(hh.Error, match="integer array"):
        model.logits(np.ones((1, 3), dtype=np.float32))
    with pytest.raises(hh.Error, match="out of range"):
        model.logits([[10**6]])
    with pytest.raises(hh.Error, match="decoder|encoder"):
        model.embed(["text"])
    model.close()
    with pytest.raises(hh.Error, match="closed"):
        model.logits(IDS)


def test_retrieval_tasks_as_eval_lm_runs_them(hh, fixture_dir):
    model = hh.load(fixture_dir("../eval/llama-tok"))  # 512 positions
    r = model.retrieval("vt", lengths=[300], depths=[0.0, 1.0], trials=1, seed=3)
    assert r["task"] == "vt" and r["count"] == 2 and len(r["cells"]) == 2
    assert 0.0 <= r["accuracy"] <= 1.0
    with pytest.raises(hh.Error, match="too short for the vt prompt"):
        model.retrieval("vt", lengths=[100])
    with pytest.raises(hh.Error, match="unknown retrieval task"):
        model.retrieval("haystack", lengths=[300])


def test_ctrl_c_interrupts_a_long_generation(hh, fixture_dir, tmp_path):
    # A child process generates 200,000 tokens; SIGINT after a second must end it with
    # KeyboardInterrupt (caught there), not a crash and not after the whole generation.
    import json
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time
    folder = tmp_path / "llama-long"  # RoPE has no position table: lift the limit so the run is long
    shutil.copytree(fixture_dir("../eval/llama-tok"), folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["max_position_embeddings"] = 1 << 20
    (folder / "config.json").write_text(json.dumps(cfg))
    code = (
        "import sys, hedgehog as hh\n"
        f"m = hh.load({str(folder)!r})\n"
        "print('ready', flush=True)\n"
        "try:\n"
        "    m.generate([1, 5, 9], max_new_tokens=200000, stop_at_eos=False)\n"
        "    print('finished')\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted')\n"
        "print(len(m.generate([1, 5, 9], max_new_tokens=3, stop_at_eos=False)))\n")
    env = dict(os.environ)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(1.0)
    t0 = time.time()
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=60)
    assert out.split() == ["interrupted", "3"], out
    assert time.time() - t0 < 10


def test_text_without_a_tokenizer_says_why(hh, fixture_dir):
    model = hh.load(fixture_dir("gpt2-tiny"))  # weights only: ids work, text names the cause
    assert len(model.generate([1, 2], max_new_tokens=2, stop_at_eos=False)) == 2
    with pytest.raises(hh.Error, match="no tokenizer .*pass token ids"):
        model.generate("text")
