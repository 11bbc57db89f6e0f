"""Start time of an embedded broker: from `start()` to the first served request.

Each run uses an empty data directory and a free port, and times until an ApiVersions
request is answered on a raw socket (no client library in the measurement). Printed
side by side, median of `--rounds` each:

- thread, warm: `EmbeddedBroker()` in this process once the broker's modules are
  imported — every broker after the first in a pytest run;
- thread, cold: the same in a fresh interpreter, the imports included (the first
  broker of a run, from `import tidegate` on);
- process: `EmbeddedBroker(mode="process")`, the flavour whose kill() is a real SIGKILL;
- reference: `tidegate serve` started as a subprocess, as a user (or the project's own
  integration tests) would.

Child interpreters run byte-compiled, as an installed package does: with
PYTHONDONTWRITEBYTECODE set (as on the project's machines) each would otherwise compile
every module it imports, about a second that no `pip install`ed Tidegate pays. Their
bytecode goes to a temporary PYTHONPYCACHEPREFIX, written by one untimed priming run.

    .venv/bin/python bench/embedded_start.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tidegate.embedded import EmbeddedBroker, _free_port  # noqa: E402

PYCACHE = tempfile.mkdtemp(prefix="tidegate-bench-pycache-")


def child_env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), PYTHONPYCACHEPREFIX=PYCACHE)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env

# ApiVersions v0: header v1 (api key 18, version 0, correlation id 1, client id "bench")
API_VERSIONS = struct.pack(">hhih", 18, 0, 1, 5) + b"bench"


def first_request(port: int, deadline: float) -> None:
    """Connect (retrying while nothing listens) and get one ApiVersions answer."""
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(struct.pack(">i", len(API_VERSIONS)) + API_VERSIONS)
                size = struct.unpack(">i", _read(s, 4))[0]
                body = _read(s, size)
                assert struct.unpack(">ih", body[:6]) == (1, 0), "ApiVersions failed"
                return
        except (ConnectionRefusedError, ConnectionResetError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.002)


def _read(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionResetError
        out += chunk
    return out


def embedded(mode: str) -> float:
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        broker = EmbeddedBroker(mode=mode, data_dir=Path(d) / "data").start()  # type: ignore[arg-type]
        try:
            first_request(broker.port, time.monotonic() + 30)
            return time.perf_counter() - t0
        finally:
            broker.stop()


COLD = """
import time, sys
t0 = time.perf_counter()
from tidegate import EmbeddedBroker
sys.path.insert(0, {bench!r})
from embedded_start import first_request
with EmbeddedBroker() as b:
    first_request(b.port, time.monotonic() + 30)
    print(time.perf_counter() - t0)
"""


def thread_cold() -> float:
    out = subprocess.run([sys.executable, "-c", COLD.format(bench=str(ROOT / "bench"))],
                         capture_output=True, text=True, env=child_env(), check=True,
                         timeout=60)
    return float(out.stdout.strip().splitlines()[-1])


def serve_subprocess() -> float:
    with tempfile.TemporaryDirectory() as d:
        port = _free_port()
        env = child_env()
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "tidegate.cli.main", "serve",
             "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
             "--override", f"log.dirs={d}/data", "--override", "http.listeners="],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        try:
            first_request(port, time.monotonic() + 30)
            return time.perf_counter() - t0
        finally:
            proc.terminate()
            proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    embedded("thread")  # imports the broker's modules: what "warm" means
    os.environ.update(child_env())  # EmbeddedBroker(mode="process") inherits it
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    thread_cold()  # writes the children's bytecode caches (untimed)
    serve_subprocess()
    runs = {
        "EmbeddedBroker() thread, warm": lambda: embedded("thread"),
        "EmbeddedBroker() thread, cold (imports included)": thread_cold,
        "EmbeddedBroker(mode='process')": lambda: embedded("process"),
        "reference: `tidegate serve` subprocess": serve_subprocess,
    }
    print(f"time to the first served request, empty data directory, "
          f"median of {args.rounds} (min-max)")
    for name, fn in runs.items():
        times = sorted(fn() for _ in range(args.rounds))
        print(f"  {name:<50} {statistics.median(times) * 1000:7.0f} ms "
              f"({times[0] * 1000:.0f}-{times[-1] * 1000:.0f})", flush=True)


if __name__ == "__main__":
    main()
