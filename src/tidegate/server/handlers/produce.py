"""Produce: validate and append record batches; answer per acks.

acks=0 sends no response; acks=1 answers once the data is in the log; acks=all
(-1) answers once it is also fsynced (group commit, see durability.py) unless the
topic's flush policy is relaxed. Any other acks value is INVALID_REQUIRED_ACKS for
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
acks=all it is answered only once that original data is durable, like the first send.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.common.topics import INTERNAL_TOPICS
from tidegate.protocol.messages import build, view
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.handlers.common import error_fields, resolve_topic
from tidegate.storage.record_checks import RecordValidationError

log = logging.getLogger(__name__)


def _partition_result(
    index: int,
    code: ErrorCode = ErrorCode.none,
    message: str | None = None,
    base_offset: int = -1,
    log_append_time: int = -1,
    log_start_offset: int = -1,
) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": code,
        "base_offset": base_offset,
        "log_append_time": log_append_time,
        "log_start_offset": log_start_offset,
        "record_errors": [],
        "error_message": message,
    }


async def handle(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    acks = int(req.acks)
    results: list[tuple[Any, dict[str, Any]]] = []  # (topic key payload, partition result)
    waits: list[asyncio.Future[None] | Any] = []
    wait_slots: list[dict[str, Any]] = []
    for topic in req.topic_data:
        name, topic_id = resolve_topic(broker, topic)
        key = {"name": name or view(topic, "name") or "", "topic_id": topic_id}
        for part in topic.partition_data:
            index = int(part.index)
            if acks not in (-1, 0, 1):
                results.append((key, _partition_result(index, ErrorCode.invalid_required_acks)))
                continue
            if name in INTERNAL_TOPICS:
                # Only the coordinators write their own logs (Kafka: "Cannot append to
                # internal topic").
                results.append(
                    (
                        key,
                        _partition_result(
                            index,
                            ErrorCode.invalid_topic_exception,
                            f"cannot append to internal topic {name}",
                        ),
                    )
                )
                continue
            lg = broker.get_log(name, index) if name else None
            if lg is None:
                code = (
                    ErrorCode.unknown_topic_id
                    if name is None and topic_id is not None
                    else ErrorCode.unknown_topic_or_partition
                )
                results.append((key, _partition_result(index, code)))
                continue
            records = part.records
            if not records:
                results.append(
                    (
                        key,
                        _partition_result(
                            index, ErrorCode.invalid_record, "produce request has no record batches"
                        ),
                    )
                )
                continue
            try:
                info = lg.append(records, single_batch=True)
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
                result = _partition_result(index, code, msg)
                if isinstance(e, RecordValidationError):
                    result["record_errors"] = [
                        {"batch_index": i, "batch_index_error_message": m}
                        for i, m in e.record_errors
                    ]
                results.append((key, result))
                continue
            except OSError as e:
                log.error("storage error appending to %s-%d: %s", name, index, e)
                results.append(
                    (key, _partition_result(index, ErrorCode.kafka_storage_error, str(e)))
                )
                continue
            if not info.duplicate:  # a duplicate wrote nothing
                broker.after_append(name, index, lg)  # type: ignore[arg-type]
            result = _partition_result(
                index,
                ErrorCode.none,
                None,
                info.first_offset,
                info.log_append_time,
                info.log_start_offset,
            )
            results.append((key, result))
            if acks == -1:
                waits.append(broker.wait_durable(lg, info.last_offset + 1))
                wait_slots.append(result)
    if acks == 0:
        return None
    if waits:
        outcomes = await asyncio.gather(*waits, return_exceptions=True)
        for slot, outcome in zip(wait_slots, outcomes):
            if isinstance(outcome, BaseException):
                slot["error_code"] = ErrorCode.kafka_storage_error
                slot["error_message"] = f"fsync failed: {outcome}"
                slot["base_offset"] = -1
    by_topic: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    topic_keys: dict[tuple[str, Any], dict[str, Any]] = {}
    for key, result in results:
        k = (key["name"], key["topic_id"])
        topic_keys.setdefault(k, key)
        by_topic.setdefault(k, []).append(result)
    responses = [
        {
            **{kk: vv for kk, vv in topic_keys[k].items() if vv is not None},
            "partition_responses": parts,
        }
        for k, parts in by_topic.items()
    ]
    return build(ctx.response_class, {"responses": responses, "throttle_time": 0})
