"""Tidegate's transactional producer against a real broker, with confluent-kafka as the
read_committed oracle: commit and abort under transaction versions 1 and 2, offsets in
a transaction (KIP-447) for a confluent-kafka group, fencing, a commit retried after
an unknown outcome, two-phase commit across processes killed with SIGKILL (KIP-939),
and the check-back helper with SQLite.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import TopicPartition as CKTopicPartition
from tests.integration.conftest import ROOT, BrokerProcess
from tests.integration.test_transactions import create, read_all

from tidegate.client import (
    ConsumerGroupMetadata,
    FatalProducerError,
    IllegalStateError,
    PreparedTxnState,
    Producer,
    ProducerFencedError,
    TopicPartition,
    TransactionAbortableError,
    TxnState,
)
from tidegate.client.producer.producer import AsyncProducer


@pytest.fixture(scope="module")
def tb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # default settings: two-phase commit (KIP-939) is on unless the operator turns it off
    b = BrokerProcess(tmp_path_factory.mktemp("clienttxn") / "data")
    b.start()
    try:
        yield b
    finally:
        b.stop()


def producer(b: BrokerProcess, txn_id: str, version: int = 2, **extra: object) -> Producer:
    return Producer({"bootstrap.servers": b.bootstrap, "transactional.id": txn_id,
                     "tidegate.transaction.version.max": version, "linger.ms": 5, **extra})


@pytest.mark.parametrize("version", [1, 2])
def test_commit_and_abort_seen_by_confluent_read_committed(tb: BrokerProcess,
                                                           version: int) -> None:
    topic_a, topic_b = f"ca-{version}", f"cb-{version}"
    create(tb.bootstrap, topic_a, topic_b, partitions=3)
    p = producer(tb, f"commit-abort-{version}", version)
    try:
        assert p.init_transactions() is None
        assert p._async._txn is not None and p._async._txn.state.version == version
        epoch0 = p._async._idem.epoch if p._async._idem else -1
        p.begin_transaction()
        for i in range(30):
            p.send(topic_a, f"keep-{i}".encode(), key=str(i).encode())
        p.send(topic_b, b"keep-b")
        p.commit_transaction()
        assert p.transaction_state is TxnState.READY
        p.begin_transaction()
        for i in range(10):
            p.send(topic_a, f"drop-{i}".encode(), key=str(i).encode())
        p.flush()  # sent, then aborted: markers must hide them
        p.abort_transaction()
        p.begin_transaction()
        p.send(topic_b, b"never-sent")
        p.abort_transaction()  # dropped before sending
        p.begin_transaction()
        p.send(topic_a, b"keep-last")
        p.commit_transaction()
        epoch1 = p._async._idem.epoch if p._async._idem else -1
    finally:
        p.close()
    # version 2 bumps the epoch at every EndTxn (3, or 4 if "never-sent" was sent before
    # the abort: then the coordinator knew of that transaction); version 1 keeps it
    assert (epoch1 - epoch0) in ((3, 4) if version == 2 else (0,))
    got_a = read_all(tb.bootstrap, topic_a, "read_committed")
    assert sorted(got_a) == sorted([f"keep-{i}".encode() for i in range(30)] + [b"keep-last"])
    assert read_all(tb.bootstrap, topic_b, "read_committed") == [b"keep-b"]
    uncommitted = read_all(tb.bootstrap, topic_a, "read_uncommitted")
    assert b"drop-3" in uncommitted  # the aborted records were written


def test_misuse_raises_the_seeds_errors(tb: BrokerProcess) -> None:
    with pytest.raises(IllegalStateError, match=r"transactional\.id"):
        Producer({"bootstrap.servers": tb.bootstrap}).init_transactions()
    p = producer(tb, "misuse")
    try:
        with pytest.raises(IllegalStateError, match="init_transactions"):
            p.send("ca-2", b"x")
        with pytest.raises(IllegalStateError, match="init_transactions"):
            p.begin_transaction()
        p.init_transactions()
        with pytest.raises(IllegalStateError, match=r"UNINITIALIZED|init_transactions"):
            p.init_transactions()
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            p.send("ca-2", b"x")
        with pytest.raises(IllegalStateError):
            p.send_offsets_to_transaction({TopicPartition("ca-2", 0): 1},
                                          ConsumerGroupMetadata("g"))
        with pytest.raises(IllegalStateError):
            p.commit_transaction()
        p.begin_transaction()
        with pytest.raises(IllegalStateError, match="already open"):
            p.begin_transaction()
        p.abort_transaction()
        assert p.transaction_state is TxnState.READY
    finally:
        p.close()


@pytest.mark.parametrize("version", [1, 2])
def test_offsets_committed_with_the_transaction(tb: BrokerProcess, version: int) -> None:
    src, group = f"off-src-{version}", f"eos-group-{version}"
    create(tb.bootstrap, src, partitions=1)
    c = CKConsumer({"bootstrap.servers": tb.bootstrap, "group.id": group,
                    "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.subscribe([src])
    deadline = time.monotonic() + 30
    while not c.assignment() and time.monotonic() < deadline:
        c.poll(0.2)
    # confluent-kafka's group metadata is opaque: take generation and member from the
    # broker
    info = _describe_member(tb, group)
    meta = ConsumerGroupMetadata(group, info[0], info[1], None)
    p = producer(tb, f"offsets-{version}", version)
    tp = TopicPartition(src, 0)
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(src, b"out")
        p.send_offsets_to_transaction({tp: 7}, meta)
        p.abort_transaction()
        assert _committed(c, src) < 0  # aborted: nothing committed
        p.begin_transaction()
        p.send_offsets_to_transaction({tp: 42}, meta)
        p.commit_transaction()
        deadline = time.monotonic() + 10
        while _committed(c, src) != 42 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _committed(c, src) == 42
        # a stale generation is refused: abortable, and abort recovers
        p.begin_transaction()
        with pytest.raises(TransactionAbortableError):
            p.send_offsets_to_transaction({tp: 50}, ConsumerGroupMetadata(
                group, info[0] + 5, info[1], None))
        assert p.transaction_state is TxnState.ABORTABLE_ERROR
        with pytest.raises(TransactionAbortableError):
            p.commit_transaction()
        p.abort_transaction()
        assert _committed(c, src) == 42
    finally:
        p.close()
        c.close()


def _committed(c: CKConsumer, topic: str) -> int:
    return int(c.committed([CKTopicPartition(topic, 0)], timeout=10)[0].offset)


def _describe_member(b: BrokerProcess, group: str) -> tuple[int, str]:
    """The group's generation and its one member id, from DescribeGroups."""
    from tests.integration.rawclient import RawClient
    raw = RawClient(b.bootstrap)
    try:
        coord = raw.call(10, 4, {"key_type": 0, "coordinator_keys": [group]}).coordinators[0]
        assert coord.error_code.name == "none"
        r = raw.call(15, 5, {"groups": [group], "include_authorized_operations": False})
        g = r.groups[0]
        gen = _generation(raw, group, str(g.members[0].member_id))
        return gen, str(g.members[0].member_id)
    finally:
        raw.close()


