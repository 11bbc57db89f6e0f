"""Brokers for the benchmarks: ZooKeeper, 3 cluster brokers and an embedded broker as processes.

Benchmarks may not import the tests, so this is their own launcher, shared by
`bench/cluster.py` and `bench/transactions.py`. `launched()` starts, in one call,
ZooKeeper (Debian's `zookeeper` package through `tidegate.cli.zk_launch`; `make
deps-system` installs it), three cluster brokers (`python -m tidegate.cli.main serve`
with `broker.id`, `zookeeper.connect` under the chroot /bench and a listener each) and,
if asked, one plain embedded broker (no `zookeeper.connect`), waits until each is
listening and each cluster broker sees all three, and stops them all on the way out,
even when the bench fails. Every broker keeps Tidegate's defaults apart from the
overrides a bench passes, which it prints. Every child dies with the bench
(PR_SET_PDEATHSIG), so a killed run leaves no broker behind.

Also here: the small helpers both benches use (a metadata client, waiting with the
brokers' logs on timeout, topic creation that waits for a full ISR, the disk's fsync
floor, percentiles).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidegate.cli import zk_launch

ROOT = Path(__file__).resolve().parents[1]
CHROOT = "/bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """In the child: SIGKILL when the bench dies, so no broker outlives a killed run."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Broker:
    """One `tidegate serve` process; its output appended to `<dir>.log`."""

    def __init__(self, name: str, data_dir: Path, overrides: dict[str, str]) -> None:
        self.name, self.data_dir, self.port = name, data_dir, free_port()
        self.overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                          "log.dirs": str(data_dir), **overrides}
        self.log = data_dir.with_suffix(".log")
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_from = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        args = [sys.executable, "-m", "tidegate.cli.main", "serve"]
        for k, v in self.overrides.items():
            args += ["--override", f"{k}={v}"]
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
        self._log_from = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                         preexec_fn=_die_with_parent)

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while b"listening on" not in self._new_output():
            if self.proc is None or self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{self.name} did not start:\n{self.tail()}")
            time.sleep(0.05)

    def _new_output(self) -> bytes:
        with open(self.log, "rb") as f:
            f.seek(self._log_from)
            return f.read()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def cpu_seconds(self) -> float:
        """CPU time of every thread of the process so far (Linux schedstat)."""
        if self.proc is None:
            return 0.0
        total = 0
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError, ValueError):
                pass
        return total / 1e9


def stop_all(brokers: list[Broker], timeout: float = 30.0) -> None:
    """SIGTERM to all at once (controlled shutdowns overlap), SIGKILL what lingers."""
    live = [b for b in brokers if b.proc is not None and b.proc.poll() is None]
    for b in live:
        assert b.proc is not None
        b.proc.terminate()
    deadline = time.monotonic() + timeout
    for b in live:
        assert b.proc is not None
        try:
            b.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"note: {b.name} still running {timeout:.0f} s after SIGTERM; killed. Its "
                  f"log ends:\n{b.tail(30)}")
        b.kill()


def wait_for(what: str, check: Any, timeout: float, brokers: list[Broker]) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as e:  # a client error while the cluster settles
            last = e
        else:
            if last:
                return last
        time.sleep(0.05)
    logs = "\n".join(f"--- {b.name}\n{b.tail()}" for b in brokers)
    raise SystemExit(f"timed out waiting for {what} (last: {last!r})\n{logs}")


