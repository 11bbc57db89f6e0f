"""Writing transaction markers (COMMIT / ABORT control batches) into partitions.

One function, `write_markers`, serves both writers of markers: the transaction
coordinator finishing a transaction it prepared (its marker jobs), and the
WriteTxnMarkers API (a coordinator elsewhere — the cluster mode — asking this node,
the partitions' leader, to write them). For each partition it:

- appends the control batch — to a data partition through `Log.append_marker`, to a
  `__consumer_offsets` partition through the group coordinator, so the group shard
  replays the marker and pending transactional offsets become visible (or are dropped)
  at the same point of its log;
- waits until the marker is durable. Markers are fsynced before the coordinator writes
  CompleteCommit/CompleteAbort even when a topic's flush policy is relaxed: a completed
  transaction whose marker a crash could lose would be neither committed nor open.

Errors are per partition (Kafka's codes): UNKNOWN_TOPIC_OR_PARTITION for a partition
that no longer exists, INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED from the
log's marker checks, KAFKA_STORAGE_ERROR for I/O failures (reported to the log
directory's `LogDirSpace`, which logs a full disk once, not per marker).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.common.topics import CONSUMER_OFFSETS, TRANSACTION_STATE

if TYPE_CHECKING:
    from tidegate.server.broker import Broker

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Marker:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool


async def write_markers(
    broker: Broker, marker: Marker, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, ErrorCode]:
    """Write `marker` into every partition and wait until each is durable; the error
    code per partition (NONE when written)."""
    out: dict[TopicPartition, ErrorCode] = {}
    waits: list[tuple[TopicPartition, asyncio.Future[object]]] = []
    loop = asyncio.get_running_loop()
    for tp in partitions:
        topic, partition = tp
        if topic == CONSUMER_OFFSETS:
            waits.append((tp, asyncio.ensure_future(
                broker.group_coordinator.write_marker(
                    partition, marker.producer_id, marker.producer_epoch,
                    marker.coordinator_epoch, marker.commit))))
            continue
        lg = broker.get_log(topic, partition) if topic != TRANSACTION_STATE else None
        if lg is None:
            out[tp] = ErrorCode.unknown_topic_or_partition
            continue
        try:
            info = lg.append_marker(
                marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                marker.commit)
        except KafkaError as e:
            out[tp] = e.code
            log.warning("marker for producer %d not written to %s-%d: %s",
                        marker.producer_id, topic, partition, e)
            continue
        except OSError as e:
            out[tp] = ErrorCode.kafka_storage_error
            broker.logs.space.write_failed(
                e, f"writing a marker of producer {marker.producer_id} to {topic}-{partition}")
            continue
        broker.after_append(topic, partition, lg)
        broker.logs.space.write_succeeded()
        fut: asyncio.Future[object]
        if broker.syncs_every_write(lg):
            fut = asyncio.ensure_future(broker.wait_durable(lg, info.last_offset + 1))
        else:
            fut = loop.run_in_executor(None, lg.flush)
        waits.append((tp, fut))
    results = await asyncio.gather(*(f for _, f in waits), return_exceptions=True)
    for (tp, _), res in zip(waits, results):
        if isinstance(res, KafkaError):
            out[tp] = res.code
        elif isinstance(res, BaseException):
            broker.logs.space.write_failed(
                res, f"making a marker of producer {marker.producer_id} durable in "
                f"{tp[0]}-{tp[1]}")
            out[tp] = ErrorCode.kafka_storage_error
        else:
            out[tp] = ErrorCode.none
    return out
