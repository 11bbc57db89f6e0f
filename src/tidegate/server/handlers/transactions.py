"""The transaction APIs a producer calls: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
TxnOffsetCommit; and WriteTxnMarkers, which a transaction coordinator sends to the
leaders of a transaction's partitions.

The handlers check what Kafka's KafkaApis checks before reaching a coordinator, and turn
coordinator answers into each version's response shape:

- AddPartitionsToTxn v0-v3 (clients) carry one transaction; v4+ (KIP-890) carry many
  and may be `verify_only`. A partition of a topic that does not exist is
  UNKNOWN_TOPIC_OR_PARTITION and every other partition of the request
  OPERATION_NOT_ATTEMPTED, with nothing added (Kafka's rule: all or nothing). Internal
  topics cannot be added: `__consumer_offsets` joins a transaction through
  AddOffsetsToTxn, and `__transaction_state` never does (INVALID_TOPIC_EXCEPTION, as a
  Produce to an internal topic gets). v4+ are sent by brokers only (a group coordinator
  verifying a TxnOffsetCommit names its `__consumer_offsets` partition) and their
  transactions are answered concurrently.
- EndTxn v5+ is transaction version 2: the answer carries the producer id and epoch the
  producer must use next (the coordinator bumps the epoch at every end).
- TxnOffsetCommit goes to the group coordinator after checking (KIP-890 verification)
  that the group's `__consumer_offsets` partition is in the ongoing transaction; from
  v5 (transaction version 2) the producer sends no AddOffsetsToTxn and the partition is
  added here instead. A verification that could not be made (the transaction
  coordinator on another broker unreachable: NETWORK_EXCEPTION) is answered as Kafka's
  group coordinator does, as a code clients retry (COORDINATOR_LOAD_IN_PROGRESS).
- Topics are looked up in the metadata view: in a cluster the coordinator's broker need
  not hold a replica of a transaction's topics.
- WriteTxnMarkers in a cluster writes only partitions led here (NOT_LEADER_OR_FOLLOWER
  for the others, server/markers.py).
- PRODUCER_FENCED goes only to versions that know it (KIP-588: AddPartitionsToTxn,
  AddOffsetsToTxn and EndTxn v2+, InitProducerId v4+); older ones get
  INVALID_PRODUCER_EPOCH.
- An empty transactional id is INVALID_REQUEST; a request naming the wrong coordinator
  NOT_COORDINATOR (never, on one node, for a started coordinator).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.common.topics import CONSUMER_OFFSETS, INTERNAL_TOPICS
from tidegate.protocol.messages import build, view
from tidegate.protocol.txn_offsets import (
    TxnOffsetCommitPartitionResult,
    TxnOffsetCommitTopicResult,
    add_offsets_response,
    txn_offset_commit_response,
)
from tidegate.protocol.txn_responses import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopicResult,
    add_partitions_response,
    end_txn_response,
)
from tidegate.server.authz import AclOperation as Op
from tidegate.server.authz import ResourceType as Res
from tidegate.server.authz import check, check_cluster
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.handlers.common import partition_counts
from tidegate.server.markers import Marker, write_markers

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


def _fenced(code: ErrorCode, version: int, since: int) -> ErrorCode:
    """KIP-588: PRODUCER_FENCED exists on the wire from version `since` of each API;
    older versions get INVALID_PRODUCER_EPOCH, which is what they always had."""
    if code == ErrorCode.producer_fenced and version < since:
        return ErrorCode.invalid_producer_epoch
    return code


def _offset_commit_error(code: ErrorCode) -> ErrorCode:
    """A verification failure as TxnOffsetCommit answers it (Kafka's group coordinator,
    `maybeConvertOffsetCommitError`): codes older clients would not retry become ones
    they do."""
    if code == ErrorCode.network_exception:
        return ErrorCode.coordinator_load_in_progress  # retried without a new lookup
    if code in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas,
                ErrorCode.not_enough_replicas_after_append):
        return ErrorCode.coordinator_not_available
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    return code


async def _partition_errors(broker: Broker, topics: Any, *, from_broker: bool = False
                            ) -> tuple[list[TopicPartition], dict[TopicPartition, ErrorCode]]:
    """The partitions a request names, and the errors of those that cannot be added.
    `from_broker` (v4+, which only brokers send): a group coordinator verifying a
    TxnOffsetCommit names its `__consumer_offsets` partition, which may be in a
    transaction (through AddOffsetsToTxn, or added by transaction version 2)."""
    wanted = [(str(t.name), int(p)) for t in topics or () for p in t.partitions or ()]
    errors: dict[TopicPartition, ErrorCode] = {}
    counted: dict[str, int] = {}
    for name, index in wanted:
        if name in INTERNAL_TOPICS and not (from_broker and name == CONSUMER_OFFSETS):
            errors[(name, index)] = ErrorCode.invalid_topic_exception
        else:
            counted[name] = max(counted.get(name, 0), index + 1)
    counts = await partition_counts(broker, counted)
    for tp in wanted:
        if tp[0] in counts and not 0 <= tp[1] < counts[tp[0]]:
            errors[tp] = ErrorCode.unknown_topic_or_partition
    return wanted, errors


async def _add_one(broker: Broker, txn_id: str, producer_id: int, epoch: int, topics: Any,
                   verify_only: bool, *, from_broker: bool = False
                   ) -> dict[TopicPartition, ErrorCode]:
    wanted, errors = await _partition_errors(broker, topics, from_broker=from_broker)
    if errors:
        return {tp: errors.get(tp, ErrorCode.operation_not_attempted) for tp in wanted}
    if not txn_id:
        return dict.fromkeys(wanted, ErrorCode.invalid_request)
    try:
        # a client's add is answered before its record is durable (no data can be
        # appended before the verification that waits for it); a broker's v4+ add
        # (transaction version 2, for a partition led elsewhere) lets data be appended
        # at once, so it waits
        return await broker.txn_coordinator.add_partitions(
            txn_id, producer_id, epoch, wanted, verify_only=verify_only,
            before_durable=not from_broker)
    except KafkaError as e:
        return dict.fromkeys(wanted, e.code)


def _by_topic(results: dict[TopicPartition, ErrorCode]
              ) -> tuple[AddPartitionsToTxnTopicResult, ...]:
    grouped: dict[str, list[AddPartitionsToTxnPartitionResult]] = {}
    for (topic, partition), code in results.items():
        grouped.setdefault(topic, []).append(AddPartitionsToTxnPartitionResult(partition, code))
    return tuple(AddPartitionsToTxnTopicResult(t, tuple(parts)) for t, parts in grouped.items())


def _denied_add(broker: Broker, ctx: RequestContext, txn_id: str, topics: Any
                ) -> dict[TopicPartition, ErrorCode] | None:
    """Kafka's AddPartitionsToTxn ACLs (v3 and below): WRITE on the transactional id,
    else every partition fails; WRITE on each topic, else that topic's partitions fail
    and the others are OPERATION_NOT_ATTEMPTED. None: authorized."""
    wanted = [(str(t.name), int(p)) for t in topics or () for p in t.partitions or ()]
    if not check(broker, ctx, Op.WRITE, Res.TRANSACTIONAL_ID, txn_id):
        return dict.fromkeys(wanted, ErrorCode.transactional_id_authorization_failed)
    refused = {n for n, _ in wanted if not check(broker, ctx, Op.WRITE, Res.TOPIC, n)}
    if not refused:
        return None
    return {tp: ErrorCode.topic_authorization_failed if tp[0] in refused
            else ErrorCode.operation_not_attempted for tp in wanted}


async def handle_add_partitions(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    if ctx.api_version <= 3:
        results = _denied_add(broker, ctx, str(req.v3_and_below_transactional_id),
                              req.v3_and_below_topics) or await _add_one(
            broker, str(req.v3_and_below_transactional_id),
            int(req.v3_and_below_producer_id), int(req.v3_and_below_producer_epoch),
            req.v3_and_below_topics, False)
        results = {tp: _fenced(c, ctx.api_version, 2) for tp, c in results.items()}
        return add_partitions_response(ctx.api_version,
                                       results_by_topic_v3_and_below=_by_topic(results))
    # v4+ come from partition leaders batching their KIP-890 verifications: the
    # transactions are independent (one entry per id), so they are answered together
    txns = list(req.transactions or ())
    if not check_cluster(broker, ctx, Op.CLUSTER_ACTION):  # Kafka: only brokers send v4+
        return add_partitions_response(ctx.api_version,
                                       error_code=ErrorCode.cluster_authorization_failed)
    answers = await asyncio.gather(*(
        _add_one(broker, str(txn.transactional_id), int(txn.producer_id),
                 int(txn.producer_epoch), txn.topics, bool(txn.verify_only), from_broker=True)
        for txn in txns))
    out = tuple(AddPartitionsToTxnResult(str(txn.transactional_id), _by_topic(results))
                for txn, results in zip(txns, answers, strict=True))
    return add_partitions_response(ctx.api_version, results_by_transaction=out)


async def handle_add_offsets(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    txn_id, group_id = str(req.transactional_id), str(req.group_id)
    if not txn_id:
        code = ErrorCode.invalid_request
    elif not group_id:
        code = ErrorCode.invalid_group_id
    elif not check(broker, ctx, Op.WRITE, Res.TRANSACTIONAL_ID, txn_id):
        code = ErrorCode.transactional_id_authorization_failed
    elif not check(broker, ctx, Op.READ, Res.GROUP, group_id):
        code = ErrorCode.group_authorization_failed
    else:
        try:
            code = await broker.txn_coordinator.add_offsets(
                txn_id, int(req.producer_id), int(req.producer_epoch), group_id)
        except KafkaError as e:
            code = e.code
    return add_offsets_response(ctx.api_version, error_code=_fenced(code, ctx.api_version, 2))


async def handle_end_txn(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    txn_id = str(req.transactional_id)
    pid, epoch = int(req.producer_id), int(req.producer_epoch)
    if not txn_id:
        return end_txn_response(ctx.api_version, error_code=ErrorCode.invalid_request)
    if not check(broker, ctx, Op.WRITE, Res.TRANSACTIONAL_ID, txn_id):
        return end_txn_response(ctx.api_version,
                                error_code=ErrorCode.transactional_id_authorization_failed)
    try:
        code, new_pid, new_epoch = await broker.txn_coordinator.end_txn(
            txn_id, pid, epoch, bool(req.committed), ctx.api_version)
    except KafkaError as e:
        code, new_pid, new_epoch = e.code, -1, -1
    code = _fenced(code, ctx.api_version, 2)
    return end_txn_response(ctx.api_version, error_code=code, producer_id=new_pid,
                            producer_epoch=new_epoch)


async def handle_txn_offset_commit(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    from tidegate.coordinator.group.messages import TxnCommitPartition, TxnOffsetCommitRequest

    txn_id, group_id = str(req.transactional_id), str(req.group_id)
    pid, epoch = int(req.producer_id), int(req.producer_epoch)
    codes: dict[TopicPartition, ErrorCode] = {}
    valid: list[TxnCommitPartition] = []
    # ACLs (Kafka): WRITE on the transactional id and READ on the group, else every
    # partition fails; READ on each topic
    denied_all = (
        ErrorCode.transactional_id_authorization_failed
        if txn_id and not check(broker, ctx, Op.WRITE, Res.TRANSACTIONAL_ID, txn_id)
        else ErrorCode.group_authorization_failed
        if group_id and not check(broker, ctx, Op.READ, Res.GROUP, group_id) else None)
    refused = [denied_all or (None if check(broker, ctx, Op.READ, Res.TOPIC, str(t.name))
                              else ErrorCode.topic_authorization_failed)
               for t in req.topics or ()]
    # only the topics the principal may use are looked up (a ZooKeeper read in a cluster)
    counted: dict[str, int] = {}
    for t, denied in zip(req.topics or (), refused, strict=True):
        if denied is None:
            counted[str(t.name)] = max(counted.get(str(t.name), 0), 1 + max(
                (int(p.partition_index) for p in t.partitions or ()), default=-1))
    counts = await partition_counts(broker, counted)
    for t, denied in zip(req.topics or (), refused, strict=True):
        name = str(t.name)
        for p in t.partitions or ():
            index = int(p.partition_index)
            if denied is not None:
                codes[(name, index)] = denied
                continue
            if not 0 <= index < counts[name]:
                codes[(name, index)] = ErrorCode.unknown_topic_or_partition
                continue
            valid.append(TxnCommitPartition(
                name, index, int(p.committed_offset),
                int(view(p, "committed_leader_epoch", -1)), p.committed_metadata))
    if valid:
        code = ErrorCode.none
        if not txn_id:
            code = ErrorCode.invalid_request
        elif not group_id:
            code = ErrorCode.invalid_group_id
        else:
            try:
                code = await broker.txn_coordinator.verify_offsets(
                    txn_id, pid, epoch, group_id, add=ctx.api_version >= 5)
            except KafkaError as e:
                code = e.code
            code = _offset_commit_error(code)
        if code == ErrorCode.none:
            tr = TxnOffsetCommitRequest(
                transactional_id=txn_id, group_id=group_id, producer_id=pid,
                producer_epoch=epoch,
                generation_id=int(view(req, "generation_id", -1)),
                member_id=str(view(req, "member_id", "") or ""),
                group_instance_id=view(req, "group_instance_id"),
                partitions=tuple(valid))
            try:
                for tp, c in await broker.group_coordinator.txn_commit(tr):
                    codes[tp] = c
            except KafkaError as e:
                for p in valid:
                    codes[(p.topic, p.partition)] = e.code
        else:
            for p in valid:
                codes[(p.topic, p.partition)] = code
    topics: dict[str, list[TxnOffsetCommitPartitionResult]] = {}
    for t in req.topics or ():
        for p in t.partitions or ():
            tp = (str(t.name), int(p.partition_index))
            topics.setdefault(tp[0], []).append(
                TxnOffsetCommitPartitionResult(tp[1], codes.get(tp, ErrorCode.none)))
    return txn_offset_commit_response(ctx.api_version, topics=tuple(
        TxnOffsetCommitTopicResult(name, tuple(parts)) for name, parts in topics.items()))


async def handle_write_txn_markers(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    out = []
    allowed = check_cluster(broker, ctx, Op.CLUSTER_ACTION)  # Kafka: brokers only
    for m in req.markers or ():
        marker = Marker(int(m.producer_id), int(m.producer_epoch), int(m.coordinator_epoch),
                        bool(m.transaction_result))
        wanted: list[TopicPartition] = []
        for t in m.topics or ():
            wanted += [(str(t.name), int(p)) for p in t.partition_indexes or ()]
        writable = [tp for tp in wanted
                    if tp[0] == CONSUMER_OFFSETS or tp[0] not in INTERNAL_TOPICS]
        results = (await write_markers(broker, marker, writable) if allowed
                   else dict.fromkeys(wanted, ErrorCode.cluster_authorization_failed))
        grouped: dict[str, list[dict[str, Any]]] = {}
        for tp in wanted:
            code = results.get(tp, ErrorCode.invalid_topic_exception)
            grouped.setdefault(tp[0], []).append({"partition_index": tp[1], "error_code": code})
        out.append({"producer_id": m.producer_id, "topics": [
            {"name": name, "partitions": parts} for name, parts in grouped.items()]})
    return build(ctx.response_class, {"markers": out})
