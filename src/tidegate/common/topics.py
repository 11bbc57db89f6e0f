"""Names of Kafka's internal topics, shared by the broker and the client."""

from __future__ import annotations

CONSUMER_OFFSETS = "__consumer_offsets"
TRANSACTION_STATE = "__transaction_state"
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS, TRANSACTION_STATE})
