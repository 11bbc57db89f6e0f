"""Fetch: read whole batches up to the high watermark, long-polling for new data.

Limits follow Kafka (KIP-74): `partition_max_bytes` per partition and `max_bytes` for
the response, except that the first non-empty partition always returns at least one
whole batch so a consumer can make progress past a batch bigger than its limits. If
fewer than `min_bytes` are available the request waits up to `max_wait_ms` for the
high watermark of any requested partition to move, then reads again.

Fetch sessions (KIP-227, server/fetch_session.py): a fetcher that asks for one (epoch
0) gets a session id; its later fetches list only the partitions it adds, changes or
forgets, and the answers carry only the partitions with records, an error, or a moved
high watermark, last stable offset or log start. Fetchers that do not ask (session id 0,
epoch -1: librdkafka, aiokafka) get full answers as before.

Only the partition's leader answers (NOT_LEADER_OR_FOLLOWER elsewhere; KIP-320 checks of
`current_leader_epoch`). A fetch from a follower broker (`replica_id` >= 0, in
`replica_state` from v15) is replication: it reads up to the log end rather than the
high watermark, its fetch offset is the follower's position (which moves the high
watermark over the ISR and may add the follower to it, server/leadership.py), and a
follower whose `last_fetched_epoch` disagrees with the leader's epoch history gets
`diverging_epoch` to truncate to, and no records (Fetch v12+, as Kafka 2.7+).

Fetch from the closest replica (KIP-392): with `replica.selector.class` set to Kafka's
`org.apache.kafka.common.replica.RackAwareReplicaSelector`, a leader answers a consumer
that gives its `client.rack` with `preferred_read_replica` = an in-sync replica in that
rack (and no records); a follower serves a v11+ consumer's fetch up to its own high
watermark (last stable offset for read_committed), which trails the leader's by a
fetch round.

read_committed (`isolation_level` 1): data is returned only below the partition's last
stable offset (the first offset of its oldest open transaction, else the high
watermark), and the response lists the aborted transactions overlapping the returned
range (producer id and first offset, from the `.txnindex` files) so the consumer can
drop their records; control batches are returned like data and dropped by the client,
as in Kafka. read_uncommitted reads up to the high watermark and gets no aborted list.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Container
from dataclasses import dataclass
from typing import Any

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.protocol.messages import build, ms, view
from tidegate.records.batch import parse_header, peek_size
from tidegate.server.authz import AclOperation as Op
from tidegate.server.authz import ResourceType as Res
from tidegate.server.authz import check, check_cluster
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchSession,
    PartitionKey,
    PartitionState,
)
from tidegate.server.handlers.common import ZERO_UUID, error_fields
from tidegate.server.partition import NO_EPOCH, Partition

log = logging.getLogger(__name__)

READ_COMMITTED = 1


def replica_id_of(req: Any) -> int:
    state = view(req, "replica_state")
    if state is not None:
        return int(state.replica_id)
    return int(view(req, "replica_id", -1))


@dataclass
class _Plan:
    """The partitions one Fetch reads, in answer order, and its session."""

    parts: list[tuple[PartitionKey, PartitionState]]
    session: FetchSession | None = None
    incremental: bool = False
    listed: frozenset[PartitionKey] = frozenset()  # incremental: what this request named


def _requested(req: Any) -> list[tuple[PartitionKey, PartitionState]]:
    out = []
    for topic in req.topics:
        name = str(getattr(topic, "topic", "") or "")
        topic_id = getattr(topic, "topic_id", None)
        key = name or str(topic_id)
        for p in topic.partitions:
            out.append(((key, int(p.partition)), PartitionState(
                name, topic_id, int(p.partition), int(p.fetch_offset),
                int(p.partition_max_bytes), int(view(p, "current_leader_epoch", NO_EPOCH)),
                int(view(p, "last_fetched_epoch", -1)), int(view(p, "log_start_offset", -1)))))
    return out


def _forgotten(req: Any) -> list[PartitionKey]:
    out: list[PartitionKey] = []
    for topic in view(req, "forgotten_topics_data", ()) or ():
        key = str(getattr(topic, "topic", "") or "") or str(getattr(topic, "topic_id", ""))
        out.extend((key, int(p)) for p in topic.partitions)
    return out


def _plan(broker: Broker, req: Any, replica_id: int) -> _Plan:
    """Which partitions this fetch reads, opening, continuing or closing its session
    (the table in server/fetch_session.py); raises KafkaError for a session error."""
    session_id = int(view(req, "session_id", 0) or 0)
    epoch = int(view(req, "session_epoch", FINAL_EPOCH))
    cache = broker.fetch_sessions
    if epoch > INITIAL_EPOCH:
        session = cache.get(session_id, epoch, broker.clock.now_ms())
        requested = _requested(req)
        session.apply(requested, _forgotten(req))
        return _Plan(list(session.partitions.items()), session, incremental=True,
                     listed=frozenset(key for key, _ in requested))
    if session_id:
        cache.close(session_id)
    requested = _requested(req)
    if epoch == INITIAL_EPOCH:
        opened = cache.open(replica_id >= 0, broker.clock.now_ms())
        if opened is not None:
            opened.apply(requested, ())
            return _Plan(list(opened.partitions.items()), opened)
    return _Plan(requested)


def _resolve(broker: Broker, ps: PartitionState) -> tuple[str | None, uuid.UUID | None]:
    if ps.topic:
        tv = broker.metadata.topic(ps.topic)
        return ps.topic, (tv.topic_id if tv else None)
    if isinstance(ps.topic_id, uuid.UUID) and ps.topic_id != ZERO_UUID:
        tv = broker.metadata.topic_by_id(ps.topic_id)
        return (tv.name, tv.topic_id) if tv is not None else (None, ps.topic_id)
    return None, None


_Read = tuple[PartitionKey, str | None, uuid.UUID | None, dict[str, Any]]


def _read_all(broker: Broker, req: Any, plan: _Plan, isolation: int,
              denied: Container[str] = ()) -> tuple[list[_Read], int, bool]:
    # The broker's fetch.max.bytes caps what a client may ask for, as in Kafka.
    cap = broker.config.get_int("fetch.max.bytes", 57671680) or 57671680
    remaining = max(min(int(view(req, "max_bytes", 2**31 - 1)), cap), 0)
    total = 0
    any_error = False
    reads: list[_Read] = []
    first_data = True
    replica_id = replica_id_of(req)
    # KIP-392: consumers from Fetch v11 may read from a follower; with
    # replica.selector.class set, the leader points them to a replica in their rack
    from_follower_ok = replica_id < 0 and int(getattr(req, "__version__", 11) or 11) >= 11
    rack = str(view(req, "rack_id", "") or "") if broker.replica_selector else ""
    # an incremental follower fetch skips the session partitions where nothing moved
    skip_idle = plan.incremental and replica_id >= 0
    for key, p in plan.parts:
        if skip_idle and key not in plan.listed and p.topic not in denied \
                and _idle_follower(broker, p, replica_id):
            continue
        name, topic_id = _resolve(broker, p)
        index = p.index
        out: dict[str, Any] = {
            "partition_index": index,
            "error_code": ErrorCode.none,
            "high_watermark": -1,
            "last_stable_offset": -1,
            "log_start_offset": -1,
            "aborted_transactions": [] if isolation == READ_COMMITTED else None,
            "preferred_read_replica": -1,
            "records": b"",
        }
        reads.append((key, name, topic_id, out))
        if name is None:
            out["error_code"] = (
                ErrorCode.unknown_topic_id
                if topic_id is not None
                else ErrorCode.unknown_topic_or_partition
            )
            any_error = True
            continue
        if name in denied:
            out["error_code"] = ErrorCode.topic_authorization_failed
            any_error = True
            continue
        try:
            part = _serving_replica(broker, name, index, p, replica_id, from_follower_ok)
        except KafkaError as e:
            out["error_code"] = e.code
            any_error = True
            continue
        lg = part.log
        offset = p.fetch_offset
        if rack and part.is_leader and replica_id < 0:
            preferred = _preferred_read_replica(broker, part, rack)
            if preferred is not None:  # KIP-392: fetch from that replica instead
                out["preferred_read_replica"] = preferred
                out["high_watermark"] = lg.high_watermark
                out["last_stable_offset"] = lg.last_stable_offset
                out["log_start_offset"] = lg.log_start_offset
                any_error = True  # answer at once, with no records
                continue
        if replica_id >= 0:
            follower = _follower_fetch(broker, part, replica_id, p, out)
            if follower is not None:  # an error or a diverging epoch: no records
                any_error = True  # answer at once
                continue
        hw = lg.high_watermark
        lso = lg.last_stable_offset
        out["high_watermark"] = hw
        out["last_stable_offset"] = lso
        bound = lso if isolation == READ_COMMITTED else hw
        if replica_id >= 0:
            bound = lg.log_end_offset  # followers replicate everything
        out["log_start_offset"] = lg.log_start_offset
        limit = min(p.partition_max_bytes, remaining)
        try:
            if offset > lg.log_end_offset or offset < lg.log_start_offset:
                raise KafkaError(
                    f"offset {offset} is outside {lg.log_start_offset}..{lg.log_end_offset}",
                    code=ErrorCode.offset_out_of_range,
                )
            if offset >= bound or (limit <= 0 and not first_data):
                data = b""
            else:
                data = lg.read(offset, limit, max_offset=bound, min_one_batch=first_data)
        except KafkaError as e:
            out["error_code"], _ = error_fields(e)
            # Kafka's failed log read (ReplicaManager) carries no offsets: -1 for all
            out["high_watermark"] = out["last_stable_offset"] = -1
            out["log_start_offset"] = -1
            any_error = True
            continue
        if data:
            first_data = False
            total += len(data)
            remaining = max(remaining - len(data), 0)
        out["records"] = data
        if data and isolation == READ_COMMITTED:
            out["aborted_transactions"] = [
                {"producer_id": a.producer_id, "first_offset": a.first_offset}
                for a in lg.aborted_transactions(offset, _end_offset(data))
            ]
    return reads, total, any_error


def _idle_follower(broker: Broker, p: PartitionState, replica_id: int) -> bool:
    """A session partition the follower did not name in this fetch, where it is at the
    leader's log end (recorded) and the high watermark, last stable offset and log
    start it was last told still hold: its answer would carry nothing, and reading it
    would only refresh the follower's caught-up time, which this does
    (`Leadership.idle_follower_fetch`). With ~35 partitions per session and a few
    moving per round, reading every one was most of a replication round's CPU."""
    if not p.topic:
        return False
    part = broker.replicas.partition(p.topic, p.index)
    if part is None or not part.is_leader or part.leader_epoch != p.current_leader_epoch:
        return False
    lead, lg = part.leadership, part.log
    return (lead is not None and p.high_watermark == lg.high_watermark
            and p.last_stable_offset == lg.last_stable_offset
            and p.answered_log_start == lg.log_start_offset
            and lead.idle_follower_fetch(replica_id, p.fetch_offset))


