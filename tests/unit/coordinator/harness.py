"""A group coordinator on one real `__consumer_offsets` log, driven without asyncio.

`Harness` plays the part of the asyncio shell: it runs operations through the runtime
(append + replay), remembers replies to parked requests by token, advances a
`ManualClock` and polls deadlines, and can restart the coordinator by replaying its
log into a fresh shard. Member ids are deterministic ("<client>-id<N>").
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tidegate.common.clock import ManualClock
from tidegate.common.errors import ErrorCode
from tidegate.coordinator.group import admin, membership, offsets, rebalance
from tidegate.coordinator.group.config import GroupConfig
from tidegate.coordinator.group.messages import (
    CommitPartition,
    HeartbeatRequest,
    JoinRequest,
    JoinResponse,
    LeaveMember,
    LeaveRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncRequest,
    SyncResponse,
)
from tidegate.coordinator.group.shard import GroupShard
from tidegate.coordinator.runtime import PARKED, CoordinatorRuntime, Result
from tidegate.protocol.coordinator_records import encode_assignment, encode_subscription
from tidegate.storage.config import LogConfig
from tidegate.storage.log import Log

R = TypeVar("R")

FAST = GroupConfig(initial_rebalance_delay_ms=0)
DELAYED = GroupConfig(initial_rebalance_delay_ms=3000)
SESSION = 10_000
REBALANCE = 30_000
TOPIC = "t"


def sub(*topics: str) -> bytes:
    return encode_subscription(list(topics or (TOPIC,)))


class Harness:
    def __init__(self, directory: Path, config: GroupConfig = DELAYED,
                 clock: ManualClock | None = None) -> None:
        self.clock = clock or ManualClock()
        self.config = config
        self.log = Log.open(directory / "__consumer_offsets-0",
                            LogConfig.from_props({"cleanup.policy": "compact"}), self.clock)
        counter = itertools.count()
        self.runtime: CoordinatorRuntime[GroupShard] = CoordinatorRuntime(
            "__consumer_offsets", 1,
            lambda p: GroupShard(p, config, new_id=lambda: f"id{next(counter)}"), self.clock)
        self.tokens = itertools.count(1)
        self.replies: dict[int, Any] = {}
        self.restart()

    # -- plumbing -------------------------------------------------------------------------

    def restart(self) -> None:
        """A new coordinator: replay the log into a fresh shard (parked requests are lost,
        as their connections would be)."""
        shard, _ = self.runtime.load(0, self.log)
        self.runtime.publish(0, self.log, shard)
        self.replies.clear()

    @property
    def shard(self) -> GroupShard:
        return self.runtime.shard(0)

    def run(self, op: Callable[[GroupShard, int, int], Result[R]]) -> tuple[int, Any]:
        """(token, response): the response, or the reply if it came in the same
        operation, or PARKED."""
        token = next(self.tokens)
        out = self.runtime.execute(0, lambda s, now: op(s, now, token))
        for tok, reply in out.result.replies:
            self.replies[tok] = reply
        response: Any = out.result.response
        if response is PARKED:
            response = self.replies.get(token, PARKED)
        return token, response

    def reply(self, token: int) -> Any:
        """The reply to a parked request so far (PARKED if none yet)."""
        return self.replies.get(token, PARKED)

    def advance(self, ms: int) -> None:
        """Move the clock in steps of at most 100 ms, polling deadlines like the shell."""
        while ms > 0:
            step = min(ms, 100)
            self.clock.advance(step)
            ms -= step
            while (out := self.runtime.poll(0)) is not None:
                for tok, reply in out.result.replies:
                    self.replies[tok] = reply

    # -- requests -------------------------------------------------------------------------

    def join(self, group: str, member_id: str = "", *, client: str = "c",
             instance: str | None = None, protocols: tuple[tuple[str, bytes], ...] | None = None,
             protocol_type: str = "consumer", session: int = SESSION,
             rebalance_ms: int = REBALANCE, require_known: bool = True,
             skip_capable: bool = True) -> tuple[int, Any]:
        req = JoinRequest(group, member_id, instance, protocol_type,
                          protocols if protocols is not None else (("range", sub()),),
                          session, rebalance_ms, client, "/127.0.0.1", require_known,
                          skip_capable)
        return self.run(lambda s, now, t: rebalance.join(s, req, t, now))

    def join_new(self, group: str, client: str = "c", **kw: Any) -> tuple[int, Any]:
        """A new member: for a dynamic one the MEMBER_ID_REQUIRED round trip first."""
        if kw.get("instance") is not None:
            return self.join(group, client=client, **kw)
        _, first = self.join(group, client=client, **kw)
        assert first.error == ErrorCode.member_id_required, first
        return self.join(group, first.member_id, client=client, **kw)

    def sync(self, group: str, generation: int, member_id: str,
             assignments: dict[str, bytes] | None = None, *, instance: str | None = None,
             protocol_name: str | None = None) -> tuple[int, Any]:
        req = SyncRequest(group, generation, member_id, instance, None, protocol_name,
                          tuple((assignments or {}).items()))
        return self.run(lambda s, now, t: membership.sync(s, req, t, now))

    def heartbeat(self, group: str, generation: int, member_id: str,
                  instance: str | None = None) -> ErrorCode:
        req = HeartbeatRequest(group, generation, member_id, instance)
        return self.run(lambda s, now, _t: membership.heartbeat(s, req, now))[1]

    def leave(self, group: str, *members: LeaveMember) -> Any:
        req = LeaveRequest(group, members)
        return self.run(lambda s, now, _t: membership.leave(s, req, now))[1]

    def commit(self, group: str, offsets_: dict[tuple[str, int], int], *, generation: int = -1,
               member_id: str = "", metadata: str = "", retention_ms: int = -1,
               instance: str | None = None, version: int = 8
               ) -> dict[tuple[str, int], ErrorCode]:
        req = OffsetCommitRequest(group, generation, member_id, instance, retention_ms, tuple(
            CommitPartition(t, p, o, -1, metadata) for (t, p), o in offsets_.items()),
            api_version=version)
        return dict(self.run(lambda s, now, _t: offsets.commit(s, req, now))[1])

    def fetch(self, group: str, partitions: list[tuple[str, int]] | None = None
              ) -> dict[tuple[str, int], int]:
        req = OffsetFetchRequest(group, None if partitions is None else tuple(partitions))
        resp = self.run(lambda s, now, _t: offsets.fetch(s, req, now))[1]
        return {(f.topic, f.partition): f.offset for f in resp.partitions}

    def expire(self) -> int:
        result: int = self.run(lambda s, now, _t: offsets.expire(s, now))[1]
        return result

    def describe(self, group: str, v6: bool = False) -> Any:
        return self.run(lambda s, now, _t: admin.describe(s, [group], now,
                                                          not_found_error=v6))[1][0]

    def delete_groups(self, *groups: str) -> dict[str, ErrorCode]:
        return dict(self.run(lambda s, now, _t: admin.delete_groups(s, groups, now))[1])

    # -- a whole rebalance ----------------------------------------------------------------

    def form(self, group: str, clients: list[str], *, static: bool = False, **kw: Any
             ) -> dict[str, JoinResponse]:
        """Join `clients` as new members of an Empty group within the initial delay, let
        it pass: one generation with all of them. Returns client -> JoinGroup reply.
        Static members get the instance id "i-<client>"."""
        results: dict[str, JoinResponse] = {}
        tokens = {}
        for c in clients:
            if static:
                kw["instance"] = f"i-{c}"
            t, resp = self.join_new(group, c, **kw)
            if resp is PARKED:
                tokens[c] = t
            else:
                results[c] = resp
        waited = 0
        while any(t not in self.replies for t in tokens.values()) and waited < 60_000:
            self.advance(100)  # the delay extends while members keep arriving
            waited += 100
        for c, t in tokens.items():
            results[c] = self.reply(t)
        return results


def assignment_for(index: int) -> bytes:
    return encode_assignment({TOPIC: [index]})


def sync_all(h: Harness, group: str, joined: dict[str, JoinResponse]) -> dict[str, bytes]:
    """Leader computes member i -> b"A<i>" assignments; everyone syncs."""
    leader = next(r for r in joined.values() if r.member_id == r.leader)
    assignments = {m.member_id: assignment_for(i) for i, m in enumerate(leader.members)}
    tokens = {}
    for c, r in joined.items():
        if r.member_id != r.leader:
            tokens[c] = h.sync(group, r.generation_id, r.member_id)[0]
    _, resp = h.sync(group, leader.generation_id, leader.member_id, assignments)
    out = {}
    assert isinstance(resp, SyncResponse) and resp.error == ErrorCode.none, resp
    out[next(c for c, r in joined.items() if r.member_id == r.leader)] = resp.assignment
    for c, tok in tokens.items():
        reply = h.reply(tok)
        assert isinstance(reply, SyncResponse) and reply.error == ErrorCode.none, reply
        out[c] = reply.assignment
    return out
