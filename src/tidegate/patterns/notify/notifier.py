"""`Notifier`: best-effort notification (seed 001) of a topic's records to HTTP endpoints.

Each record of the source topics is POSTed to its endpoint (one URL, or one chosen per
record). A 2xx answer delivers it; anything else — another status, a refused
connection, no answer within ``request_timeout_s`` (an endpoint that hangs) — is a
failed attempt, retried after the schedule's next interval (tracker.py: seed 001's
"time ladder"). After the last try the record goes to the dead-letter topic and the
log says ``ALERT`` once. Every attempt is written to the delivery-log topic (key: the
notification id ``topic:partition:offset``; value: JSON with the attempt number,
outcome, HTTP status, error, time).

Guarantee: at least once. The notifier reads read_committed with manual assignment of
every partition (no rebalance waits after a crash) and commits a partition's offset
only up to its lowest record not yet delivered or dead-lettered, after flushing the
delivery log and dead-letter records: a kill -9 at any point re-delivers what was in
flight (the receiver de-duplicates by ``X-Notification-Id``) and loses nothing. After
a restart the schedule starts over for the records it re-reads.

Requests: ``POST`` with the record's value as the body and headers
``X-Notification-Id``, ``X-Notification-Attempt``, ``X-Notification-Topic`` and
``X-Notification-Key`` (percent-encoded); ``Content-Type`` from the record's
``content-type`` header, else ``application/octet-stream``.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tidegate.client import (
    Consumer,
    ConsumerRecord,
    FatalProducerError,
    Producer,
    RecordMetadata,
    TopicPartition,
)
from tidegate.patterns._config import consumer_settings, producer_settings
from tidegate.patterns.notify.tracker import DEFAULT_SCHEDULE_S, Notification, Tracker

__all__ = ["Attempt", "EndpointFor", "Notifier", "NotifierStats", "http_post"]

log = logging.getLogger("tidegate.patterns.notify")

EndpointFor = str | Callable[[ConsumerRecord], str | None]


@dataclass(frozen=True)
class Attempt:
    """One attempt's result: an HTTP status (None: no answer) and an error text."""

    status: int | None
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


@dataclass
class NotifierStats:
    attempts: int = 0
    delivered: int = 0
    retried: int = 0
    dead_lettered: int = 0
    restarts: int = 0


def _header(record: ConsumerRecord, name: str) -> bytes | None:
    for k, v in record.headers:
        if k.lower() == name:
            return v
    return None


