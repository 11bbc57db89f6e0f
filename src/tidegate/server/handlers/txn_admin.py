"""KIP-664's tools for understanding transactions: ListTransactions,
DescribeTransactions (the coordinator's view) and DescribeProducers (a partition's view:
the producers it knows and the transaction each has open there).

A hanging transaction is one a partition's producer state shows open
(`current_txn_start_offset` >= 0) that the coordinator does not know as Ongoing; it
pins the partition's last stable offset. `tidegate txn` and Kafka's
kafka-transactions.sh find it with these two APIs and abort it with WriteTxnMarkers.
"""

from __future__ import annotations

import re
from typing import Any

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.protocol.messages import build, view
from tidegate.server.authz import AclOperation as Op
from tidegate.server.authz import ResourceType as Res
from tidegate.server.authz import check, check_cluster
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext

STATE_NAMES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
               "CompleteAbort", "Dead", "PrepareEpochFence")


async def handle_list_transactions(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    states = [str(s) for s in view(req, "state_filters", ()) or ()]
    unknown = [s for s in states if s not in STATE_NAMES]
    pids = {int(p) for p in view(req, "producer_id_filters", ()) or ()}
    duration = int(view(req, "duration_filter", -1))
    pattern = view(req, "transactional_id_pattern")
    listed: list[dict[str, Any]] = []
    regex: re.Pattern[str] | None = None
    code = ErrorCode.none
    if pattern:
        try:
            regex = re.compile(str(pattern))
        except re.error:
            code = ErrorCode.invalid_regular_expression
    if code == ErrorCode.none and not (states and not set(states) & set(STATE_NAMES)):
        try:
            code, found = await broker.txn_coordinator.list_transactions(
                [s for s in states if s in STATE_NAMES], pids, duration)
        except KafkaError as e:
            code, found = e.code, []
        # ACLs (Kafka): DESCRIBE on the cluster lists all, else the ids one may DESCRIBE
        every = check_cluster(broker, ctx, Op.DESCRIBE, log_denied=False)
        for t in found:
            # Kafka never lists Dead (an id being expired) and, from v2 (KIP-1152),
            # keeps the ids the pattern matches whole, as Java's Matcher.matches()
            if t.state == "Dead":
                continue
            if regex is not None and not regex.fullmatch(t.transactional_id):
                continue
            if not every and not check(broker, ctx, Op.DESCRIBE, Res.TRANSACTIONAL_ID,
                                       t.transactional_id, log_denied=False):
                continue
            listed.append({"transactional_id": t.transactional_id,
                           "producer_id": t.producer_id, "transaction_state": t.state})
    return build(ctx.response_class, {"throttle_time": 0, "error_code": code,
                                      "unknown_state_filters": unknown,
                                      "transaction_states": listed})


async def handle_describe_transactions(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    ids = [str(t) for t in req.transactional_ids or ()]
    out = []
    # ACLs (Kafka): DESCRIBE on each transactional id
    allowed = [t for t in ids if check(broker, ctx, Op.DESCRIBE, Res.TRANSACTIONAL_ID, t)]
    for t in ids:
        if t not in allowed:
            out.append({"error_code": ErrorCode.transactional_id_authorization_failed,
                        "transactional_id": t, "transaction_state": "",
                        "transaction_timeout": 0, "transaction_start_time": -1,
                        "producer_id": -1, "producer_epoch": -1, "topics": []})
    for d in await broker.txn_coordinator.describe_transactions(allowed) if allowed else ():
        out.append({
            "error_code": d.error,
            "transactional_id": d.transactional_id,
            "transaction_state": d.state,
            "transaction_timeout": d.timeout_ms,
            "transaction_start_time": d.start_time_ms,
            "producer_id": d.producer_id,
            "producer_epoch": d.producer_epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in d.topics.items()],
        })
    return build(ctx.response_class, {"throttle_time": 0, "transaction_states": out})


async def handle_describe_producers(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    topics = []
    for t in req.topics or ():
        parts: list[dict[str, Any]] = []
        readable = check(broker, ctx, Op.READ, Res.TOPIC, str(t.name))  # Kafka's ACL
        for p in t.partition_indexes or ():
            index = int(p)
            if not readable:
                parts.append({"partition_index": index, "error_code":
                              ErrorCode.topic_authorization_failed, "error_message": None,
                              "active_producers": []})
                continue
            try:  # the leader's producer state is the one that answers (Kafka's rule)
                lg = broker.replicas.leader(str(t.name), index).log
            except KafkaError as e:
                parts.append({"partition_index": index, "error_code": e.code,
                              "error_message": None, "active_producers": []})
                continue
            parts.append({
                "partition_index": index, "error_code": ErrorCode.none, "error_message": None,
                "active_producers": [
                    {"producer_id": s.producer_id, "producer_epoch": s.producer_epoch,
                     "last_sequence": s.last_sequence, "last_timestamp": s.last_timestamp,
                     "coordinator_epoch": s.coordinator_epoch,
                     "current_txn_start_offset": s.current_txn_start_offset}
                    for s in lg.describe_producers()
                ],
            })
        topics.append({"name": t.name, "partitions": parts})
    return build(ctx.response_class, {"throttle_time": 0, "topics": topics})
