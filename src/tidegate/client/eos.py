"""Exactly-once consume-transform-produce (seeds 000/001/004's read-process-write loop).

`AsyncTransactionalProcessor` (asyncio) and `TransactionalProcessor` (blocking) run
the loop that Kafka leaves to the application::

    poll records -> begin (once) -> send transform(record)... ->
    send_offsets_to_transaction(next offsets, consumer.group_metadata()) -> commit

so the output records and the consumed offsets become visible together or not at all.
A transaction spans polls until ``commit_interval_ms`` (Kafka Streams' EOS default,
100 ms) or ``max_records_per_transaction`` is reached, or the input goes idle.

Invariants and the failure rules:

- Records are transformed only inside a transaction, and every record polled since the
  last commit is in the open transaction (`_Pending` tracks, per partition, the first
  offset taken and the next offset to consume).
- After an abort — a failed send, a refused offset commit, an exception from the
  transform — the consumer is *rewound* to the group's committed offsets (falling back
  to the transaction's first offsets), so the aborted input is read again. Kafka's
  clients leave that to the user, and forgetting it silently loses records (the gap
  Jepsen reported as KAFKA-17582). An exception from the transform is re-raised after
  the rewind.
- Rebalance-safe (KIP-447): the processor's rebalance listener commits the open
  transaction in ``on_partitions_revoked`` (the partitions are still ours, the offsets
  carry the current generation), and aborts it in ``on_partitions_lost`` (they may
  belong to someone else already); the application's own listener is called after.
  The group coordinator refuses offsets carrying a stale generation or member id, so
  a zombie member cannot commit: its transaction aborts and it rejoins.
- A fatal producer error (`FatalProducerError`: fenced, not authorized) is raised; the
  processor cannot go on and must be closed (nothing more is committed).
- The consumer must not auto-commit (``enable.auto.commit=false``: offsets go only
  through the transaction) and reads ``isolation.level=read_committed`` (an aborted
  upstream transaction must not leak into the output). Both are checked.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple, Protocol, cast

from tidegate.client.errors import ConfigError, FatalProducerError
from tidegate.client.types import ConsumerGroupMetadata, ConsumerRecord, TopicPartition

if TYPE_CHECKING:
    import asyncio

    from tidegate.client.consumer.consumer import AsyncConsumer
    from tidegate.client.sync import Consumer

__all__ = ["AsyncTransactionalProcessor", "Output", "TransactionalProcessor"]

log = logging.getLogger("tidegate.client.eos")

Headers = list[tuple[str, bytes | str | None]]


class Output(NamedTuple):
    """One record for the transform to produce."""

    topic: str
    value: object = None
    key: object = None
    partition: int | None = None
    headers: Headers | None = None


Transform = Callable[[ConsumerRecord], Iterable[Output] | None]
_Outputs = Iterable[Output] | None
AsyncTransform = Callable[[ConsumerRecord], Awaitable[_Outputs] | _Outputs]


class _AsyncTxnProducer(Protocol):
    """What the processor needs of `AsyncProducer` (with ``transactional.id``)."""

    def init_transactions(self) -> object: ...
    def begin_transaction(self) -> object: ...
    def send(self, topic: str, value: object = None, key: object = None, *,
             partition: int | None = None,
             headers: Headers | None = None) -> Awaitable[object]: ...
    def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, int],
                                    group_metadata: ConsumerGroupMetadata) -> object: ...
    def commit_transaction(self) -> object: ...
    def abort_transaction(self) -> object: ...


class _TxnProducer(Protocol):
    """What the processor needs of the blocking `Producer` (with ``transactional.id``)."""

    def init_transactions(self) -> object: ...
    def begin_transaction(self) -> object: ...
    def send(self, topic: str, value: object = None, key: object = None, *,
             partition: int | None = None, headers: Headers | None = None) -> object: ...
    def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, int],
                                    group_metadata: ConsumerGroupMetadata) -> object: ...
    def commit_transaction(self) -> object: ...
    def abort_transaction(self) -> object: ...


async def _maybe_await(value: object) -> object:
    return await value if inspect.isawaitable(value) else value


class _Pending:
    """Sans-IO bookkeeping of the open transaction's input."""

    def __init__(self) -> None:
        self.first: dict[TopicPartition, int] = {}
        self.next: dict[TopicPartition, int] = {}
        self.count = 0
        self.started = 0.0
        self.open = False

    def add(self, r: ConsumerRecord) -> None:
        tp = TopicPartition(r.topic, r.partition)
        self.first.setdefault(tp, r.offset)
        self.next[tp] = r.offset + 1
        self.count += 1

    def due(self, interval_ms: int, max_records: int, idle: bool) -> bool:
        if not self.open:
            return False
        return idle or self.count >= max_records or \
            (time.monotonic() - self.started) * 1000 >= interval_ms

    def clear(self) -> None:
        self.first.clear()
        self.next.clear()
        self.count = 0
        self.open = False


