"""Exactly-once consume-transform-produce under kill -9 (the transactions issue's
acceptance; seeds 000 and 004's read-process-write loop), with confluent-kafka.

An input topic (3 partitions) holds N unique values. A processor subprocess
(tests/integration/eos_processor.py: fixed transactional.id and group id,
read_committed, no auto commit) turns each into `out-<value>` in an output topic (3
partitions), committing its consumed offsets inside each transaction. The test
SIGKILLs the processor at random moments many times and restarts it, and SIGKILLs the
broker a few times and restarts it on the same data directory and port. At the end a
read_committed read of the output holds every input value exactly once, and the
group's committed offsets equal the input's end offsets.

The broker is a `Target`: one `BrokerProcess` here (`BrokerTarget`), a 3-broker
cluster in tests/integration/test_cluster_eos.py (`cluster_txn_util.ClusterTarget`,
which injects its own faults and checks open transactions and replica divergence at
the end); tests/integration/test_txn_history.py runs its workload on the same targets.

`make test` runs N=20,000 with >= 10 processor kills and 2 broker kills; `make soak`
(TIDEGATE_SOAK=1) runs N=100,000 with more of both.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.conftest import ROOT, BrokerProcess, soak_seed

PROCESSOR = Path(__file__).with_name("eos_processor.py")
TXN_OVERRIDES = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}
TXN_TIMEOUT_MS = 6000
PARTITIONS = 3


def create_topics(bootstrap: str, *topics: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, partitions, 1) for t in topics]).values():
        f.result(30)


class Target(Protocol):
    """Where a workload runs, and the faults it suffers: one broker (`BrokerTarget`) or a
    cluster (tests/integration/cluster_txn_util.py)."""

    @property
    def bootstrap(self) -> str: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def create_topics(self, *topics: str, partitions: int = PARTITIONS) -> None: ...

    @property
    def kinds(self) -> list[str]: ...  # the kinds of fault `fault` injects (once started)

    def fault(self, rng: random.Random, note: Callable[[str], object],
              kind: str | None = None) -> str:
        """One fault (of `kind`, else drawn with `rng`), returning once it is over (`note`
        is told what is done first); returns its kind."""

    def heal(self) -> None:
        """Every broker up and running again (after a test's fault phase)."""

    def check_after(self) -> str:
        """Checks the target's own invariants once the workload is done (before stop);
        returns what it found, for the test's summary."""

    def error_lines(self) -> list[str]: ...


@dataclass
class BrokerTarget:
    """One broker process: kill -9 and restart on the same data directory and port, or
    (with `pauses`) SIGSTOP for a while: a "long pause" (a quarter of the drawn pauses)
    outlasts transaction.timeout.ms, so the coordinator aborts ones about to commit."""

    broker: BrokerProcess
    pauses: bool = True

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def start(self) -> None:
        self.broker.start()

    def stop(self) -> None:
        self.broker.stop()

    def create_topics(self, *topics: str, partitions: int = PARTITIONS) -> None:
        create_topics(self.broker.bootstrap, *topics, partitions=partitions)

    @property
    def kinds(self) -> list[str]:
        return ["kill", "pause", "long pause"] if self.pauses else ["kill"]

    def fault(self, rng: random.Random, note: Callable[[str], object],
              kind: str | None = None) -> str:
        if kind is None:  # the same draws as before kinds could be named
            kind = ("kill" if not self.pauses or rng.random() < 0.5
                    else "long pause" if rng.random() < 0.25 else "pause")
        if kind == "kill":
            note("kill")
            self.broker.kill()
            time.sleep(rng.uniform(0.2, 1.5))
            self.broker.start()
            return "kill"
        assert self.broker.proc is not None and kind in ("pause", "long pause")
        pid = self.broker.proc.pid
        note(kind)
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(rng.uniform(6.5, 8.0) if kind == "long pause" else rng.uniform(1.0, 4.0))
        finally:
            os.kill(pid, signal.SIGCONT)
        return kind

    def heal(self) -> None:
        if self.broker.proc is None or self.broker.proc.poll() is not None:
            self.broker.start()

    def check_after(self) -> str:
        return ""

    def error_lines(self) -> list[str]:
        return [ln for ln in self.broker.log_lines if " ERROR " in ln or "Traceback" in ln]


def end_offsets(bootstrap: str, topic: str, isolation: str = "read_uncommitted") -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets",
                  "isolation.level": isolation})
    try:
        n = len(c.list_topics(topic, timeout=10).topics[topic].partitions)
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                for p in range(n)]
    finally:
        c.close()


