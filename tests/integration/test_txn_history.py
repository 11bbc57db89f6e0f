"""Jepsen-style transactional queue workload against a real broker under a nemesis.

Worker threads, each with its own transactional producer (confluent-kafka) and a
read_committed consumer (half assign every partition from the start, half subscribe
in one group), run random operations and record them in a `History`
(tests/integration/history.py): transactions of 1-4 sends of unique values to known
partitions — about a fifth deliberately aborted after their records reached the log —
and polls. A nemesis meanwhile SIGKILLs the broker (restarting it on the same data
directory and port) and SIGSTOPs it for a few seconds. After the faults stop, a
read_committed read of every partition to its high watermark is recorded as the final
read and `history.check` looks for lost writes, duplicates, aborted reads, torn
transactions of unknown outcome, inconsistent offsets, non-monotonic and skipping
polls.

The broker is a `Target` of tests/integration/test_eos_pipeline.py: one broker here;
tests/integration/test_cluster_eos.py runs the same workload on a 3-broker cluster
whose nemesis kills, pauses and partitions brokers.

`make test`: one fault of each kind (kill, pause, a pause beyond the transaction
timeout), ~30 s. `make soak` (TIDEGATE_SOAK=1): 11 minutes of random faults.
"""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Protocol

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as TP
from tests.integration.conftest import BrokerProcess, soak_seed
from tests.integration.history import History, OpType, Read, Report, Send, Write, check
from tests.integration.test_eos_pipeline import (
    TXN_OVERRIDES,
    BrokerTarget,
    Target,
    read_committed_all,
)

TOPIC = "queue"
PARTITIONS = 3
TXN_TIMEOUT_MS = 6000
ABORT_FRACTION = 0.2
QUIET_AFTER_FAULTS = 5  # seconds of workload after the last fault (make test's runs)


class Endpoint(Protocol):
    @property
    def bootstrap(self) -> str: ...


