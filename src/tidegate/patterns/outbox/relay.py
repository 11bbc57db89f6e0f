"""`OutboxRelay`: publish outbox rows exactly once, in order per aggregate (seed 001's
local message table, with Debezium's outbox event router as the record layout).

Each batch of unpublished rows (store.py) becomes one Kafka transaction:

1. begin; send each row to ``outbox.event.<aggregatetype>`` (configurable) with key
   ``aggregateid``, value ``payload`` and headers ``id`` and ``type``;
2. `prepare_transaction()` (KIP-939): the records are written but invisible to
   read_committed readers; the transaction has a name, ``tid:producer id:epoch``
   (`tidegate.client.checkback.key`);
3. in one local transaction, set ``relay_txn`` to that name on the batch's rows;
4. commit the Kafka transaction.

A crash (kill -9) anywhere leaves one of: nothing prepared (the open transaction is
aborted by the next `init_transactions`, the rows are still unpublished and go again);
a prepared transaction whose rows are not marked (step 3 did not commit: it is
aborted, the rows go again); or a prepared transaction whose rows are marked (it is
committed). The next relay to start decides between the last two by asking the
database (check-back), so every committed row is on the topic exactly once.

If step 3's outcome is unknown (the database connection broke at COMMIT), the relay
asks the database again; if it cannot tell, it leaves the transaction prepared (the
coordinator never times out a prepared transaction) and starts over, which asks again.

Under transaction version 1 the epoch does not move between transactions, so a name
can repeat within one producer session: `mark` renames older rows carrying the name
in the same local transaction, so the name in the table is always the latest one.

Several relays: all relays of one table share a transactional id (derived from the
database and table unless given), so a new one fences an old one, and only the relay
holding the store's lock (an advisory lock on PostgreSQL, a file lock for SQLite)
publishes; the others wait for the lock.

Bad rows: a row whose record the producer or the topic refuses as too large
(MESSAGE_TOO_LARGE) is not retried forever: the relay aborts the batch, logs an alert
once, and sends a record without the payload to the dead-letter topic (headers ``id``,
``type``, ``aggregatetype``, ``aggregateid``, ``error``, ``payload.size``) in the row's
place, in the same exactly-once way, and marks the row published.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tidegate.client import FatalProducerError, PreparedTxnState, Producer, RecordMetadata
from tidegate.client.checkback import key as txn_name
from tidegate.common.errors import KafkaError
from tidegate.patterns.outbox.store import OutboxRow, OutboxStore, OutboxTableError

__all__ = ["DEFAULT_DEAD_LETTER_TOPIC", "DEFAULT_TOPIC", "OutboxRelay", "RelayStats"]

log = logging.getLogger("tidegate.patterns.outbox")

DEFAULT_TOPIC = "outbox.event.{aggregatetype}"
DEFAULT_DEAD_LETTER_TOPIC = "outbox.deadletter"
TopicFor = str | Callable[[OutboxRow], str]


@dataclass
class RelayStats:
    """What a relay did since it started."""

    published: int = 0
    dead_lettered: int = 0
    transactions: int = 0
    recovered_commit: int = 0
    recovered_abort: int = 0
    restarts: int = 0


def default_transactional_id(store: OutboxStore) -> str:
    """One id per (database, table): relays of the same outbox fence each other, relays
    of different outboxes never do (the hash keeps passwords out of the id)."""
    digest = hashlib.sha256(store.description.encode()).hexdigest()[:12]
    return f"tidegate-outbox-{store.table}-{digest}"


def _too_large(exc: BaseException | None) -> bool:
    return isinstance(exc, KafkaError) and exc.name in (
        "MESSAGE_TOO_LARGE", "RECORD_LIST_TOO_LARGE")


class OutboxRelay:
    """See the module docstring. `config` is the producer's (``bootstrap.servers``,
    security...); the relay sets ``transactional.id`` (unless given) and
    ``transaction.two.phase.commit.enable``."""

    def __init__(self, store: OutboxStore, config: Mapping[str, object], *,
                 topic: TopicFor = DEFAULT_TOPIC,
                 dead_letter_topic: str = DEFAULT_DEAD_LETTER_TOPIC,
                 batch_size: int = 500, poll_interval_s: float = 1.0,
                 retry_backoff_s: float = 1.0, delete_published: bool = False) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.store = store
        cfg = dict(config)
        cfg.setdefault("transactional.id", default_transactional_id(store))
        cfg["transaction.two.phase.commit.enable"] = True
        self.config = cfg
        self.transactional_id = str(cfg["transactional.id"])
        self.topic = topic
        self.dead_letter_topic = dead_letter_topic
        self.batch_size = batch_size
        self.poll_interval_s = poll_interval_s
        self.retry_backoff_s = retry_backoff_s
        self.delete_published = delete_published
        self.stats = RelayStats()
        self.producer: Producer | None = None
        # Rows found too large for their topic (seq -> error name): they go to the
        # dead-letter topic. Suspects were in a record batch the topic refused.
        self._too_large: dict[int, str] = {}
        self._suspects: set[int] = set()
        self._checked = False

    # -- leadership and recovery ------------------------------------------------------

    def start(self, stop: threading.Event | None = None) -> bool:
        """Wait for the store's lock, take over the transactional id and finish what a
        previous relay left prepared. False if `stop` was set first. Raises
        OutboxTableError when the table is missing (no point waiting)."""
        while stop is None or not stop.is_set():
            try:
                if not self._checked:
                    self.store.check_table()
                    self._checked = True
                if not self.store.try_acquire():
                    self._sleep(stop, self.poll_interval_s)
                    continue
                self.producer = Producer(self.config)
                found = self.producer.init_transactions(keep_prepared_txn=True)
                if found is not None:
                    self._resolve(found)
                log.info("outbox relay for %s table %s is active (transactional.id %s)",
                         self.store.description, self.store.table, self.transactional_id)
                return True
            except OutboxTableError:
                raise
            except Exception as e:
                log.warning("outbox relay could not start (%s: %s); retrying",
                            type(e).__name__, e)
                self._drop()
                self._sleep(stop, self.retry_backoff_s)
        return False

    def _resolve(self, prepared: PreparedTxnState) -> None:
        """A prepared transaction left by a relay that died: commit it iff its rows
        were marked (raises, leaving it prepared, if the database cannot tell)."""
        assert self.producer is not None
        name = txn_name(prepared)
        commit = self.store.is_marked(name)
        self.producer.complete_transaction(prepared, commit=commit)
        if commit:
            self.stats.recovered_commit += 1
        else:
            self.stats.recovered_abort += 1
        log.info("prepared transaction %s left by an earlier relay: %s", name,
                 "committed (its rows are marked)" if commit else "aborted (rows unmarked)")

    def _drop(self) -> None:
        """Give up the producer and the lock (a prepared transaction stays prepared)."""
        p, self.producer = self.producer, None
        if p is not None:
            try:
                p.close(timeout_ms=1000)
            except Exception as e:
                log.debug("closing the producer: %s", e)
        try:
            self.store.reset()
        except Exception as e:
            log.debug("resetting the store: %s", e)

    @staticmethod
    def _sleep(stop: threading.Event | None, seconds: float) -> None:
        if stop is not None:
            stop.wait(seconds)
        else:
            time.sleep(seconds)

    # -- publishing ------------------------------------------------------------------

    def _topic_for(self, row: OutboxRow) -> str:
        if callable(self.topic):
            return self.topic(row)
        return self.topic.format(aggregatetype=row.aggregatetype, type=row.type)

    def _send_dead_letter(self, p: Producer, row: OutboxRow) -> None:
        size = len(row.payload or b"")
        p.send(self.dead_letter_topic, None, row.aggregateid, headers=[
            ("id", row.id), ("type", row.type), ("aggregatetype", row.aggregatetype),
            ("aggregateid", row.aggregateid), ("error", self._too_large[row.seq]),
            ("payload.size", str(size))])

    def _dead(self, row: OutboxRow, exc: BaseException) -> None:
        if row.seq not in self._too_large:
            self._too_large[row.seq] = exc.name if isinstance(exc, KafkaError) \
                else type(exc).__name__
            log.error("ALERT outbox row seq=%d id=%s (%d-byte payload) is too large for "
                      "topic %s (%s): it goes to dead-letter topic %s", row.seq, row.id,
                      len(row.payload or b""), self._topic_for(row), exc,
                      self.dead_letter_topic)

    def _send_row(self, p: Producer, row: OutboxRow
                  ) -> concurrent.futures.Future[RecordMetadata]:
        topic = self._topic_for(row)
        headers: list[tuple[str, bytes | str | None]] = [("id", row.id), ("type", row.type)]
        if row.seq not in self._suspects:
            return p.send(topic, row.payload, row.aggregateid, headers=headers)
        # The topic refused a record batch holding this row: send it in a batch of its
        # own (flush before and after), so that only a row too large by itself is
        # dead-lettered, not the rows that shared its batch.
        p.flush()
        fut = p.send(topic, row.payload, row.aggregateid, headers=headers)
        p.flush()
        return fut

    def publish_batch(self) -> int:
        """Publish up to `batch_size` unpublished rows in one transaction; return how
        many rows it took (0: nothing to do). Raises on errors the caller should
        recover from (see `run`)."""
        p = self.producer
        if p is None:
            raise RuntimeError("start() the relay first")
        rows = self.store.fetch(self.batch_size)
        if not rows:
            return 0
        while True:
            p.begin_transaction()
            sent: list[tuple[OutboxRow, concurrent.futures.Future[RecordMetadata]]] = []
            try:
                for row in rows:
                    if row.seq not in self._too_large:
                        try:
                            sent.append((row, self._send_row(p, row)))
                            continue
                        except KafkaError as e:
                            if not _too_large(e):
                                raise
                            self._dead(row, e)
                    self._send_dead_letter(p, row)
                prepared = p.prepare_transaction()
            except KafkaError:
                refused = [(row, f.exception()) for row, f in sent
                           if f.done() and _too_large(f.exception())]
                p.abort_transaction()
                if not refused:
                    raise
                for row, exc in refused:
                    assert exc is not None
                    if row.seq in self._suspects:
                        self._dead(row, exc)  # refused alone: it is the culprit
                    else:
                        self._suspects.add(row.seq)
                continue  # again: suspects alone in their batches, culprits dead-lettered
            break
        self._finish(p, prepared, rows)
        return len(rows)

    def _finish(self, p: Producer, prepared: PreparedTxnState, rows: list[OutboxRow]
                ) -> None:
        name = txn_name(prepared)
        try:
            self.store.mark([r.seq for r in rows], name)
            commit = True
        except Exception as e:
            # The local commit may or may not have happened: ask (raises, leaving the
            # transaction prepared for the next start, if the database cannot tell).
            log.warning("marking %d rows as %s failed (%s: %s); checking back", len(rows),
                        name, type(e).__name__, e)
            commit = self.store.is_marked(name)
        p.complete_transaction(prepared, commit=commit)
        if not commit:
            raise RuntimeError(f"transaction {name} aborted: its rows were not marked")
        self.stats.transactions += 1
        dead = sum(1 for r in rows if r.seq in self._too_large)
        self.stats.dead_lettered += dead
        self.stats.published += len(rows) - dead
        for r in rows:
            self._too_large.pop(r.seq, None)
            self._suspects.discard(r.seq)
        if self.delete_published:
            # Every marked row's transaction is complete: this relay holds the lock and
            # has just completed the only one it had open.
            self.store.delete_published()

    # -- the loop ----------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None, *, until_idle: bool = False) -> None:
        """Publish until `stop` is set (or, with `until_idle`, until no row is left).
        Errors (broker or database down, fenced by another relay) are logged; the
        relay then gives up its lock and producer and starts over."""
        active = self.producer is not None  # start() was called already
        while stop is None or not stop.is_set():
            try:
                if not active:
                    active = self.start(stop)
                    continue
                if self.publish_batch() == 0:
                    if until_idle:
                        return
                    self.store.wait(self.poll_interval_s)
            except OutboxTableError:
                raise
            except FatalProducerError as e:
                log.warning("outbox relay fenced or refused (%s); standing by", e)
                self._restart(stop)
                active = False
            except Exception as e:
                log.warning("outbox relay error (%s: %s); starting over",
                            type(e).__name__, e)
                self._restart(stop)
                active = False

    def _restart(self, stop: threading.Event | None) -> None:
        self.stats.restarts += 1
        self._drop()
        self._sleep(stop, self.retry_backoff_s)

    def close(self) -> None:
        p, self.producer = self.producer, None
        try:
            if p is not None:
                p.close()
        finally:
            self.store.close()

    def __enter__(self) -> OutboxRelay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
