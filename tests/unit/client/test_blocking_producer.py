"""The blocking producer's hand-off to its loop thread, and its per-record futures."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tidegate.client import Consumer, Producer, TopicPartition
from tidegate.client.errors import ClientClosedError
from tidegate.client.futures import DeliveryFuture, FutureGroup
from tidegate.client.loop_thread import LoopThread

from .fake_broker import FakeBroker, on_loop_thread


@pytest.fixture
def broker() -> Iterator[FakeBroker]:
    with on_loop_thread({"t": 2}) as b:
        yield b


def test_no_record_is_stranded_between_pumps(broker: FakeBroker) -> None:
    """Records sent while the loop thread's pump is finishing are still sent: short
    bursts with flushes in between exercise the hand-over again and again."""
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=0) as p:
        futures = []
        for burst in range(300):
            futures += [p.send("t", b"%d" % (burst * 3 + i)) for i in range(burst % 4)]
            if burst % 7 == 0:
                time.sleep(0.0005)  # let the pump run dry
            if burst % 50 == 0:
                p.flush()
                assert all(f.done() for f in futures)
        p.flush()
        assert all(f.result(0).offset >= 0 for f in futures)


class _HookedLock:
    """The producer's lock, calling `after_exit` each time it is released."""

    def __init__(self, lock: Any, after_exit: Callable[[], None]) -> None:
        self._lock = lock
        self._after_exit = after_exit

    def __enter__(self) -> None:
        self._lock.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._lock.__exit__(*exc)
        self._after_exit()

    def acquire(self) -> bool:
        return bool(self._lock.acquire())

    def release(self) -> None:
        self._lock.release()
        self._after_exit()


def test_a_pump_that_finished_leaves_the_next_pumps_records_alone() -> None:
    """A pump hands `_pumping` back and, before it returns, another thread queues a
    record and starts the next pump: the first must not fail that record."""
    broker = FakeBroker(topics={"t": 1, "u": 1})
    host = LoopThread("fake-broker")
    host.run(broker.start())
    try:
        with Producer(bootstrap_servers=broker.bootstrap, linger_ms=0) as p:
            raced: list[concurrent.futures.Future[object]] = []

            def after_exit() -> None:
                # On the loop thread, just after a pump emptied the queue: a send to a
                # topic without metadata yet is queued, and starts a new pump.
                if not raced and not p._pumping and \
                        threading.current_thread() is p._loop._thread:
                    sender = threading.Thread(target=lambda: raced.append(p.send("u", b"2")))
                    sender.start()
                    sender.join()

            p._lock = _HookedLock(p._lock, after_exit)  # type: ignore[assignment]
            first = p.send("t", b"1")  # no metadata yet: queued, so a pump runs
            p.flush()
            assert first.result(5).offset == 0
            assert raced and raced[0].result(5).offset == 0
    finally:
        host.run(broker.stop())
        host.stop()


def test_sends_from_several_threads(broker: FakeBroker) -> None:
    with Producer(bootstrap_servers=broker.bootstrap) as p:
        def worker(n: int) -> list[concurrent.futures.Future[object]]:
            return [p.send("t", b"w%d-%d" % (n, i), key=b"k%d" % n) for i in range(2000)]

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            results = list(pool.map(worker, range(4)))
        p.flush()
    for futures in results:
        offsets = [f.result(0).offset for f in futures]  # type: ignore[attr-defined]
        assert offsets == sorted(offsets)  # one key, one partition: send order kept
    with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as c:
        tps = [TopicPartition("t", 0), TopicPartition("t", 1)]
        assert sum(c.end_offsets(tps).values()) == 8000


def test_blocking_calls_after_close_raise_client_closed() -> None:
    loop = LoopThread("tidegate-consumer")
    loop.stop()

    async def never() -> None:
        raise AssertionError("must not run")

    coro = never()
    with pytest.raises(ClientClosedError, match="the consumer is closed"):
        loop.run(coro)
    assert coro.cr_frame is None  # closed, so no "never awaited" warning


def test_delivery_future_behaves_like_a_concurrent_future() -> None:
    group = FutureGroup()
    futures: list[DeliveryFuture[int]] = [DeliveryFuture(group) for _ in range(5)]
    assert isinstance(futures[0], concurrent.futures.Future)
    seen: list[int] = []
    futures[0].add_done_callback(lambda f: seen.append(f.result()))

    def complete() -> None:
        time.sleep(0.05)
        for i, f in enumerate(futures):
            f.set_result(i)

    threading.Thread(target=complete).start()
    assert futures[3].result(timeout=5) == 3  # woken although the others completed too
    done, not_done = concurrent.futures.wait(futures, timeout=5)
    assert len(done) == 5 and not not_done
    assert [f.result() for f in concurrent.futures.as_completed(futures)] != []
    assert seen == [0]
    futures[0].add_done_callback(lambda f: seen.append(-1))  # already done: runs now
    assert seen == [0, -1]

    slow: DeliveryFuture[int] = DeliveryFuture(group)
    with pytest.raises(TimeoutError):
        slow.result(timeout=0.01)
    with pytest.raises(TimeoutError):
        slow.exception(timeout=0.01)
    slow.set_exception(ValueError("boom"))
    assert isinstance(slow.exception(), ValueError)
    with pytest.raises(ValueError, match="boom"):
        slow.result()
    with pytest.raises(concurrent.futures.InvalidStateError):
        slow.set_result(1)

    cancelled: DeliveryFuture[int] = DeliveryFuture(group)
    assert cancelled.cancel() and cancelled.cancelled() and cancelled.done()
    with pytest.raises(concurrent.futures.CancelledError):
        cancelled.result()
    with pytest.raises(concurrent.futures.InvalidStateError):
        cancelled.set_result(1)
    assert group.waiting == 0
