"""Transactional offset commits waiting for their transaction's marker.

A TxnOffsetCommit writes its offsets to `__consumer_offsets` in a transactional batch
of the producer; they must stay invisible (OffsetFetch answers the last committed
offset, or UNSTABLE_OFFSET_COMMIT with `require_stable`) until the COMMIT marker for
that producer lands in the same partition, and vanish on ABORT. `PendingOffsets` holds
them for one shard, changed only by the shard's replay:

- `add` — a transactional offset commit record was replayed;
- `take(producer_id)` — a marker of the producer was replayed: its pending offsets of
  every group leave (the shard applies them on COMMIT, where newer than the committed
  offset by record offset, and drops them on ABORT);
- `discard(group, tp)` — an offset tombstone (OffsetDelete, DeleteGroups, a deleted
  topic) removes the committed offset and every producer's pending one.

Invariant: the two indexes agree — `(group, tp)` maps to producer `pid` in `_by_group`
exactly when `_by_producer[pid][group]` holds `tp`; empty inner maps are removed, so
`has_group` and `has_producer` are plain membership tests.
"""

from __future__ import annotations

from collections.abc import Iterator

from tidegate.coordinator.group.model import OffsetAndMetadata, TopicPartition

__all__ = ["PendingOffsets"]

GroupOffsets = dict[str, dict[TopicPartition, OffsetAndMetadata]]


class PendingOffsets:
    def __init__(self) -> None:
        self._by_producer: dict[int, GroupOffsets] = {}
        self._by_group: dict[str, dict[TopicPartition, set[int]]] = {}

    def __bool__(self) -> bool:
        return bool(self._by_producer)

    def __len__(self) -> int:
        """The number of pending (producer, group, partition) offsets."""
        return sum(len(tps) for groups in self._by_producer.values() for tps in groups.values())

    # -- replay ---------------------------------------------------------------------------

    def add(self, producer_id: int, group_id: str, tp: TopicPartition,
            offset: OffsetAndMetadata) -> None:
        """A later commit of the same producer for the same partition replaces it."""
        groups = self._by_producer.setdefault(producer_id, {})
        groups.setdefault(group_id, {})[tp] = offset
        self._by_group.setdefault(group_id, {}).setdefault(tp, set()).add(producer_id)

    def take(self, producer_id: int) -> GroupOffsets:
        """Remove and return every pending offset of the producer, by group."""
        groups = self._by_producer.pop(producer_id, None)
        if groups is None:
            return {}
        for gid, tps in groups.items():
            by_tp = self._by_group[gid]
            for tp in tps:
                producers = by_tp[tp]
                producers.discard(producer_id)
                if not producers:
                    del by_tp[tp]
            if not by_tp:
                del self._by_group[gid]
        return groups

    def discard(self, group_id: str, tp: TopicPartition) -> None:
        """Drop every producer's pending offset for the group's partition."""
        by_tp = self._by_group.get(group_id)
        if by_tp is None:
            return
        for pid in by_tp.pop(tp, ()):
            groups = self._by_producer[pid]
            tps = groups[group_id]
            del tps[tp]
            if not tps:
                del groups[group_id]
                if not groups:
                    del self._by_producer[pid]
        if not by_tp:
            del self._by_group[group_id]

    # -- queries --------------------------------------------------------------------------

    def has(self, group_id: str, tp: TopicPartition) -> bool:
        by_tp = self._by_group.get(group_id)
        return by_tp is not None and tp in by_tp

    def has_group(self, group_id: str) -> bool:
        return group_id in self._by_group

    def has_producer(self, producer_id: int) -> bool:
        return producer_id in self._by_producer

    def partitions(self, group_id: str) -> Iterator[TopicPartition]:
        """The group's partitions with a pending offset (of any producer)."""
        return iter(list(self._by_group.get(group_id, ())))

    def producers(self) -> list[int]:
        return sorted(self._by_producer)

    def get(self, producer_id: int, group_id: str, tp: TopicPartition
            ) -> OffsetAndMetadata | None:
        return self._by_producer.get(producer_id, {}).get(group_id, {}).get(tp)
