"""One embedded broker of this tree for the client test-suite runners (tests/compat/).

`CompatBroker` starts `tidegate serve` on named loopback listeners (free ports, a
scratch data directory, the listener names and the other configs the runner gives),
logs its output to a file, waits for "listening on", and stops it with SIGTERM (then
SIGKILL after 60 s). The runners (franz_go.py, confluent_kafka_python.py) say which
listeners and configs their suite expects.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class CompatBroker:
    """See the module docstring. `listeners`: listener names, each on a free port."""

    def __init__(self, data: Path, log: Path, listeners: tuple[str, ...], who: str,
                 configs: Mapping[str, str]) -> None:
        self.ports = {name: free_port() for name in listeners}
        self.data, self.log_path, self.who = data, log, who
        self.configs = dict(configs)  # besides listeners, log.dirs, http.listeners
        self.proc: subprocess.Popen[str] | None = None

    def seeds(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"

    def start(self, timeout: float = 60.0) -> None:
        """Start it with its configs, its listeners, log.dirs and no HTTP listener."""
        overrides = {
            "listeners": ",".join(f"{n}://{self.seeds(n)}" for n in self.ports),
            **self.configs,
            "log.dirs": str(self.data),
            "http.listeners": "",
        }
        args = [sys.executable, "-m", "tidegate.cli.main", "serve"]
        for k, v in overrides.items():
            args += ["--override", f"{k}={v}"]
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep
                   + os.environ.get("PYTHONPATH", ""))
        log = self.log_path.open("w")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env, cwd=ROOT)
        ready = threading.Event()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                log.write(line)
                log.flush()
                if "listening on" in line:
                    ready.set()
            log.close()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"{self.who}: the broker did not start; see {self.log_path}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