def _answer(plan: _Plan, reads: list[_Read]) -> list[dict[str, Any]]:
    """The response's topics: each run of one topic's partitions under one entry (as
    Kafka's FetchResponse), an incremental answer keeping only what changed."""
    topics_out: list[dict[str, Any]] = []
    last: tuple[str | None, uuid.UUID | None] | None = None
    session = plan.session
    for key, name, topic_id, out in reads:
        if session is not None and not session.sent(
                key, high_watermark=out["high_watermark"],
                last_stable_offset=out["last_stable_offset"],
                log_start_offset=out["log_start_offset"], has_records=bool(out["records"]),
                has_error=(out["error_code"] != ErrorCode.none or "diverging_epoch" in out
                           or out["preferred_read_replica"] >= 0),
                incremental=plan.incremental):
            continue
        if last != (name, topic_id):
            topics_out.append({"topic": name or "", "topic_id": topic_id or ZERO_UUID,
                               "partitions": []})
            last = (name, topic_id)
        topics_out[-1]["partitions"].append(out)
    return topics_out


def _serving_replica(broker: Broker, name: str, index: int, p: Any, replica_id: int,
                     from_follower_ok: bool) -> Partition:
    """The replica that serves this fetch: the leader, or (KIP-392) a follower here
    when a v11+ consumer asks it (it serves up to its own high watermark)."""
    epoch = int(view(p, "current_leader_epoch", NO_EPOCH))
    if from_follower_ok and broker.replicas.cluster:
        part = broker.replicas.partition(name, index)
        if part is not None and not part.is_leader and part.leader_epoch >= 0:
            part.check_epoch(epoch)
            return part
    return broker.replicas.leader(name, index, epoch)


