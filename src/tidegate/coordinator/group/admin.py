"""DescribeGroups, ListGroups and DeleteGroups over one shard's groups."""

from __future__ import annotations

from collections.abc import Iterable

from tidegate.common.errors import ErrorCode
from tidegate.coordinator.group.messages import DescribedGroup, DescribedMember, ListedGroup
from tidegate.coordinator.group.shard import GroupShard
from tidegate.coordinator.group.states import GroupState
from tidegate.coordinator.runtime import Record, Result
from tidegate.protocol.coordinator_records import (
    encode_group_metadata_key,
    encode_offset_commit_key,
)

__all__ = ["CLASSIC_GROUP_TYPE", "delete_groups", "describe", "list_groups"]

CLASSIC_GROUP_TYPE = "classic"


def describe(
    shard: GroupShard, group_ids: Iterable[str], now: int, *, not_found_error: bool = False
) -> Result[list[DescribedGroup]]:
    """Kafka's group summary: member metadata and assignments only when Stable. An
    unknown group is reported Dead, or GROUP_ID_NOT_FOUND from DescribeGroups v6."""
    out = []
    for gid in group_ids:
        group = shard.groups.get(gid)
        if group is None:
            code = ErrorCode.group_id_not_found if not_found_error else ErrorCode.none
            out.append(DescribedGroup(gid, code))
            continue
        stable = group.state is GroupState.STABLE
        members = tuple(
            DescribedMember(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata(group.protocol) if stable else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        out.append(
            DescribedGroup(
                gid,
                ErrorCode.none,
                group.state.value,
                group.protocol_type or "",
                (group.protocol or "") if stable else "",
                members,
            )
        )
    return Result(out)


def list_groups(
    shard: GroupShard, states: Iterable[str] = (), types: Iterable[str] = ()
) -> list[ListedGroup]:
    wanted_states = {s.lower() for s in states}
    wanted_types = {t.lower() for t in types}
    if wanted_types and CLASSIC_GROUP_TYPE not in wanted_types:
        return []
    return [
        ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
        for g in shard.groups.values()
        if not wanted_states or g.state.value.lower() in wanted_states
    ]


def delete_groups(
    shard: GroupShard, group_ids: Iterable[str], now: int
) -> Result[list[tuple[str, ErrorCode]]]:
    """Only Empty groups can be deleted: their offsets (committed, or pending on a
    transaction) and metadata get tombstones."""
    results: list[tuple[str, ErrorCode]] = []
    records: list[Record] = []
    for gid in group_ids:
        group = shard.groups.get(gid)
        if group is None:
            results.append((gid, ErrorCode.group_id_not_found))
        elif group.state is not GroupState.EMPTY:
            results.append((gid, ErrorCode.non_empty_group))
        else:
            tps = list(group.offsets)
            tps += [tp for tp in shard.pending.partitions(gid) if tp not in group.offsets]
            records += [(encode_offset_commit_key(gid, *tp), None) for tp in tps]
            records.append((encode_group_metadata_key(gid), None))
            results.append((gid, ErrorCode.none))
    return Result(results, records)
