"""The consumer's group membership against an in-memory coordinator (`fake_group`).

Covers the join round trip (MEMBER_ID_REQUIRED), leader assignment, eager and
cooperative (KIP-429) rebalances with the listener, commits and committed offsets,
heartbeat error handling, coordinator rediscovery, static membership, fencing,
``max.poll.interval.ms`` and the blocking facade's callback thread.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from tidegate.client import AsyncConsumer, AsyncProducer, Consumer, TopicPartition
from tidegate.client.consumer import (
    CommitFailedError,
    FencedInstanceIdError,
    InvalidGroupIdError,
    OffsetAndMetadata,
    RebalanceListener,
)
from tidegate.common.errors import KafkaError

from .fake_group import FakeGroupBroker

T = TypeVar("T")
FAST = {"heartbeat_interval_ms": 50, "session_timeout_ms": 1500,
        "max_poll_interval_ms": 4000, "retry_backoff_ms": 20,
        "auto_offset_reset": "earliest", "group_id": "g"}


def run(fn: Callable[[FakeGroupBroker], Awaitable[T]], timeout: float = 30, **topics: int) -> T:
    async def main() -> T:
        broker = await FakeGroupBroker(topics=dict(topics) or {"t": 6}).start()
        try:
            return await asyncio.wait_for(fn(broker), timeout)
        finally:
            await broker.stop()
    return asyncio.run(main())


def consumer(broker: FakeGroupBroker, **overrides: Any) -> AsyncConsumer:
    return AsyncConsumer(**{"bootstrap_servers": broker.bootstrap, **FAST, **overrides})


class Recorder(RebalanceListener):
    """Listener that records events; `commit_on_revoke` commits from the callback."""

    def __init__(self, c: AsyncConsumer | None = None, commit_on_revoke: bool = False) -> None:
        self.events: list[tuple[str, list[TopicPartition]]] = []
        self.consumer = c
        self.commit_on_revoke = commit_on_revoke

    async def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        self.events.append(("revoked", sorted(partitions)))
        if self.commit_on_revoke and self.consumer is not None:
            await self.consumer.commit()

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        self.events.append(("assigned", sorted(partitions)))

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        self.events.append(("lost", sorted(partitions)))


async def produce(broker: FakeGroupBroker, topic: str, n: int, partitions: int) -> None:
    async with AsyncProducer(bootstrap_servers=broker.bootstrap, linger_ms=0) as p:
        for i in range(n):
            await p.send(topic, b"v%d" % i, partition=i % partitions)
        await p.flush()


async def poll_until(consumers: list[AsyncConsumer], done: Callable[[], bool],
                     timeout: float = 10.0, got: dict[int, list[Any]] | None = None) -> None:
    """Poll every consumer (concurrently, as separate applications would) until
    `done()`; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached; assignments: " + str(
                [sorted(c.assignment()) for c in consumers]))
        results = await asyncio.gather(*(c.poll(timeout_ms=50) for c in consumers))
        if got is not None:
            for i, records in enumerate(results):
                got.setdefault(i, []).extend(records)


def covers(consumers: list[AsyncConsumer], topic: str = "t", n: int = 6) -> bool:
    sets = [c.assignment() for c in consumers]
    union = set().union(*sets)
    return sum(map(len, sets)) == len(union) == n and all(tp.topic == topic for tp in union)