def _preferred_read_replica(broker: Broker, part: Partition, rack: str) -> int | None:
    """Kafka's RackAwareReplicaSelector: an in-sync replica in the client's rack; None
    when the leader is one, or when none is."""
    lead = part.leadership
    if lead is None:
        return None
    candidates = [r for r in lead.state.isr
                  if (b := broker.metadata.broker(r)) is not None and b.rack == rack]
    if not candidates or part.leader_id in candidates or broker.node_id in candidates:
        return None
    return candidates[0]


def _follower_fetch(broker: Broker, part: Partition, replica_id: int, p: Any,
                   out: dict[str, Any]) -> bool | None:
    """Record a follower's position; None to go on reading, else True for an error or
    a diverging epoch (False), already written into `out`."""
    lead = part.leadership
    if lead is None:
        out["error_code"] = ErrorCode.not_leader_or_follower
        return True
    try:
        result = lead.on_follower_fetch(
            replica_id, int(p.fetch_offset), int(view(p, "last_fetched_epoch", -1)),
            int(view(p, "log_start_offset", -1)))
    except KafkaError as e:
        log.info("%s-%d: fetch from follower %d refused: %s", part.topic, part.index,
                 replica_id, e)
        out["error_code"] = e.code
        return True
    if result.diverging_epoch is not None:
        out["diverging_epoch"] = {"epoch": result.diverging_epoch.epoch,
                                  "end_offset": result.diverging_epoch.end_offset}
        out["high_watermark"] = part.log.high_watermark
        out["log_start_offset"] = part.log.log_start_offset
        return False
    if result.expand_isr:
        broker.replicas.propose_isr_expansion(part, replica_id)
    return None


