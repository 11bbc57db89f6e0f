"""A saga's state machine (seed 001's Saga, orchestrated), without I/O.

A `SagaDefinition` is an ordered list of `Step`s; each step is a command to a
participant topic and has a compensation (the same topic, action ``compensate``). The
orchestrator (orchestrator.py) feeds this machine the saga's start, each participant's
reply and each timeout, and publishes the commands it returns together with the new
state in one Kafka transaction; this module only decides.

Rules:

- Forward: step *i*'s ``do`` succeeded -> send step *i+1*'s ``do`` (or COMPLETED).
- Forward recovery: no reply within the step's ``timeout_s`` -> send the same command
  again (same idempotency key) up to ``retries`` more times.
- Backward recovery: a failure reply for step *i* (the participant did nothing) ->
  compensate steps *i-1* .. *0* in reverse order; a step still silent after its
  retries -> compensate steps *i* .. *0* (step *i* may have happened unseen: its
  participant treats a compensation for something it never did as an empty
  compensation, and refuses the step if it arrives later — seed 001's "hanging").
- A compensation must succeed: it is resent after every timeout and every failure
  reply to its current attempt, forever, and the orchestrator alerts each time
  (``alert`` in the result).
- Replies that do not match the current step, action and attempt are stale
  (re-deliveries, answers to an earlier attempt) and change nothing.

Every command carries ``idempotency.key`` = ``<saga id>/<step>/<action>``: participants
de-duplicate by it. Time (``now``, seconds) is passed in.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace

__all__ = ["COMPENSATED", "COMPENSATING", "COMPLETED", "RUNNING", "Command", "Decision",
           "SagaDefinition", "SagaState", "Step", "definitions_from_json", "on_reply",
           "on_timeout", "start"]

RUNNING, COMPENSATING, COMPLETED, COMPENSATED = (
    "RUNNING", "COMPENSATING", "COMPLETED", "COMPENSATED")
DO, COMPENSATE = "do", "compensate"


@dataclass(frozen=True)
class Step:
    name: str
    topic: str
    timeout_s: float = 30.0
    retries: int = 2


@dataclass(frozen=True)
class SagaDefinition:
    name: str
    steps: tuple[Step, ...]

    def __post_init__(self) -> None:
        if not self.steps:
            raise ValueError(f"saga {self.name!r} has no steps")
        names = [s.name for s in self.steps]
        if len(set(names)) != len(names):
            raise ValueError(f"saga {self.name!r} repeats a step name")


@dataclass(frozen=True)
class Command:
    """A command for a participant: publish to `topic`, key the saga id."""

    topic: str
    saga_id: str
    saga: str
    step: str
    action: str
    attempt: int
    payload: str

    @property
    def idempotency_key(self) -> str:
        return f"{self.saga_id}/{self.step}/{self.action}"


@dataclass(frozen=True)
class SagaState:
    """What the compacted state topic holds per saga (`to_json` / `from_json`)."""

    saga_id: str
    saga: str
    payload: str
    status: str
    step: int  # index of the step being done or compensated
    action: str
    attempt: int
    deadline: float
    history: tuple[str, ...] = field(default=())

    def to_json(self) -> bytes:
        d = asdict(self)
        d["history"] = list(self.history)
        return json.dumps(d).encode()

    @staticmethod
    def from_json(data: bytes) -> SagaState:
        d = json.loads(data)
        d["history"] = tuple(d["history"])
        return SagaState(**d)

    @property
    def done(self) -> bool:
        return self.status in (COMPLETED, COMPENSATED)


@dataclass(frozen=True)
class Decision:
    state: SagaState
    commands: tuple[Command, ...] = ()
    alert: str = ""


def _command(d: SagaDefinition, s: SagaState) -> Command:
    step = d.steps[s.step]
    return Command(step.topic, s.saga_id, d.name, step.name, s.action, s.attempt, s.payload)


def _go(d: SagaDefinition, s: SagaState, now: float, note: str, **changes: object
        ) -> Decision:
    s = replace(s, history=(*s.history, note), **changes)  # type: ignore[arg-type]
    if s.done:
        return Decision(replace(s, deadline=0.0))
    s = replace(s, deadline=now + d.steps[s.step].timeout_s)
    return Decision(s, (_command(d, s),))


def start(d: SagaDefinition, saga_id: str, payload: str, now: float) -> Decision:
    s = SagaState(saga_id, d.name, payload, RUNNING, 0, DO, 1, 0.0)
    return _go(d, s, now, "started")


def _compensate_from(d: SagaDefinition, s: SagaState, index: int, now: float, note: str
                     ) -> Decision:
    if index < 0:
        return _go(d, s, now, note + "; nothing to compensate", status=COMPENSATED)
    return _go(d, s, now, note, status=COMPENSATING, step=index, action=COMPENSATE,
               attempt=1)


def on_reply(d: SagaDefinition, s: SagaState, step: str, action: str, attempt: int,
             ok: bool, now: float, reason: str = "") -> Decision:
    """A participant answered `action` of `step` (attempt `attempt`)."""
    if s.done or d.steps[s.step].name != step or s.action != action:
        return Decision(s)  # stale: an earlier step's or attempt's answer
    name = d.steps[s.step].name
    if s.action == DO:
        if attempt != s.attempt:
            return Decision(s)
        if ok:
            if s.step + 1 == len(d.steps):
                return _go(d, s, now, f"{name} done", status=COMPLETED)
            return _go(d, s, now, f"{name} done", step=s.step + 1, attempt=1)
        # The participant refused: it did nothing, so compensate only the steps before.
        return _compensate_from(d, s, s.step - 1, now, f"{name} failed: {reason}")
    if ok:  # a compensation is idempotent: any attempt's success counts
        if s.step == 0:
            return _go(d, s, now, f"{name} compensated", status=COMPENSATED)
        return _go(d, s, now, f"{name} compensated", step=s.step - 1, attempt=1)
    if attempt != s.attempt:
        return Decision(s)  # an earlier attempt's refusal: the current one is on its way
    dec = _go(d, s, now, f"{name} compensation failed: {reason}", attempt=s.attempt + 1)
    return replace(dec, alert=f"saga {s.saga_id} ({d.name}): compensation of {name} "
                              f"failed ({reason}); retrying, attempt {s.attempt + 1}")


def on_timeout(d: SagaDefinition, s: SagaState, now: float) -> Decision:
    """Call when `now` >= the state's deadline."""
    if s.done or now < s.deadline:
        return Decision(s)
    step = d.steps[s.step]
    if s.action == DO:
        if s.attempt <= step.retries:
            return _go(d, s, now, f"{step.name} timed out; retry", attempt=s.attempt + 1)
        # Still silent: it may have happened unseen, so compensate it too.
        dec = _compensate_from(d, s, s.step, now,
                               f"{step.name} timed out after {s.attempt} attempts")
        return replace(dec, alert=f"saga {s.saga_id} ({d.name}): participant of "
                                  f"{step.name} never answered; compensating")
    dec = _go(d, s, now, f"{step.name} compensation timed out", attempt=s.attempt + 1)
    return replace(dec, alert=f"saga {s.saga_id} ({d.name}): compensation of {step.name} "
                              f"unanswered; retrying, attempt {s.attempt + 1}")


def definitions_from_json(text: str) -> list[SagaDefinition]:
    """Definitions from JSON: one object or a list of them, each
    ``{"name": ..., "steps": [{"name": ..., "topic": ..., "timeout_s": 30, "retries": 2}]}``."""
    data = json.loads(text)
    out = []
    for d in data if isinstance(data, list) else [data]:
        steps = tuple(Step(str(s["name"]), str(s["topic"]), float(s.get("timeout_s", 30.0)),
                           int(s.get("retries", 2))) for s in d["steps"])
        out.append(SagaDefinition(str(d["name"]), steps))
    return out
