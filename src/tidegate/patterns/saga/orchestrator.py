"""`SagaOrchestrator`: runs `SagaDefinition`s (machine.py) as an exactly-once processor.

Topics (names configurable; the prefix defaults to ``sagas``):

- ``sagas.start``: start requests, key the saga id, value the payload (text), header
  ``saga`` the definition's name (`start_saga` writes one);
- ``sagas.replies``: participants' answers (participant.py writes them): headers
  ``saga.id``, ``saga.step``, ``saga.action``, ``saga.attempt``, ``saga.outcome``
  (``ok`` / ``failed``), ``saga.reason``;
- ``sagas.state``: compacted, key the saga id, value the `SagaState` JSON — what
  ``tidegate sagas list|describe`` shows;
- each step's topic: the commands (`command_record`).

One loop turn reads start requests and replies, asks the machine, and in ONE Kafka
transaction sends the commands it decided, the new states, and the consumed offsets
(`send_offsets_to_transaction`). A crash at any point leaves either the whole turn or
none of it: a state change is never seen without its command, nor a reply consumed
without its state change. On start the orchestrator fences its predecessor
(``transactional.id``), reads the state topic read_committed to its end (that is the
state as of the committed offsets) and goes on from the committed offsets. Timeouts
are wall-clock deadlines stored in the state, so they survive restarts; an expired
deadline is a turn of its own (the machine retries or compensates).

Commands may be sent more than once (a turn aborted after the send, a retry after a
timeout): participants de-duplicate by ``idempotency.key`` (participant.py does).
Errors (broker down, fenced) drop the clients and start over. Manual assignment of
every partition: one orchestrator per prefix at a time (a second one fences the first).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from tidegate.client import Consumer, ConsumerRecord, Producer, TopicPartition
from tidegate.patterns._config import consumer_settings, producer_settings
from tidegate.patterns.saga.machine import (
    Command,
    Decision,
    SagaDefinition,
    SagaState,
    on_reply,
    on_timeout,
    start,
)

__all__ = ["OrchestratorStats", "SagaOrchestrator", "SagaTopics", "command_record",
           "header", "read_states", "start_saga"]

log = logging.getLogger("tidegate.patterns.saga")

Headers = list[tuple[str, bytes | str | None]]


@dataclass(frozen=True)
class SagaTopics:
    prefix: str = "sagas"

    @property
    def start(self) -> str:
        return f"{self.prefix}.start"

    @property
    def replies(self) -> str:
        return f"{self.prefix}.replies"

    @property
    def state(self) -> str:
        return f"{self.prefix}.state"


@dataclass
class OrchestratorStats:
    started: int = 0
    completed: int = 0
    compensated: int = 0
    commands: int = 0
    transactions: int = 0
    restarts: int = 0


def header(record: ConsumerRecord, name: str) -> str:
    for k, v in record.headers:
        if k == name and v is not None:
            return v.decode()
    return ""


def command_record(c: Command, replies_topic: str) -> tuple[str, str, Headers]:
    """(topic, key, headers) of a command; its value is the saga's payload."""
    return c.topic, c.saga_id, [
        ("saga.id", c.saga_id), ("saga.name", c.saga), ("saga.step", c.step),
        ("saga.action", c.action), ("saga.attempt", str(c.attempt)),
        ("idempotency.key", c.idempotency_key), ("reply.topic", replies_topic)]


def start_saga(producer: Producer, definition: str, saga_id: str, payload: str,
               topics: SagaTopics = SagaTopics()) -> None:
    """Ask the orchestrator to run saga `definition` (a start request; repeating it
    for the same id changes nothing)."""
    producer.send(topics.start, payload, saga_id, headers=[("saga", definition)])