def _end_offset(data: bytes) -> int:
    """The offset after the last whole batch in `data`."""
    end = pos = 0
    while pos < len(data):
        size = peek_size(data, pos)
        if size is None or pos + size > len(data):
            break
        end = parse_header(data, pos).next_offset
        pos += size
    return end


def _denied_topics(broker: Broker, ctx: RequestContext, req: Any, plan: _Plan) -> set[str]:
    """Topics this fetch may not read (Kafka: a follower needs CLUSTER_ACTION, else every
    partition is TOPIC_AUTHORIZATION_FAILED; a consumer needs READ on each topic)."""
    if broker.authorizer is None:
        return set()
    names = {n for n in (_resolve(broker, ps)[0] for _, ps in plan.parts) if n}
    if replica_id_of(req) >= 0:
        return set() if check_cluster(broker, ctx, Op.CLUSTER_ACTION) else names
    return {n for n in names if not check(broker, ctx, Op.READ, Res.TOPIC, n)}


async def handle(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    isolation = int(view(req, "isolation_level", 0))
    try:
        plan = _plan(broker, req, replica_id_of(req))
    except KafkaError as e:  # a session error: no partition is read
        log.debug("fetch session refused: %s", e)
        return build(ctx.response_class, {"throttle_time": 0, "error_code": e.code,
                                          "session_id": 0, "responses": []})
    denied = _denied_topics(broker, ctx, req, plan)
    reads, total, any_error = _read_all(broker, req, plan, isolation, denied)
    min_bytes = int(req.min_bytes)
    wait_ms = ms(req.max_wait)
    # plan.parts, not reads: an incremental follower fetch may have read nothing yet
    if total < max(min_bytes, 1) and not any_error and wait_ms > 0 and plan.parts:
        tps = [(name, ps.index) for ps in (p for _, p in plan.parts)
               if (name := ps.topic or _resolve(broker, ps)[0])]
        deadline = broker.clock.monotonic() + wait_ms / 1000
        while True:
            left = deadline - broker.clock.monotonic()
            if left <= 0:
                break
            await broker.wait_for_data(tps, left)
            reads, total, any_error = _read_all(broker, req, plan, isolation, denied)
            if total >= min_bytes or any_error:
                break
    return build(
        ctx.response_class,
        {
            "throttle_time": 0,
            "error_code": 0,
            "session_id": 0 if plan.session is None else plan.session.session_id,
            "responses": _answer(plan, reads),
        },
    )
