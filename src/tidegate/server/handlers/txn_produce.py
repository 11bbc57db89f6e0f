"""Transactional batches on the produce path: KIP-890 verification, in the producer's order.

A transactional batch that would start a transaction in a partition (its producer has
none open there) is written only if the transaction coordinator has that partition in
the producer's ongoing transaction — for every client version, not only the newest as in
Kafka — so a late or zombie batch can never open a transaction nobody will end (a
hanging transaction). Produce v12+ is transaction version 2: there the broker adds the
partition itself instead of checking it. A coordinator that cannot answer yet (loading,
moving, on an unreachable broker) gets the batch NOT_ENOUGH_REPLICAS, which every client
retries (Kafka's ReplicaManager does the same). A guard taken before asking (`Log.
begin_verification`) is cleared by any marker for the producer written meanwhile, so a
transaction that ends while we ask is not reopened.

Asking the coordinator may wait, and a producer pipelines several batches to one
partition. A later batch must never be appended before an earlier one that is still
waiting: a producer the partition does not know yet is accepted at any sequence number,
so the earlier batch would afterwards look like an old retry (DUPLICATE_SEQUENCE_NUMBER,
which clients take as "delivered") and be lost. So each request reserves, before its
handler first awaits, a *slot* per (partition, producer) for its transactional batches,
behind any slot of the same producer already waiting there; a batch is appended only once
the slot ahead of it is released (after that batch's append, or its refusal). Since a
connection now starts its next Produce only once the previous one has appended
(server/listener.py), slots order the batches of one producer that reach a partition
over different connections (a reconnect while a request still waits for verification);
they cost nothing when no batch is waiting.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.common.topics import INTERNAL_TOPICS
from tidegate.protocol.messages import view
from tidegate.records.batch import ATTRIBUTES_OFFSET, TRANSACTIONAL_MASK, parse_header
from tidegate.server.handlers.common import resolve_topic
from tidegate.storage.log import Log

if TYPE_CHECKING:
    from tidegate.server.broker import Broker

# The coordinator could not answer (yet): moving, loading, unreachable (cluster mode).
_NOT_VERIFIED_YET = frozenset({
    ErrorCode.network_exception, ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available, ErrorCode.not_coordinator})

# Per partition log, per producer id: the newest slot not yet released.
_TAILS: weakref.WeakKeyDictionary[Log, dict[int, Slot]] = weakref.WeakKeyDictionary()


@dataclass(eq=False)
class Slot:
    """One transactional batch's place in its producer's order on one partition."""

    log: Log
    producer_id: int
    ahead: Slot | None
    done: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())

    def release(self) -> None:
        if not self.done.done():
            self.done.set_result(None)
        tails = _TAILS.get(self.log)
        if tails is not None and tails.get(self.producer_id) is self:
            del tails[self.producer_id]

    async def wait_turn(self) -> None:
        if self.ahead is not None:
            await asyncio.wait({self.ahead.done})


def transactional_producer(records: Any) -> tuple[int, int] | None:
    """(producer id, epoch) of a transactional data batch; None otherwise (or unreadable:
    the log's validation answers that)."""
    # runs twice per partition per request (reserve_slots, the handler): a plain batch
    # is told by its attributes' low byte, without parsing the whole header
    if len(records) > ATTRIBUTES_OFFSET + 1 and not (
            records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_MASK):
        return None
    try:
        header = parse_header(records, 0)
    except Exception:
        return None
    if not header.is_transactional or header.is_control:
        return None
    return header.producer_id, header.producer_epoch


def reserve_slots(broker: Broker, req: Any) -> dict[tuple[int, int], Slot]:
    """Slots for the request's transactional batches that need verification or have a
    batch of the same producer waiting ahead of them, keyed by (topic index in the
    request, partition). Synchronous: call it before the handler's first await."""
    slots: dict[tuple[int, int], Slot] = {}
    for ti, topic in enumerate(req.topic_data or ()):
        name: str | None = ""  # the topic is looked up at its first transactional batch
        for part in topic.partition_data or ():
            txn = transactional_producer(part.records) if part.records else None
            if txn is None or txn[0] < 0:
                continue
            if name == "":
                name, _ = resolve_topic(broker, topic)
            if not name or name in INTERNAL_TOPICS:
                break
            lg = broker.get_log(name, int(part.index))
            if lg is None:
                continue
            tails = _TAILS.setdefault(lg, {})
            ahead = tails.get(txn[0])
            if ahead is None and not lg.needs_verification(txn[0]):
                continue  # continuing its transaction here, nothing waiting ahead
            slot = Slot(lg, txn[0], ahead)
            tails[txn[0]] = slot
            slots[(ti, int(part.index))] = slot
    return slots


async def verify_transactional(
    broker: Broker, req: Any, topic: str, partition: int, lg: Log, txn: tuple[int, int],
    slot: Slot | None, *, implicit_add: bool,
) -> tuple[ErrorCode, object | None]:
    """(error, verification guard for `Log.append`). Waits for the producer's earlier
    batches on this partition first (the slot); the caller releases the slot after its
    append attempt."""
    producer_id, epoch = txn
    transactional_id = view(req, "transactional_id")
    if not transactional_id:
        # Kafka: a transactional batch needs a transactional id it may write for
        return ErrorCode.transactional_id_authorization_failed, None
    if producer_id < 0:
        return ErrorCode.invalid_record, None
    if slot is not None:
        await slot.wait_turn()
    if not lg.needs_verification(producer_id, epoch):
        return ErrorCode.none, None
    guard = lg.begin_verification(producer_id, epoch)
    try:
        code = await broker.txn_coordinator.verify_partition(
            str(transactional_id), producer_id, epoch, (topic, partition), add=implicit_add)
    except KafkaError as e:
        code = e.code
    if (code == ErrorCode.none and lg.needs_verification(producer_id, epoch)
            and lg.begin_verification(producer_id, epoch) is not guard):
        # The guard went stale while the coordinator was asked: a marker of this
        # producer landed meanwhile, typically the previous transaction's, which a
        # cluster's coordinator writes to remote leaders after EndTxn has answered
        # (it parked this verification until then). The append would be refused as
        # unverified, fatally for the producer: make it ask again instead (asking
        # again is always safe; a zombie's retry is refused by the coordinator).
        code = ErrorCode.not_enough_replicas
    if code == ErrorCode.producer_fenced:
        code = ErrorCode.invalid_producer_epoch  # Produce never answers PRODUCER_FENCED
    elif code in _NOT_VERIFIED_YET:
        # Kafka's ReplicaManager: retriable failures older clients would not retry on
        # Produce become NOT_ENOUGH_REPLICAS, retried without a metadata refresh
        code = ErrorCode.not_enough_replicas
    return code, guard
