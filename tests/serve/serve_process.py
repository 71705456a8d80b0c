"""hh_serve as a child process for the Python tests of tests/serve/: started on a free port over a
model folder, its port read from its start line ("... on http://127.0.0.1:PORT")."""
import os
import subprocess
import time


def start_server(build, folder, log, *flags):
    """Starts BUILD/hh_serve --model FOLDER on a free port (output to LOG); returns (process, port)."""
    p = subprocess.Popen([os.path.join(build, "hh_serve"), "--model", folder, "--port", "0", "--threads", "1", *flags],
                         stdout=open(log, "w"), stderr=subprocess.STDOUT)
    mark = "on http://127.0.0.1:"
    t0 = time.time()
    while time.time() - t0 < 60:
        text = open(log).read()
        if mark in text:
            return p, int(text.split(mark)[1].split()[0])
        if p.poll() is not None:
            raise SystemExit(f"hh_serve exited while starting:\n{text}")
        time.sleep(0.05)
    raise SystemExit("hh_serve did not start in 60 s")