def test_two_members_split_a_topic_and_one_leaving_gives_the_other_everything() -> None:
    async def body(broker: FakeGroupBroker) -> None:
        await produce(broker, "t", 60, 6)
        a, b = consumer(broker), consumer(broker)
        a.subscribe(["t"])
        b.subscribe(["t"])
        got: dict[int, list[Any]] = {}
        await poll_until([a, b], lambda: covers([a, b]) and sum(map(len, got.values())) >= 60,
                         got=got)
        assert sorted(len(c.assignment()) for c in (a, b)) == [3, 3]
        assert sorted(r.value for rs in got.values() for r in rs) == sorted(
            b"v%d" % i for i in range(60))
        g = broker.groups["g"]
        assert g.protocol == "range"
        # KIP-394: every member's first JoinGroup got MEMBER_ID_REQUIRED, then joined.
        assert sum(1 for k, _ in broker.requests if k == 11) >= 4
        await a.close()  # auto-commits, revokes, leaves
        await poll_until([b], lambda: covers([b]))
        assert broker.committed[("g", "t", 0)][0] == 10 or broker.committed[("g", "t", 3)][0] == 10
        await b.close()
        assert {k[2]: v[0] for k, v in broker.committed.items()} == {p: 10 for p in range(6)}
        assert not broker.groups["g"].members  # both left
    run(body)


def test_committed_offsets_resume_after_restart_and_manual_commits() -> None:
    async def body(broker: FakeGroupBroker) -> None:
        await produce(broker, "t", 20, 2)
        c = consumer(broker, enable_auto_commit=False)
        c.subscribe(["t"])
        got: dict[int, list[Any]] = {}
        await poll_until([c], lambda: len(got.get(0, [])) >= 20, got=got)
        tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
        await c.commit({tp0: 4, tp1: OffsetAndMetadata(7, "note")})
        assert await c.committed([tp0, tp1]) == {tp0: OffsetAndMetadata(4, ""),
                                                 tp1: OffsetAndMetadata(7, "note")}
        await c.close()  # no auto-commit: the manual commit stands
        c = consumer(broker, enable_auto_commit=False)
        c.subscribe(["t"])
        got = {}
        await poll_until([c], lambda: len(got.get(0, [])) >= 9, got=got)
        assert sorted((r.partition, r.offset) for r in got[0]) == \
            [(0, o) for o in range(4, 10)] + [(1, o) for o in range(7, 10)]
        assert await c.position(tp0) == 10
        done: list[tuple[dict[TopicPartition, OffsetAndMetadata], BaseException | None]] = []
        await c.commit_async(callback=lambda offsets, err: done.append((offsets, err)))
        assert done == [({tp0: OffsetAndMetadata(10), tp1: OffsetAndMetadata(10)}, None)]
        await c.close()
    run(body, t=2)


def test_eager_listener_revokes_everything_then_assigns_and_may_commit() -> None:
    async def body(broker: FakeGroupBroker) -> None:
        await produce(broker, "t", 12, 6)
        a = consumer(broker, enable_auto_commit=False)
        rec = Recorder(a, commit_on_revoke=True)
        a.subscribe(["t"], listener=rec)
        got: dict[int, list[Any]] = {}
        await poll_until([a], lambda: covers([a]) and len(got.get(0, [])) >= 12, got=got)
        assert rec.events == [("assigned", [TopicPartition("t", p) for p in range(6)])]
        b = consumer(broker)
        b.subscribe(["t"])
        await poll_until([a, b], lambda: covers([a, b]) and len(b.assignment()) == 3)
        assert rec.events[1] == ("revoked", [TopicPartition("t", p) for p in range(6)])
        assert rec.events[2][0] == "assigned" and len(rec.events[2][1]) == 3
        # The commit inside on_partitions_revoked went through.
        assert all(broker.committed[("g", "t", p)][0] == 2 for p in range(6))
        await asyncio.gather(a.close(), b.close())
    run(body)


