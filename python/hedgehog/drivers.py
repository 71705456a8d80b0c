"""hedgehog.convert and hedgehog.evaluate: the apps' drivers from Python.

Each call runs the same driver as the command-line app (convert_bert, convert_vit, convert_gpt2,
convert_llama; eval_lm) with the flags its keyword arguments name, so the options, presets, run
folder, report and progress lines are the app's (see ``build/<app> --help``)::

    import hedgehog as hh
    r = hh.convert("gpt2-folder", data="wikitext", preset="quick", feature_map="hedgehog",
                   out="out/gpt2", save=True)            # convert_gpt2 --model ... --save
    r["rows"][0]["metrics"]                               # out/gpt2/results.json, as a dict
    hh.evaluate("out/gpt2/hedgehog/model", task="passkey", lengths=[512, 1024], out="out/pk")

A keyword ``feature_map="hedgehog"`` is the flag ``--feature-map=hedgehog``; True/False give
``--flag=true/false``; a list or tuple is a comma list; None leaves the flag out. Errors are the
app's ("error: ..." there) raised as hedgehog.Error. Ctrl-C stops a conversion at its next step
with its checkpoint written (``resume=True`` continues it) and raises KeyboardInterrupt.
"""
import json
import os
import tempfile

from ._hedgehog import Error, _run_driver

# The conversion app of each model family an HF folder's config.json names (model_type).
_CONVERT_APPS = {
    "bert": "convert_bert",
    "vit": "convert_vit",
    "gpt2": "convert_gpt2",
    "llama": "convert_llama",
    "mistral": "convert_llama",
    "qwen2": "convert_llama",
    "qwen3": "convert_llama",
}


def _flags(options):
    args = []
    for key, value in options.items():
        if value is None:
            continue
        name = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        args.append(f"{name}={os.fspath(value) if isinstance(value, os.PathLike) else value}")
    return args


def _convert_app(folder):
    path = os.path.join(os.fspath(folder), "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            model_type = json.load(f).get("model_type")
    except (OSError, ValueError) as e:
        raise Error(f"convert: {path}: {e}") from None
    app = _CONVERT_APPS.get(model_type)
    if app is None:
        raise Error(f"convert: {path}: model_type {model_type!r} has no conversion app "
                    f"(known: {', '.join(sorted(_CONVERT_APPS))}); name one with app=...")
    return app


def _results(out):
    with open(os.path.join(out, "results.json"), encoding="utf-8") as f:
        return json.load(f)


def convert(teacher, task=None, data=None, *, app=None, out=None, **options):
    """Converts the softmax model in the HF folder ``teacher`` with its family's convert app.

    ``task``: convert_bert's task (a GLUE name, custom or embed); ``data``: the app's --data;
    ``app``: the driver when config.json's model_type does not say (convert_bert, convert_vit,
    convert_gpt2, convert_llama); ``out``: the run folder (default: the app's, out/<app>). Other
    keywords are the app's flags. Returns the run's results.json as a dict.
    """
    if app is not None and app not in set(_CONVERT_APPS.values()):
        raise Error(f"convert: no such app {app!r} (known: {', '.join(sorted(set(_CONVERT_APPS.values())))})")
    app = app or _convert_app(teacher)
    out = os.fspath(out) if out is not None else os.path.join("out", app)
    args = [f"--model={os.fspath(teacher)}", f"--out={out}"]
    if task is not None:
        args.append(f"--task={task}")
    if data is not None:
        args.append(f"--data={os.fspath(data)}")
    if _run_driver(app, args + _flags(options)) != 0:
        raise Error(f"{app} failed")
    return _results(out)


def evaluate(model, task, data=None, *, out=None, **options):
    """Evaluates the HF or converted causal LM in folder ``model`` as eval_lm does.

    ``task``: choice, passkey, needle, niah_multikey, niah_multivalue, vt or perplexity; ``data``:
    its --data; ``out``: a folder to keep results.json, the table and heat map or scores, and
    index.html (default: none kept). Other keywords are eval_lm's flags (lengths=[512, 1024],
    depths=..., trials=..., mixer=..., window=...). Returns results.json as a dict.
    """
    with tempfile.TemporaryDirectory(prefix="hedgehog-eval-") as scratch:
        folder = os.fspath(out) if out is not None else os.path.join(scratch, "out")
        args = [f"--model={os.fspath(model)}", f"--task={task}", f"--out={folder}"]
        if data is not None:
            args.append(f"--data={os.fspath(data)}")
        if _run_driver("eval_lm", args + _flags(options)) != 0:
            raise Error("eval_lm failed")
        return _results(folder)