def admin(bootstrap: str) -> Any:
    """A metadata view (librdkafka's logs off: these clients see brokers die on purpose)."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "allow.auto.create.topics": False,
                        "log_level": 0})


_T0 = time.monotonic()


def progress(what: str) -> None:
    print(f"[{time.monotonic() - _T0:6.1f} s] {what}", file=sys.stderr, flush=True)


def partitions_of(client: Any, topic: str) -> dict[int, Any]:
    md = client.list_topics(topic, timeout=5)
    t = md.topics[topic]
    if t.error is not None:
        raise RuntimeError(str(t.error))
    return dict(t.partitions)


def create_topics(bootstrap: str, specs: list[tuple[str, int, int]],
                  brokers: list[Broker]) -> None:
    """Create (name, partitions, replication factor) topics, RF=3 ones with
    min.insync.replicas=2, and wait until every partition has a leader and its whole
    replica set in sync."""
    from confluent_kafka.admin import NewTopic

    a = admin(bootstrap)
    new = [NewTopic(name, parts, rf, config={"min.insync.replicas": "2"} if rf == 3 else {})
           for name, parts, rf in specs]
    for fut in a.create_topics(new).values():
        fut.result(60)
    for name, _parts, rf in specs:
        wait_for(f"leaders and full ISR of {name}", lambda n=name, r=rf: all(
            p.leader >= 0 and len(p.isrs) == r for p in partitions_of(a, n).values()),
            60, brokers)


def pct(values: list[float], p: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def fsync_floor_ms(directory: Path, n: int) -> tuple[float, float]:
    """Median and p99 (ms) of one 4 KiB append + fdatasync in `directory`."""
    block, path = os.urandom(4096), directory / "fsync-floor.tmp"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    times = []
    try:
        for _ in range(n):
            start = time.perf_counter()
            os.write(fd, block)
            os.fdatasync(fd)
            times.append((time.perf_counter() - start) * 1000)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(times), pct(times, 99)


def zookeeper_missing() -> str | None:
    """None when ZooKeeper and Java are installed, else what to install."""
    try:
        zk_launch.find_zookeeper_classpath()
        zk_launch.find_java()
    except zk_launch.ZooKeeperNotInstalledError as e:
        return str(e)
    return None


# -- the launch ---------------------------------------------------------------------------


@dataclass
class Launched:
    """The running processes: cluster brokers by broker.id, the embedded broker if any."""

    cluster: dict[int, Broker]
    embedded: Broker | None

    @property
    def bootstrap(self) -> str:
        """The cluster's bootstrap list (every cluster broker)."""
        return ",".join(b.bootstrap for b in self.cluster.values())

    @property
    def everyone(self) -> list[Broker]:
        return [*self.cluster.values(), *([self.embedded] if self.embedded else [])]


@contextmanager
def launched(base: Path, *, zk_tick_ms: int = 2000, session_ms: int | None = 4000,
             cluster: bool = True, embedded: bool = True,
             overrides: Callable[[int], dict[str, str]] | None = None) -> Iterator[Launched]:
    """ZooKeeper and brokers 1-3 (if `cluster`) and an embedded broker (if `embedded`),
    their data and logs under `base`; `overrides(broker_id)` adds cluster brokers'
    settings; `session_ms` their zookeeper.session.timeout.ms (None: the default).
    Everything is stopped when the block ends."""
    zk_proc: subprocess.Popen[bytes] | None = None
    running = Launched({}, Broker("embedded broker", base / "embedded", {}) if embedded
                       else None)
    try:
        if cluster:
            zk = zk_launch.ZooKeeperSettings(data_dir=base / "zk" / "data", port=free_port(),
                                             tick_time_ms=zk_tick_ms)
            with open(base / "zookeeper.log", "ab") as out:
                zk_proc = zk_launch.launch(zk, cfg_path=base / "zoo.cfg", output=out,
                                           preexec_fn=_die_with_parent)
            if not zk_launch.wait_until_serving("127.0.0.1", zk.port, 60, zk_proc):
                raise SystemExit("ZooKeeper did not start:\n"
                                 + (base / "zookeeper.log").read_text(errors="replace")[-3000:])
            for bid in (1, 2, 3):
                settings = {"broker.id": str(bid),
                            "zookeeper.connect": f"127.0.0.1:{zk.port}{CHROOT}",
                            **({} if session_ms is None
                               else {"zookeeper.session.timeout.ms": str(session_ms)}),
                            **(overrides(bid) if overrides else {})}
                running.cluster[bid] = Broker(f"broker {bid}", base / f"broker-{bid}", settings)
        everyone = running.everyone
        progress(f"starting {len(running.cluster)} cluster brokers"
                 + (" and the embedded broker" if embedded else ""))
        for b in everyone:
            b.start()
        for b in everyone:
            b.wait_ready()
        for b in running.cluster.values():
            view = admin(b.bootstrap)
            wait_for(f"{b.name} to see 3 brokers",
                     lambda v=view: len(v.list_topics(timeout=5).brokers) == 3, 60, everyone)
        yield running
    finally:
        progress("stopping")
        stop_all(running.everyone)
        if zk_proc is not None:
            zk_proc.terminate()
            try:
                zk_proc.wait(10)
            except subprocess.TimeoutExpired:
                zk_proc.kill()
                zk_proc.wait()
