"""An in-memory classic group coordinator on top of `FakeBroker`, for client tests.

It implements FindCoordinator, JoinGroup (with KIP-394's MEMBER_ID_REQUIRED),
SyncGroup, Heartbeat, LeaveGroup, OffsetCommit and OffsetFetch with the classic
protocol's rules, simplified: a rebalance completes as soon as every known member has
rejoined (or after the longest rebalance timeout, dropping the others); members whose
session expires are removed; the protocol is the one most members prefer among those
all support; static members (group.instance.id) that rejoin with an empty member id
get a new member id (fencing the old one) and, if the group is stable, no rebalance.

Tests can inject error codes per API (`errors[api_key] = [codes...]`), kick members
out, and look at the groups' state.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from tidegate.protocol.framing import encode_frame
from tidegate.protocol.headers import encode_response_header, parse_request_header
from tidegate.protocol.messages import (
    build,
    decode,
    encode,
    is_flexible,
    ms,
    request_class,
    response_class,
)

from .fake_broker import FakeBroker, kio_range

GROUP_APIS = (8, 9, 10, 11, 12, 13, 14)
NONE, COORDINATOR_NOT_AVAILABLE, ILLEGAL_GENERATION = 0, 15, 22
INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS = 23, 25, 27
MEMBER_ID_REQUIRED, FENCED_INSTANCE_ID = 79, 82


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    last_seen: float = field(default_factory=time.monotonic)
    join: asyncio.Future[dict[str, Any]] | None = None
    sync: asyncio.Future[dict[str, Any]] | None = None
    assignment: bytes = b""


@dataclass
class Group:
    group_id: str
    state: str = "Empty"  # Empty, PreparingRebalance, CompletingRebalance, Stable
    generation: int = 0
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    rebalance: asyncio.Task[None] | None = None
    generations: list[tuple[int, str | None, list[str]]] = field(default_factory=list)

    def static(self, instance_id: str) -> Member | None:
        for m in self.members.values():
            if m.instance_id == instance_id:
                return m
        return None


@dataclass
class FakeGroupBroker(FakeBroker):
    groups: dict[str, Group] = field(default_factory=dict)
    committed: dict[tuple[str, str, int], tuple[int, str | None]] = field(default_factory=dict)
    errors: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    join_delay_s: float = 0.0  # like group.initial.rebalance.delay.ms
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _reaper: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        for k in GROUP_APIS:
            self.versions[k] = kio_range(k)
        self.versions[8] = (2, 9)
        self.versions[9] = (1, 9)

    async def start(self) -> FakeGroupBroker:
        await super().start()
        if self._reaper is None:
            self._reaper = asyncio.create_task(self._reap())
        return self

    async def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        await super().stop()

    def group(self, group_id: str) -> Group:
        return self.groups.setdefault(group_id, Group(group_id))

    # -- plumbing ------------------------------------------------------------------------

    async def _answer(self, frame: bytes, fut: asyncio.Future[bytes | None]) -> None:
        api_key = int.from_bytes(frame[:2], "big")
        if api_key not in GROUP_APIS:
            await super()._answer(frame, fut)
            return
        version = int.from_bytes(frame[2:4], "big")
        self.requests.append((api_key, version))
        header, pos = parse_request_header(frame, is_flexible(api_key, version))
        req = decode(request_class(api_key, version), frame, pos)
        await asyncio.sleep(self.delay_s.get(api_key, 0))
        injected = self.errors.get(api_key)
        if injected:
            data: dict[str, Any] = self._error_response(api_key, req, injected.pop(0))
        else:
            data = await getattr(self, f"_group_{api_key}")(req)
        cls = response_class(api_key, version)
        flexible = bool(getattr(cls, "__flexible__", False))
        fut.set_result(encode_frame(encode_response_header(header.correlation_id, flexible)
                                    + encode(build(cls, data))))

    def _error_response(self, api_key: int, req: Any, code: int) -> dict[str, Any]:
        if api_key == 10:
            return {"error_code": code, "node_id": -1, "host": "", "port": -1,
                    "coordinators": [{"key": k, "error_code": code, "node_id": -1,
                                      "host": "", "port": -1}
                                     for k in (getattr(req, "coordinator_keys", ())
                                               or [getattr(req, "key", "")])]}
        if api_key == 8:
            return {"topics": [{"name": t.name, "partitions": [
                {"partition_index": p.partition_index, "error_code": code}
                for p in t.partitions]} for t in req.topics]}
        if api_key == 9:
            return {"error_code": code, "topics": [],
                    "groups": [{"group_id": g.group_id, "error_code": code, "topics": []}
                               for g in getattr(req, "groups", ())]}
        return {"error_code": code, "member_id": getattr(req, "member_id", ""),
                "generation_id": -1, "leader": "", "protocol_name": None, "members": [],
                "assignment": b""}

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(0.02)
            now = time.monotonic()
            for g in self.groups.values():
                for m in list(g.members.values()):
                    waiting = m.join is not None and not m.join.done()
                    if not waiting and now - m.last_seen > m.session_timeout_ms / 1000:
                        self.remove(g, m.member_id)

    def remove(self, g: Group, member_id: str) -> None:
        """Drop a member (session expiry, LeaveGroup, a test kicking it out)."""
        m = g.members.pop(member_id, None)
        if m is None:
            return
        for f in (m.join, m.sync):
            if f is not None and not f.done():
                f.set_result({"error_code": UNKNOWN_MEMBER_ID, "member_id": member_id,
                              "generation_id": -1, "leader": "", "protocol_name": None,
                              "members": [], "assignment": b""})
        if not g.members:
            g.state, g.leader, g.protocol = "Empty", None, None
            g.generation += 1
            return
        self._prepare(g)

    def _prepare(self, g: Group) -> None:
        if g.state == "CompletingRebalance":
            for m in g.members.values():
                if m.sync is not None and not m.sync.done():
                    m.sync.set_result({"error_code": REBALANCE_IN_PROGRESS, "assignment": b""})
        g.state = "PreparingRebalance"
        if g.rebalance is None or g.rebalance.done():
            g.rebalance = asyncio.create_task(self._complete_join(g))

    async def _complete_join(self, g: Group) -> None:
        await asyncio.sleep(self.join_delay_s)
        limit = max((m.rebalance_timeout_ms for m in g.members.values()), default=0)
        deadline = time.monotonic() + limit / 1000
        while time.monotonic() < deadline:
            if g.members and all(m.join is not None and not m.join.done()
                                 for m in g.members.values()):
                break
            await asyncio.sleep(0.01)
        for m in list(g.members.values()):
            if m.join is None or m.join.done():
                self.remove(g, m.member_id)  # did not rejoin in time
        if not g.members:
            return
        common = set.intersection(*({n for n, _ in m.protocols} for m in g.members.values()))
        votes: dict[str, int] = defaultdict(int)
        for m in g.members.values():
            for name, _ in m.protocols:
                if name in common:
                    votes[name] += 1
                    break
        g.generation += 1
        g.protocol = max(votes, key=lambda n: votes[n]) if votes else None
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.state = "CompletingRebalance"
        g.generations.append((g.generation, g.protocol, sorted(g.members)))
        everyone = [{"member_id": m.member_id, "group_instance_id": m.instance_id,
                     "metadata": dict(m.protocols)[g.protocol]}
                    for m in g.members.values()] if g.protocol else []
        for m in g.members.values():
            assert m.join is not None
            m.last_seen = time.monotonic()
            if g.protocol is None:
                m.join.set_result({"error_code": INCONSISTENT_GROUP_PROTOCOL,
                                   "member_id": m.member_id, "leader": "", "members": [],
                                   "protocol_name": None})
                continue
            m.join.set_result({
                "error_code": NONE, "generation_id": g.generation, "protocol_type": "consumer",
                "protocol_name": g.protocol, "leader": g.leader, "member_id": m.member_id,
                "members": everyone if m.member_id == g.leader else []})

    # -- the APIs --------------------------------------------------------------------------

    async def _group_10(self, req: Any) -> dict[str, Any]:
        keys = list(getattr(req, "coordinator_keys", ()) or [getattr(req, "key", "")])
        return {"error_code": NONE, "node_id": 1, "host": "127.0.0.1", "port": self.port,
                "coordinators": [{"key": k, "node_id": 1, "host": "127.0.0.1",
                                  "port": self.port, "error_code": NONE} for k in keys]}

    def _fenced(self, g: Group, member_id: str, instance_id: str | None) -> bool:
        if instance_id is None:
            return False
        current = g.static(instance_id)
        return current is not None and current.member_id != member_id

    async def _group_11(self, req: Any) -> dict[str, Any]:
        g = self.group(req.group_id)
        instance = getattr(req, "group_instance_id", None)
        member_id = req.member_id
        protocols = [(p.name, p.metadata) for p in req.protocols]
        session, rebalance = ms(req.session_timeout), ms(req.rebalance_timeout)
        if member_id == "":
            new_id = f"{instance or 'consumer'}-{next(self._ids)}"
            old = g.static(instance) if instance else None
            if old is not None:  # a static member restarted: replace, fence the old id
                del g.members[old.member_id]
                old.member_id = new_id
                old.protocols, old.last_seen = protocols, time.monotonic()
                g.members[new_id] = old
                if g.leader not in g.members:
                    g.leader = new_id
                if g.state == "Stable":
                    return {"error_code": NONE, "generation_id": g.generation,
                            "protocol_type": "consumer", "protocol_name": g.protocol,
                            "leader": g.leader, "member_id": new_id, "members": []}
                member_id = new_id
            elif instance is None and req.__version__ >= 4:
                g.members[new_id] = Member(new_id, None, protocols, session, rebalance)
                return {"error_code": MEMBER_ID_REQUIRED, "member_id": new_id,
                        "generation_id": -1, "leader": "", "protocol_name": None,
                        "members": []}
            else:
                g.members[new_id] = Member(new_id, instance, protocols, session, rebalance)
                member_id = new_id
        elif self._fenced(g, member_id, instance):
            return {"error_code": FENCED_INSTANCE_ID, "member_id": member_id,
                    "leader": "", "members": [], "protocol_name": None}
        elif member_id not in g.members:
            return {"error_code": UNKNOWN_MEMBER_ID, "member_id": member_id,
                    "generation_id": -1, "leader": "", "protocol_name": None, "members": []}
        m = g.members[member_id]
        m.protocols, m.session_timeout_ms, m.rebalance_timeout_ms = protocols, session, rebalance
        m.last_seen = time.monotonic()
        m.join = asyncio.get_running_loop().create_future()
        if g.state != "PreparingRebalance":
            self._prepare(g)
        return await m.join

    async def _group_14(self, req: Any) -> dict[str, Any]:
        g = self.group(req.group_id)
        m = g.members.get(req.member_id)
        if self._fenced(g, req.member_id, getattr(req, "group_instance_id", None)):
            return {"error_code": FENCED_INSTANCE_ID, "assignment": b""}
        if m is None:
            return {"error_code": UNKNOWN_MEMBER_ID, "assignment": b""}
        if req.generation_id != g.generation:
            return {"error_code": ILLEGAL_GENERATION, "assignment": b""}
        if g.state == "PreparingRebalance":
            return {"error_code": REBALANCE_IN_PROGRESS, "assignment": b""}
        m.last_seen = time.monotonic()
        if g.state == "Stable":
            return {"error_code": NONE, "assignment": m.assignment,
                    "protocol_type": "consumer", "protocol_name": g.protocol}
        m.sync = asyncio.get_running_loop().create_future()
        if req.member_id == g.leader:
            given = {a.member_id: a.assignment for a in req.assignments}
            for other in g.members.values():
                other.assignment = given.get(other.member_id, b"")
            g.state = "Stable"
            for other in g.members.values():
                if other.sync is not None and not other.sync.done():
                    other.sync.set_result({"error_code": NONE, "assignment": other.assignment,
                                           "protocol_type": "consumer",
                                           "protocol_name": g.protocol})
        return await m.sync

    async def _group_12(self, req: Any) -> dict[str, Any]:
        g = self.group(req.group_id)
        if self._fenced(g, req.member_id, getattr(req, "group_instance_id", None)):
            return {"error_code": FENCED_INSTANCE_ID}
        m = g.members.get(req.member_id)
        if m is None:
            return {"error_code": UNKNOWN_MEMBER_ID}
        if req.generation_id != g.generation:
            return {"error_code": ILLEGAL_GENERATION}
        m.last_seen = time.monotonic()
        if g.state == "PreparingRebalance":
            return {"error_code": REBALANCE_IN_PROGRESS}
        return {"error_code": NONE}

    async def _group_13(self, req: Any) -> dict[str, Any]:
        g = self.group(req.group_id)
        ids = [x.member_id for x in getattr(req, "members", ())] or [req.member_id]
        for member_id in ids:
            self.remove(g, member_id)
        return {"error_code": NONE, "members": [{"member_id": i, "error_code": NONE}
                                                for i in ids]}

    async def _group_8(self, req: Any) -> dict[str, Any]:
        g = self.group(req.group_id)
        gen, member = req.generation_id_or_member_epoch, req.member_id
        code = NONE
        if self._fenced(g, member, getattr(req, "group_instance_id", None)):
            code = FENCED_INSTANCE_ID
        elif gen < 0 and member == "":
            code = NONE if not g.members else UNKNOWN_MEMBER_ID
        elif member not in g.members:
            code = UNKNOWN_MEMBER_ID
        elif gen != g.generation:
            code = ILLEGAL_GENERATION
        elif g.state == "CompletingRebalance":
            code = REBALANCE_IN_PROGRESS
        if code == NONE:
            if member in g.members:
                g.members[member].last_seen = time.monotonic()
            for t in req.topics:
                for p in t.partitions:
                    self.committed[(req.group_id, t.name, p.partition_index)] = (
                        p.committed_offset, p.committed_metadata)
        return {"topics": [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": code}
            for p in t.partitions]} for t in req.topics]}

    async def _group_9(self, req: Any) -> dict[str, Any]:
        groups = list(getattr(req, "groups", ()) or [req])
        out = []
        for q in groups:
            topics = [{"name": t.name, "partitions": [
                {"partition_index": p, "error_code": NONE,
                 "committed_offset": self.committed.get((q.group_id, t.name, p), (-1, ""))[0],
                 "metadata": self.committed.get((q.group_id, t.name, p), (-1, ""))[1],
                 "committed_leader_epoch": -1}
                for p in t.partition_indexes]} for t in q.topics or ()]
            out.append({"group_id": q.group_id, "error_code": NONE, "topics": topics})
        return {"error_code": NONE, "topics": out[0]["topics"], "groups": out}


__all__ = ["FakeGroupBroker", "Group", "Member"]
