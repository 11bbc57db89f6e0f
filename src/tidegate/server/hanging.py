"""Finding hanging transactions: open in a partition, unknown to the coordinator.

A partition's producer state says which producers have a transaction open there (from
their first transactional batch until a marker). The coordinator says which
transactions are open. A transaction open in a partition that the coordinator does not
have — Ongoing or Prepare* with that producer id and that partition — will never get a
marker by itself: it pins the partition's last stable offset and stops every
read_committed consumer there. Kafka users meet this after a lost marker or a zombie
write; Tidegate's produce path verifies partitions with the coordinator (KIP-890), so it
should not happen here, and this check is the safety net that says so if it does.

`find_hanging` compares the two views (pure, given both); `HangingCheck` runs it every
`transaction.hanging.check.interval.ms` (a Tidegate setting, default 60 s) and logs each
hanging transaction once, with the command that aborts it. A transaction counts only
once it has been seen open for longer than `transaction.max.timeout.ms`, so transactions
between their first write and the coordinator's record are not reported.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class HangingTxn:
    topic: str
    partition: int
    producer_id: int
    first_offset: int
    open_since_ms: int


def find_hanging(
    open_in_partitions: Mapping[TopicPartition, Mapping[int, int]],
    coordinator_open: Mapping[int, frozenset[TopicPartition]],
    first_seen_ms: dict[tuple[TopicPartition, int, int], int],
    now_ms: int,
    max_timeout_ms: int,
) -> list[HangingTxn]:
    """The hanging transactions among `open_in_partitions` ((topic, partition) ->
    producer id -> first offset) given `coordinator_open` (producer id -> partitions of
    its open transaction). `first_seen_ms` remembers when each open transaction was first
    seen and is pruned of those no longer open."""
    found = []
    alive = set()
    for tp, producers in open_in_partitions.items():
        for pid, first in producers.items():
            key = (tp, pid, first)
            alive.add(key)
            since = first_seen_ms.setdefault(key, now_ms)
            if tp in coordinator_open.get(pid, frozenset()):
                continue
            if now_ms - since > max_timeout_ms:
                found.append(HangingTxn(tp[0], tp[1], pid, first, since))
    for key in list(first_seen_ms):
        if key not in alive:
            del first_seen_ms[key]
    return found


class HangingCheck:
    """Remembers what it has seen and reported between runs."""

    def __init__(self, max_timeout_ms: int) -> None:
        self.max_timeout_ms = max_timeout_ms
        self._first_seen: dict[tuple[TopicPartition, int, int], int] = {}
        self._reported: set[tuple[TopicPartition, int, int]] = set()
        self.hanging: list[HangingTxn] = []

    def run(self, open_in_partitions: Mapping[TopicPartition, Mapping[int, int]],
            coordinator_open: Mapping[int, frozenset[TopicPartition]], now_ms: int
            ) -> list[HangingTxn]:
        self.hanging = find_hanging(open_in_partitions, coordinator_open, self._first_seen,
                                    now_ms, self.max_timeout_ms)
        current = set()
        for h in self.hanging:
            key = ((h.topic, h.partition), h.producer_id, h.first_offset)
            current.add(key)
            if key not in self._reported:
                log.warning(
                    "hanging transaction in %s-%d: producer %d has had a transaction open "
                    "from offset %d for over %d ms that no transaction coordinator knows; "
                    "read_committed consumers cannot pass it. Abort it with: tidegate txn "
                    "abort --topic %s --partition %d --producer-id %d",
                    h.topic, h.partition, h.producer_id, h.first_offset,
                    self.max_timeout_ms, h.topic, h.partition, h.producer_id)
        self._reported = current
        return self.hanging


def coordinator_view(txns: Iterable[tuple[int, frozenset[TopicPartition]]]
                     ) -> dict[int, frozenset[TopicPartition]]:
    """Producer id -> partitions, merged over every open transaction the coordinator has."""
    out: dict[int, frozenset[TopicPartition]] = {}
    for pid, parts in txns:
        out[pid] = out.get(pid, frozenset()) | parts
    return out
