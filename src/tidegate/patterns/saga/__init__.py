"""Saga orchestration (seed 001): a saga is an ordered list of steps, each a command to
a participant with a compensation.

- machine.py: the state machine (no I/O): forward steps, retries after a timeout
  (forward recovery), compensation in reverse order (backward recovery);
- orchestrator.py: `SagaOrchestrator`, the machine as an exactly-once processor (each
  state change, its commands and the consumed input's offset in one transaction; the
  states in a compacted topic); `start_saga`, `read_states`;
- participant.py: `SagaParticipant`, idempotent steps and compensations over a local
  ledger table, with seed 001's empty-compensation and hanging cases.
"""

from tidegate.patterns.saga.machine import (
    COMPENSATED,
    COMPENSATING,
    COMPLETED,
    RUNNING,
    Command,
    Decision,
    SagaDefinition,
    SagaState,
    Step,
    definitions_from_json,
    on_reply,
    on_timeout,
    start,
)
from tidegate.patterns.saga.orchestrator import (
    OrchestratorStats,
    SagaOrchestrator,
    SagaTopics,
    read_states,
    start_saga,
)
from tidegate.patterns.saga.participant import (
    ParticipantCommand,
    SagaParticipant,
    StepFailed,
    ledger_schema,
)

__all__ = ["COMPENSATED", "COMPENSATING", "COMPLETED", "RUNNING", "Command", "Decision",
           "OrchestratorStats", "ParticipantCommand", "SagaDefinition", "SagaOrchestrator",
           "SagaParticipant", "SagaState", "SagaTopics", "Step", "StepFailed",
           "definitions_from_json", "ledger_schema", "on_reply", "on_timeout",
           "read_states", "start", "start_saga"]
