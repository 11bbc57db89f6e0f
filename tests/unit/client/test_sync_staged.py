"""The blocking consumer's staged polls (`consumer/staging.py`): polls drained ahead
on the loop thread and taken on the application's thread must behave exactly as polls
that go to the loop. Each test stops a race that a naive pre-drain gets wrong:
positions and commits counting staged records, a seek, pause, reassignment or
rebalance letting a stale staged record through, an error waiting behind staged
records, the group not knowing the application polls."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tidegate.client import Consumer, Producer, TopicPartition
from tidegate.client.consumer import staging
from tidegate.client.loop_thread import LoopThread
from tidegate.common.errors import KafkaError

from .fake_group import FakeGroupBroker

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)
N = 400  # records per partition
FAST = {"heartbeat_interval_ms": 50, "session_timeout_ms": 1500,
        "max_poll_interval_ms": 4000, "retry_backoff_ms": 20,
        "auto_offset_reset": "earliest", "max_poll_records": 10}


@pytest.fixture(scope="module")
def broker() -> Iterator[FakeGroupBroker]:
    host = LoopThread("fake-broker")
    b = FakeGroupBroker(topics={"t": 2})
    host.run(b.start())
    try:
        with Producer(bootstrap_servers=b.bootstrap, linger_ms=1,
                      enable_idempotence=False) as p:
            for i in range(2 * N):
                p.send("t", b"v%d" % i, partition=i % 2)
            p.flush()
        yield b
    finally:
        host.run(b.stop())
        host.stop()


def consumer(b: FakeGroupBroker, **overrides: Any) -> Consumer:
    return Consumer(**{"bootstrap_servers": b.bootstrap, **FAST, **overrides})


def wait_staged(c: Consumer, n: int = 1) -> None:
    """Until the loop has staged `n` polls ahead."""
    deadline = time.monotonic() + 5
    while len(c._staged._staged) < n:
        assert time.monotonic() < deadline, "nothing staged"
        time.sleep(0.005)


def first_poll(c: Consumer) -> list[Any]:
    deadline = time.monotonic() + 5
    while not (got := c.poll(timeout_ms=200)):
        assert time.monotonic() < deadline
    return got


def offsets(records: list[Any], tp: TopicPartition) -> list[int]:
    return [r.offset for r in records if (r.topic, r.partition) == tp]


def drain_all(c: Consumer, got: list[Any], want: int) -> None:
    deadline = time.monotonic() + 10
    while len(got) < want and time.monotonic() < deadline:
        got += c.poll(timeout_ms=100)


def test_position_and_commit_count_only_records_handed_out(broker: FakeGroupBroker) -> None:
    with consumer(broker, group_id="g-commit", enable_auto_commit=False) as c:
        c.assign([TP0])
        got = first_poll(c)
        assert offsets(got, TP0) == list(range(10))
        wait_staged(c)  # the loop's own position is past the staged records by now
        assert c.position(TP0) == 10
        c.commit()
        assert c.committed([TP0])[TP0].offset == 10  # type: ignore[union-attr]
        assert offsets(c.poll(timeout_ms=1000), TP0) == list(range(10, 20))


def test_close_commits_only_records_handed_out(broker: FakeGroupBroker) -> None:
    with consumer(broker, group_id="g-close", auto_commit_interval_ms=60_000) as c:
        c.assign([TP0])
        assert offsets(first_poll(c), TP0) == list(range(10))
        wait_staged(c, 2)
    assert broker.committed[("g-close", "t", 0)][0] == 10


def test_seek_between_polls_drops_staged_records(broker: FakeGroupBroker) -> None:
    with consumer(broker) as c:
        c.assign([TP0])
        first_poll(c)
        wait_staged(c)
        c.seek(TP0, 300)
        assert offsets(c.poll(timeout_ms=1000), TP0) == list(range(300, 310))
        wait_staged(c)
        c.seek(TP0, 3)
        assert offsets(c.poll(timeout_ms=1000), TP0) == list(range(3, 13))
        wait_staged(c)
        c.seek_to_end(TP0)
        assert c.poll(timeout_ms=200) == []
        assert c.position(TP0) == N


def test_pause_between_polls_holds_back_staged_records(broker: FakeGroupBroker) -> None:
    with consumer(broker) as c:
        c.assign([TP0, TP1])
        got = first_poll(c)
        wait_staged(c, 4)
        c.pause(TP0)
        paused: list[Any] = []
        for _ in range(5):
            paused += c.poll(timeout_ms=200)
        assert paused and not offsets(paused, TP0)
        c.resume(TP0)
        got += paused
        drain_all(c, got, 2 * N)
        assert offsets(got, TP0) == list(range(N))  # nothing lost, nothing twice
        assert offsets(got, TP1) == list(range(N))


def test_reassignment_between_polls_drops_staged_records(broker: FakeGroupBroker) -> None:
    with consumer(broker, group_id="g-assign", enable_auto_commit=False) as c:
        c.assign([TP0, TP1])
        got = first_poll(c)
        wait_staged(c, 4)
        handed0 = len(offsets(got, TP0))
        c.commit()
        c.assign([TP1])
        after: list[Any] = []
        drain_all(c, after, 2 * N)
        assert not offsets(after, TP0)
        assert offsets(got + after, TP1) == list(range(N))
        assert c.committed([TP0])[TP0].offset == handed0  # type: ignore[union-attr]


def test_an_error_surfaces_on_the_next_poll_before_staged_records(
        broker: FakeGroupBroker) -> None:
    with consumer(broker) as c:
        c.assign([TP0])
        got = first_poll(c)
        wait_staged(c)
        fetcher = c._async._fetcher
        assert fetcher is not None
        c._loop.call(lambda: fetcher.report(KafkaError("injected")))
        with pytest.raises(KafkaError, match="injected"):
            c.poll(timeout_ms=1000)
        drain_all(c, got, N)
        assert offsets(got, TP0) == list(range(N))  # the staged records still come


def test_max_records_and_poll_kind_changes_keep_the_order(broker: FakeGroupBroker) -> None:
    with consumer(broker) as c:
        c.assign([TP0])
        got = first_poll(c)
        wait_staged(c, 4)
        small = c.poll(timeout_ms=1000, max_records=3)
        assert offsets(small, TP0) == list(range(10, 13))
        wait_staged(c)
        batches = c.poll_batches(timeout_ms=1000)
        assert [r.offset for r in batches[TP0]] == list(range(13, 23))
        got += small
        got += [r for r in c.poll(timeout_ms=1000)]
        assert offsets(got, TP0)[-1] == 32


def test_fast_polls_tell_the_group_the_application_polls(broker: FakeGroupBroker) -> None:
    with consumer(broker, group_id="g-clock") as c:
        c.assign([TP0])
        first_poll(c)
        wait_staged(c, 2)
        group = c._async._group
        assert group is not None
        before = time.monotonic()
        time.sleep(0.01)
        c._staged._take_until = time.monotonic() + 1  # as just after group work
        assert c._staged.take("poll", 10) is not None  # taken here, not on the loop
        assert group._last_poll >= before


def test_auto_commit_runs_on_time_while_polls_are_taken_staged(
        broker: FakeGroupBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    """The auto-commit runs in a poll on the loop: once it is due, a staged poll is
    not taken (the poll goes to the loop, which commits), however long ago the last
    group work was (GROUP_WORK_S is 10 s here)."""
    monkeypatch.setattr(staging, "GROUP_WORK_S", 10.0)
    with consumer(broker, group_id="g-auto", auto_commit_interval_ms=40) as c:
        c.assign([TP0])
        first_poll(c)  # the group work ran on the loop then
        at = time.monotonic()
        wait_staged(c, 2)
        time.sleep(max(0.0, at + 0.05 - time.monotonic()))  # the commit is due now
        assert c._staged.take("poll", 10) is None
        assert offsets(c.poll(timeout_ms=1000), TP0) == list(range(10, 20))  # on the loop
        deadline = time.monotonic() + 2
        while broker.committed.get(("g-auto", "t", 0), (0,))[0] < 10:
            assert time.monotonic() < deadline
            time.sleep(0.005)


def test_revoked_partitions_are_never_returned_and_nothing_is_lost(
        broker: FakeGroupBroker) -> None:
    """Two members share a topic; the second joins while the first has polls staged.
    The first commits on revocation what it handed out, the second resumes there:
    every record is consumed once."""
    seen: dict[str, list[Any]] = {"a": [], "b": []}
    revoked_at: dict[str, dict[TopicPartition, int]] = {"a": {}, "b": {}}
    stop = threading.Event()
    staged = threading.Event()
    errors: list[BaseException] = []

    class Listener:
        def __init__(self, name: str) -> None:
            self.name = name

        def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
            for tp in partitions:
                revoked_at[self.name][tp] = len(seen[self.name])

        def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
            for tp in partitions:
                revoked_at[self.name].pop(tp, None)

    def member(name: str, delay: float) -> None:
        try:
            with consumer(broker, group_id="g-rebalance", max_poll_records=5) as c:
                c.subscribe(["t"], Listener(name))
                while not stop.is_set():
                    seen[name] += c.poll(timeout_ms=50)
                    if name == "a" and seen["a"] and len(c._staged._staged) >= 2:
                        staged.set()
                        time.sleep(delay)  # the app is slow: b joins meanwhile
        except BaseException as e:
            errors.append(e)

    a = threading.Thread(target=member, args=("a", 0.02))
    b = threading.Thread(target=member, args=("b", 0.0))
    a.start()
    try:
        assert staged.wait(10)
        b.start()
        deadline = time.monotonic() + 20
        while len({(r.partition, r.offset) for r in seen["a"] + seen["b"]}) < 2 * N:
            assert time.monotonic() < deadline and not errors, errors
            time.sleep(0.05)
    finally:
        stop.set()
        a.join()
        if b.is_alive():
            b.join()
    assert not errors
    everything = sorted((r.partition, r.offset) for r in seen["a"] + seen["b"])
    assert everything == sorted((p, o) for p in (0, 1) for o in range(N))  # once each
    for name in ("a", "b"):
        for tp, at in revoked_at[name].items():  # still revoked at the end
            assert not offsets(seen[name][at:], tp)
