#!/usr/bin/env python3
"""hh_serve's chat page (GET /) in a real headless browser (CTest hh_serve_chat_page).

Starts hh_serve over the tiny Llama fixture (text completion mode) and over a copy with a chat
template (chat mode), opens the page in headless Chromium and drives it through the DevTools
protocol (a small websocket client here, standard library only): types a message into the page's
textarea, clicks its Send button (the page's own handlers), waits for the streamed reply to end,
and reads it from the page; it must equal the API's reply for the same request (temperature 0).
Exit 77 (CTest's skip) with "skipped: no chromium" when no Chromium is installed.

    python3 tests/serve/chat_page_test.py BUILD_DIR FIXTURES_DIR
"""
import json
import os
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_process import start_server  # noqa: E402
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from devtools import chromium, new_tab, require_chromium  # noqa: E402

require_chromium()


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=60))


def drive_page(devtools_port, url, message, max_tokens):
    """Opens `url` in a new tab, sends `message` through the page's own input and button, returns
    (final state, user text shown, assistant text shown, mode label)."""
    ws = new_tab(devtools_port, url)
    t0 = time.time()
    # Loaded, and /health read (the page names its mode then).
    while not ws.eval("(document.getElementById('mode') || {}).textContent || ''"):
        if time.time() - t0 > 30:
            raise SystemExit("the page did not load in 30 s")
        time.sleep(0.05)
    ws.eval(f"document.getElementById('max_tokens').value = '{max_tokens}'")
    ws.eval(f"document.getElementById('prompt').value = {json.dumps(message)}")
    ws.eval("document.getElementById('send').click()")
    while ws.eval("document.body.dataset.state") in ("idle", "streaming"):
        if time.time() - t0 > 60:
            break
        time.sleep(0.05)
    out = (ws.eval("document.body.dataset.state"),
           ws.eval("document.querySelector('.user') && document.querySelector('.user').textContent"),
           ws.eval("document.querySelector('.assistant') && document.querySelector('.assistant').textContent"),
           ws.eval("document.getElementById('mode').textContent"),
           ws.eval("document.getElementById('log').textContent"))  # the whole log: errors show there
    ws.s.close()
    return out


def main():
    build, fixtures = sys.argv[1], sys.argv[2]
    failures = []

    def check(what, ok, detail=""):
        print(("ok    " if ok else "FAIL  ") + what + (f": {detail}" if not ok and detail else ""))
        if not ok:
            failures.append(what)

    with tempfile.TemporaryDirectory() as tmp:
        with chromium(tmp) as devtools:
            plain = os.path.join(fixtures, "llama-tiny-tok")
            chat = os.path.join(tmp, "llama-chat")
            shutil.copytree(plain, chat)
            with open(os.path.join(chat, "tokenizer_config.json"), "w") as f:
                json.dump({"bos_token": "<s>",
                           "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n"
                                            "{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"}, f)
            for name, folder in (("text completion", plain), ("chat", chat)):
                server, port = start_server(build, folder, os.path.join(tmp, f"{name}.log"))
                try:
                    message = "The hedgehog is"
                    if name == "chat":
                        expected = post(port, "/v1/chat/completions",
                                        {"messages": [{"role": "user", "content": message}], "max_tokens": 10,
                                         "temperature": 0})["choices"][0]["message"]["content"]
                    else:
                        expected = post(port, "/v1/completions",
                                        {"prompt": message, "max_tokens": 10, "temperature": 0})["choices"][0]["text"]
                    state, user, reply, mode, log = drive_page(devtools, f"http://127.0.0.1:{port}/", message, 10)
                    check(f"{name}: the page's reply ended", state == "done", f"{state}; page log: {log!r}")
                    check(f"{name}: the page shows the message", user == message, repr(user))
                    check(f"{name}: the page's streamed reply equals the API's", reply == expected,
                          f"{reply!r} vs {expected!r}")
                    check(f"{name}: the page names its mode", ("no chat template" in mode) == (name != "chat"), mode)
                finally:
                    server.send_signal(signal.SIGTERM)
                    server.wait(timeout=30)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
