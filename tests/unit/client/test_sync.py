"""The blocking facades run the async clients on a private loop thread."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tidegate.client import Consumer, Producer, RecordMetadata, TopicPartition
from tidegate.client.errors import ClientClosedError
from tidegate.client.loop_thread import LoopThread
from tidegate.common.errors import MessageTooLargeError

from .fake_broker import FakeBroker, on_loop_thread


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    with on_loop_thread({"t": 3}) as b:
        yield b


def test_blocking_producer_and_consumer(broker: FakeBroker) -> None:
    delivered: list[tuple[RecordMetadata | None, BaseException | None, str]] = []

    def on_delivery(meta: RecordMetadata | None, err: BaseException | None) -> None:
        delivered.append((meta, err, threading.current_thread().name))

    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=1,
                  max_request_size=2000) as p:
        futs = [p.send("t", f"v{i}", key=f"k{i % 5}", on_delivery=on_delivery)
                for i in range(3000)]
        with pytest.raises(MessageTooLargeError):
            p.send("t", b"x" * 3000)  # raised in the caller's thread, before queueing
        p.flush()
        assert all(f.done() for f in futs)
        assert sorted(p.partitions_for("t")) == [0, 1, 2]
    with pytest.raises(ClientClosedError):
        p.send("t", b"late")
    metas = [f.result() for f in futs]
    assert len(delivered) == 3000 and all(err is None for _, err, _ in delivered)
    assert {name for _, _, name in delivered} == {"tidegate-producer"}
    # Records with one key keep their send order in their partition.
    for k in range(5):
        offsets = [m.offset for i, m in enumerate(metas) if i % 5 == k]
        assert offsets == sorted(offsets)

    with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as c:
        tps = [TopicPartition("t", i) for i in range(3)]
        c.assign(tps)
        got = []
        for record in c:
            got.append(record)
            if len(got) == 3000:
                break
        assert sorted(int((r.value or b"")[1:]) for r in got) == list(range(3000))
        assert sum(c.end_offsets(tps).values()) == 3000
        assert all(c.position(tp) == c.end_offsets([tp])[tp] for tp in tps)
        c.seek(tps[0], 0)
        c.pause(tps[1], tps[2])
        assert c.paused() == {tps[1], tps[2]}
        batch = c.poll_batches(timeout_ms=2000)
        assert list(batch) == [tps[0]] and batch[tps[0]][0].offset == 0


def test_blocking_call_from_the_loop_thread_is_refused() -> None:
    loop = LoopThread("t")
    try:
        async def inner() -> str:
            async def noop() -> str:
                return "x"
            with pytest.raises(RuntimeError, match="own loop thread"):
                loop.run(noop())
            return "ok"
        assert loop.run(inner()) == "ok"
    finally:
        loop.stop()


def test_with_consumer_connects_on_entry(broker: FakeBroker) -> None:
    """Entering ``with Consumer(...)`` fetches the metadata before any poll, as
    ``async with AsyncConsumer(...)`` does."""
    before = len(broker.requests)
    with Consumer(bootstrap_servers=broker.bootstrap) as c:
        sent = {api for api, _ in broker.requests[before:]}
        assert 3 in sent  # Metadata, before any poll
        assert c.assignment() == set()


def test_with_consumer_on_a_dead_bootstrap_fails_at_entry() -> None:
    """An unreachable bootstrap fails on entry (not at the first poll), and leaves no
    loop thread behind (``__exit__`` does not run when ``__enter__`` raises)."""
    import socket

    from tidegate.common.errors import KafkaError

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    threads = threading.active_count()
    entered = False
    with (pytest.raises(KafkaError, match="cannot reach"),
          Consumer(bootstrap_servers=f"127.0.0.1:{port}")):
        entered = True
    assert not entered
    assert threading.active_count() == threads