def read_states(config: Mapping[str, object], topics: SagaTopics = SagaTopics(),
                timeout_s: float = 60.0) -> dict[str, SagaState]:
    """Every saga's latest committed state (the state topic read to its end)."""
    c = Consumer({**consumer_settings(config), "group.id": f"tidegate-sagas-{uuid.uuid4()}",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        tps = [TopicPartition(topics.state, p) for p in c.partitions_for_topic(topics.state)]
        ends = c.end_offsets(tps)
        c.assign(tps)
        c.seek_to_beginning(*tps)
        out: dict[str, SagaState] = {}
        deadline = time.monotonic() + timeout_s
        while any(c.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topics.state} to its end")
            for r in c.poll(200):
                if r.key is not None and r.value is not None:
                    out[r.key.decode()] = SagaState.from_json(r.value)
        return out
    finally:
        c.close()


class SagaOrchestrator:
    def __init__(self, definitions: Iterable[SagaDefinition], config: Mapping[str, object],
                 *, topics: SagaTopics = SagaTopics(), transactional_id: str | None = None,
                 retry_backoff_s: float = 1.0, clock: Callable[[], float] = time.time
                 ) -> None:
        self.definitions = {d.name: d for d in definitions}
        if not self.definitions:
            raise ValueError("give at least one saga definition")
        self.config = dict(config)
        self.topics = topics
        self.transactional_id = transactional_id or f"tidegate-sagas-{topics.prefix}"
        self.group_id = f"tidegate-sagas-{topics.prefix}"
        self.retry_backoff_s = retry_backoff_s
        self.clock = clock
        self.stats = OrchestratorStats()
        self.states: dict[str, SagaState] = {}
        self.consumer: Consumer | None = None
        self.producer: Producer | None = None

    # -- start, stop ----------------------------------------------------------------------

    def start(self) -> None:
        """Fence the previous orchestrator, load the committed states, assign inputs."""
        self.producer = Producer({**producer_settings(self.config),
                                  "transactional.id": self.transactional_id})
        self.producer.init_transactions()
        self.states = read_states(self.config, self.topics)
        self.consumer = Consumer({**consumer_settings(self.config), "group.id": self.group_id,
                                  "enable.auto.commit": False,
                                  "isolation.level": "read_committed",
                                  "auto.offset.reset": "earliest"})
        tps = [TopicPartition(t, p) for t in (self.topics.start, self.topics.replies)
               for p in self.consumer.partitions_for_topic(t)]
        self.consumer.assign(tps)
        active = sum(1 for s in self.states.values() if not s.done)
        log.info("saga orchestrator %s running: %d sagas loaded, %d active",
                 self.transactional_id, len(self.states), active)

    def _drop(self) -> None:
        for client in (self.consumer, self.producer):
            if client is not None:
                try:
                    client.close()
                except Exception as e:
                    log.debug("closing a client: %s", e)
        self.consumer = self.producer = None

    def close(self) -> None:
        self._drop()

    def __enter__(self) -> SagaOrchestrator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the loop ---------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None, *, until_idle: bool = False) -> None:
        """Run until `stop` is set (or, with `until_idle`, until every saga known is
        completed or compensated and no input is waiting)."""
        stop = stop or threading.Event()
        while not stop.is_set():
            try:
                if self.consumer is None:
                    self.start()
                if self.step() == 0 and until_idle and self._idle():
                    return
            except Exception as e:
                log.warning("saga orchestrator error (%s: %s); starting over",
                            type(e).__name__, e)
                self.stats.restarts += 1
                self._drop()
                stop.wait(self.retry_backoff_s)

    def _idle(self) -> bool:
        c = self.consumer
        assert c is not None
        if any(not s.done for s in self.states.values()):
            return False
        tps = list(c.assignment())
        ends = c.end_offsets(tps)
        return all(c.position(tp) >= ends.get(tp, 0) for tp in tps)

    def step(self) -> int:
        """One turn (one transaction if there is anything to do); returns how many
        inputs and timeouts it handled."""
        c, p = self.consumer, self.producer
        assert c is not None and p is not None, "start() the orchestrator first"
        now = self.clock()
        deadlines = [s.deadline for s in self.states.values() if not s.done]
        wait = min([0.2, *[max(0.0, d - now) for d in deadlines]])
        records = c.poll(int(wait * 1000), max_records=500)
        now = self.clock()
        changed: dict[str, Decision] = {}
        for r in records:
            dec = self._input(r, now, changed)
            if dec is not None:
                changed[dec.state.saga_id] = dec
        for sid, s in list(self.states.items()):
            cur = changed[sid].state if sid in changed else s
            if not cur.done and cur.deadline <= now:
                dec = on_timeout(self.definitions[cur.saga], cur, now)
                if sid in changed:  # keep the commands of the earlier change too
                    dec = Decision(dec.state, changed[sid].commands + dec.commands, dec.alert)
                changed[sid] = dec
        if not records and not changed:
            return 0
        offsets: dict[TopicPartition, int] = {}
        for r in records:
            offsets[TopicPartition(r.topic, r.partition)] = r.offset + 1
        p.begin_transaction()
        try:
            for dec in changed.values():
                for cmd in dec.commands:
                    topic, key, headers = command_record(cmd, self.topics.replies)
                    p.send(topic, cmd.payload, key, headers=headers)
                p.send(self.topics.state, dec.state.to_json(), dec.state.saga_id)
            if offsets:
                p.send_offsets_to_transaction(offsets, c.group_metadata())
            p.commit_transaction()
        except BaseException:
            try:
                p.abort_transaction()
            except Exception as e:
                log.debug("abort after a failed turn: %s", e)
            raise  # run() starts over: the states are reloaded from the topic
        self.stats.transactions += 1
        for sid, dec in changed.items():
            before = self.states.get(sid)
            self.states[sid] = dec.state
            self.stats.commands += len(dec.commands)
            if dec.alert:
                log.error("ALERT %s", dec.alert)
            if dec.state.done and (before is None or not before.done):
                if dec.state.status == "COMPLETED":
                    self.stats.completed += 1
                else:
                    self.stats.compensated += 1
                log.info("saga %s (%s) %s: %s", sid, dec.state.saga, dec.state.status,
                         "; ".join(dec.state.history))
        return len(records) + len(changed)

    def _input(self, r: ConsumerRecord, now: float, changed: Mapping[str, Decision]
               ) -> Decision | None:
        def cur_of(sid: str) -> SagaState | None:
            return changed[sid].state if sid in changed else self.states.get(sid)

        if r.topic == self.topics.start:
            sid = r.key.decode() if r.key else ""
            name = header(r, "saga") or (next(iter(self.definitions))
                                         if len(self.definitions) == 1 else "")
            if not sid or name not in self.definitions:
                log.error("ALERT start request at %s:%d:%d names no known saga (%r) or "
                          "has no key; ignored", r.topic, r.partition, r.offset, name)
                return None
            if cur_of(sid) is not None:
                return None  # a repeated start request
            self.stats.started += 1
            payload = r.value.decode("utf-8", "replace") if r.value else ""
            return start(self.definitions[name], sid, payload, now)
        sid = header(r, "saga.id")
        cur = cur_of(sid)
        if cur is None:
            log.warning("reply for unknown saga %r ignored", sid)
            return None
        try:
            attempt = int(header(r, "saga.attempt") or "0")
        except ValueError:
            attempt = 0
        prev = changed.get(sid)
        dec = on_reply(self.definitions[cur.saga], cur, header(r, "saga.step"),
                       header(r, "saga.action"), attempt, header(r, "saga.outcome") == "ok",
                       now, header(r, "saga.reason"))
        if dec.state is cur:
            return prev
        if prev is not None:  # two inputs for one saga in one turn: send both commands
            dec = Decision(dec.state, prev.commands + dec.commands, dec.alert or prev.alert)
        return dec