def read_committed_all(bootstrap: str, topic: str, timeout: float = 60
                       ) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record a read_committed consumer returns,
    reading every partition from the start until its position reaches the high
    watermark (so an open transaction pinning the LSO fails the read)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"final-{time.monotonic_ns()}",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        n = len(c.list_topics(topic, timeout=10).topics[topic].partitions)
        tps = [TopicPartition(topic, p, 0) for p in range(n)]
        c.assign(tps)
        out: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msgs = c.consume(10000, 0.5)
            for m in msgs:
                assert m.error() is None, m.error()
                out.append((m.partition(), m.offset(), m.value()))
            if msgs:
                continue
            positions = [tp.offset for tp in c.position(tps)]
            highs = [c.get_watermark_offsets(tp, timeout=10, cached=False)[1] for tp in tps]
            if all(p >= h for p, h in zip(positions, highs)):
                return out
        raise AssertionError(f"read_committed of {topic} did not reach the high watermark in "
                             f"{timeout}s: positions {positions}, high watermarks {highs}")
    finally:
        c.close()


def produce_input(bootstrap: str, topic: str, n: int) -> list[bytes]:
    values = [f"v{i:07d}".encode() for i in range(n)]
    failed: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                  "linger.ms": 20, "batch.num.messages": 2000})
    for i, v in enumerate(values):
        while True:
            try:
                p.produce(topic, key=v, value=v, partition=i % PARTITIONS,
                          on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(60) == 0 and not failed, failed[:5]
    return values


@dataclass
class Pipeline:
    broker: Target
    workdir: Path
    group: str = "eos-group"
    batch_range: tuple[int, int] = (50, 800)
    # transaction.timeout.ms: short on one broker, so that a killed processor's open
    # transaction ends soon; on a cluster longer than a failover (a transaction that
    # outlives it is aborted and its producer fenced, as on Kafka: a fatal error)
    txn_timeout_ms: int = TXN_TIMEOUT_MS
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    proc: subprocess.Popen[bytes] | None = None
    incarnation: int = 0
    exits: Counter[int] = field(default_factory=Counter)
    kills: int = 0
    extra_args: tuple[str, ...] = ()  # more eos_processor.py options

    def log_path(self, i: int) -> Path:
        return self.workdir / f"processor-{i:03d}.log"

    def spawn(self) -> None:
        self.incarnation += 1
        args = [sys.executable, str(PROCESSOR), self.broker.bootstrap, "in", "out",
                self.group, "eos-processor", "--batch", str(self.rng.randint(*self.batch_range)),
                "--transaction-timeout-ms", str(self.txn_timeout_ms), "--max-seconds", "900",
                *self.extra_args]
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        with self.log_path(self.incarnation).open("wb") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env,
                                         cwd=ROOT)

    def log(self, i: int | None = None) -> str:
        return self.log_path(i or self.incarnation).read_text(errors="replace")

    def wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "READY" in self.log():
                return True
            if self.reap():
                return False
            time.sleep(0.05)
        return False

    def reap(self) -> bool:
        """True (and respawns) if the processor exited by itself."""
        assert self.proc is not None
        rc = self.proc.poll()
        if rc is None:
            return False
        self.exits[rc] += 1
        self.spawn()
        return True

    def kill(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.kills += 1
        else:
            self.exits[self.proc.returncode] += 1
        self.spawn()

    def stop(self, timeout: float = 30) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def commits(self) -> int:
        return sum(self.log(i).count("COMMIT ") for i in range(1, self.incarnation + 1))

    def committed_offsets(self) -> list[int]:
        c = Consumer({"bootstrap.servers": self.broker.bootstrap, "group.id": self.group,
                      "isolation.level": "read_committed", "enable.auto.commit": False})
        try:
            tps = [TopicPartition("in", p) for p in range(PARTITIONS)]
            return [tp.offset for tp in c.committed(tps, timeout=20)]
        finally:
            c.close()


def run_pipeline(tmp_path: Path, n: int, processor_kills: int, broker_kills: int,
                 budget: float, seed: int, pipeline: type[Pipeline] | None = None,
                 target: Target | None = None) -> None:
    """`pipeline`: a `Pipeline` subclass whose `spawn()` starts another processor;
    `target`: where it runs (default: one broker), `broker_kills` its faults."""
    started = time.monotonic()
    rng = random.Random(seed)
    broker = target or BrokerTarget(BrokerProcess(tmp_path / "data", overrides=TXN_OVERRIDES),
                                    pauses=False)
    broker.start()
    pipe = (pipeline or Pipeline)(broker, tmp_path, rng=rng)
    faults: Counter[str] = Counter()
    after = ""
    try:
        broker.create_topics("in", "out")
        values = produce_input(broker.bootstrap, "in", n)
        ends = end_offsets(broker.bootstrap, "in")
        assert sum(ends) == n, ends
        produced_at = time.monotonic()
        # kill the broker after these processor kills (spread over the run)
        broker_after = {(k + 1) * processor_kills // (broker_kills + 1)
                        for k in range(broker_kills)}
        pipe.spawn()
        for i in range(processor_kills):
            assert time.monotonic() - started < budget, "kill phase over budget"
            pipe.wait_ready(30)
            time.sleep(rng.uniform(0.5, 2.0))
            if i in broker_after:
                faults[broker.fault(rng, print)] += 1
                time.sleep(rng.uniform(0.5, 2.0))
            pipe.kill()
        broker.heal()
        killed_at = time.monotonic()
        # let the last incarnation finish the input
        committed: list[int] = []
        while time.monotonic() - started < budget:
            pipe.reap()
            committed = pipe.committed_offsets()
            if committed == ends:
                break
            time.sleep(1)
        pipe.wait_ready(30)  # (a processor still importing dies of SIGTERM: rc -15)
        rc = pipe.stop()
        finished_at = time.monotonic()
        out = read_committed_all(broker.bootstrap, "out")
        everything = sum(end_offsets(broker.bootstrap, "out"))
        try:
            after = broker.check_after()
        except AssertionError as e:  # reported below, after the pipeline's summary
            after = f"FAILED: {e}"
    finally:
        pipe.stop(5)
        broker.stop()
    counts = Counter(v for _p, _o, v in out)
    expected = Counter(b"out-" + v for v in values)
    lost = expected - counts
    duplicated = counts - expected
    misplaced = [(p, v) for p, _o, v in out if int(v[5:]) % PARTITIONS != p]
    summary = (
        f"N={n} seed={seed}: lost {sum(lost.values())} (e.g. {sorted(lost)[:5]}), duplicated "
        f"{sum(duplicated.values())} (e.g. {sorted(duplicated)[:5]}), misplaced {len(misplaced)}; "
        f"processor SIGKILLs {pipe.kills}, self-exits {dict(pipe.exits)}, last exit {rc}, "
        f"broker faults {dict(faults)} {after}, committed txns {pipe.commits()}, output log "
        f"{everything} records (incl. aborted + markers) for {len(out)} committed; "
        f"input {produced_at - started:.1f}s, kill phase {killed_at - produced_at:.1f}s, "
        f"drain {finished_at - killed_at:.1f}s, total {time.monotonic() - started:.1f}s")
    print(summary)
    assert not lost and not duplicated and not misplaced, summary
    assert not after.startswith("FAILED"), summary
    assert committed == ends, f"group offsets {committed} != input end offsets {ends}; {summary}"
    assert pipe.kills >= processor_kills * 0.8, summary
    assert pipe.exits[3] == 0, f"processor hit unexpected errors: {summary}\n" + "\n".join(
        pipe.log(i)[-2000:] for i in range(1, pipe.incarnation + 1) if "ERROR" in pipe.log(i))


def test_consume_transform_produce_exactly_once_under_kill9(tmp_path: Path) -> None:
    run_pipeline(tmp_path, n=20_000, processor_kills=12, broker_kills=2, budget=150, seed=4)


@dataclass
class ConsumerProtocolPipeline(Pipeline):
    """The same processor as a KIP-848 group member (`group.protocol=consumer`)."""

    extra_args: tuple[str, ...] = ("--group-protocol", "consumer")


def test_consume_transform_produce_exactly_once_with_the_consumer_protocol(
        tmp_path: Path) -> None:
    """KIP-848: offsets fenced by member epoch (KIP-447), a killed member's partitions
    reassigned after the group's session timeout (3 s here)."""
    target = BrokerTarget(BrokerProcess(tmp_path / "data", overrides={
        **TXN_OVERRIDES, "group.consumer.session.timeout.ms": "3000",
        "group.consumer.heartbeat.interval.ms": "300"}), pauses=False)
    run_pipeline(tmp_path, n=4_000, processor_kills=4, broker_kills=0, budget=150, seed=7,
                 pipeline=ConsumerProtocolPipeline, target=target)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(not os.environ.get("TIDEGATE_SOAK"),
                    reason="soak run: `make soak` (TIDEGATE_SOAK=1)")
def test_consume_transform_produce_exactly_once_soak(tmp_path: Path) -> None:
    run_pipeline(tmp_path, n=100_000, processor_kills=80, broker_kills=10, budget=1500,
                 seed=soak_seed())
