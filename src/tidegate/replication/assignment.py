"""Kafka's replica assignment: which brokers hold each partition's replicas, in what order.

The controller uses this when a topic is created without an explicit assignment and when
CreatePartitions adds partitions (Kafka's `AdminUtils.assignReplicasToBrokers`, so a
Tidegate cluster spreads a topic as a ZooKeeper-mode Kafka cluster of the same brokers
would, given the same random draws). The first replica of each list is the preferred
leader.

Rack-unaware (no broker has a rack): brokers sorted by id; partition p's first replica is
broker `(p + start_index) % n`; the others follow it at a distance of
`1 + (shift + j) % (n - 1)` for j = 0, 1, ..., where `shift` grows by one every n
partitions, so followers of consecutive leaders spread instead of piling up on the same
neighbours. `start_index` and `shift` are random (from the injected `random.Random`)
unless given.

Rack-aware (every broker has a rack): the same walk over a *rack-alternated* broker list
(racks sorted, each rack's brokers sorted by id, one broker per rack in turn), with the
shift scaled by the number of racks, skipping a broker whose rack already holds a
replica while some rack holds none, and a broker already used while some broker is unused.
So each partition spans min(RF, racks) racks, and leaders and followers still spread.
Some brokers with a rack and some without is refused, as Kafka does.

Invariants: every list has `replication_factor` distinct brokers, all from the input;
partition ids are consecutive from `start_partition_id`; the result depends only on the
inputs and the random draws.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tidegate.common.errors import (
    ErrorCode,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    KafkaError,
)

__all__ = [
    "BrokerMetadata",
    "InvalidReplicaAssignmentError",
    "RackInformationError",
    "assign_additional_partitions",
    "assign_replicas_to_brokers",
    "rack_alternated_brokers",
    "validate_replica_assignment",
]


@dataclass(frozen=True)
class BrokerMetadata:
    """A live broker as assignment sees it (Kafka's `BrokerMetadata`)."""

    broker_id: int
    rack: str | None = None


class RackInformationError(InvalidReplicationFactorError):
    """Some brokers have `broker.rack` and some do not. Kafka (ZooKeeper mode) refuses with
    an AdminOperationException, which reaches clients as UNKNOWN_SERVER_ERROR; we answer
    INVALID_REPLICATION_FACTOR with Kafka's message, which says what to fix."""


class InvalidReplicaAssignmentError(KafkaError):
    code = ErrorCode.invalid_replica_assignment


Brokers = Iterable[BrokerMetadata] | Mapping[int, str | None]


def _normalise(brokers: Brokers) -> list[BrokerMetadata]:
    if isinstance(brokers, Mapping):
        items = [BrokerMetadata(bid, rack) for bid, rack in brokers.items()]
    else:
        items = list(brokers)
    ids = [b.broker_id for b in items]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate broker ids in {sorted(ids)}")
    return sorted(items, key=lambda b: b.broker_id)


def assign_replicas_to_brokers(
    brokers: Brokers,
    partitions: int,
    replication_factor: int,
    rng: random.Random | None = None,
    *,
    start_index: int | None = None,
    replica_shift: int | None = None,
    start_partition_id: int = 0,
    rack_aware: bool = True,
) -> dict[int, list[int]]:
    """Partition id -> replica list (preferred leader first) for `partitions` partitions
    numbered from `start_partition_id`.

    `brokers`: `BrokerMetadata`s or a {broker id: rack or None} mapping (order does not
    matter: sorted by id, as Kafka's callers sort them). `rng` draws `start_index` and
    `replica_shift` where not given (Kafka's `fixedStartIndex` sets both to one value).
    `rack_aware=False` ignores racks (kafka-topics' --disable-rack-aware).

    Raises InvalidPartitionsError (partitions < 1), InvalidReplicationFactorError
    (RF < 1 or RF > number of brokers), RackInformationError (racks on some brokers only)."""
    if partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    metas = _normalise(brokers)
    if replication_factor > len(metas):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(metas)}."
        )
    with_rack = [b for b in metas if b.rack is not None]
    if rack_aware and with_rack and len(with_rack) != len(metas):
        raise RackInformationError(
            "Not all brokers have rack information for replica rack aware assignment."
        )
    draw = rng if rng is not None else random.Random()
    # Kafka draws the start index first, then the shift.
    first = start_index if start_index is not None else draw.randrange(len(metas))
    shift = replica_shift if replica_shift is not None else draw.randrange(len(metas))
    if rack_aware and with_rack:
        racks = {b.broker_id: b.rack for b in metas if b.rack is not None}
        return _rack_aware(racks, partitions, replication_factor, first, shift, start_partition_id)
    ids = [b.broker_id for b in metas]
    return _rack_unaware(ids, partitions, replication_factor, first, shift, start_partition_id)


def _replica_index(first_index: int, shift: int, j: int, n: int) -> int:
    return (first_index + 1 + (shift + j) % (n - 1)) % n


