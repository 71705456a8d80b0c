"""hedgehog.convert / hedgehog.evaluate: the apps' drivers from Python. A tiny conversion gives the
app's results bit for bit and a folder that loads; evaluate gives eval_lm's scores; bad flags raise
the app's error; Ctrl-C stops a conversion with its checkpoint written, and resume continues it."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import ROOT

WIKI = os.path.join(ROOT, "tests", "fixtures", "wikitext")
EVAL = os.path.join(ROOT, "tests", "fixtures", "eval")
# convert_gpt2's tiny run (cmake/convert_lm_tests.cmake: GPT2_TINY), as keywords.
TINY = dict(data=WIKI, context=32, stride=16, batch=8, max_train_tokens=1500, feature_map="hedgehog",
            distill_epochs=1, finetune_epochs=1, lr=1e-3, quiet=True, threads=1)


def _app(hh, name):
    """The app binary beside the module in a build tree (build/python/hedgehog -> build/<name>)."""
    path = os.path.join(os.path.dirname(hh.__file__), "..", "..", name)
    return path if os.path.exists(path) else None


def test_convert_is_the_app(hh, tmp_path):
    hh.set_num_threads(2)
    r = hh.convert(os.path.join(WIKI, "gpt2-bytes"), out=tmp_path / "py", save=True, **TINY)
    assert hh.get_num_threads() == 2  # threads=1 held for the run only
    (row,) = r["rows"]
    assert row["label"] == "Hedgehog" and row["status"] == "ok"
    assert row["distill"]["steps"] > 0 and row["finetune"]["steps"] > 0
    assert (tmp_path / "py" / "report.html").exists()
    student = hh.load(tmp_path / "py" / "hedgehog" / "model")  # the converted folder loads back
    assert student.logits([3, 14, 15, 9]).shape[1] == 4
    app = _app(hh, "convert_gpt2")
    if app is None:
        pytest.skip("no convert_gpt2 binary beside the module (an installed package)")
    flags = [f"--{k.replace('_', '-')}={str(v).lower() if isinstance(v, bool) else v}" for k, v in TINY.items()]
    subprocess.run([app, f"--model={os.path.join(WIKI, 'gpt2-bytes')}", f"--out={tmp_path / 'cli'}", *flags],
                   check=True, capture_output=True)
    cli = json.loads((tmp_path / "cli" / "results.json").read_text())
    for key in ("test", "val_distilled", "val_finetuned", "fidelity"):  # same driver, same numbers
        assert row[key] == cli["rows"][0][key], key
    assert r["teacher"] == cli["teacher"]


def test_convert_picks_the_family_app(hh, tmp_path):
    # bert-tiny-tok's config.json says model_type bert: convert_bert, with its GLUE task.
    r = hh.convert(os.path.join(ROOT, "tests", "fixtures", "hf", "bert-tiny-tok"), task="cola",
                   data=os.path.join(ROOT, "tests", "fixtures", "glue", "CoLA"), out=tmp_path / "bert",
                   preset="tiny", feature_map=["hedgehog"], max_length=32, lr=0.002, quiet=True)
    assert [row["label"] for row in r["rows"]] == ["Hedgehog"] and r["rows"][0]["status"] == "ok"
    assert "GLUE CoLA" in r["title"]


def test_evaluate_is_eval_lm(hh, tmp_path):
    r = hh.evaluate(os.path.join(EVAL, "gpt2-tok"), task="choice", data=os.path.join(EVAL, "choice.jsonl"))
    assert (r["correct"], r["correct_norm"], r["correct_bytes"], r["count"]) == (4, 1, 1, 7)  # choice_expected.json
    r = hh.evaluate(os.path.join(EVAL, "llama-tok"), task="passkey", lengths=[128], depths=[0, 1], trials=1,
                    out=tmp_path / "pk")
    assert (tmp_path / "pk" / "heatmap.svg").exists() and r["task"] == "passkey"


def test_bad_options_raise_the_apps_error(hh, tmp_path):
    with pytest.raises(hh.Error, match="unknown flag --no-such-flag"):
        hh.convert(os.path.join(WIKI, "gpt2-bytes"), out=tmp_path / "x", no_such_flag=1, **TINY)
    with pytest.raises(hh.Error, match="--context"):
        hh.convert(os.path.join(WIKI, "gpt2-bytes"), out=tmp_path / "x", **{**TINY, "context": -3})
    with pytest.raises(hh.Error, match="config.json"):
        hh.convert(tmp_path / "nowhere", data=WIKI)
    with pytest.raises(hh.Error, match="--task"):
        hh.evaluate(os.path.join(EVAL, "gpt2-tok"), task="no-such-task")
    with pytest.raises(hh.Error, match="set_num_threads"):
        hh.set_num_threads(0)
    assert not np.isnan(hh.load(os.path.join(EVAL, "gpt2-tok")).logits([1, 2])).any()  # still usable


def _interrupted_run(args, folder, after):
    """A child converts with distill_epochs large; SIGINT `after` seconds into it. Returns its
    stdout and the distillation epochs its progress lines showed."""
    code = (
        "import sys, hedgehog as hh\n"
        f"kw = {dict(TINY, distill_epochs=5000, distill_patience=10000, out=str(folder))!r}\n"
        "print('ready', flush=True)\n"
        "try:\n"
        f"    hh.convert({os.path.join(WIKI, 'gpt2-bytes')!r}, **kw{args})\n"
        "    print('finished')\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted')\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(after)
    t0 = time.time()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert time.time() - t0 < 10  # stopped at the next step, not after 5000 epochs
    epochs = [int(line.split()[2].split("/")[0]) for line in err.splitlines() if line.startswith("distill epoch ")]
    return out, epochs, err


def test_ctrl_c_stops_a_conversion_and_resume_continues(hh, tmp_path):
    folder = tmp_path / "run"
    out, first, err = _interrupted_run("", folder, 2.0)
    assert out.split() == ["interrupted"], (out, err[-2000:])
    assert first, err[-2000:]
    assert (folder / "hedgehog" / "checkpoint.safetensors").exists()  # written at the step it stopped
    assert not (folder / "results.json").exists()  # no report for a stopped run
    out, again, err = _interrupted_run(", resume=True", folder, 1.0)
    assert out.split() == ["interrupted"], (out, err[-2000:])
    assert again and again[0] >= max(first), (first[-3:], again[:3])  # continued, not started afresh


def test_an_unknown_driver_or_app_raises(hh):
    from hedgehog import _hedgehog
    with pytest.raises(hh.Error, match="no driver 'nope'.*convert_bert"):
        _hedgehog._run_driver("nope", [])
    with pytest.raises(hh.Error, match="no such app"):
        hh.convert(os.path.join(WIKI, "gpt2-bytes"), app="convert_nope", data=WIKI)