def test_cooperative_sticky_moves_only_what_it_must_in_two_rounds() -> None:
    async def body(broker: FakeGroupBroker) -> None:
        coop = {"partition_assignment_strategy": "cooperative-sticky"}
        a = consumer(broker, **coop)
        ra = Recorder()
        a.subscribe(["t"], listener=ra)
        await poll_until([a], lambda: covers([a]))
        first = set(a.assignment())
        b = consumer(broker, **coop)
        rb = Recorder()
        b.subscribe(["t"], listener=rb)
        await poll_until([a, b], lambda: covers([a, b]) and len(b.assignment()) == 3)
        g = broker.groups["g"]
        assert g.protocol == "cooperative-sticky"
        # a kept three of its partitions throughout and revoked exactly the other three.
        revoked = [ps for kind, ps in ra.events if kind == "revoked"]
        assert len(revoked) == 1 and len(revoked[0]) == 3
        assert set(a.assignment()) == first - set(revoked[0])
        assert ("lost", []) not in ra.events
        # b got them only in the second round (the first gave it nothing).
        assert rb.events[0] == ("assigned", [])
        assert rb.events[-1] == ("assigned", revoked[0])
        assert len(g.generations) >= 3  # a alone, round one, round two
        await asyncio.gather(a.close(), b.close())
    run(body)


def test_heartbeat_errors_rejoin_reset_and_rediscover() -> None:
    async def body(broker: FakeGroupBroker) -> None:
        a = consumer(broker)
        rec = Recorder()
        a.subscribe(["t"], listener=rec)
        await poll_until([a], lambda: covers([a]))
        generation = broker.groups["g"].generation
        finds = sum(1 for k, _ in broker.requests if k == 10)
        broker.errors[12] = [16]  # NOT_COORDINATOR: look it up again
        await poll_until([a], lambda: sum(1 for k, _ in broker.requests if k == 10) > finds)
        broker.errors[12] = [27]  # REBALANCE_IN_PROGRESS: rejoin
        await poll_until([a], lambda: broker.groups["g"].generation > generation
                         and covers([a]))
        everything = [TopicPartition("t", p) for p in range(6)]
        assert rec.events[1:] == [("revoked", everything), ("assigned", everything)]
        broker.errors[12] = [25]  # UNKNOWN_MEMBER_ID: partitions lost, rejoin
        await poll_until([a], lambda: any(k == "lost" for k, _ in rec.events) and covers([a]))
        assert rec.events[-2][0] == "lost" and rec.events[-1][0] == "assigned"
        await a.close()
    run(body)


def test_coordinator_not_available_is_retried_and_fenced_instance_is_fatal() -> None:
    async def body(broker: FakeGroupBroker) -> None:
        broker.errors[10] = [15, 15]  # COORDINATOR_NOT_AVAILABLE twice
        a = consumer(broker, group_instance_id="app-1")
        a.subscribe(["t"])
        await poll_until([a], lambda: covers([a]))
        broker.errors[12] = [82]  # FENCED_INSTANCE_ID
        with pytest.raises(FencedInstanceIdError, match=r"group\.instance\.id"):
            await poll_until([a], lambda: False, timeout=5)
        with pytest.raises(FencedInstanceIdError):
            await a.poll(timeout_ms=10)  # stays fatal
        await a.close()
    run(body)


def test_static_member_restart_keeps_its_partitions_without_a_rebalance() -> None:
    async def body(broker: FakeGroupBroker) -> None:
        a = consumer(broker, group_instance_id="a")
        b = consumer(broker, group_instance_id="b")
        a.subscribe(["t"])
        b.subscribe(["t"])
        await poll_until([a, b], lambda: covers([a, b]))
        mine = a.assignment()
        generation = broker.groups["g"].generation
        leaves = sum(1 for k, _ in broker.requests if k == 13)
        await a.close()
        assert sum(1 for k, _ in broker.requests if k == 13) == leaves  # static: no leave
        a = consumer(broker, group_instance_id="a")
        a.subscribe(["t"])
        await poll_until([a, b], lambda: covers([a, b]))
        assert a.assignment() == mine and broker.groups["g"].generation == generation
        await asyncio.gather(a.close(), b.close())
    run(body)