def _rack_unaware(
    ids: Sequence[int], partitions: int, rf: int, start_index: int, shift: int, start_pid: int
) -> dict[int, list[int]]:
    n = len(ids)
    out: dict[int, list[int]] = {}
    pid = max(0, start_pid)
    for _ in range(partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + start_index) % n
        out[pid] = [ids[first]] + [ids[_replica_index(first, shift, j, n)] for j in range(rf - 1)]
        pid += 1
    return out


def rack_alternated_brokers(racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered one per rack in turn (racks sorted by name, brokers by id):
    {1: a, 2: a, 3: b, 4: c, 5: c} -> [1, 3, 4, 2, 5]."""
    by_rack: dict[str, list[int]] = {}
    for bid, rack in racks.items():
        by_rack.setdefault(rack, []).append(bid)
    queues = [sorted(by_rack[r]) for r in sorted(by_rack)]
    out: list[int] = []
    depth = 0
    while len(out) < len(racks):
        out.extend(q[depth] for q in queues if depth < len(q))
        depth += 1
    return out


def _rack_aware(
    racks: Mapping[int, str],
    partitions: int,
    rf: int,
    start_index: int,
    shift: int,
    start_pid: int,
) -> dict[int, list[int]]:
    arranged = rack_alternated_brokers(racks)
    n = len(arranged)
    num_racks = len(set(racks.values()))
    out: dict[int, list[int]] = {}
    pid = max(0, start_pid)
    for _ in range(partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + start_index) % n
        leader = arranged[first]
        replicas = [leader]
        racks_used = {racks[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(rf - 1):
            while True:
                broker = arranged[_replica_index(first, shift * num_racks, k, n)]
                k += 1
                rack = racks[broker]
                # Skip a broker in a rack that already has a replica while some rack has
                # none, and a broker already used while some broker is unused.
                if (rack not in racks_used or len(racks_used) == num_racks) and (
                    broker not in brokers_used or len(brokers_used) == n
                ):
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
        out[pid] = replicas
        pid += 1
    return out


def assign_additional_partitions(
    brokers: Brokers,
    existing: Mapping[int, Sequence[int]],
    total_partitions: int,
    *,
    rack_aware: bool = True,
) -> dict[int, list[int]]:
    """Assignments for the partitions CreatePartitions adds (ids len(existing) ..
    total_partitions - 1), as Kafka's `AdminZkClient.createNewPartitionsAssignment`: the
    replication factor of partition 0, and both start index and shift at the position of
    partition 0's first replica among the sorted brokers, so the new partitions continue
    its pattern rather than start a random one."""
    count = len(existing)
    if total_partitions <= count:
        raise InvalidPartitionsError(
            f"The number of partitions for a topic can only be increased. Topic currently "
            f"has {count} partitions, {total_partitions} would not be an increase."
        )
    p0 = existing.get(0)
    if not p0:
        raise InvalidPartitionsError("The topic has no partition 0 to continue from.")
    ids = [b.broker_id for b in _normalise(brokers)]
    start = next((i for i, bid in enumerate(ids) if bid >= p0[0]), 0)
    return assign_replicas_to_brokers(
        brokers,
        total_partitions - count,
        len(p0),
        start_index=start,
        replica_shift=start,
        start_partition_id=count,
        rack_aware=rack_aware,
    )


def validate_replica_assignment(
    assignment: Mapping[int, Sequence[int]],
    known_brokers: Iterable[int],
    *,
    first_partition: int = 0,
) -> None:
    """Check an explicit assignment (CreateTopics with assignments, CreatePartitions with
    assignments, a reassignment target): partition ids consecutive from `first_partition`,
    one replication factor for all, no broker twice in a list, every broker known.
    Raises InvalidReplicaAssignmentError (INVALID_REPLICA_ASSIGNMENT) with Kafka's wording."""
    known = set(known_brokers)
    if not assignment:
        raise InvalidReplicaAssignmentError("The replica assignment is empty.")
    expected = list(range(first_partition, first_partition + len(assignment)))
    if sorted(assignment) != expected:
        raise InvalidReplicaAssignmentError(
            "Partitions should be a consecutive 0-based integer sequence, got "
            f"{sorted(assignment)}."
        )
    sizes = {len(r) for r in assignment.values()}
    if len(sizes) != 1:
        raise InvalidReplicaAssignmentError(
            "All partitions should have the same number of replicas."
        )
    for pid, replicas in sorted(assignment.items()):
        if not replicas:
            raise InvalidReplicaAssignmentError(f"Partition {pid} has no replicas.")
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(
                f"Duplicate replica assignment found for partition {pid}: {list(replicas)}."
            )
        unknown = sorted(set(replicas) - known)
        if unknown:
            raise InvalidReplicaAssignmentError(
                f"Partition {pid} names unknown brokers {unknown}."
            )
