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
import base64
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_process import start_server  # noqa: E402
import urllib.parse
import urllib.request

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
if CHROMIUM is None:
    print("skipped: no chromium (scripts/setup installs Debian's chromium)")
    sys.exit(77)


class WebSocket:
    """A minimal client (RFC 6455): text frames out (masked), text frames in."""

    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.s = socket.create_connection((u.hostname, u.port), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall((f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
                        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.s.recv(1)
        assert head.startswith(b"HTTP/1.1 101"), head
        self.next_id = 0

    def _read(self, n):
        b = b""
        while len(b) < n:
            chunk = self.s.recv(n - len(b))
            if not chunk:
                raise ConnectionError("websocket closed")
            b += chunk
        return b

    def send(self, text):
        data = text.encode()
        head = bytes([0x81])
        n = len(data)
        head += bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 else \
            bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.s.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def recv(self):
        message = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            message += self._read(n)
            if b0 & 0x80:
                return message.decode()

    def call(self, method, **params):
        self.next_id += 1
        self.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            r = json.loads(self.recv())
            if r.get("id") == self.next_id:
                if "error" in r:
                    raise RuntimeError(f"{method}: {r['error']}")
                return r["result"]

    def eval(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=60))


def drive_page(devtools_port, url, message, max_tokens):
    """Opens `url` in a new tab, sends `message` through the page's own input and button, returns
    (final state, user text shown, assistant text shown, mode label)."""
    req = urllib.request.Request(f"http://127.0.0.1:{devtools_port}/json/new?{urllib.parse.quote(url, safe='')}",
                                 method="PUT")
    target = json.load(urllib.request.urlopen(req, timeout=30))
    ws = WebSocket(target["webSocketDebuggerUrl"])
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
        browser = subprocess.Popen([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                    "--remote-debugging-port=0", f"--user-data-dir={tmp}/profile", "about:blank"],
                                   stdout=subprocess.DEVNULL, stderr=open(f"{tmp}/chromium.log", "w"))
        try:
            t0 = time.time()
            devtools = None
            while devtools is None and time.time() - t0 < 60:
                text = open(f"{tmp}/chromium.log").read()
                if "DevTools listening on ws://127.0.0.1:" in text:
                    devtools = int(text.split("DevTools listening on ws://127.0.0.1:")[1].split("/")[0])
                time.sleep(0.05)
            if devtools is None:
                raise SystemExit("chromium did not start its DevTools endpoint in 60 s:\n" + open(f"{tmp}/chromium.log").read())

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
        finally:
            browser.kill()
            browser.wait()
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
