"""A real Tidegate cluster for tests: one ZooKeeper server and N broker processes.

Each broker is `tidegate serve` (the `BrokerProcess` of conftest.py) with its own
`broker.id`, port and data directory, `zookeeper.connect` pointing at the test's
ZooKeeper under a chroot, and a short ZooKeeper session so that a killed broker's
leadership moves within seconds. Faults are real: `kill()` is SIGKILL, `pause()` is
SIGSTOP. `diverging_replicas` compares the brokers' copies of partitions byte for byte.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from tests.integration.conftest import BrokerProcess, free_port
from tests.integration.zkserver import ZooKeeperServer

SESSION_MS = 4000


class Cluster:
    def __init__(self, base: Path, size: int = 3, overrides: dict[str, str] | None = None) -> None:
        self.base = base
        self.zk = ZooKeeperServer(base / "zk")
        self.overrides = dict(overrides or {})
        self.brokers: dict[int, BrokerProcess] = {}
        for bid in range(1, size + 1):
            self.brokers[bid] = BrokerProcess(
                base / f"broker-{bid}", free_port(), self._overrides(bid))

    def _overrides(self, bid: int) -> dict[str, str]:
        return {
            "broker.id": str(bid),
            "zookeeper.connect": f"{self.zk.connect}/tidegate",
            "zookeeper.session.timeout.ms": str(SESSION_MS),
            # a loaded CI machine can take seconds to open the first session
            "zookeeper.connection.timeout.ms": "15000",
            "replica.lag.time.max.ms": "6000",
            "replica.fetch.wait.max.ms": "200",
            "replica.fetch.backoff.ms": "200",
            **self.overrides,
        }

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def start(self) -> None:
        """ZooKeeper, then the first broker (it becomes the controller, as in every run
        before), then the others at once: a broker's start is mostly an interpreter
        starting and ZooKeeper round trips, and three one after another were ~3 s of each
        cluster test's setup. If one fails to start, what did start is stopped before the
        error goes on (callers start outside their try/finally: orphaned brokers and
        ZooKeepers would slow every test after)."""
        try:
            self.zk.start()
            first, *others = self.brokers.values()
            first.start(timeout=60)
            with ThreadPoolExecutor(max(1, len(others))) as pool:
                # every start is waited for (and its error raised) before the pool closes
                for started in [pool.submit(b.start, 60) for b in others]:
                    started.result()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for b in self.brokers.values():
            if b.proc is not None and b.proc.poll() is None:
                os.kill(b.proc.pid, signal.SIGCONT)
        for b in self.brokers.values():
            b.stop()
        self.zk.stop()

    def kill(self, bid: int) -> None:
        self.brokers[bid].kill()

    def pause(self, bid: int) -> None:
        proc = self.brokers[bid].proc
        assert proc is not None
        os.kill(proc.pid, signal.SIGSTOP)

    def resume(self, bid: int) -> None:
        proc = self.brokers[bid].proc
        assert proc is not None
        os.kill(proc.pid, signal.SIGCONT)

    def restart(self, bid: int) -> None:
        self.brokers[bid].start(timeout=60)

    def logs(self) -> str:
        return "\n".join(f"--- broker {bid}\n{b.logs()}" for bid, b in self.brokers.items())

    def failure_report(self, tail: int = 8000) -> str:
        """What to print when a test fails: every broker's warnings and refusals, then
        the tail of each broker's log (a tail of the concatenation shows one broker).
        The whole logs are written next to the brokers' data (`<base>/broker-N.log`)."""
        notable = ("WARNING", "ERROR", "refused", "Traceback", "not coordinator",
                   "COORDINATOR", "timed out", "fault point")
        out = []
        for bid, b in self.brokers.items():
            text = b.logs()
            path = self.base / f"broker-{bid}.log"
            with contextlib.suppress(OSError):
                path.write_text(text)
            lines = [ln for ln in text.splitlines() if any(k in ln for k in notable)]
            out.append(f"--- broker {bid} (whole log: {path}): {len(lines)} notable lines\n"
                       + "\n".join(lines[-60:]))
        for bid, b in self.brokers.items():
            out.append(f"--- broker {bid}: last {tail} characters\n{b.logs()[-tail:]}")
        return "\n".join(out)


def log_digest(directory: Path) -> str:
    """sha256 of a partition directory's .log segments, in offset order."""
    h = hashlib.sha256()
    for name in sorted(os.listdir(directory)):
        if name.endswith(".log"):
            h.update((directory / name).read_bytes())
    return h.hexdigest()


def diverging_replicas(c: Cluster, topics: Iterable[str]) -> list[str]:
    """The partitions of `topics` (`<topic>-<n>`) whose .log files differ between the
    brokers, or that some broker lacks (every broker is meant to hold a replica: RF =
    cluster size). Racy while writes go on: callers retry until the cluster is quiet."""
    wanted = set(topics)
    held: dict[int, set[str]] = {}
    for bid in c.brokers:
        root = c.base / f"broker-{bid}"
        held[bid] = {d.name for d in root.iterdir()
                     if d.is_dir() and d.name.rpartition("-")[0] in wanted}
    names = set().union(*held.values())
    bad = sorted(n for n in names if any(n not in h for h in held.values()))
    for n in sorted(names - set(bad)):
        if len({log_digest(c.base / f"broker-{bid}" / n) for bid in c.brokers}) != 1:
            bad.append(n)
    return bad


def produce_numbers(producer: Any, topic: str, stop: threading.Event,
                    on_delivery: Callable[[Any, Any], None], *, pause_every: int,
                    flush_s: float) -> None:
    """Write 0, 1, 2... (key = value = the number) with a confluent-kafka `producer`
    until `stop`, sleeping 10 ms every `pause_every` records; then flush. A full local
    queue (acks lagging the writes, e.g. while leadership moves) waits instead of
    failing the writer."""
    i = 0
    while not stop.is_set():
        try:
            producer.produce(topic, key=str(i).encode(), value=str(i).encode(),
                             on_delivery=on_delivery)
        except BufferError:  # librdkafka's queue is full: acks lag the writes
            producer.poll(0.1)
            continue
        i += 1
        producer.poll(0)
        if i % pause_every == 0:
            time.sleep(0.01)
    producer.flush(flush_s)


def wait_for(what: str, check: Callable[[], object], timeout: float = 30.0,
             every: float = 0.2) -> object:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as e:  # a client error while the cluster settles
            last = e
        else:
            if last:
                return last
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def high_watermark(consumer: Any, topic: str, partition: int, timeout: float = 30.0) -> int:
    """The partition's high watermark, asked again while leadership moves.

    librdkafka's ``get_watermark_offsets`` gives up on the first NOT_LEADER_FOR_PARTITION;
    on a cluster whose controller is handing leadership back to preferred replicas (or
    just failed a leader over) the answer can come from the broker that led a moment ago.
    """
    from confluent_kafka import TopicPartition

    got = wait_for(f"the high watermark of {topic}-{partition}",
                   lambda: [consumer.get_watermark_offsets(
                       TopicPartition(topic, partition), timeout=5, cached=False)[1]],
                   timeout=timeout)
    return int(got[0])  # type: ignore[index]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # a new (or emptied) group's rebalance at once, not after Kafka's 3 s wait for more
    # members: the groups of these modules' tests have one member at a time
    c = Cluster(tmp_path_factory.mktemp("cluster"),
                overrides={"group.initial.rebalance.delay.ms": "0"})
    c.start()
    try:
        yield c
    finally:
        c.stop()