def _generation(raw: object, group: str, member: str) -> int:
    """The generation: a heartbeat with a guessed generation answers ILLEGAL_GENERATION
    until it is right (DescribeGroups does not carry it)."""
    for gen in range(1, 50):
        r = raw.call(12, 4, {"group_id": group, "generation_id": gen,  # type: ignore[attr-defined]
                             "member_id": member, "group_instance_id": None})
        if r.error_code.name in ("none", "rebalance_in_progress"):
            return gen
    raise AssertionError("no generation found")


def test_a_second_producer_fences_the_first(tb: BrokerProcess) -> None:
    create(tb.bootstrap, "fence", partitions=2)
    p1 = producer(tb, "fenced-id")
    p2 = producer(tb, "fenced-id")
    try:
        p1.init_transactions()
        p1.begin_transaction()
        p1.send("fence", b"zombie")
        p1.flush()
        p2.init_transactions()  # bumps the epoch, aborts p1's transaction
        p2.begin_transaction()
        p2.send("fence", b"live")
        p2.commit_transaction()
        with pytest.raises(ProducerFencedError):
            p1.send("fence", b"late").result(10)
            p1.commit_transaction()
        assert p1.transaction_state is TxnState.FATAL_ERROR
        with pytest.raises(ProducerFencedError):
            p1.begin_transaction()
    finally:
        p1.close()
        p2.close()
    assert read_all(tb.bootstrap, "fence", "read_committed") == [b"live"]


