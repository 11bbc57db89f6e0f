"""A saga participant: apply commands to a local database exactly once and answer.

`SagaParticipant` consumes its command topic and, for each command, runs the
application's ``do`` or ``compensate`` callback and records the outcome in a ledger
table in the SAME local transaction, then answers on the command's ``reply.topic``.
The ledger (``<table>(key PRIMARY KEY, state)``, key ``<saga id>/<step>``) makes the
participant idempotent and handles seed 001's two awkward cases:

- a repeated command (re-delivered, or resent after a timeout) finds its row and gets
  the same answer without running the callback again;
- **empty compensation**: a compensation whose step never ran here (it was lost or is
  still on its way) records ``blocked`` and answers ok without calling
  ``compensate``;
- **hanging**: the step arriving after that finds ``blocked`` and is refused, so a
  compensated saga never leaves a step applied.

States: ``done``, ``failed`` (``do`` raised `StepFailed`: its changes rolled back, the
saga compensates the earlier steps), ``compensated``, ``blocked``. A ``compensate``
callback that raises anything answers ``failed``: the orchestrator retries it and
alerts until it succeeds.

Answers are sent after the local commit and offsets committed after the answers are
flushed: after a crash a command is handled again, the ledger answers it, and the
orchestrator ignores the repeated reply. `ledger_schema` gives the DDL; the database
connection is any DB-API one (sqlite3 or psycopg), opened by ``connect``.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tidegate.client import Consumer, ConsumerRecord, Producer, TopicPartition
from tidegate.patterns._config import consumer_settings, producer_settings
from tidegate.patterns.saga.orchestrator import header

__all__ = ["ParticipantCommand", "SagaParticipant", "StepFailed", "ledger_schema"]

log = logging.getLogger("tidegate.patterns.saga.participant")


class StepFailed(Exception):
    """Raised by a ``do`` callback to refuse the step (a business failure)."""


@dataclass(frozen=True)
class ParticipantCommand:
    saga_id: str
    saga: str
    step: str
    action: str
    attempt: int
    payload: str
    reply_topic: str

    @staticmethod
    def from_record(r: ConsumerRecord) -> ParticipantCommand:
        return ParticipantCommand(header(r, "saga.id"), header(r, "saga.name"),
                                  header(r, "saga.step"), header(r, "saga.action"),
                                  int(header(r, "saga.attempt") or "0"),
                                  r.value.decode("utf-8", "replace") if r.value else "",
                                  header(r, "reply.topic"))


def ledger_schema(table: str = "saga_ledger") -> str:
    return f"CREATE TABLE IF NOT EXISTS {table} (key TEXT PRIMARY KEY, state TEXT NOT NULL)"


Callback = Callable[[Any, ParticipantCommand], None]


class SagaParticipant:
    def __init__(self, topic: str, config: Mapping[str, object], connect: Callable[[], Any],
                 do: Callback, compensate: Callback, *, ledger_table: str = "saga_ledger",
                 group_id: str | None = None) -> None:
        self.topic = topic
        self.config = dict(config)
        self.connect = connect
        self.do = do
        self.compensate = compensate
        self.table = ledger_table
        self.group_id = group_id or f"tidegate-saga-participant-{topic}"
        self.conn: Any = None
        self.consumer: Consumer | None = None
        self.producer: Producer | None = None
        self.handled = 0

    def _mark(self) -> str:
        return "?" if isinstance(self.conn, sqlite3.Connection) else "%s"

    def _state(self, key: str) -> str | None:
        row = self.conn.execute(f"SELECT state FROM {self.table} WHERE key = {self._mark()}",
                                (key,)).fetchone()
        return None if row is None else str(row[0])

    def _set(self, key: str, state: str, exists: bool) -> None:
        m = self._mark()
        if exists:
            self.conn.execute(f"UPDATE {self.table} SET state = {m} WHERE key = {m}",
                              (state, key))
        else:
            self.conn.execute(f"INSERT INTO {self.table} (key, state) VALUES ({m}, {m})",
                              (key, state))

    def handle(self, cmd: ParticipantCommand) -> tuple[bool, str] | None:
        """Apply one command in one local transaction; (ok, reason) to answer, or None
        for no answer (a subclass may play a participant that stays silent)."""
        key = f"{cmd.saga_id}/{cmd.step}"
        try:
            state = self._state(key)
            if cmd.action == "do":
                if state == "done":
                    return True, ""
                if state == "failed":
                    return False, "refused earlier"
                if state in ("compensated", "blocked"):
                    return False, "compensated before it ran"  # hanging: refuse it
                try:
                    self.do(self.conn, cmd)
                except StepFailed as e:
                    self.conn.rollback()
                    self._set(key, "failed", False)
                    self.conn.commit()
                    return False, str(e)
                self._set(key, "done", False)
                self.conn.commit()
                return True, ""
            if state == "done":
                try:
                    self.compensate(self.conn, cmd)
                except Exception as e:
                    self.conn.rollback()
                    log.error("compensation of %s refused: %s", key, e)
                    return False, f"{type(e).__name__}: {e}"
                self._set(key, "compensated", True)
            elif state is None:
                self._set(key, "blocked", False)  # empty compensation
            self.conn.commit()
            return True, ""
        except BaseException:
            self.conn.rollback()
            raise

    # -- the loop ---------------------------------------------------------------------------

    def start(self) -> None:
        self.conn = self.connect()
        self.producer = Producer({**producer_settings(self.config), "enable.idempotence": True})
        self.consumer = Consumer({**consumer_settings(self.config), "group.id": self.group_id,
                                  "enable.auto.commit": False,
                                  "isolation.level": "read_committed",
                                  "auto.offset.reset": "earliest"})
        tps = [TopicPartition(self.topic, p)
               for p in self.consumer.partitions_for_topic(self.topic)]
        self.consumer.assign(tps)
        self.consumer.committed(tps)  # find the group coordinator before the first commit

    def step(self, timeout_ms: int = 200) -> int:
        c, p = self.consumer, self.producer
        assert c is not None and p is not None, "start() the participant first"
        records = c.poll(timeout_ms, max_records=200)
        offsets: dict[TopicPartition, int] = {}
        for r in records:
            cmd = ParticipantCommand.from_record(r)
            answer = self.handle(cmd)
            if answer is not None and cmd.reply_topic:
                ok, reason = answer
                p.send(cmd.reply_topic, None, cmd.saga_id, headers=[
                    ("saga.id", cmd.saga_id), ("saga.step", cmd.step),
                    ("saga.action", cmd.action), ("saga.attempt", str(cmd.attempt)),
                    ("saga.outcome", "ok" if ok else "failed"), ("saga.reason", reason)])
            offsets[TopicPartition(r.topic, r.partition)] = r.offset + 1
            self.handled += 1
        if offsets:
            p.flush()
            c.commit(offsets)
        return len(records)

    def run(self, stop: threading.Event, retry_backoff_s: float = 0.5) -> None:
        while not stop.is_set():
            try:
                if self.consumer is None:
                    self.start()
                self.step()
            except Exception as e:
                log.warning("saga participant %s error (%s: %s); starting over", self.topic,
                            type(e).__name__, e)
                self.close()
                stop.wait(retry_backoff_s)

    def close(self) -> None:
        for client in (self.consumer, self.producer):
            if client is not None:
                try:
                    client.close()
                except Exception as e:
                    log.debug("closing a client: %s", e)
        self.consumer = self.producer = None
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception as e:
                log.debug("closing the database: %s", e)
            self.conn = None
