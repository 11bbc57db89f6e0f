"""Seed 001's distributed-transaction patterns, built on Tidegate's public client.

Each pattern is a small library part a team can pick up instead of hand-rolling it:

- `tidegate.patterns.outbox`: the transactional outbox (seed 001's "local message
  table"): the application writes its rows and an outbox row in one local transaction;
  a relay publishes the outbox rows exactly once, in order per aggregate.

The patterns use only `tidegate.client` (an import-linter contract checks it): they run
against any broker the client talks to. docs/patterns.md compares them with Kafka
transactions and check-back and says when to choose which.
"""
