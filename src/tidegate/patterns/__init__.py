"""Seed 001's distributed-transaction patterns, built on Tidegate's public client.

Each pattern is a small library part a team can pick up instead of hand-rolling it:

- `tidegate.patterns.outbox`: the transactional outbox (seed 001's "local message
  table"): the application writes its rows and an outbox row in one local transaction;
  a relay publishes the outbox rows exactly once, in order per aggregate.
- `tidegate.patterns.notify`: best-effort notification: a topic's records POSTed to
  HTTP endpoints with retries on a schedule, a delivery log, a dead-letter topic and
  a query for what the receiver missed.
- `tidegate.patterns.saga`: Saga orchestration: an exactly-once orchestrator running
  saga definitions (steps with compensations, timeouts, retries), its state in a
  compacted topic, and a participant helper with idempotent steps.
- `tidegate.patterns.tcc`: Try-Confirm-Cancel: a coordinator recording each global
  transaction's phase in a compacted topic and finishing it after any crash, and a
  participant helper (idempotent calls, empty rollback, hanging).

The patterns use only `tidegate.client` (an import-linter contract checks it): they run
against any broker the client talks to. docs/patterns.md compares them with Kafka
transactions and check-back and says when to choose which.
"""