def test_poll_interval_exceeded_leaves_the_group_and_reports_lost() -> None:
    async def body(broker: FakeGroupBroker) -> None:
        a = consumer(broker, max_poll_interval_ms=600)
        b = consumer(broker)
        ra = Recorder()
        a.subscribe(["t"], listener=ra)
        b.subscribe(["t"])
        await poll_until([a, b], lambda: covers([a, b]))
        # a stops polling; b keeps going and ends up with everything.
        await poll_until([b], lambda: len(b.assignment()) == 6, timeout=10)
        assert any(k == 13 for k, _ in broker.requests)  # a sent LeaveGroup
        await poll_until([a, b], lambda: covers([a, b]) and len(a.assignment()) == 3)
        kinds = [k for k, _ in ra.events]
        assert kinds[:3] == ["assigned", "lost", "assigned"]
        await asyncio.gather(a.close(), b.close())
    run(body)


def test_commit_after_being_kicked_out_fails_and_sessions_expire() -> None:
    async def body(broker: FakeGroupBroker) -> None:
        a = consumer(broker, enable_auto_commit=False)
        a.subscribe(["t"])
        await poll_until([a], lambda: covers([a]))
        await a.commit()
        g = broker.groups["g"]
        broker.remove(g, next(iter(g.members)))  # e.g. the session expired
        with pytest.raises(CommitFailedError, match="rebalanced"):
            await a.commit({TopicPartition("t", 0): 1})
        await poll_until([a], lambda: covers([a]) and a.group_metadata().generation_id > 0)
        await a.close()
    run(body)


def test_pattern_subscription_and_api_misuse() -> None:
    async def body(broker: FakeGroupBroker) -> None:
        a = consumer(broker)
        a.subscribe(re.compile(r"orders-.*"))
        await poll_until([a], lambda: len(a.assignment()) == 5)
        assert {tp.topic for tp in a.assignment()} == {"orders-eu", "orders-us"}
        assert a.subscription() == {"orders-eu", "orders-us"}
        with pytest.raises(RuntimeError, match="unsubscribe"):
            a.assign([TopicPartition("t", 0)])
        await a.unsubscribe()
        assert a.assignment() == set()
        a.assign([TopicPartition("t", 0)])
        with pytest.raises(RuntimeError, match="assign"):
            a.subscribe(["t"])
        await a.close()
        no_group = AsyncConsumer(bootstrap_servers=broker.bootstrap)
        with pytest.raises(InvalidGroupIdError):
            no_group.subscribe(["t"])
        with pytest.raises(InvalidGroupIdError):
            await no_group.commit()
        await no_group.close()
    run(body, **{"orders-eu": 2, "orders-us": 3, "other": 1, "t": 1})


def test_manual_assignment_commits_with_the_group_id() -> None:
    async def body(broker: FakeGroupBroker) -> None:
        await produce(broker, "t", 5, 1)
        a = consumer(broker)
        tp = TopicPartition("t", 0)
        a.assign([tp])
        got: dict[int, list[Any]] = {}
        await poll_until([a], lambda: len(got.get(0, [])) >= 5, got=got)
        await a.close()  # auto-commit on close, generation -1
        assert broker.committed[("g", "t", 0)][0] == 5
    run(body, t=1)


def test_blocking_consumer_runs_callbacks_on_the_polling_thread() -> None:
    async def body(broker: FakeGroupBroker) -> None:
        await produce(broker, "t", 6, 6)
        threads: list[str] = []
        result: dict[str, Any] = {}

        class Committer:
            def __init__(self) -> None:
                self.consumer: Consumer | None = None

            def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
                threads.append(threading.current_thread().name)
                assert self.consumer is not None
                self.consumer.commit()  # a blocking call from inside the callback

            def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
                threads.append(threading.current_thread().name)

        def app() -> None:
            listener = Committer()
            with Consumer(bootstrap_servers=broker.bootstrap, **FAST) as c:
                listener.consumer = c
                c.subscribe(["t"], listener)
                seen = 0
                deadline = time.monotonic() + 10
                while seen < 6 and time.monotonic() < deadline:
                    seen += len(c.poll(timeout_ms=100))
                result["seen"] = seen
                result["committed"] = c.committed([TopicPartition("t", p) for p in range(6)])
            result["thread"] = threading.current_thread().name

        thread = threading.Thread(target=app, name="app-thread")
        thread.start()
        while thread.is_alive():
            await asyncio.sleep(0.05)
        assert result["seen"] == 6
        assert set(threads) == {"app-thread"} and len(threads) == 2  # assigned, revoked
        assert broker.committed[("g", "t", 3)][0] == 1
    run(body)


