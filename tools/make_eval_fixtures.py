#!/usr/bin/env python3
"""Fixtures of the LM evaluations (experiments/eval, apps/eval_lm): two tiny random decoders over the
tokenizer fixtures, with more positions than tests/fixtures/hf's so that passkey prompts fit, and
the log-likelihoods lm-evaluation-harness would compute for a small multiple-choice file.

  tests/fixtures/eval/llama-tok   LlamaForCausalLM over tests/fixtures/tokenizers/llama (<s> added)
  tests/fixtures/eval/gpt2-tok    GPT2LMHeadModel over tests/fixtures/tokenizers/bytebpe (no BOS)
  tests/fixtures/eval/choice.jsonl         the examples ({context, choices, gold, id})
  tests/fixtures/eval/choice_expected.json per model: every choice's context and continuation
                                           tokens, its summed log-probability and is_greedy, and
                                           acc / acc_norm / acc_bytes
  tests/fixtures/eval/text.txt             a short text, and in perplexity_expected.json its
                                           perplexity per model on strided windows (below)

The scoring follows lm-evaluation-harness (EleutherAI, lm_eval/api/model.py loglikelihood and
_encode_pair, lm_eval/models/huggingface.py tok_encode and _loglikelihood_tokens, lm_eval/api/task.py
process_results for multiple_choice), re-stated here because lm_eval is not installed:
  - an empty context is [prefix token] (BOS, else EOS) + tok_encode(continuation, no specials),
    unless the continuation's first token is that token;
  - otherwise trailing whitespace of the context (str.rstrip) moves to the continuation, then
    whole = tok_encode(context + continuation), ctx = tok_encode(context) (the tokenizer's default
    specials: Llama's <s>, none for GPT-2), continuation tokens = whole[len(ctx):];
  - input = (ctx + cont)[-(max_length + 1):][:-1] (max_length = the model's positions), the
    log-softmax of its logits, the continuation tokens' log-probabilities summed; is_greedy when
    every continuation token is the argmax;
  - acc = argmax(ll) == gold, acc_norm = argmax(ll / len(choice)) (characters, Python's len),
    acc_bytes = argmax(ll / len(choice.encode("utf-8"))); numpy's argmax takes the first maximum.
The choices here are the continuations exactly as scored (the target delimiter, a space, included):
eval_lm's default --target-delimiter "" takes them as given.

Perplexity (eval_lm --task perplexity, experiments/lm's evaluate_lm): the text's ids (the tokenizer's
specials included) in windows of `context` + 1 tokens every `stride` tokens; the model reads the
first `context` of a window and predicts the rest; the first window scores every prediction, each
later one only those of tokens no earlier window scored (stride 0: non-overlapping blocks, the
incomplete tail dropped). ppl = exp(mean negative log-likelihood of the scored tokens).

Run from the repository root: python3 tools/make_eval_fixtures.py
"""
import json
import os
import shutil

import numpy as np
import torch
import transformers as tf

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "eval")
TOK = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
POSITIONS = 512

LONG = "The hedgehog sleeps under the hedge all winter. " * 70  # > 512 tokens: left truncation

EXAMPLES = [
    {"id": "capital", "context": "Question: What is the capital of France?\nAnswer:",
     "choices": [" Paris", " London", " the city of Lyon", " Berlin"], "gold": 0},
    {"id": "unicode", "context": "Les hérissons dorment l'hiver. Ils se réveillent au",
     "choices": [" printemps", " été", " mois de mars, quand il fait plus doux"], "gold": 0},
    {"id": "cjk-emoji", "context": "The word for hedgehog in Japanese is",
     "choices": [" ハリネズミ", " 🦔", " hari"], "gold": 0},
    {"id": "trailing-space", "context": "A hedgehog eats ",
     "choices": ["insects", "rocks and stones", "snails"], "gold": 0},
    {"id": "empty-context", "context": "",
     "choices": ["The hedgehog is small.", "The hedgehog is a large and noisy bird."], "gold": 0},
    {"id": "long", "context": LONG + "Where does the hedgehog sleep? Under the",
     "choices": [" hedge", " sea", " bed of the river"], "gold": 0},
    {"context": "2 + 2 =", "choices": [" 4", " 5", " four", " twenty-two"], "gold": 0},
]