def test_commit_after_a_fatal_error_raises_it_again(tb: BrokerProcess) -> None:
    """Misuse: once fenced (FATAL_ERROR), commit_transaction() and abort_transaction()
    raise the fatal error again; nothing of the zombie's transaction becomes visible."""
    create(tb.bootstrap, "fatal-commit", partitions=1)
    p1 = producer(tb, "fatal-commit-id")
    p2 = producer(tb, "fatal-commit-id")
    try:
        p1.init_transactions()
        p1.begin_transaction()
        p1.send("fatal-commit", b"zombie")
        p1.flush()
        p2.init_transactions()  # fences p1 and aborts its transaction
        with pytest.raises(ProducerFencedError):
            p1.commit_transaction()
        assert p1.transaction_state is TxnState.FATAL_ERROR
        for call in (p1.commit_transaction, p1.abort_transaction):
            with pytest.raises(ProducerFencedError):
                call()
            assert p1.transaction_state is TxnState.FATAL_ERROR
    finally:
        p1.close()
        p2.close()
    assert read_all(tb.bootstrap, "fatal-commit", "read_committed") == []


def test_async_producer_commit(tb: BrokerProcess) -> None:
    import asyncio
    create(tb.bootstrap, "async-txn", partitions=2)

    async def run() -> None:
        async with AsyncProducer({"bootstrap.servers": tb.bootstrap,
                                  "transactional.id": "async-1"}) as p:
            await p.init_transactions()
            p.begin_transaction()
            futs = [await p.send("async-txn", f"a{i}".encode()) for i in range(20)]
            await p.commit_transaction()
            assert all(f.done() and f.exception() is None for f in futs)
    asyncio.run(run())
    assert sorted(read_all(tb.bootstrap, "async-txn", "read_committed")) == sorted(
        f"a{i}".encode() for i in range(20))


# -- two-phase commit (KIP-939) across processes -------------------------------------

_PREPARE = """
import json, os, sys, time
from tidegate.client import Producer
p = Producer({{"bootstrap.servers": "{bootstrap}", "transactional.id": "{tid}",
              "transaction.two.phase.commit.enable": True,
              "tidegate.transaction.version.max": {version}}})
p.init_transactions()
p.begin_transaction()
for i in range(5):
    p.send("{topic}", f"2pc-{{i}}".encode())
state = p.prepare_transaction()
print(state.to_json(), flush=True)
time.sleep(3600)  # killed with SIGKILL here
"""

_COMPLETE = """
import json, sys
from tidegate.client import Producer, PreparedTxnState
p = Producer({{"bootstrap.servers": "{bootstrap}", "transactional.id": "{tid}",
              "transaction.two.phase.commit.enable": True,
              "tidegate.transaction.version.max": {version}}})
found = p.init_transactions(keep_prepared_txn=True)
given = PreparedTxnState.from_json(sys.argv[1])
print(json.dumps({{"found": found.to_json() if found else None}}), flush=True)
p.complete_transaction(given, commit=sys.argv[2] == "commit")
p.close()
"""


