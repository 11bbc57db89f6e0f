"""Writing transaction markers (COMMIT / ABORT control batches) into partitions.

One function, `write_markers`, serves both writers of markers: the transaction
coordinator finishing a transaction it prepared (its marker jobs), and the
WriteTxnMarkers API (a coordinator elsewhere — the cluster mode — asking this node,
the partitions' leader, to write them). For each partition it:

- appends the control batch — to a data partition through `Log.append_marker`, only
  if this broker leads it (in a cluster; the embedded broker leads everything), stamped
  with the partition's leader epoch; to a `__consumer_offsets` partition through the
  group coordinator, so the group shard replays the marker and pending transactional
  offsets become visible (or are dropped) at the same point of its log;
- waits until the marker is durable: in a cluster committed over the in-sync replicas
  (acks=all, as Kafka appends WriteTxnMarkers) within `request.timeout.ms`. Markers are
  also fsynced here before the coordinator writes CompleteCommit/CompleteAbort even when
  a topic's flush policy is relaxed: a completed transaction whose marker a crash could
  lose would be neither committed nor open.

Errors are per partition (Kafka's codes): UNKNOWN_TOPIC_OR_PARTITION for a partition
that no longer exists, NOT_LEADER_OR_FOLLOWER for one this broker does not lead (for
`__consumer_offsets`: whose group coordinator shard is not loaded here),
REQUEST_TIMED_OUT / NOT_ENOUGH_REPLICAS_AFTER_APPEND when the in-sync replicas do not
follow, INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED from the log's marker
checks, KAFKA_STORAGE_ERROR for I/O failures (reported to the log directory's
`LogDirSpace`, which logs a full disk once, not per marker).
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
    from tidegate.server.partition import Partition

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Marker:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool


_NOT_HERE = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress,
                       ErrorCode.coordinator_not_available})


async def write_markers(
    broker: Broker, marker: Marker, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, ErrorCode]:
    """Write `marker` into every partition and wait until each is durable; the error
    code per partition (NONE when written)."""
    out: dict[TopicPartition, ErrorCode] = {}
    waits: list[tuple[TopicPartition, asyncio.Future[object]]] = []
    timeout = (broker.config.get_int("request.timeout.ms", 30000) or 30000) / 1000
    for tp in partitions:
        topic, partition = tp
        if topic == CONSUMER_OFFSETS:
            waits.append((tp, asyncio.ensure_future(
                broker.group_coordinator.write_marker(
                    partition, marker.producer_id, marker.producer_epoch,
                    marker.coordinator_epoch, marker.commit))))
            continue
        if topic == TRANSACTION_STATE:
            out[tp] = ErrorCode.unknown_topic_or_partition
            continue
        try:
            # only the leader writes (in a cluster; one node leads all), and stamps its
            # leader epoch: the epoch cache and follower truncation rely on it
            part = broker.replicas.leader(topic, partition)
        except KafkaError as e:  # NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION
            out[tp] = e.code
            continue
        lg = part.log
        try:
            info = lg.append_marker(
                marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                marker.commit, leader_epoch=part.leader_epoch if part.stamp_epoch else None)
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
        waits.append((tp, asyncio.ensure_future(
            _make_durable(broker, part, info.last_offset + 1, timeout))))
    results = await asyncio.gather(*(f for _, f in waits), return_exceptions=True)
    for (tp, _), res in zip(waits, results):
        if isinstance(res, KafkaError):
            # a __consumer_offsets partition not loaded here: the transaction coordinator
            # expects NOT_LEADER_OR_FOLLOWER (Kafka's KafkaApis translates them so too)
            out[tp] = ErrorCode.not_leader_or_follower if res.code in _NOT_HERE else res.code
        elif isinstance(res, BaseException):
            broker.logs.space.write_failed(
                res, f"making a marker of producer {marker.producer_id} durable in "
                f"{tp[0]}-{tp[1]}")
            out[tp] = ErrorCode.kafka_storage_error
        else:
            out[tp] = ErrorCode.none
    return out


async def _make_durable(broker: Broker, part: Partition, offset: int, timeout: float) -> None:
    """In a cluster: committed over the ISR (acks=all, as Kafka appends WriteTxnMarkers),
    within `request.timeout.ms`; on one node: fsynced (group commit). Either way fsynced
    here too, even under a relaxed flush policy."""
    lg = part.log
    if broker.replicas.cluster:
        code = await broker.replicas.wait_committed(part, offset, timeout)
        if code != ErrorCode.none:  # REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND
            raise KafkaError(f"{part.topic}-{part.index}: {code.name}", code=code)
    elif broker.syncs_every_write(lg):
        await broker.wait_durable(lg, offset)
    if lg.recovery_point < offset:
        await asyncio.get_running_loop().run_in_executor(None, lg.flush)