def perturb(model, scale=0.05, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return model


def llama():
    tok = tf.PreTrainedTokenizerFast(tokenizer_file=os.path.join(TOK, "llama", "tokenizer.json"),
                                     bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    torch.manual_seed(11)
    cfg = tf.LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=POSITIONS,
                         rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True, initializer_range=0.3,
                         hidden_act="silu", attn_implementation="eager", bos_token_id=1, eos_token_id=2)
    return perturb(tf.LlamaForCausalLM(cfg).eval(), seed=11), tok, os.path.join(TOK, "llama", "tokenizer.json")


def gpt2():
    tok = tf.PreTrainedTokenizerFast(tokenizer_file=os.path.join(TOK, "bytebpe", "tokenizer.json"),
                                     eos_token="<|endoftext|>")
    torch.manual_seed(12)
    cfg = tf.GPT2Config(vocab_size=len(tok), n_positions=POSITIONS, n_embd=16, n_layer=2, n_head=2,
                        initializer_range=0.3, bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    return perturb(tf.GPT2LMHeadModel(cfg).eval(), seed=12), tok, os.path.join(TOK, "bytebpe", "tokenizer.json")


def encode_pair(tok, context, continuation):
    if context == "":
        prefix = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        cont = tok.encode(continuation, add_special_tokens=False)
        return ([prefix], cont) if prefix != cont[0] else (cont[:1], cont[1:])
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces > 0:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = tok.encode(context + continuation)
    ctx = tok.encode(context)
    return ctx, whole[len(ctx):]


def loglikelihood(model, ctx, cont, max_length):
    assert 0 < len(cont) <= max_length
    inp = torch.tensor([(ctx + cont)[-(max_length + 1):][:-1]], dtype=torch.long)
    with torch.no_grad():
        logp = torch.log_softmax(model(inp).logits.double(), dim=-1)[0]  # (L,V)
    logp = logp[-len(cont):]
    target = torch.tensor(cont, dtype=torch.long)
    greedy = bool((logp.argmax(-1) == target).all())
    return float(logp.gather(1, target[:, None]).sum()), greedy


def score(model, tok):
    rows = []
    acc = acc_norm = acc_bytes = 0.0
    for ex in EXAMPLES:
        lls, greedy, ctxs, conts = [], [], [], []
        for choice in ex["choices"]:
            ctx, cont = encode_pair(tok, ex["context"], choice)
            ll, g = loglikelihood(model, ctx, cont, POSITIONS)
            lls.append(ll)
            greedy.append(g)
            ctxs.append(len(ctx))
            conts.append(cont)
        lls_np = np.array(lls)
        chars = np.array([float(len(c)) for c in ex["choices"]])
        nbytes = np.array([float(len(c.encode("utf-8"))) for c in ex["choices"]])
        pred, pred_norm, pred_bytes = int(np.argmax(lls_np)), int(np.argmax(lls_np / chars)), int(
            np.argmax(lls_np / nbytes))
        acc += pred == ex["gold"]
        acc_norm += pred_norm == ex["gold"]
        acc_bytes += pred_bytes == ex["gold"]
        rows.append({"loglikelihoods": lls, "is_greedy": greedy, "context_tokens": ctxs,
                     "continuation_ids": conts, "pred": pred, "pred_norm": pred_norm, "pred_bytes": pred_bytes})
    n = len(EXAMPLES)
    return {"examples": rows, "acc": acc / n, "acc_norm": acc_norm / n, "acc_bytes": acc_bytes / n}


TEXT = ("The hedgehog is a small mammal with a coat of spines. It sleeps through the winter under a hedge or a "
        "pile of leaves, and wakes in spring, hungry. Les hérissons mangent des insectes, des vers et des limaces. "
        "At night it walks a long way, snuffling and grunting, looking for beetles and snails. In the morning it "
        "curls up in its nest again.\n\nGardeners like hedgehogs because they eat the slugs that eat the lettuce.\n")


def perplexity(model, ids, context, stride):
    n = len(ids)
    nll, count, scored_to = 0.0, 0, 0  # scored_to: the last token index predicted so far
    begin = 0
    while True:
        if stride == 0 and begin + context > n - 1:
            break  # blocks: the incomplete tail is dropped
        end = min(begin + context, n - 1)  # predicts ids[begin + 1 .. end]
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([ids[begin:end]])).logits.double(), dim=-1)[0]
        for j in range(end - begin):
            t = begin + 1 + j
            if t > scored_to:
                nll -= float(logp[j, ids[t]])
                count += 1
        scored_to = end
        if stride > 0 and end == n - 1:
            break
        begin += stride if stride > 0 else context
    return {"context": context, "stride": stride, "tokens": count, "loss": nll / count,
            "ppl": float(np.exp(nll / count))}


def main():
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "choice.jsonl"), "w", encoding="utf-8") as f:
        for ex in EXAMPLES:
            f.write(json.dumps(ex, ensure_ascii=False) + "\n")
    expected = {"transformers": tf.__version__, "torch": torch.__version__}
    ppl = dict(expected)
    with open(os.path.join(OUT, "text.txt"), "w", encoding="utf-8") as f:
        f.write(TEXT)
    for name, make in (("llama-tok", llama), ("gpt2-tok", gpt2)):
        model, tok, tok_file = make()
        path = os.path.join(OUT, name)
        shutil.rmtree(path, ignore_errors=True)
        model.save_pretrained(path, safe_serialization=True)
        shutil.copy(tok_file, path)
        expected[name] = score(model, tok)
        ids = tok.encode(TEXT)
        ppl[name] = {"ids": len(ids), "windows": [perplexity(model, ids, c, st) for c, st in ((64, 32), (64, 0), (48, 7))]}
        print(name, {k: v for k, v in expected[name].items() if k != "examples"})
    with open(os.path.join(OUT, "choice_expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, indent=1, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(OUT, "perplexity_expected.json"), "w", encoding="utf-8") as f:
        json.dump(ppl, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
