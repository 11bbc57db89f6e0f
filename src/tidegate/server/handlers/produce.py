"""Produce: validate and append record batches; answer per acks.

acks=0 sends no response. acks=1 and acks=all (-1) answer once the data is fsynced
(group commit, see durability.py) and so below the high watermark, unless the topic's
flush policy is relaxed (then right after the append, which moved the high watermark):
on one node the in-sync replicas are the leader alone, so, as on a one-replica Kafka,
acks=1 means acks=all and an acknowledged record is at once visible to ListOffsets and
Fetch. Any other acks value is INVALID_REQUIRED_ACKS for
every partition, as in the Java broker. Errors are per partition: one bad batch
never fails the other partitions of the request.

Each partition's records must be exactly one batch (Kafka's rule for Produce v3+, the
only versions served): more is INVALID_RECORD. Idempotent producers: the log's
producer-state checks raise typed errors that become the partition's error code
(OUT_OF_ORDER_SEQUENCE_NUMBER 45, DUPLICATE_SEQUENCE_NUMBER 46 for a retry older than
the cached batches, INVALID_PRODUCER_EPOCH 47; a batch with a producer id but no
sequence is INVALID_RECORD; UNKNOWN_PRODUCER_ID 59 is not sent, since like Kafka >= 2.5
the log accepts an unknown producer at any sequence). Every record is checked
(`storage.record_checks`); records rejected one by one (a null key on a compacted topic,
a timestamp out of range) are listed in the partition's record_errors (v8+), each with
its index in the batch, as Kafka does. A retry of a cached batch is not
written again and is answered NONE with the original base offset, as Kafka does; under
acks=1 or all it is answered only once that original data is durable, like the first send.

Once its appends are done the handler releases the connection (`RequestContext.
release()`): the wait for durability that remains lets the producer's next pipelined
Produce start, so both share one group-commit fsync; other requests on the connection
still wait for the answer.

The answer is built as `protocol.produce_response` objects, encoded by hand (byte for
byte kio's encoding): with one small batch per partition over 1,000 partitions, kio's
entities and writer cost more per partition than the append itself.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.common.topics import INTERNAL_TOPICS
from tidegate.protocol.messages import ms, view
from tidegate.protocol.produce_request import drop_records
from tidegate.protocol.produce_response import (
    PartitionProduceResponse,
    RecordError,
    TopicProduceResponse,
    response_class,
)
from tidegate.records.batch import ATTRIBUTES_OFFSET, MAGIC_V2, TRANSACTIONAL_MASK
from tidegate.server.authz import AclOperation as Op
from tidegate.server.authz import ResourceType as Res
from tidegate.server.authz import check
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.durability import DurableWaiter
from tidegate.server.handlers.common import error_fields, resolve_topic
from tidegate.server.handlers.txn_produce import (
    Slot,
    reserve_slots,
    transactional_producer,
    verify_transactional,
)
from tidegate.server.partition import Partition
from tidegate.storage.log import Log
from tidegate.storage.record_checks import RecordValidationError

log = logging.getLogger(__name__)

# where a batch's magic byte sits: after baseOffset, batchLength, partitionLeaderEpoch
MAGIC_OFFSET = 16
TXN_BYTE = ATTRIBUTES_OFFSET + 1  # the attributes' low byte (int16, big-endian)


async def handle(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    acks = int(req.acks)
    # partition answers by (topic name, topic id), in the request's order
    by_topic: dict[tuple[str, Any], list[PartitionProduceResponse]] = {}
    # before any await: the order in which this request's transactional batches may be
    # appended relative to the producers' batches already waiting (txn_produce.py)
    slots = reserve_slots(broker, req)
    try:
        return await _handle(broker, ctx, req, acks, by_topic, slots)
    finally:
        for slot in slots.values():
            slot.release()


async def _wait(broker: Broker, replica: Partition, acks: int, offset: int,
                timeout: float) -> ErrorCode:
    """acks=all: committed (fsynced here; in a cluster, over the ISR, within the request's
    timeout). acks=1 in a cluster: durable in the leader's log only."""
    if acks == 1 and replica.leadership is not None:
        await broker.replicas.wait_local_durable(replica.log, offset)
        return ErrorCode.none
    return await broker.replicas.wait_committed(replica, offset, timeout)


def _failed_fsync(waited: PartitionProduceResponse, error: BaseException) -> None:
    waited.error_code = ErrorCode.kafka_storage_error
    waited.error_message = f"fsync failed: {error}"
    waited.base_offset = -1