class Worker(threading.Thread):
    txn_timeout_ms = TXN_TIMEOUT_MS  # transaction.timeout.ms of its producers

    def __init__(self, idx: int, broker: Endpoint, history: History, stop_at: float,
                 seed: int, isolation: str = "read_committed") -> None:
        super().__init__(name=f"worker-{idx}", daemon=True)
        self.idx = idx
        self.isolation = isolation
        self.broker = broker
        self.history = history
        self.stop_at = stop_at
        self.rng = random.Random(seed)
        self.seq = 0
        self.subscribe = idx % 2 == 1
        self.producer: Producer | None = None
        self.consumer: Consumer | None = None
        self.errors: list[str] = []
        self.producers_made = 0

    # -- clients -------------------------------------------------------------------
    def new_producer(self) -> Producer | None:
        """A producer with this worker's transactional.id, initialised (which fences a
        previous one and aborts its open transaction); None when out of time."""
        while time.monotonic() < self.stop_at:
            p = Producer({"bootstrap.servers": self.broker.bootstrap,
                          "transactional.id": f"queue-{self.idx}",
                          "transaction.timeout.ms": self.txn_timeout_ms, "linger.ms": 2})
            self.producers_made += 1
            while time.monotonic() < self.stop_at:
                try:
                    p.init_transactions(10)
                    return p
                except KafkaException as e:
                    self.note("init_transactions", e)
                    if e.args[0].fatal():
                        break
                    time.sleep(0.2)
        return None

    def new_consumer(self) -> Consumer:
        conf = {"bootstrap.servers": self.broker.bootstrap, "isolation.level": self.isolation,
                "enable.auto.commit": self.subscribe, "auto.offset.reset": "earliest",
                "group.id": "queue-group" if self.subscribe else f"queue-reader-{self.idx}",
                "session.timeout.ms": 10000}
        c = Consumer(conf)
        self.history.add(self.idx, "ok", "reset", "new consumer")
        if self.subscribe:
            def reset(_c: Consumer, parts: list[TP]) -> None:
                self.history.add(self.idx, "ok", "reset", "rebalance")
            c.subscribe([TOPIC], on_assign=reset, on_revoke=reset, on_lost=reset)
        else:
            c.assign([TP(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        return c

    def note(self, what: str, e: BaseException) -> None:
        if len(self.errors) < 200:
            self.errors.append(f"{what}: {e}")

    # -- operations ----------------------------------------------------------------
    def run(self) -> None:
        try:
            self.producer = self.new_producer()
            self.consumer = self.new_consumer()
            while time.monotonic() < self.stop_at:
                if self.rng.random() < 0.55:
                    self.txn()
                else:
                    self.poll()
        except Exception as e:  # recorded and reported by the test
            self.note("worker crashed", e)
        finally:
            if self.consumer is not None:
                self.consumer.close()

    def txn(self) -> None:
        if self.producer is None:
            self.producer = self.new_producer()
            if self.producer is None:
                return
        p = self.producer
        sends = []
        for _ in range(self.rng.randint(1, 4)):
            self.seq += 1
            sends.append(Send(self.rng.randrange(PARTITIONS), f"{self.idx}-{self.seq}"))
        abort = self.rng.random() < ABORT_FRACTION
        offsets: dict[str, int] = {}

        def delivered(err: KafkaError | None, msg: object) -> None:
            if err is None:
                offsets[msg.value().decode()] = msg.offset()  # type: ignore[attr-defined]

        self.history.invoke(self.idx, "txn", sends)
        outcome: OpType = "fail"  # until commit_transaction is called, it can never commit
        try:
            p.begin_transaction()
            for s in sends:
                p.produce(TOPIC, key=s.value.encode(), value=s.value.encode(),
                          partition=s.partition, on_delivery=delivered)
            if abort:
                p.flush(5)  # let the aborted records reach the log
                p.abort_transaction(10)
            else:
                outcome = "info"
                self.commit(p)
                outcome = "ok"
        except KafkaException as e:
            self.note("txn", e)
            err = e.args[0]
            if err.fatal() or not self.try_abort(p):
                self.producer = None  # the next one fences this one and aborts its txn
        writes = [Write(s.partition, offsets.get(s.value), s.value) for s in sends]
        self.history.add(self.idx, outcome, "txn", writes)

    def commit(self, p: Producer) -> None:
        deadline = time.monotonic() + 30
        while True:
            try:
                p.commit_transaction(10)
                return
            except KafkaException as e:
                err = e.args[0]
                if not err.retriable() or err.txn_requires_abort() or \
                        time.monotonic() > deadline:
                    raise
                self.note("commit retry", e)

    def try_abort(self, p: Producer) -> bool:
        for _ in range(3):
            try:
                p.abort_transaction(10)
                return True
            except KafkaException as e:
                self.note("abort", e)
                if e.args[0].fatal():
                    return False
        return False

    def poll(self) -> None:
        assert self.consumer is not None
        self.history.invoke(self.idx, "poll")
        try:
            msgs = self.consumer.consume(200, 0.2)
        except KafkaException as e:
            self.note("consume", e)
            self.history.add(self.idx, "info", "poll", [])
            self.consumer.close()
            self.consumer = self.new_consumer()
            return
        reads = []
        for m in msgs:
            err = m.error()
            if err is None:
                reads.append(Read(m.partition(), m.offset(), m.value().decode()))
            elif err.code() != KafkaError._PARTITION_EOF:
                self.note("poll", KafkaException(err))
        self.history.add(self.idx, "ok", "poll", reads)


class Nemesis(threading.Thread):
    """Every 2-5 s one fault of the target (`Target.fault`: for one broker, SIGKILL +
    restart or SIGSTOP ... SIGCONT), recorded in the history, until `stop_at`.

    With `rounds` (make test), the faults go round the target's kinds, every kind once
    per round in a shuffled order, 1-3 s apart, and the nemesis stops after `rounds`
    rounds and at least `at_least` faults: every kind is hit in a short run."""

    def __init__(self, target: Target, history: History, stop_at: float, seed: int,
                 rounds: int | None = None, at_least: int = 3):
        super().__init__(name="nemesis", daemon=True)
        self.target, self.history, self.stop_at = target, history, stop_at
        self.rng = random.Random(seed)
        self.rounds, self.at_least = rounds, at_least
        self.faults: Counter[str] = Counter()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            deck: list[str] = []
            for n in itertools.count():
                if self.rounds is not None and n >= max(
                        self.rounds * len(self.target.kinds), self.at_least):
                    return
                time.sleep(self.rng.uniform(2.0, 5.0) if self.rounds is None
                           else self.rng.uniform(1.0, 3.0))
                if time.monotonic() > self.stop_at:
                    return
                kind = None
                if self.rounds is not None:
                    if not deck:
                        deck = self.rng.sample(self.target.kinds, len(self.target.kinds))
                    kind = deck.pop()
                self.faults[self.target.fault(
                    self.rng, lambda what: self.history.add("nemesis", "info", what),
                    kind)] += 1
        except BaseException as e:
            self.error = e


def run_workload(tmp_path: Path, duration: float, workers: int, seed: int,
                 nemesis_on: bool = True, isolation: str = "read_committed",
                 target: Target | None = None, fault_rounds: int | None = None) -> Report:
    """The workload for `duration` seconds, faults from 3 s in until 8 s before its end.
    With `fault_rounds` (make test: see `Nemesis`), `duration` is a bound: the workers
    stop QUIET_AFTER_FAULTS seconds after the nemesis's last fault, and the run fails
    unless every kind of fault was injected `fault_rounds` times."""
    started = time.monotonic()
    broker = target or BrokerTarget(BrokerProcess(tmp_path / "data", overrides=TXN_OVERRIDES))
    broker.start()
    history = History()
    after = ""
    try:
        broker.create_topics(TOPIC, partitions=PARTITIONS)
        stop_at = time.monotonic() + duration
        # faults from 3 s in until 8 s before the workers stop, so the end is healthy
        nemesis = Nemesis(broker, history, stop_at - 8, seed, fault_rounds)
        threads = [Worker(i, broker, history, stop_at, seed * 100 + i, isolation)
                   for i in range(workers)]
        for t in threads:
            t.start()
        if nemesis_on:
            time.sleep(3)
            nemesis.start()
            nemesis.join(duration + 30)
            if fault_rounds is not None:  # a healthy end, then the final read
                for t in threads:
                    t.stop_at = min(t.stop_at, time.monotonic() + QUIET_AFTER_FAULTS)
        for t in threads:
            t.join(duration + 90)
        assert not any(t.is_alive() for t in threads) and not nemesis.is_alive(), \
            "a thread did not stop"
        assert nemesis.error is None, repr(nemesis.error)
        broker.heal()
        final = read_committed_all(broker.bootstrap, TOPIC, timeout=60)
        history.add("final", "ok", "final-read",
                    [Read(p, o, v.decode()) for p, o, v in final])
        if isolation == "read_committed":
            try:
                after = broker.check_after()
            except AssertionError as e:  # reported below, after the history's summary
                after = f"FAILED: {e}"
    finally:
        broker.stop()
    report = check(history.ops)
    if os.environ.get("TIDEGATE_SOAK"):  # kept for analysis with the data (--basetemp)
        with open(tmp_path / "history.txt", "w") as f:
            f.writelines(f"{op}\n" for op in history.ops)
        if isinstance(broker, BrokerTarget):
            (tmp_path / "broker.log").write_text("\n".join(broker.broker.log_lines) + "\n")
    crashed = [e for t in threads for e in t.errors if e.startswith("worker crashed")]
    broker_errors = broker.error_lines()
    summary = (f"seed={seed} {report.summary()}\nnemesis: {dict(nemesis.faults)} {after}; "
               f"producers made "
               f"{sum(t.producers_made for t in threads)}; client errors "
               f"{sum(len(t.errors) for t in threads)} (e.g. "
               f"{[e for t in threads for e in t.errors][:3]}); broker ERROR lines "
               f"{len(broker_errors)} (e.g. {broker_errors[:3]}); "
               f"{time.monotonic() - started:.1f}s")
    print(summary)
    assert not crashed, crashed
    if isolation != "read_committed":
        return report
    assert report.valid, summary
    assert not after.startswith("FAILED"), summary
    # the run must have exercised what it checks
    assert report.stats["ok"] >= 20 and report.stats["fail"] >= 3, summary
    assert report.stats["polled"] > 0 and sum(nemesis.faults.values()) >= 3, summary
    if fault_rounds is not None:
        assert all(nemesis.faults[k] >= fault_rounds for k in broker.kinds), summary
    return report


def test_transactional_queue_history_under_nemesis(tmp_path: Path) -> None:
    """A kill -9, a pause and a pause beyond transaction.timeout.ms, in a random order:
    about 30 s (the soak below runs 11 minutes of random faults)."""
    run_workload(tmp_path, duration=60, workers=4, seed=12, fault_rounds=1)


def test_the_workload_catches_read_uncommitted_consumers(tmp_path: Path) -> None:
    """The harness end to end can fail: consumers at read_uncommitted see the
    deliberately aborted records, and the checker reports them as aborted reads."""
    report = run_workload(tmp_path, duration=5, workers=2, seed=3, nemesis_on=False,
                          isolation="read_uncommitted")
    assert report.counts["aborted_read"] > 0, report.summary()


@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.skipif(not os.environ.get("TIDEGATE_SOAK"),
                    reason="soak run: `make soak` (TIDEGATE_SOAK=1)")
def test_transactional_queue_history_soak(tmp_path: Path) -> None:
    run_workload(tmp_path, duration=660, workers=6, seed=soak_seed())
