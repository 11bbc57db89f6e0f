"""A real broker process for integration tests: `broker` fixture and `BrokerProcess`.

Each broker runs `python -m tidegate.cli.main serve` on a free loopback port with its
own data directory, exactly as a user would start it, and the tests talk to it over
TCP with real clients. `soak_seed` gives a soak run its random seed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The JVM options of the tests' Spark drivers: the client JIT only (C1) and the serial
# GC. A test's driver lives a minute running small jobs; C2 recompiling Spark's hot
# code and G1's threads only compete with it for the machine's cores (docs/spark.md's
# snippet: ~25 s of ~85 s on two busy cores). Spark, its plans and the data are the same.
SPARK_TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def soak_seed() -> int:
    """A new seed for a soak run's random choices, printed (shown with a failing test's
    output) so the run can be replayed: TIDEGATE_SOAK_SEED=<seed> gives it back. From
    the pid and the clock in nanoseconds: two runs started in the same second (parallel
    lanes, two checkouts) get different seeds, as they did not from the seconds alone."""
    given = os.environ.get("TIDEGATE_SOAK_SEED")
    seed = int(given) if given else (os.getpid() << 40 ^ time.time_ns()) & (1 << 62) - 1
    print(f"soak seed {seed} (replay: TIDEGATE_SOAK_SEED={seed})", flush=True)
    return seed


class BrokerProcess:
    def __init__(
        self, data_dir: Path, port: int | None = None, overrides: dict[str, str] | None = None
    ) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.overrides = dict(overrides or {})
        # the group the process runs with (None: ours); netpartition.py tells "hosts" apart
        # by it
        self.group: int | None = None
        self.proc: subprocess.Popen[str] | None = None
        self.log_lines: list[str] = []
        self._reader: threading.Thread | None = None
        # the HTTP listener's URL once the broker printed it (http.listeners set)
        self.http_url: str | None = None
        self.http_ready = threading.Event()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        args = [
            sys.executable,
            "-m",
            "tidegate.cli.main",
            "serve",
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "--override",
            f"log.dirs={self.data_dir}",
            # no HTTP listener unless a test asks (overrides below win): parallel brokers
            # must not all try the default 127.0.0.1:9644; `http.listeners=
            # http://127.0.0.1:0` picks a free port, then `http_url` says which.
            # TIDEGATE_TEST_HTTP=1 turns it on for every test broker (and with it the
            # KIP-714 APIs clients see in ApiVersions)
            "--override",
            "http.listeners=" + ("http://127.0.0.1:0" if os.environ.get("TIDEGATE_TEST_HTTP")
                                 else ""),
        ]
        for k, v in self.overrides.items():
            args += ["--override", f"{k}={v}"]
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT,
            group=self.group,
        )
        ready = threading.Event()
        self.http_url = None
        self.http_ready.clear()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.log_lines.append(line.rstrip("\n"))
                if line.startswith("HTTP listener on "):
                    self.http_url = line.split()[-1]
                    self.http_ready.set()
                if "listening on" in line:
                    ready.set()

        self._reader = threading.Thread(target=pump, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        while not ready.is_set():
            if self.proc.poll() is not None:
                raise RuntimeError("broker exited:\n" + "\n".join(self.log_lines[-50:]))
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("broker did not start:\n" + "\n".join(self.log_lines[-50:]))
            ready.wait(0.05)

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc = self.proc.returncode
        self.proc = None
        return rc

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def logs(self) -> str:
        return "\n".join(self.log_lines)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data")
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # a new group's first rebalance at once, not after Kafka's 3 s wait for more members
    # (as most tests' brokers): the examples, snippets and clients here that join a group
    # one member at a time only waited; a test of the wait itself sets its own broker
    b = BrokerProcess(tmp_path_factory.mktemp("shared") / "data",
                      overrides={"group.initial.rebalance.delay.ms": "0"})
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="session")
def spark_session() -> Iterator[Any]:
    """One local[2] SparkSession, with ``format("tidegate")`` registered, for the serial
    lane's modules that run Spark jobs in this process (test_spark, and the restarts of
    test_spark_failures). Its JVM start and its first jobs' warm-up (Spark's Python
    daemons, the JIT) cost ~30 s on a loaded 2-core machine: paid once per run, not per
    module. Each test's queries have topics and checkpoints of their own; the session
    stops at the end of the run."""
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    from tidegate.spark import register

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[2]").appName("tidegate-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.extraJavaOptions", SPARK_TEST_JVM_OPTIONS)
               .getOrCreate())
    register(session)
    try:
        yield session
    finally:
        session.stop()
