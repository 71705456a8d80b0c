#!/usr/bin/env python3
"""hh_serve with the real `openai` Python client (CTest hh_serve_openai_client).

Starts hh_serve on a free port over the tiny Llama fixture (and a copy of it with a chat template),
then through openai.OpenAI(base_url=...): completions, whole and streamed, must give the text
`hf_run` gives for the same prompt, temperature and seed; chat completions, whole and streamed, the
same text as each other; models.list names the folder; errors arrive as the client's exception
types. Exit 77 (CTest's skip) with "skipped: no openai client" when the package is absent.

    python3 tests/serve/openai_client_test.py BUILD_DIR FIXTURES_DIR
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_process import start_server  # noqa: E402

try:
    import openai
except ImportError:
    print("skipped: no openai client (pip install openai; scripts/setup does)")
    sys.exit(77)


def hf_run(build, folder, out, *flags):
    subprocess.run([os.path.join(build, "hf_run"), "--model", folder, "--out", out, *flags], check=True,
                   stdout=subprocess.DEVNULL)
    r = json.load(open(os.path.join(out, "results.json")))
    assert r["text"].startswith(r["prompt"])
    return r["text"][len(r["prompt"]):]


def main():
    build, fixtures = sys.argv[1], sys.argv[2]
    folder = os.path.join(fixtures, "llama-tiny-tok")
    failures = []

    def check(what, ok, detail=""):
        print(("ok    " if ok else "FAIL  ") + what + (f": {detail}" if detail and not ok else ""))
        if not ok:
            failures.append(what)

    with tempfile.TemporaryDirectory() as tmp:
        server, port = start_server(build, folder, os.path.join(tmp, "serve.log"))
        try:
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none")
            prompt = "The hedgehog is"
            cases = [("greedy", {"temperature": 0}, ["--temperature", "0"]),
                     ("seeded", {"temperature": 0.8, "top_p": 0.9, "seed": 11},
                      ["--temperature", "0.8", "--top-p", "0.9", "--seed", "11"])]
            for name, args, flags in cases:
                expected = hf_run(build, folder, os.path.join(tmp, name), "--prompt", prompt, "--max-new-tokens", "12",
                                  *flags)
                whole = client.completions.create(model="llama-tiny-tok", prompt=prompt, max_tokens=12, **args)
                check(f"completion ({name}) equals hf_run's", whole.choices[0].text == expected,
                      f"{whole.choices[0].text!r} vs {expected!r}")
                check(f"completion ({name}) usage", whole.usage.completion_tokens == 12, str(whole.usage))
                streamed = "".join(c.choices[0].text for c in
                                   client.completions.create(model="llama-tiny-tok", prompt=prompt, max_tokens=12,
                                                             stream=True, **args) if c.choices)
                check(f"streamed completion ({name}) equals hf_run's", streamed == expected,
                      f"{streamed!r} vs {expected!r}")
            check("models.list names the folder", [m.id for m in client.models.list().data] == ["llama-tiny-tok"])
            try:
                client.completions.create(model="llama-tiny-tok", prompt=prompt, temperature=-1)
                check("a negative temperature is refused", False)
            except openai.BadRequestError as e:
                check("a negative temperature is a BadRequestError", "temperature" in str(e), str(e))
            try:
                client.completions.create(model="gpt-4", prompt=prompt)
                check("an unknown model is refused", False)
            except openai.NotFoundError:
                check("an unknown model is a NotFoundError", True)
        finally:
            server.send_signal(signal.SIGTERM)
            check("hh_serve exits 0 on SIGTERM", server.wait(timeout=30) == 0)

        chat_folder = os.path.join(tmp, "llama-chat")
        shutil.copytree(folder, chat_folder)
        with open(os.path.join(chat_folder, "tokenizer_config.json"), "w") as f:
            json.dump({"bos_token": "<s>", "eos_token": "</s>",
                       "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n"
                                        "{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"}, f)
        server, port = start_server(build, chat_folder, os.path.join(tmp, "chat.log"))
        try:
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none")
            messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "The hedgehog is"}]
            whole = client.chat.completions.create(model="llama-chat", messages=messages, max_tokens=8, temperature=0)
            check("chat completion's message is the assistant's", whole.choices[0].message.role == "assistant")
            check("chat completion's prompt is the template's 31 tokens", whole.usage.prompt_tokens == 31,
                  str(whole.usage))
            streamed = "".join(c.choices[0].delta.content or "" for c in
                               client.chat.completions.create(model="llama-chat", messages=messages, max_tokens=8,
                                                              temperature=0, stream=True) if c.choices)
            check("streamed chat equals the whole one", streamed == whole.choices[0].message.content,
                  f"{streamed!r} vs {whole.choices[0].message.content!r}")
            # logprobs in chat's form: one entry per token, the greedy token the best of its top list,
            # the tokens' texts making up the message, streamed the same as whole.
            lp = client.chat.completions.create(model="llama-chat", messages=messages, max_tokens=8, temperature=0,
                                                logprobs=True, top_logprobs=3)
            content = lp.choices[0].logprobs.content
            check("chat logprobs: one per token", len(content) == lp.usage.completion_tokens, str(len(content)))
            check("chat logprobs: greedy tokens are their top lists' first",
                  all(len(t.top_logprobs) == 3 and abs(t.logprob - t.top_logprobs[0].logprob) < 1e-9 and t.logprob <= 0
                      for t in content))
            check("chat logprobs: the tokens spell the message",
                  "".join(t.token for t in content) == lp.choices[0].message.content)
            streamed_lp = [t for c in client.chat.completions.create(
                model="llama-chat", messages=messages, max_tokens=8, temperature=0, logprobs=True, top_logprobs=3,
                stream=True) if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
            check("streamed chat logprobs equal the whole ones",
                  [(t.token, t.logprob) for t in streamed_lp] == [(t.token, t.logprob) for t in content])
        finally:
            server.send_signal(signal.SIGTERM)
            check("the chat server exits 0 on SIGTERM", server.wait(timeout=30) == 0)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
