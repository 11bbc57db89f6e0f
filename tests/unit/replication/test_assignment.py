"""Kafka's replica assignment (replication/assignment.py)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegate.common.errors import (
    ErrorCode,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
)
from tidegate.replication.assignment import (
    BrokerMetadata,
    InvalidReplicaAssignmentError,
    RackInformationError,
    assign_additional_partitions,
    assign_replicas_to_brokers,
    rack_alternated_brokers,
    validate_replica_assignment,
)

# The expected lists below are the ones Kafka's own AdminUtils tests check for the same
# inputs (fixed start index 0): the algorithm must match Kafka's, not merely be "spread".


def test_rack_unaware_matches_kafka() -> None:
    got = assign_replicas_to_brokers(
        {b: None for b in range(5)}, 10, 3, start_index=0, replica_shift=0
    )
    assert got == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2],
    }


RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}


def test_rack_alternated_list_matches_kafka() -> None:
    assert rack_alternated_brokers(RACKS) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated_brokers({k: v for k, v in RACKS.items() if k != 5}) == [0, 3, 1, 4, 2]


def test_rack_aware_matches_kafka() -> None:
    got = assign_replicas_to_brokers(RACKS, 7, 3, start_index=0, replica_shift=0)
    assert got == {
        0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2],
        4: [4, 2, 0], 5: [2, 0, 3], 6: [0, 4, 2],
    }


def test_broker_order_does_not_matter() -> None:
    metas = [BrokerMetadata(b, r) for b, r in reversed(RACKS.items())]
    assert assign_replicas_to_brokers(metas, 7, 3, start_index=1, replica_shift=2) == (
        assign_replicas_to_brokers(RACKS, 7, 3, start_index=1, replica_shift=2)
    )


def test_random_draws_come_from_the_injected_rng() -> None:
    a = assign_replicas_to_brokers({1: None, 2: None, 3: None}, 6, 2, random.Random(7))
    b = assign_replicas_to_brokers({1: None, 2: None, 3: None}, 6, 2, random.Random(7))
    assert a == b


def test_bad_replication_factor_and_partitions() -> None:
    brokers = {1: None, 2: None}
    with pytest.raises(InvalidReplicationFactorError) as info:
        assign_replicas_to_brokers(brokers, 1, 3)
    assert info.value.code == ErrorCode.invalid_replication_factor
    assert "larger than available brokers: 2" in str(info.value)
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas_to_brokers(brokers, 1, 0)
    with pytest.raises(InvalidPartitionsError):
        assign_replicas_to_brokers(brokers, 0, 1)


def test_mixed_rack_information_is_refused_unless_racks_are_ignored() -> None:
    brokers = {1: "a", 2: None, 3: "b"}
    with pytest.raises(RackInformationError) as info:
        assign_replicas_to_brokers(brokers, 3, 2, random.Random(1))
    assert info.value.code == ErrorCode.invalid_replication_factor
    got = assign_replicas_to_brokers(brokers, 3, 2, rack_aware=False, start_index=0,
                                     replica_shift=0)
    assert got == assign_replicas_to_brokers({1: None, 2: None, 3: None}, 3, 2, start_index=0,
                                             replica_shift=0)


def test_additional_partitions_continue_partition_zeros_pattern() -> None:
    brokers = {b: None for b in range(5)}
    full = assign_replicas_to_brokers(brokers, 10, 3, start_index=2, replica_shift=2)
    existing = {p: full[p] for p in range(4)}
    # Partition 0 starts at broker 2 -> start index 2, shift 2: the same as `full`.
    assert assign_additional_partitions(brokers, existing, 10) == {
        p: full[p] for p in range(4, 10)
    }
    with pytest.raises(InvalidPartitionsError):
        assign_additional_partitions(brokers, existing, 4)
    with pytest.raises(InvalidReplicationFactorError):
        assign_additional_partitions({0: None, 1: None}, existing, 6)  # RF 3 on 2 brokers


def test_validate_replica_assignment() -> None:
    validate_replica_assignment({0: [1, 2], 1: [2, 3]}, {1, 2, 3})
    bad_ones: list[dict[int, list[int]]] = [
        {0: [1, 1]}, {0: [1, 2], 1: [1]}, {1: [1]}, {0: [9]}, {}, {0: []},
    ]
    for bad in bad_ones:
        with pytest.raises(InvalidReplicaAssignmentError) as info:
            validate_replica_assignment(bad, {1, 2, 3})
        assert info.value.code == ErrorCode.invalid_replica_assignment
    validate_replica_assignment({3: [1], 4: [2]}, {1, 2}, first_partition=3)


@given(
    st.dictionaries(st.integers(0, 50), st.sampled_from([None]), min_size=1, max_size=8)
    | st.dictionaries(st.integers(0, 50), st.sampled_from("abc"), min_size=1, max_size=8),
    st.integers(1, 30),
    st.data(),
)
def test_assignment_invariants(
    brokers: dict[int, str | None], partitions: int, data: st.DataObject
) -> None:
    rf = data.draw(st.integers(1, len(brokers)))
    seed = data.draw(st.integers(0, 2**32))
    got = assign_replicas_to_brokers(brokers, partitions, rf, random.Random(seed))
    assert sorted(got) == list(range(partitions))
    racks = {r for r in brokers.values() if r is not None}
    for replicas in got.values():
        assert len(replicas) == rf and len(set(replicas)) == rf
        assert set(replicas) <= set(brokers)
        if racks:  # spans as many racks as it can
            assert len({brokers[b] for b in replicas}) == min(rf, len(racks))
    if partitions % len(brokers) == 0:  # leaders spread evenly
        leaders = Counter(r[0] for r in got.values())
        assert set(leaders.values()) == {partitions // len(brokers)}