def _check(config: object) -> None:
    if getattr(config, "enable_auto_commit", False):
        raise ConfigError("exactly-once processing needs enable.auto.commit=false on the "
                          "consumer: offsets are committed inside the transaction")
    if getattr(config, "isolation_level", "") != "read_committed":
        raise ConfigError("exactly-once processing needs isolation.level=read_committed on "
                          "the consumer, or aborted input would reach the output")


def _outputs(result: Iterable[Output] | None) -> Iterable[Output]:
    return () if result is None else (o if isinstance(o, Output) else Output(*o)
                                      for o in result)


class AsyncTransactionalProcessor:
    """See the module docstring. `run(topics)` until `stop` is set (or `step()`
    yourself); `close()` commits what is open. The consumer and producer stay the
    caller's to close."""

    def __init__(self, consumer: AsyncConsumer, producer: _AsyncTxnProducer,
                 transform: AsyncTransform, *, commit_interval_ms: int = 100,
                 max_records_per_transaction: int = 10_000, poll_timeout_ms: int = 100,
                 listener: object | None = None) -> None:
        _check(consumer.config)
        self.consumer, self.producer, self.transform = consumer, producer, transform
        self.commit_interval_ms = commit_interval_ms
        self.max_records = max_records_per_transaction
        self.poll_timeout_ms = poll_timeout_ms
        self.listener = listener
        self.pending = _Pending()
        self.committed_transactions = 0
        self.aborted_transactions = 0
        self._ready = False

    async def start(self, topics: Iterable[str]) -> None:
        """init_transactions (fencing an older instance with the same
        transactional.id), then subscribe with the processor's rebalance listener."""
        if not self._ready:
            await _maybe_await(self.producer.init_transactions())
            self._ready = True
        self.consumer.subscribe(list(topics), listener=_AsyncListener(self))

    async def run(self, topics: Iterable[str], stop: asyncio.Event | None = None) -> None:
        await self.start(topics)
        try:
            while stop is None or not stop.is_set():
                await self.step()
        except FatalProducerError:
            raise
        except BaseException:
            await self.abort(rewind=False)
            raise
        await self.close()

    async def step(self) -> int:
        """One poll, its records into the transaction, a commit if due; returns the
        number of records processed."""
        records = await self.consumer.poll(self.poll_timeout_ms)
        p = self.pending
        if records:
            if not p.open:
                await _maybe_await(self.producer.begin_transaction())
                p.open, p.started = True, time.monotonic()
            try:
                for r in records:
                    p.add(r)
                    result = cast("_Outputs", await _maybe_await(self.transform(r)))
                    for o in _outputs(result):
                        await self.producer.send(o.topic, o.value, o.key,
                                                 partition=o.partition, headers=o.headers)
            except FatalProducerError:
                raise
            except Exception:
                await self.abort()
                raise
        if p.due(self.commit_interval_ms, self.max_records, idle=not records):
            await self.commit()
        return len(records)

    async def commit(self, exclude: set[TopicPartition] | None = None) -> bool:
        """Commit the open transaction with its offsets; on failure abort and rewind.
        True if committed (or nothing was open)."""
        p = self.pending
        if not p.open:
            return True
        try:
            await _maybe_await(self.producer.send_offsets_to_transaction(
                dict(p.next), self.consumer.group_metadata()))
            await _maybe_await(self.producer.commit_transaction())
        except FatalProducerError:
            raise
        except Exception as e:
            log.warning("transaction could not commit (%r): aborting and rewinding", e)
            await self.abort(exclude=exclude)
            return False
        log.debug("committed %d records: %s", p.count, p.next)
        self.committed_transactions += 1
        p.clear()
        return True

    async def abort(self, rewind: bool = True,
                    exclude: set[TopicPartition] | None = None) -> None:
        """Abort the open transaction; then seek its partitions that are still assigned
        (and not in `exclude`: being revoked) back to their committed offsets
        (KAFKA-17582)."""
        p = self.pending
        if not p.open:
            return
        first = dict(p.first)
        p.clear()
        self.aborted_transactions += 1
        await _maybe_await(self.producer.abort_transaction())
        owned = self.consumer.assignment() - (exclude or set())
        tps = [tp for tp in first if tp in owned]
        if rewind and tps:
            try:
                found = await self.consumer.committed(tps)
            except Exception as e:  # the transaction's start is as good
                log.warning("committed offsets unavailable (%r); rewinding to the "
                            "aborted transaction's first offsets", e)
                found = {}
            for tp in tps:
                c = found.get(tp)
                self.consumer.seek(tp, c.offset if c is not None else first[tp])

    async def close(self) -> None:
        await self.commit()

    async def on_revoked(self, partitions: set[TopicPartition]) -> None:
        await self.commit(exclude=partitions)  # KIP-447: finish before they go
        await _call(self.listener, "on_partitions_revoked", partitions)

    async def on_lost(self, partitions: set[TopicPartition]) -> None:
        await self.abort(exclude=partitions)  # maybe someone else's now: never commit
        await _call(self.listener, "on_partitions_lost", partitions)


