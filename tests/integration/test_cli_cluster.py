"""`tidegate cluster up` as a user runs it: a real ZooKeeper and three real brokers,
then `cluster status`, `topics create` / `describe`, `produce` / `consume` through the
printed bootstrap list; Ctrl-C (SIGINT) must leave no process behind, and a second
`cluster up` on the same directory must find the topic and its records again.

Every process the launcher starts has the test's temporary directory on its command
line (log.dirs, zoo.cfg), so /proc tells which ones are still alive.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.conftest import ROOT, free_port

from tidegate.cli import zk_launch

pytestmark = pytest.mark.interop

BROKERS = 3
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + e.get("PYTHONPATH", "")
    return e


def tidegate(*args: str, stdin: bytes | None = None,
             timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidegate.cli.main", *args],
                          input=None if stdin is None else stdin.decode(), capture_output=True,
                          text=True, env=env(), timeout=timeout, cwd=ROOT)


def consecutive_free_ports(n: int) -> int:
    """A base port with n free ports from it (broker N listens on base + N - 1)."""
    for _ in range(200):
        base = random.randint(20000, 60000 - n)
        try:
            for port in range(base, base + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free port range")


def processes_under(directory: Path) -> dict[int, str]:
    """pid -> command line of every process naming `directory` in its arguments."""
    found: dict[int, str] = {}
    needle = str(directory).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline:
            found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode(errors="replace")
    return found


class Launcher:
    """`tidegate cluster up` in the background, its output collected line by line."""

    def __init__(self, directory: Path, base_port: int, zk_port: int) -> None:
        self.directory = directory
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tidegate.cli.main", "cluster", "up", "--brokers",
             str(BROKERS), "--dir", str(directory), "--base-port", str(base_port),
             "--zk-port", str(zk_port)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env(), cwd=ROOT)
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for_bootstrap(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if line.startswith("Bootstrap servers: "):
                    return line.removeprefix("Bootstrap servers: ")
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"no bootstrap line; output:\n{self.output}\n{self.logs()}")

    def interrupt(self) -> int:
        """Ctrl-C; the launcher's exit status once it and every child are gone."""
        self.proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None and not processes_under(self.directory):
                self._reader.join(5)
                return self.proc.returncode
            time.sleep(0.1)
        left = processes_under(self.directory)
        raise AssertionError(f"still running {STOP_TIMEOUT_S} s after SIGINT: launcher "
                             f"{'gone' if self.proc.poll() is not None else 'alive'}, "
                             f"children {left}\n{self.output}")

    def logs(self) -> str:
        out = []
        for log in sorted((self.directory / "logs").glob("*.log")):
            out.append(f"--- {log.name}\n" + "\n".join(log.read_text().splitlines()[-30:]))
        return "\n".join(out)

    def kill_everything(self) -> None:
        """The test failed half-way: leave nothing running."""
        for pid in [self.proc.pid, *processes_under(self.directory)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    try:
        zk_launch.find_java()
        zk_launch.find_zookeeper_classpath()
    except zk_launch.ZooKeeperNotInstalledError as e:
        pytest.skip(str(e))
    yield tmp_path / "tidegate-cluster"


def test_cluster_up_status_describe_ctrl_c_and_restart(cluster_dir: Path) -> None:
    base, zk_port = consecutive_free_ports(BROKERS), free_port()
    launcher = Launcher(cluster_dir, base, zk_port)
    try:
        bootstrap = launcher.wait_for_bootstrap()
        assert bootstrap == ",".join(f"127.0.0.1:{base + i}" for i in range(BROKERS))
        out = launcher.output
        assert f"starting ZooKeeper on 127.0.0.1:{zk_port} ... ready" in out
        for i in range(BROKERS):
            assert f"broker {i + 1} ... listening on 127.0.0.1:{base + i}" in out
        # each broker its own HTTP listener (metrics, health, console): 9644 + N - 1
        urls = [f"http://127.0.0.1:{9644 + i}" for i in range(BROKERS)]
        assert f"Metrics, health and the web console: {', '.join(urls)}" in out
        for url in urls:
            with urllib.request.urlopen(url + "/healthz", timeout=10) as r:
                assert r.status == 200

        status = tidegate("cluster", "status", "--bootstrap-server", bootstrap)
        assert status.returncode == 0, status.stdout + status.stderr
        rows = [line.split() for line in status.stdout.splitlines()
                if line.split() and line.split()[0].isdigit()]
        assert sorted(int(r[0]) for r in rows) == [1, 2, 3]
        assert [r[3] for r in rows].count("controller") == 1
        assert "Healthy" in status.stdout

        made = tidegate("topics", "create", "spread", "--partitions", "6",
                        "--replication-factor", "1", "--bootstrap-server", bootstrap)
        assert made.returncode == 0, made.stderr
        leaders = describe_leaders(bootstrap)
        assert len(leaders) == 6 and set(leaders.values()) == {1, 2, 3}, leaders
        sent = tidegate("produce", "spread", "--bootstrap-server", bootstrap,
                        stdin=b"".join(b"%d\n" % i for i in range(60)))
        assert sent.returncode == 0, sent.stderr

        assert launcher.interrupt() == 0
        out = launcher.output
        assert "Stopping the cluster" in out and "stopping ZooKeeper ... stopped" in out
        for i in range(BROKERS):
            assert f"stopping broker {i + 1} ... stopped" in out, out
        assert "killed" not in out
    except BaseException:
        launcher.kill_everything()
        raise

    # the same directory again: same topic, same records
    again = Launcher(cluster_dir, base, zk_port)
    try:
        bootstrap = again.wait_for_bootstrap()
        assert "(reusing its data)" in again.output
        assert set(describe_leaders(bootstrap).values()) == {1, 2, 3}
        got = tidegate("consume", "spread", "--from-beginning", "--max-messages", "60",
                       "--timeout-ms", "20000", "--bootstrap-server", bootstrap)
        assert sorted(int(x) for x in got.stdout.split()) == list(range(60)), got.stderr
        assert again.interrupt() == 0
    except BaseException:
        again.kill_everything()
        raise


def describe_leaders(bootstrap: str) -> dict[int, int]:
    """partition -> leader, from `tidegate topics describe spread`."""
    desc = tidegate("topics", "describe", "spread", "--bootstrap-server", bootstrap)
    assert desc.returncode == 0, desc.stderr
    leaders: dict[int, int] = {}
    for line in desc.stdout.splitlines():
        fields = dict(f.split(": ", 1) for f in line.strip().split("\t") if ": " in f)
        if "Partition" in fields:
            assert "UnderReplicated" not in fields and "Offline" not in fields, line
            leaders[int(fields["Partition"])] = int(fields["Leader"])
    return leaders
