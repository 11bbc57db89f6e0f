"""Brokers of this tree for the client test-suite runners (tests/compat/).

`CompatBroker` starts `tidegate serve` on named loopback listeners (free ports, a
scratch data directory, the listener names and the other configs the runner gives),
logs its output to a file, waits for "listening on", and stops it with SIGTERM (then
SIGKILL after 60 s). The runners (franz_go.py, confluent_kafka_python.py) say which
listeners and configs their suite expects.

`CompatCluster` is the same in cluster mode: a ZooKeeper server (Debian's package,
started by tidegate.cli.zk_launch as `tidegate cluster up` does) and N `CompatBroker`s
with `broker.id` 1..N and `zookeeper.connect` under a chroot; `seeds(name)` lists every
broker's listener of that name.
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


class CompatCluster:
    """See the module docstring: ZooKeeper and `size` brokers, data under `base`, each
    broker's log in `logs`/broker-N.log and ZooKeeper's in `logs`/zookeeper.log."""

    def __init__(self, base: Path, logs: Path, size: int, listeners: tuple[str, ...],
                 who: str, configs: Mapping[str, str]) -> None:
        self.base, self.logs, self.who = base, logs, who
        self.zk_port = free_port()
        self.zk: subprocess.Popen[bytes] | None = None
        self.brokers = [CompatBroker(base / f"broker-{bid}", logs / f"broker-{bid}.log",
                                     listeners, who, {
                                         **configs,
                                         "broker.id": str(bid),
                                         "zookeeper.connect":
                                             f"127.0.0.1:{self.zk_port}/tidegate",
                                     }) for bid in range(1, size + 1)]

    def seeds(self, name: str) -> str:
        return ",".join(b.seeds(name) for b in self.brokers)

    def start(self) -> None:
        """ZooKeeper, then each broker; what started is stopped if one does not."""
        sys.path.insert(0, str(ROOT / "src"))  # this tree's launcher, as for the brokers
        from tidegate.cli import zk_launch
        try:
            settings = zk_launch.ZooKeeperSettings(data_dir=self.base / "zookeeper",
                                                   port=self.zk_port)
            with (self.logs / "zookeeper.log").open("wb") as out:
                self.zk = zk_launch.launch(settings, cfg_path=self.base / "zoo.cfg",
                                           output=out)
            if not zk_launch.wait_until_serving("127.0.0.1", self.zk_port, 60, self.zk):
                raise SystemExit(f"{self.who}: ZooKeeper did not start; see "
                                 f"{self.logs / 'zookeeper.log'}")
            for b in self.brokers:
                b.data.mkdir(parents=True, exist_ok=True)
                b.start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for b in reversed(self.brokers):
            b.stop()
        if self.zk is not None and self.zk.poll() is None:
            self.zk.terminate()
            try:
                self.zk.wait(20)
            except subprocess.TimeoutExpired:
                self.zk.kill()
                self.zk.wait()
