"""Headless Chromium driven through the DevTools protocol, standard library only: the browser
tests' shared client (tests/serve/chat_page_test.py, tests/report/report_pages_test.py)."""
import base64
import contextlib
import json
import os
import signal
import shutil
import socket
import struct
import subprocess
import sys
import time
import urllib.parse
import urllib.request

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


def require_chromium():
    """Exit 77 (CTest's skip) saying so when no Chromium is installed."""
    if CHROMIUM is None:
        print("skipped: no chromium (scripts/setup installs Debian's chromium)")
        sys.exit(77)


@contextlib.contextmanager
def chromium(tmp, *args):
    """Headless Chromium with a fresh profile under `tmp`, in its own process group, killed whole
    (its helpers too) when the block ends: yields its DevTools port."""
    log = f"{tmp}/chromium.log"
    browser = subprocess.Popen([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", *args,
                                "--remote-debugging-port=0", f"--user-data-dir={tmp}/profile", "about:blank"],
                               stdout=subprocess.DEVNULL, stderr=open(log, "w"), start_new_session=True)
    try:
        t0 = time.time()
        port = None
        while port is None and time.time() - t0 < 60:
            text = open(log).read()
            if "DevTools listening on ws://127.0.0.1:" in text:
                port = int(text.split("DevTools listening on ws://127.0.0.1:")[1].split("/")[0])
            time.sleep(0.05)
        if port is None:
            raise SystemExit("chromium did not start its DevTools endpoint in 60 s:\n" + open(log).read())
        yield port
    finally:
        os.killpg(browser.pid, signal.SIGKILL)
        browser.wait()


def new_tab(devtools_port, url="about:blank"):
    """A new tab on `url`, as a connected WebSocket."""
    req = urllib.request.Request(f"http://127.0.0.1:{devtools_port}/json/new?{urllib.parse.quote(url, safe='')}",
                                 method="PUT")
    return WebSocket(json.load(urllib.request.urlopen(req, timeout=30))["webSocketDebuggerUrl"])


class WebSocket:
    """A minimal DevTools client (RFC 6455): masked text frames out, text frames in."""

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
        n = len(data)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n)
                                if n < 65536 else bytes([0x80 | 127]) + struct.pack(">Q", n))
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

    def open(self, path):
        self.call("Page.navigate", url="file://" + os.path.abspath(path))
        t0 = time.time()
        while self.eval("document.readyState") != "complete" or self.eval("document.URL").endswith("about:blank"):
            if time.time() - t0 > 30:
                raise SystemExit(f"{path} did not load in 30 s")
            time.sleep(0.05)