def _python(code: str, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.parametrize(("version", "outcome"), [(2, "commit"), (1, "commit"),
                                                  (2, "abort")])
def test_two_phase_commit_prepared_then_killed_then_completed(
        tb: BrokerProcess, version: int, outcome: str) -> None:
    topic, tid = f"2pc-{version}-{outcome}", f"2pc-{version}-{outcome}"
    create(tb.bootstrap, topic, partitions=2)
    prep = _python(_PREPARE.format(bootstrap=tb.bootstrap, tid=tid, topic=topic,
                                   version=version))
    assert prep.stdout is not None
    line = prep.stdout.readline()
    assert line, prep.stderr.read() if prep.stderr else ""
    os.kill(prep.pid, signal.SIGKILL)
    prep.wait()
    state = PreparedTxnState.from_json(line)
    assert state.transactional_id == tid
    # prepared, not decided: invisible to read_committed (and the LSO is pinned)
    assert read_all(tb.bootstrap, topic, "read_committed", expect_end=False, timeout=3) == []
    done = _python(_COMPLETE.format(bootstrap=tb.bootstrap, tid=tid, version=version),
                   line.strip(), outcome)
    out, err = done.communicate(timeout=60)
    assert done.returncode == 0, err
    assert json.loads(out.splitlines()[0])["found"] == line.strip()
    want = sorted(f"2pc-{i}".encode() for i in range(5)) if outcome == "commit" else []
    assert sorted(read_all(tb.bootstrap, topic, "read_committed")) == want


def test_complete_with_a_mismatched_state_is_a_clear_error(tb: BrokerProcess) -> None:
    from tidegate.client import PreparedTxnMismatchError
    create(tb.bootstrap, "2pc-mismatch", partitions=1)
    cfg = {"transaction.two.phase.commit.enable": True}
    p = producer(tb, "2pc-mismatch", **cfg)
    p.init_transactions()
    p.begin_transaction()
    p.send("2pc-mismatch", b"m")
    state = p.prepare_transaction()
    p.close()
    q = producer(tb, "2pc-mismatch", **cfg)
    try:
        found = q.init_transactions(keep_prepared_txn=True)
        assert found == state
        wrong = PreparedTxnState(state.transactional_id, state.producer_id, state.epoch - 1)
        with pytest.raises(PreparedTxnMismatchError, match="not the given"):
            q.complete_transaction(wrong, commit=True)
        q.complete_transaction(state, commit=True)
    finally:
        q.close()
    assert read_all(tb.bootstrap, "2pc-mismatch", "read_committed") == [b"m"]


# -- check-back with SQLite (examples/checkback_sqlite.py) ---------------------------


def _example(b: BrokerProcess, db: Path, topic: str,
             *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, str(ROOT / "examples" / "checkback_sqlite.py"),
                           b.bootstrap, "--db", str(db), "--topic", topic, *args],
                          capture_output=True, text=True, env=env, timeout=90)


def _db_orders(db: Path) -> list[int]:
    import sqlite3
    with sqlite3.connect(db) as conn:
        return sorted(int(r[0]) for r in conn.execute("SELECT id FROM orders"))


@pytest.mark.parametrize(("crash", "kept"), [("after-local", True), ("before-local", False)])
def test_checkback_resolves_what_a_killed_process_left(tb: BrokerProcess, tmp_path: Path,
                                                       crash: str, kept: bool) -> None:
    topic = f"orders-{crash}"
    create(tb.bootstrap, topic, partitions=2)
    db = tmp_path / "orders.db"
    first = _example(tb, db, topic, "--orders", "2")
    assert first.returncode == 0, first.stderr
    killed = _example(tb, db, topic, "--orders", "1", "--first-order", "3", "--crash", crash)
    assert killed.returncode == -signal.SIGKILL
    # prepared, undecided: the order's record is invisible. Read to the LSO of both
    # partitions (the open order pins partition 1's), not to the first quiet 0.2 s: a
    # consumer may fetch one partition a fetch.wait.max.ms after the other.
    assert sorted(read_all(tb.bootstrap, topic, "read_committed")) == [b"order 1",
                                                                       b"order 2"]
    again = _example(tb, db, topic, "--orders", "1", "--first-order", "4",
                     *(["--unknown-first"] if kept else []))
    assert again.returncode == 0, again.stderr
    verdict = "commit" if kept else "abort"
    checks = 2 if kept else 1
    assert f": {verdict} after {checks} check(s)" in again.stdout, again.stdout
    want = [1, 2, 3, 4] if kept else [1, 2, 4]
    assert _db_orders(db) == want
    got = read_all(tb.bootstrap, topic, "read_committed")
    assert sorted(got) == sorted(f"order {n}".encode() for n in want)


def test_two_phase_commit_refused_by_the_broker_says_what_to_set(tmp_path: Path) -> None:
    """With transaction.two.phase.commit.enable=false on the broker, a 2PC producer and
    the check-back example fail at once, naming the broker setting."""
    b = BrokerProcess(tmp_path / "data",
                      overrides={"transaction.two.phase.commit.enable": "false"})
    b.start()
    try:
        p = producer(b, "2pc-refused", **{"transaction.two.phase.commit.enable": True})
        try:
            with pytest.raises(FatalProducerError) as e:
                p.init_transactions()
        finally:
            p.close()
        assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in str(e.value)
        assert "Start the broker with transaction.two.phase.commit.enable=true" in str(e.value)
        started = time.monotonic()
        r = _example(b, tmp_path / "orders.db", "orders")
        assert r.returncode == 1 and time.monotonic() - started < 20
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith("tidegate.client.errors.FatalProducerError: InitProducerId")
        assert "transaction.two.phase.commit.enable=true" in last, last
        assert _db_orders(tmp_path / "orders.db") == []
    finally:
        b.stop()
