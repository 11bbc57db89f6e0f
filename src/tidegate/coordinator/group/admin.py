"""DescribeGroups, ListGroups and DeleteGroups over one shard's groups (classic and
KIP-848 consumer groups; ConsumerGroupDescribe is `describe_consumer`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from tidegate.common.errors import ErrorCode
from tidegate.coordinator.group import consumer
from tidegate.coordinator.group.messages import DescribedGroup, DescribedMember, ListedGroup
from tidegate.coordinator.group.shard import GroupShard
from tidegate.coordinator.group.states import GroupState
from tidegate.coordinator.runtime import Record, Result
from tidegate.protocol import consumer_group_records as cr
from tidegate.protocol.coordinator_records import (
    encode_group_metadata_key,
    encode_offset_commit_key,
)

__all__ = ["CLASSIC_GROUP_TYPE", "CONSUMER_GROUP_TYPE", "delete_groups", "describe",
           "describe_consumer", "list_groups"]

CLASSIC_GROUP_TYPE = "classic"
CONSUMER_GROUP_TYPE = "consumer"


def describe(
    shard: GroupShard, group_ids: Iterable[str], now: int, *, not_found_error: bool = False
) -> Result[list[DescribedGroup]]:
    """Kafka's group summary: member metadata and assignments only when Stable. An
    unknown group is reported Dead, or GROUP_ID_NOT_FOUND from DescribeGroups v6."""
    out = []
    for gid in group_ids:
        cgroup = shard.consumer_groups.get(gid)
        if cgroup is not None:
            # KIP-848 group: its classic view (ConsumerGroupDescribe has the details)
            out.append(DescribedGroup(gid, ErrorCode.none, cgroup.state, CONSUMER_GROUP_TYPE,
                                      "", tuple(DescribedMember(
                                          m.member_id, m.instance_id, m.client_id,
                                          m.client_host, b"", b"")
                                          for m in cgroup.members.values())))
            continue
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
    out: list[ListedGroup] = []
    if not wanted_types or CLASSIC_GROUP_TYPE in wanted_types:
        out += [
            ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
            for g in shard.groups.values()
            if (not wanted_states or g.state.value.lower() in wanted_states)
            and g.group_id not in shard.consumer_groups  # its offsets only
        ]
    if not wanted_types or CONSUMER_GROUP_TYPE in wanted_types:
        out += [
            ListedGroup(g.group_id, CONSUMER_GROUP_TYPE, g.state, CONSUMER_GROUP_TYPE)
            for g in shard.consumer_groups.values()
            if not wanted_states or g.state.lower() in wanted_states
        ]
    return out


def delete_groups(
    shard: GroupShard, group_ids: Iterable[str], now: int
) -> Result[list[tuple[str, ErrorCode]]]:
    """Only Empty groups can be deleted: their offsets (committed, or pending on a
    transaction) and metadata get tombstones."""
    results: list[tuple[str, ErrorCode]] = []
    records: list[Record] = []
    for gid in group_ids:
        group = shard.groups.get(gid)
        cgroup = shard.consumer_groups.get(gid)
        if cgroup is not None:
            if cgroup.members:
                results.append((gid, ErrorCode.non_empty_group))
                continue
            records += consumer.delete_group(gid)
            if group is None:
                results.append((gid, ErrorCode.none))
                continue
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


def describe_consumer(shard: GroupShard, group_ids: Iterable[str]
                      ) -> Result[list[dict[str, object]]]:
    """ConsumerGroupDescribe: each group as the response's DescribedGroup fields
    (plain values; the handler adds authorized operations)."""
    out: list[dict[str, object]] = []
    for gid in group_ids:
        g = shard.consumer_groups.get(gid)
        if g is None:
            classic = shard.groups.get(gid)
            msg = (f"Group {gid} is not a consumer group." if classic is not None
                   and (classic.members or classic.stored is not None)
                   else f"Group {gid} not found.")
            out.append({"group_id": gid, "error_code": ErrorCode.group_id_not_found,
                        "error_message": msg, "group_state": "Dead", "members": []})
            continue
        names = {t.topic_id: t.name for t in g.topics.values()}

        def parts(a: cr.Assignment, names: dict[uuid.UUID, str] = names
                  ) -> dict[str, object]:
            return {"topic_partitions": [
                {"topic_id": tid, "topic_name": names.get(tid, ""), "partitions": sorted(ps)}
                for tid, ps in sorted(a.items()) if ps]}

        assignors = {m.server_assignor for m in g.members.values() if m.server_assignor}
        out.append({
            "group_id": gid, "error_code": ErrorCode.none, "group_state": g.state,
            "group_epoch": g.group_epoch, "assignment_epoch": g.assignment_epoch,
            "assignor_name": (sorted(assignors)[0] if assignors
                              else shard.config.consumer_assignors[0]),
            "members": [{
                "member_id": m.member_id, "instance_id": m.instance_id,
                "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex,
                "assignment": parts(m.assigned),
                "target_assignment": parts(g.target.get(m.member_id, {})),
                "member_type": 0 if m.classic is not None else 1,  # classic / consumer
            } for m in g.members.values()],
        })
    return Result(out)
