"""One rebalance's network half: JoinGroup, then SyncGroup, retried until it works.

`join_and_sync` runs as a background task started by `poll()` (so a poll timeout does
not cancel a JoinGroup midway) and returns a `JoinOutcome`; `poll()` then applies it
and runs the listener. Per attempt:

1. JoinGroup with the member id we have ("" the first time), ``session.timeout.ms``,
   ``max.poll.interval.ms`` as the rebalance timeout, ``group.instance.id`` and one
   protocol per assignor. MEMBER_ID_REQUIRED (KIP-394) hands us a member id: join
   again at once with it. The request may wait up to the rebalance timeout, so its
   timeout is that plus a margin.
2. The leader (``leader == member_id``) refreshes metadata for every member's topics
   and runs the assignor the coordinator chose; others send no assignments.
3. SyncGroup; the response carries our assignment.

Errors: REBALANCE_IN_PROGRESS -> join again; ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID ->
reset the member (partitions lost) and join again; NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE, timeouts, lost connections -> find the coordinator again
and join again; COORDINATOR_LOAD_IN_PROGRESS -> back off and join again;
FENCED_INSTANCE_ID, INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT,
GROUP_AUTHORIZATION_FAILED, GROUP_MAX_SIZE_REACHED and other non-retriable errors
end the task with the exception, which `poll()` raises to the application.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from tidegate.assignors import Assignment, lookup
from tidegate.assignors.protocol import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerProtocolError,
    decode_assignment,
    decode_subscription,
)
from tidegate.client.config import ConsumerConfig
from tidegate.client.consumer.coordinator_link import JOIN_GROUP, SYNC_GROUP, CoordinatorLink
from tidegate.client.consumer.group_offsets import COORDINATOR_ERRORS, group_error
from tidegate.client.consumer.membership import (
    Generation,
    GroupMember,
    Membership,
    MemberState,
    leader_assignments,
)
from tidegate.common.errors import KafkaError

__all__ = ["JoinOutcome", "join_and_sync"]

log = logging.getLogger("tidegate.client.consumer.group")

JOIN_TIMEOUT_MARGIN_MS = 5_000  # Kafka's JOIN_GROUP_TIMEOUT_LAPSE

# Async callbacks into the coordinator: the protocols to offer, and the partition
# counts of the given topics (refreshing metadata) for the leader's assignment.
ProtocolsFn = Callable[[], list[dict[str, object]]]
PartitionCountsFn = Callable[[set[str]], Awaitable[Mapping[str, int]]]


@dataclass(frozen=True)
class JoinOutcome:
    generation: Generation
    assignment: Assignment
    leader: bool
    topics: frozenset[str]  # what we subscribed to when joining


class _Rejoin(Exception):
    """This attempt failed in a way that only needs another attempt."""


class _MemberIdRequired(_Rejoin):
    """KIP-394: the coordinator gave us a member id; join again at once."""


async def join_and_sync(config: ConsumerConfig, link: CoordinatorLink,
                        membership: Membership, topics: frozenset[str],
                        protocols: ProtocolsFn, partition_counts: PartitionCountsFn
                        ) -> JoinOutcome:
    """See the module docstring."""
    backoff = config.retry_backoff_ms / 1000
    while True:
        try:
            return await _attempt(config, link, membership, topics, protocols,
                                  partition_counts)
        except _Rejoin as e:
            log.debug("group %s: joining again: %s", membership.group_id, e)
            if membership.state is not MemberState.UNJOINED:
                membership.transition_to(MemberState.UNJOINED)
            if not isinstance(e, _MemberIdRequired):
                await asyncio.sleep(backoff)
        except KafkaError as e:
            if not e.retriable:
                raise
            log.debug("group %s: join failed, retrying: %s", membership.group_id, e)
            if membership.state is not MemberState.UNJOINED:
                membership.transition_to(MemberState.UNJOINED)
            await asyncio.sleep(backoff)


def _check(code: ErrorCode, membership: Membership, link: CoordinatorLink, what: str) -> None:
    if code == ErrorCode.none:
        return
    if code == ErrorCode.rebalance_in_progress:
        raise _Rejoin(f"{what}: the group is rebalancing")
    if code in (ErrorCode.illegal_generation, ErrorCode.unknown_member_id):
        membership.reset(f"{what}: {code.name.upper()}")
        raise _Rejoin(code.name)
    if code in COORDINATOR_ERRORS:
        link.mark_unknown(f"{what}: {code.name.upper()}")
        raise _Rejoin(code.name)
    if code == ErrorCode.coordinator_load_in_progress:
        raise _Rejoin(code.name)
    raise group_error(code, f"{what} for group {membership.group_id!r}")


async def _attempt(config: ConsumerConfig, link: CoordinatorLink, membership: Membership,
                   topics: frozenset[str], protocols: ProtocolsFn,
                   partition_counts: PartitionCountsFn) -> JoinOutcome:
    deadline = time.monotonic() + config.max_poll_interval_ms / 1000
    await link.ensure(deadline)
    reason = membership.begin_join()
    resp = await link.request(JOIN_GROUP, {
        "group_id": membership.group_id, "session_timeout": config.session_timeout_ms,
        "rebalance_timeout": config.max_poll_interval_ms, "member_id": membership.member_id,
        "group_instance_id": membership.group_instance_id,
        "protocol_type": CONSUMER_PROTOCOL_TYPE, "protocols": protocols(),
        "reason": reason,
    }, timeout_ms=max(config.request_timeout_ms,
                      config.max_poll_interval_ms + JOIN_TIMEOUT_MARGIN_MS))
    if resp.error_code == ErrorCode.member_id_required:
        membership.member_id = resp.member_id
        raise _MemberIdRequired("member id required")
    _check(resp.error_code, membership, link, "JoinGroup")
    if not membership.at(MemberState.PREPARING_REBALANCE):
        raise _Rejoin("the member was reset while joining")  # e.g. by a failed commit
    protocol = resp.protocol_name
    if protocol is None or getattr(resp, "protocol_type", None) not in (
            None, CONSUMER_PROTOCOL_TYPE):
        raise KafkaError(f"JoinGroup chose protocol {resp.protocol_type}/{protocol}, which "
                         "is not a consumer protocol", code=ErrorCode.inconsistent_group_protocol)
    membership.joined(Generation(int(resp.generation_id), resp.member_id, protocol))
    leader = resp.leader == resp.member_id
    assignments: list[dict[str, Any]] = []
    if leader and not getattr(resp, "skip_assignment", False):
        members = [GroupMember(m.member_id, getattr(m, "group_instance_id", None), m.metadata)
                   for m in resp.members]
        assignments = await _assign(protocol, members, partition_counts)
    resp = await link.request(SYNC_GROUP, {
        "group_id": membership.group_id, "generation_id": membership.generation.generation_id,
        "member_id": membership.member_id, "group_instance_id": membership.group_instance_id,
        "protocol_type": CONSUMER_PROTOCOL_TYPE, "protocol_name": protocol,
        "assignments": assignments,
    })
    _check(resp.error_code, membership, link, "SyncGroup")
    if not membership.at(MemberState.COMPLETING_REBALANCE):
        raise _Rejoin("the member was reset while syncing")  # e.g. by a heartbeat
    try:
        assignment = decode_assignment(resp.assignment)
    except ConsumerProtocolError as e:
        raise KafkaError(f"the group leader sent an assignment that does not decode: {e}",
                         code=ErrorCode.inconsistent_group_protocol) from e
    membership.synced()
    return JoinOutcome(membership.generation, assignment, leader, topics)


async def _assign(protocol: str, members: list[GroupMember],
                  partition_counts: PartitionCountsFn) -> list[dict[str, Any]]:
    try:
        assignor = lookup(protocol)
    except KeyError:
        raise KafkaError(f"the coordinator chose assignor {protocol!r}, which this consumer "
                         "does not have", code=ErrorCode.inconsistent_group_protocol) from None
    wanted: set[str] = set()
    for m in members:
        try:
            wanted.update(decode_subscription(m.metadata).topics)
        except ConsumerProtocolError:
            pass  # leader_assignments logs it
    counts = await partition_counts(wanted)
    result = leader_assignments(assignor, members, counts)
    return [{"member_id": m, "assignment": a} for m, a in result.items()]