def http_post(url: str, record: ConsumerRecord, nid: str, attempt: int,
              timeout_s: float) -> Attempt:
    """One POST; never raises (every failure is a failed attempt)."""
    ctype = _header(record, "content-type")
    headers = {
        "Content-Type": ctype.decode("latin-1") if ctype else "application/octet-stream",
        "X-Notification-Id": nid,
        "X-Notification-Attempt": str(attempt),
        "X-Notification-Topic": record.topic,
        "X-Notification-Key": urllib.parse.quote(record.key or b""),
    }
    req = urllib.request.Request(url, data=record.value or b"", headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            resp.read()
            return Attempt(resp.status)
    except urllib.error.HTTPError as e:
        return Attempt(e.code, f"HTTP {e.code}")
    except Exception as e:  # refused, reset, timed out (a hanging endpoint), bad URL
        return Attempt(None, f"{type(e).__name__}: {e}")


class Notifier:
    """See the module docstring. `config` holds the client settings shared by the
    consumer and the producer (``bootstrap.servers``, security...)."""

    def __init__(self, topics: Sequence[str], endpoint: EndpointFor,
                 config: Mapping[str, object], *, group_id: str | None = None,
                 schedule: Sequence[float] = DEFAULT_SCHEDULE_S,
                 log_topic: str = "notify.log", dead_letter_topic: str = "notify.deadletter",
                 request_timeout_s: float = 10.0, max_in_flight: int = 8,
                 max_pending: int = 10_000, commit_interval_s: float = 0.5,
                 retry_backoff_s: float = 1.0,
                 post: Callable[[str, ConsumerRecord, str, int, float], Attempt] = http_post,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not topics:
            raise ValueError("give at least one source topic")
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self.topics = list(topics)
        self.endpoint = endpoint
        self.config = dict(config)
        self.group_id = group_id or "tidegate-notify-" + "-".join(self.topics)
        self.schedule = tuple(schedule)
        self.log_topic = log_topic
        self.dead_letter_topic = dead_letter_topic
        self.request_timeout_s = request_timeout_s
        self.max_in_flight = max_in_flight
        self.max_pending = max_pending
        self.commit_interval_s = commit_interval_s
        self.retry_backoff_s = retry_backoff_s
        self.post = post
        self.clock = clock
        self.stats = NotifierStats()
        self.consumer: Consumer | None = None
        self.producer: Producer | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(max_in_flight,
                                                           thread_name_prefix="notify")
        self._reset_state()

    def _reset_state(self) -> None:
        self.tracker = Tracker(self.schedule)
        self._inflight: dict[concurrent.futures.Future[Attempt], Notification] = {}
        self._sent: list[concurrent.futures.Future[RecordMetadata]] = []
        self._last_commit = 0.0

    # -- start, stop ----------------------------------------------------------------------

    def start(self) -> None:
        """Open the clients and assign every partition of the source topics (reading
        from the group's committed offsets, else the earliest)."""
        self.producer = Producer({**producer_settings(self.config),
                                  "enable.idempotence": True, "acks": "all"})
        self.consumer = Consumer({**consumer_settings(self.config), "group.id": self.group_id,
                                  "enable.auto.commit": False,
                                  "isolation.level": "read_committed",
                                  "auto.offset.reset": "earliest"})
        tps = [TopicPartition(t, p) for t in self.topics
               for p in self.consumer.partitions_for_topic(t)]
        self.consumer.assign(tps)
        # Find the group coordinator now: the first commit() would otherwise spend
        # ~0.5 s looking for it, and a notifier restarted often might never commit.
        self.consumer.committed(tps)
        log.info("notifier for %s is running (group %s, %d partitions)",
                 ",".join(self.topics), self.group_id, len(tps))

    def _drop(self) -> None:
        for f in self._inflight:
            f.cancel()
        c, self.consumer = self.consumer, None
        p, self.producer = self.producer, None
        for client in (c, p):
            if client is not None:
                try:
                    client.close()
                except Exception as e:
                    log.debug("closing a client: %s", e)
        self._reset_state()

    def close(self) -> None:
        self._drop()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> Notifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the loop ---------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None, *, until_idle: bool = False) -> None:
        """Notify until `stop` is set (or, with `until_idle`, until every record of the
        source topics is delivered or dead-lettered). Broker errors are logged; the
        notifier then drops its clients and starts over from the committed offsets."""
        stop = stop or threading.Event()
        while not stop.is_set():
            try:
                if self.consumer is None:
                    self.start()
                if self.step() and until_idle:
                    self._commit(force=True)
                    return
            except Exception as e:
                fatal = isinstance(e, FatalProducerError)
                log.warning("notifier error (%s: %s); starting over%s", type(e).__name__, e,
                            " (fatal producer error)" if fatal else "")
                self.stats.restarts += 1
                self._drop()
                stop.wait(self.retry_backoff_s)

    def step(self) -> bool:
        """One turn: collect finished attempts, start due retries, poll new records,
        commit. True when idle: nothing in flight or waiting and the source read to
        its end."""
        c = self.consumer
        assert c is not None, "start() the notifier first"
        self._collect()
        now = self.clock()
        for n in self.tracker.due(now, self.max_in_flight - len(self._inflight)):
            self._submit(n)
        free = self.max_in_flight - len(self._inflight)
        idle = False
        if free > 0 and self.tracker.outstanding < self.max_pending:
            nxt = self.tracker.next_due()
            wait_s = 0.02 if self._inflight else min(
                0.5, max(0.0, (nxt - now) if nxt is not None else 0.5))
            records = c.poll(int(wait_s * 1000), max_records=free)
            for r in records:
                url = self.endpoint(r) if callable(self.endpoint) else self.endpoint
                if url:
                    self._submit(self.tracker.add(r, url))
                else:
                    self.tracker.skip(r)
            idle = (not records and not self._inflight and self.tracker.outstanding == 0
                    and self._at_end(c))
        else:
            concurrent.futures.wait(list(self._inflight), timeout=0.2,
                                    return_when=concurrent.futures.FIRST_COMPLETED)
        self._commit()
        return idle

    def _at_end(self, c: Consumer) -> bool:
        tps = list(c.assignment())
        ends = c.end_offsets(tps)
        return all(c.position(tp) >= ends.get(tp, 0) for tp in tps)

    def _submit(self, n: Notification) -> None:
        fut = self._pool.submit(self.post, n.endpoint, n.record, n.id, n.attempts + 1,
                                self.request_timeout_s)
        self._inflight[fut] = n

    def _collect(self) -> None:
        for fut in [f for f in self._inflight if f.done()]:
            n = self._inflight.pop(fut)
            self._handle(n, fut.result())

    def _handle(self, n: Notification, a: Attempt) -> None:
        assert self.producer is not None
        now = self.clock()
        outcome = self.tracker.result(n, a.ok, now, a.error)
        self.stats.attempts += 1
        entry = {"id": n.id, "topic": n.record.topic, "partition": n.record.partition,
                 "offset": n.record.offset, "endpoint": n.endpoint, "attempt": n.attempts,
                 "outcome": {"dead": "dead-lettered"}.get(outcome.kind, outcome.kind),
                 "status": a.status, "error": a.error, "at_ms": int(time.time() * 1000)}
        if outcome.retry_at is not None:
            entry["next_retry_ms"] = int((time.time() + outcome.retry_at - now) * 1000)
        self._sent.append(self.producer.send(self.log_topic, json.dumps(entry).encode(),
                                             n.id))
        if outcome.kind == "delivered":
            self.stats.delivered += 1
            self.tracker.finish(n)
        elif outcome.kind == "retry":
            self.stats.retried += 1
            log.info("notification %s to %s failed (attempt %d: %s); retry in %.1f s",
                     n.id, n.endpoint, n.attempts, a.error, outcome.retry_at - now
                     if outcome.retry_at is not None else 0)
        else:
            self._dead_letter(n)

    def _dead_letter(self, n: Notification) -> None:
        assert self.producer is not None
        r = n.record
        log.error("ALERT notification %s (key %r) to %s failed %d times, last: %s; it goes "
                  "to dead-letter topic %s", n.id, r.key, n.endpoint, n.attempts,
                  n.last_error, self.dead_letter_topic)
        headers: list[tuple[str, bytes | str | None]] = list(r.headers)
        headers += [("notify.id", n.id), ("notify.endpoint", n.endpoint),
                    ("notify.attempts", str(n.attempts)), ("notify.error", n.last_error)]
        self._sent.append(self.producer.send(self.dead_letter_topic, r.value, r.key,
                                             headers=headers))
        self.stats.dead_lettered += 1
        self.tracker.finish(n)

    def _commit(self, force: bool = False) -> None:
        now = self.clock()
        if not force and now - self._last_commit < self.commit_interval_s:
            return
        offsets = self.tracker.to_commit()
        if not offsets:
            return
        assert self.producer is not None and self.consumer is not None
        # The delivery log and dead letters of every finished notification first: an
        # offset is committed only when what it stands for is durable.
        self.producer.flush()
        sent, self._sent = self._sent, []
        for f in sent:
            f.result(0)  # raises if a log or dead-letter record was refused
        self.consumer.commit(offsets)
        self.tracker.committed(offsets)
        self._last_commit = now