def test_listener_errors_surface_from_poll_after_the_assignment() -> None:
    async def body(broker: FakeGroupBroker) -> None:
        class Broken(RebalanceListener):
            def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
                raise ValueError("app bug")

        a = consumer(broker)
        a.subscribe(["t"], Broken())
        with pytest.raises(ValueError, match="app bug"):
            await poll_until([a], lambda: False, timeout=5)
        assert len(a.assignment()) == 6  # the rebalance itself completed
        await a.poll(timeout_ms=10)  # raised once only
        await a.close()
    run(body)


def test_sticky_members_keep_their_partitions_when_one_joins() -> None:
    async def body(broker: FakeGroupBroker) -> None:
        cfg = {"partition_assignment_strategy": "sticky"}
        a, b = consumer(broker, **cfg), consumer(broker, **cfg)
        a.subscribe(["t"])
        b.subscribe(["t"])
        await poll_until([a, b], lambda: covers([a, b], n=12), timeout=15)
        before = {0: a.assignment(), 1: b.assignment()}
        c = consumer(broker, **cfg)
        c.subscribe(["t"])
        await poll_until([a, b, c], lambda: covers([a, b, c], n=12)
                         and len(c.assignment()) == 4, timeout=15)
        assert broker.groups["g"].protocol == "sticky"
        # Balanced 4/4/4, and a and b each kept 4 of their 6 (sticky user data).
        assert len(a.assignment() & before[0]) == 4 and len(b.assignment() & before[1]) == 4
        await asyncio.gather(a.close(), b.close(), c.close())
    run(body, t=12)


def test_join_and_sync_errors_are_retried() -> None:
    async def body(broker: FakeGroupBroker) -> None:
        broker.errors[11] = [14, 16]  # COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR
        broker.errors[14] = [27]  # REBALANCE_IN_PROGRESS on the first SyncGroup
        a = consumer(broker)
        a.subscribe(["t"])
        await poll_until([a], lambda: covers([a]))
        assert not broker.errors[11] and not broker.errors[14]
        assert sum(1 for k, _ in broker.requests if k == 10) >= 2  # found it again
        await a.close()
    run(body)


def test_position_waits_for_the_committed_offset_and_session_expiry_is_noticed() -> None:
    async def body(broker: FakeGroupBroker) -> None:
        await produce(broker, "t", 6, 6)
        broker.committed[("g", "t", 2)] = (1, "")
        a = consumer(broker, enable_auto_commit=False)
        rec = Recorder()
        a.subscribe(["t"], listener=rec)
        await poll_until([a], lambda: covers([a]), timeout=10)
        assert await a.position(TopicPartition("t", 2)) in (1, 6)  # committed, or read on
        assert await a.position(TopicPartition("t", 0)) in (0, 1)  # earliest
        broker.delay_s[12] = 2.0  # heartbeats stall past session.timeout.ms (1.5 s)
        await asyncio.sleep(2.5)
        broker.delay_s[12] = 0
        await poll_until([a], lambda: any(k == "lost" for k, _ in rec.events)
                         and covers([a]), timeout=10)
        await a.close()
    run(body)


def test_unexpected_join_errors_are_raised_once_then_the_join_is_retried() -> None:
    async def body(broker: FakeGroupBroker) -> None:
        broker.errors[11] = [23]  # INCONSISTENT_GROUP_PROTOCOL
        a = consumer(broker)
        a.subscribe(["t"])
        with pytest.raises(KafkaError, match="INCONSISTENT_GROUP_PROTOCOL"):
            await poll_until([a], lambda: False, timeout=5)
        await poll_until([a], lambda: covers([a]))
        await a.close()
    run(body)