class TransactionalProcessor:
    """The blocking `AsyncTransactionalProcessor`, over the blocking `Consumer` and
    `Producer`; same rules (see the module docstring)."""

    def __init__(self, consumer: Consumer, producer: _TxnProducer, transform: Transform,
                 *, commit_interval_ms: int = 100, max_records_per_transaction: int = 10_000,
                 poll_timeout_ms: int = 100, listener: object | None = None) -> None:
        _check(consumer.config)
        self.consumer, self.producer, self.transform = consumer, producer, transform
        self.commit_interval_ms = commit_interval_ms
        self.max_records = max_records_per_transaction
        self.poll_timeout_ms = poll_timeout_ms
        self.listener = listener
        self.pending = _Pending()
        self.committed_transactions = 0
        self.aborted_transactions = 0
        self._ready = False

    def __enter__(self) -> TransactionalProcessor:
        return self

    def __exit__(self, et: object, e: BaseException | None, tb: object) -> None:
        if e is None:
            self.close()
        elif self.pending.open and not isinstance(e, FatalProducerError):
            self.abort(rewind=False)

    def start(self, topics: Iterable[str]) -> None:
        if not self._ready:
            self.producer.init_transactions()
            self._ready = True
        self.consumer.subscribe(list(topics), listener=_Listener(self))

    def run(self, topics: Iterable[str], should_stop: Callable[[], bool] = lambda: False
            ) -> None:
        """Process until `should_stop()` is true (checked after every step)."""
        self.start(topics)
        while not should_stop():
            self.step()
        self.close()

    def step(self) -> int:
        records = self.consumer.poll(self.poll_timeout_ms)
        p = self.pending
        if records:
            if not p.open:
                self.producer.begin_transaction()
                p.open, p.started = True, time.monotonic()
            try:
                for r in records:
                    p.add(r)
                    for o in _outputs(self.transform(r)):
                        self.producer.send(o.topic, o.value, o.key, partition=o.partition,
                                           headers=o.headers)
            except FatalProducerError:
                raise
            except Exception:
                self.abort()
                raise
        if p.due(self.commit_interval_ms, self.max_records, idle=not records):
            self.commit()
        return len(records)

    def commit(self, exclude: set[TopicPartition] | None = None) -> bool:
        p = self.pending
        if not p.open:
            return True
        try:
            self.producer.send_offsets_to_transaction(dict(p.next),
                                                      self.consumer.group_metadata())
            self.producer.commit_transaction()
        except FatalProducerError:
            raise
        except Exception as e:
            log.warning("transaction could not commit (%r): aborting and rewinding", e)
            self.abort(exclude=exclude)
            return False
        self.committed_transactions += 1
        p.clear()
        return True

    def abort(self, rewind: bool = True, exclude: set[TopicPartition] | None = None
              ) -> None:
        p = self.pending
        if not p.open:
            return
        first = dict(p.first)
        p.clear()
        self.aborted_transactions += 1
        self.producer.abort_transaction()
        owned = self.consumer.assignment() - (exclude or set())
        tps = [tp for tp in first if tp in owned]
        if rewind and tps:
            try:
                found = self.consumer.committed(tps)
            except Exception as e:
                log.warning("committed offsets unavailable (%r); rewinding to the "
                            "aborted transaction's first offsets", e)
                found = {}
            for tp in tps:
                c = found.get(tp)
                self.consumer.seek(tp, c.offset if c is not None else first[tp])

    def close(self) -> None:
        self.commit()


def _listener_method(listener: object | None, name: str
                     ) -> Callable[[set[TopicPartition]], object] | None:
    """The user's callback (``on_partitions_lost`` falls back to ``..._revoked``)."""
    fn = getattr(listener, name, None)
    if fn is None and name == "on_partitions_lost":
        fn = getattr(listener, "on_partitions_revoked", None)
    return fn


async def _call(listener: object | None, name: str, partitions: set[TopicPartition]) -> None:
    fn = _listener_method(listener, name)
    if fn is not None:
        await _maybe_await(fn(partitions))


class _AsyncListener:
    def __init__(self, proc: AsyncTransactionalProcessor) -> None:
        self._proc = proc

    async def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        await self._proc.on_revoked(partitions)

    async def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        await _call(self._proc.listener, "on_partitions_assigned", partitions)

    async def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        await self._proc.on_lost(partitions)


class _Listener:
    """Runs on the thread that polls (the blocking consumer's callback pump)."""

    def __init__(self, proc: TransactionalProcessor) -> None:
        self._proc = proc

    def _user(self, name: str, partitions: set[TopicPartition]) -> None:
        fn = _listener_method(self._proc.listener, name)
        if fn is not None:
            fn(partitions)

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        self._proc.commit(exclude=partitions)
        self._user("on_partitions_revoked", partitions)

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        self._user("on_partitions_assigned", partitions)

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        self._proc.abort(exclude=partitions)
        self._user("on_partitions_lost", partitions)