async def _handle(broker: Broker, ctx: RequestContext, req: Any, acks: int,
                  by_topic: dict[tuple[str, Any], list[PartitionProduceResponse]],
                  slots: dict[tuple[int, int], Slot]) -> Any:
    timeout = max(ms(view(req, "timeout", 30000)), 0) / 1000 or 30.0
    # ACLs (Kafka's KafkaApis): WRITE on the transactional id, else every partition
    # fails; then WRITE on each topic. Any acks value but -1, 0, 1 fails every partition.
    txn_id = view(req, "transactional_id")
    denied_all = (ErrorCode.invalid_required_acks if acks not in (-1, 0, 1)
                  else ErrorCode.transactional_id_authorization_failed
                  if txn_id and not check(broker, ctx, Op.WRITE, Res.TRANSACTIONAL_ID, txn_id)
                  else None)
    replicas = broker.replicas
    leader = replicas.leader
    single_node = not replicas.cluster
    # the waits for durability: on one node under the fsync-per-write policy (the
    # group commit alone decides) (log, offset to be durable) with its answer at the
    # same place; elsewhere (answer, replica, offset)
    durable: list[tuple[Log, int]] = []
    durable_answers: list[PartitionProduceResponse] = []
    waits: list[tuple[PartitionProduceResponse, Partition, int]] = []
    wrote = False  # some batch was written: the log directory's space is not full
    for ti, topic in enumerate(req.topic_data):
        name, topic_id = resolve_topic(broker, topic)
        answers = by_topic.setdefault((name or view(topic, "name") or "", topic_id), [])
        answer = answers.append
        # decided once per topic (the same answer for each of its partitions): denied,
        # an internal topic (only the coordinators write their own logs; Kafka: "Cannot
        # append to internal topic"), an unknown topic
        topic_refused: tuple[ErrorCode, str | None] | None = (
            (denied_all, None) if denied_all is not None
            else (ErrorCode.topic_authorization_failed, None) if name is not None
            and not check(broker, ctx, Op.WRITE, Res.TOPIC, name)
            else (ErrorCode.invalid_topic_exception, f"cannot append to internal topic {name}")
            if name in INTERNAL_TOPICS
            else (ErrorCode.unknown_topic_id if topic_id is not None
                  else ErrorCode.unknown_topic_or_partition, None) if name is None
            else None)
        if topic_refused is not None:
            code, msg = topic_refused
            for part in topic.partition_data:
                answer(PartitionProduceResponse(int(part.index), code, msg))
            continue
        assert name is not None
        for part in topic.partition_data:
            index = int(part.index)
            try:  # only the leader appends (NOT_LEADER_OR_FOLLOWER elsewhere)
                replica = leader(name, index)
                if acks == -1 and replica.leadership is not None:
                    replica.leadership.check_min_isr()  # NOT_ENOUGH_REPLICAS
            except KafkaError as e:
                answer(PartitionProduceResponse(index, e.code, str(e)))
                continue
            lg = replica.log
            records = part.records
            if not records:
                answer(PartitionProduceResponse(index, ErrorCode.invalid_record,
                                                "produce request has no record batches"))
                continue
            if len(records) > MAGIC_OFFSET and records[MAGIC_OFFSET] != MAGIC_V2:
                # Kafka's ProduceRequest.validateRecords: v3+ carries only v2 batches; an
                # older magic is INVALID_RECORD (a CRC or framing fault is CORRUPT_MESSAGE)
                log.warning("rejected produce to %s-%d from %s (%s): record batch magic %d",
                            name, index, ctx.peer, ctx.client_id, records[MAGIC_OFFSET])
                answer(PartitionProduceResponse(
                    index, ErrorCode.invalid_record,
                    f"Produce requests with version {ctx.api_version} are only allowed to "
                    "contain record batches with magic version 2"))
                continue
            guard: object | None = None
            slot = slots.pop((ti, index), None) if slots else None
            # a plain batch is told by its attributes' low byte (`transactional_producer`)
            txn = (transactional_producer(records) if len(records) <= TXN_BYTE
                   or records[TXN_BYTE] & TRANSACTIONAL_MASK else None)
            if txn is not None:
                code, guard = await verify_transactional(
                    broker, req, name, index, lg, txn, slot, implicit_add=ctx.api_version >= 12)
                if code == ErrorCode.transaction_abortable and ctx.api_version < 12:
                    code = ErrorCode.invalid_txn_state  # clients before KIP-890 know this one
                if code != ErrorCode.none:
                    if slot is not None:
                        slot.release()
                    log.warning("rejected transactional produce to %s-%d from %s (%s): %s",
                                name, index, ctx.peer, ctx.client_id, code.name.upper())
                    answer(PartitionProduceResponse(index, code))
                    continue
            try:
                # checks leadership again (it may have moved while verifying), stamps
                # the leader epoch in a cluster, and tells the high-watermark rule
                info = replica.append(records, single_batch=True, verification_guard=guard)
            except KafkaError as e:
                code, msg = error_fields(e)
                log.log(
                    logging.INFO
                    if code == ErrorCode.duplicate_sequence_number
                    else logging.WARNING,
                    "rejected produce to %s-%d from %s (%s): %s",
                    name,
                    index,
                    ctx.peer,
                    ctx.client_id,
                    msg,
                )
                refused = PartitionProduceResponse(index, code, msg)
                if isinstance(e, RecordValidationError):
                    refused.record_errors = tuple(RecordError(i, m) for i, m in e.record_errors)
                answer(refused)
                continue
            except OSError as e:  # a full disk is logged once per directory, not per append
                # (with several log.dirs an I/O error takes the partition's dir offline)
                broker.logs.write_failed(name, index, e, f"appending to {name}-{index}")
                answer(PartitionProduceResponse(index, ErrorCode.kafka_storage_error, str(e)))
                continue
            finally:
                if slot is not None:
                    slot.release()  # the producer's next batch to this partition may go on
            wrote = wrote or not info.duplicate  # a duplicate wrote nothing
            result = PartitionProduceResponse(index, ErrorCode.none, None, info.first_offset,
                                              info.log_append_time, info.log_start_offset)
            answer(result)
            # acks=1 waits too: on one node it is acks=all (module doc). On one node with
            # a relaxed flush policy there is nothing to wait for: the append moved the
            # high watermark (ReplicaManager.after_append), and a wait would cost a Task
            if acks == 0:
                continue
            # (decided once per partition here, not again when the waits are registered)
            if single_node and replica.leadership is None:
                if lg.syncs_every_write:
                    durable.append((lg, info.last_offset + 1))
                    durable_answers.append(result)
            else:
                waits.append((result, replica, info.last_offset + 1))
    # Every append is done (or refused): free the slots of batches never tried, then the
    # connection, so a pipelined Produce behind this one appends now and shares the
    # fsync this one waits for (server/listener.py). Nothing below changes state.
    for slot in slots.values():
        slot.release()
    if wrote:  # once per request, not per partition (a check of one flag when not full)
        broker.logs.space.write_succeeded()
    # The records are in the log: let go of the request's views of the frame, so that the
    # listener's buffer pool can reuse its buffer while this request waits on the group
    # commit (protocol/produce_request.py's drop_records)
    records = part = None
    drop_records(req)
    ctx.release()
    if acks == 0:
        return None
    if durable or waits:
        # Every wait must be registered with the group commit now, so that a failed
        # fsync fails each of them at once (durability.py). On one node under the fsync-
        # per-write policy all of them share ONE waiter (a count and a future, not a
        # future per partition), registered in one call; elsewhere (a cluster, a relaxed
        # policy with acks=all) a Task per partition runs `_wait`.
        waiter: DurableWaiter | None = None
        if durable:
            waiter = DurableWaiter()
            replicas.add_durable_waits(waiter, durable)
        pending: list[Any] = [_wait(broker, replica, acks, offset, timeout)
                              for _, replica, offset in waits]
        answered = waits
        if waiter is not None and waiter.left:
            if pending:
                pending.append(waiter.future)
            else:
                await waiter.future
        outcomes = await asyncio.gather(*pending, return_exceptions=True) if pending else []
        # (the waiter's future, if gathered too, is last: its outcome is in `errors`)
        for (waited, _, _), outcome in zip(answered, outcomes[:len(answered)], strict=True):
            if isinstance(outcome, ErrorCode) and outcome != ErrorCode.none:
                waited.error_code = outcome  # REQUEST_TIMED_OUT, ..._AFTER_APPEND
                if outcome != ErrorCode.not_enough_replicas_after_append:
                    waited.base_offset = -1
            elif isinstance(outcome, KafkaError):  # leadership moved while waiting
                waited.error_code = outcome.code
                waited.error_message = str(outcome)
                waited.base_offset = -1
            elif isinstance(outcome, BaseException):
                _failed_fsync(waited, outcome)
        if waiter is not None:
            for at, error in waiter.errors.items():  # exactly the logs whose flush failed
                _failed_fsync(durable_answers[at], error)
    return response_class(ctx.api_version)(
        tuple(TopicProduceResponse(name, tuple(parts)) for (name, _), parts in by_topic.items()))
