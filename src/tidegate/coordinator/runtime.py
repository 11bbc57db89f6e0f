"""The coordinator runtime: state machines over the partitions of an internal topic.

Generic over the state machine (the *shard*): the group coordinator uses it with
`__consumer_offsets`, the transaction coordinator will with `__transaction_state`.
Sans-IO apart from the partition `Log` (synchronous file I/O); the asyncio shell in
`server/coordinator.py` adds durability waits, deferred responses and the timer tick.

How one operation runs (`execute`), atomically with respect to every other operation
on the same partition:

1. the operation, `op(shard, now_ms) -> Result`, reads the shard and returns the
   records to append, its response (or `PARKED`: answered later), and `replies` to
   earlier parked requests (by the integer token the shell gave them). It must not
   change durable state itself;
2. the records are appended to the partition's log as one RecordBatch (Kafka's key
   and value layouts). Without a producer id it goes through `Log.append` (or, for a
   runtime with `own_batches`, the transaction coordinator's, through
   `Log.append_control` like every other batch it builds: its records are valid by
   construction, and the client path's checks — record parsing, timestamps, the size
   limit — cost about half of each append on the commit path); when the
   `Result` carries one (a TxnOffsetCommit), as one transactional batch with that
   producer id and epoch and no sequence, through `Log.append_control`, the path for
   broker-built batches that checks the producer epoch but not sequences (a second
   TxnOffsetCommit of one transaction would look like a duplicate otherwise);
3. the appended records are replayed — `shard.replay(records, ...)`, the only mutator
   of durable state;
4. the shell waits until the log is durable up to `Outcome.end_offset` and only then
   sends the response and the replies. Operations without records wait for the log
   end at their time too, so nobody reads state that is not yet durable.

Transaction markers (`execute_marker`) are the live twin of loading: the COMMIT/ABORT
control batch is appended, then `shard.replay_marker` applies it.

Loading a partition (`load`) replays its whole log into a fresh shard: the state a
coordinator starts from is, by construction, the state its records describe.
If an append or a replay fails the partition is marked failed: the shell reloads it
from its log, so memory and log can never disagree. A transactional write or a marker
the log *rejects* before writing anything (a fenced producer epoch, an older
coordinator epoch: a `KafkaError` other than `KafkaStorageError`) fails only that
operation, with the log's error: such operations change nothing before their records
are replayed. So does an append refused for a full disk (a failed append leaves the log
as it was) by an operation that changed nothing in memory: a marker, a transactional
write, or any operation of a runtime whose operations are all pure (`pure_ops`, the
transaction coordinator's); the partition keeps serving, and the operation's error is a
`CoordinatorNotAvailableError` caused by the `OSError`.

Which partition owns a key: `partition_for` (coordinator/partitioning.py, re-exported).
"""

from __future__ import annotations

import enum
import gc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, Protocol, TypeVar

from tidegate.common.clock import Clock
from tidegate.common.errors import ErrorCode, KafkaError, KafkaStorageError
from tidegate.coordinator.partitioning import java_string_hash, partition_for
from tidegate.records.builder import BatchBuilder
from tidegate.records.control import ControlType, build_control_batch, parse_control_record
from tidegate.records.record import iter_batches
from tidegate.storage.disk_space import disk_full_error
from tidegate.storage.log import AppendInfo, Log

__all__ = [
    "PARKED",
    "CoordinatorLoadInProgressError",
    "CoordinatorNotAvailableError",
    "CoordinatorRuntime",
    "KnownRecord",
    "LoadStats",
    "LoggedRecord",
    "NotCoordinatorError",
    "Outcome",
    "PartitionState",
    "Record",
    "ReplayRecord",
    "Result",
    "Shard",
    "java_string_hash",
    "partition_for",
]

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

Record = tuple[bytes, bytes | None]  # (key, value); a None value is a tombstone


class _Parked(enum.Enum):
    PARKED = "parked"


PARKED = _Parked.PARKED
"""The response of an operation that answers later, through a `Result.replies` entry."""


@dataclass
class Result(Generic[R]):
    """What an operation returns. With `producer_id` >= 0 the records are written as
    one transactional batch of that producer (epoch-checked by the log)."""

    response: R | _Parked
    records: list[Record] = field(default_factory=list)
    replies: list[tuple[int, object]] = field(default_factory=list)
    producer_id: int = -1
    producer_epoch: int = -1


class ReplayRecord(Protocol):
    """What replay reads of a record (`records.record.Record` and `LoggedRecord` fit)."""

    @property
    def offset(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...


class KnownRecord(tuple[bytes, bytes | None]):
    """A `Record` whose builder knows what it decodes to (`known`, the shard's own
    form): replay then uses that instead of decoding the bytes it was just given. Only
    for records the operation itself built; loading always decodes."""

    known: object

    def __new__(cls, key: bytes, value: bytes | None, known: object) -> KnownRecord:
        self = super().__new__(cls, (key, value))
        self.known = known
        return self


class LoggedRecord(NamedTuple):
    """A record just appended by an operation; `known` as `KnownRecord`'s, else None."""

    offset: int
    key: bytes | None
    value: bytes | None
    known: object = None


class Shard(Protocol):
    """The state machine of one coordinator partition."""

    def replay(self, records: Sequence[ReplayRecord], producer_id: int, producer_epoch: int,
               transactional: bool) -> None:
        """Apply one batch's records in offset order: the only way durable state
        changes. (Batch-wise because loading replays millions of records.)"""

    def replay_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """Apply a transaction marker (COMMIT/ABORT) found in the partition."""

    def set_time(self, now_ms: int) -> None:
        """The time of the operation or load under way (for replay's deadlines)."""

    def on_loaded(self, now_ms: int) -> None:
        """The log has been replayed; start the timers loaded state needs."""

    def poll(self, now_ms: int) -> Result[None]:
        """Handle every deadline that is due."""

    def next_deadline(self) -> int | None:
        """The earliest pending deadline (wall-clock ms), if any."""


S = TypeVar("S", bound=Shard)


class NotCoordinatorError(KafkaError):
    code = ErrorCode.not_coordinator


class CoordinatorLoadInProgressError(KafkaError):
    code = ErrorCode.coordinator_load_in_progress


class CoordinatorNotAvailableError(KafkaError):
    code = ErrorCode.coordinator_not_available


class PartitionState(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"


@dataclass
class _Partition(Generic[S]):
    index: int
    log: Log
    shard: S | None = None
    state: PartitionState = PartitionState.LOADING


@dataclass(frozen=True)
class Outcome(Generic[R]):
    result: Result[R]
    log: Log
    end_offset: int  # the response may go once the log is durable below this offset
    appended: int  # records appended by this operation


@dataclass(frozen=True)
class LoadStats:
    partition: int
    batches: int
    records: int
    end_offset: int


@contextmanager
def _gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class CoordinatorRuntime(Generic[S]):
    """The coordinator partitions of one internal topic on this node."""

    def __init__(
        self,
        topic: str,
        num_partitions: int,
        shard_factory: Callable[[int], S],
        clock: Clock,
        *,
        load_buffer_bytes: int = 5 * 1024 * 1024,
        pure_ops: bool = False,
        own_batches: bool = False,
    ) -> None:
        self.topic = topic
        # non-transactional batches too through Log.append_control (module docstring)
        self.own_batches = own_batches
        # operations only read the shard and return records (replay is the only mutator),
        # so one whose append was refused changed nothing (module docstring)
        self.pure_ops = pure_ops
        self.num_partitions = num_partitions
        self.shard_factory = shard_factory
        self.clock = clock
        self.load_buffer_bytes = load_buffer_bytes
        self._partitions: dict[int, _Partition[S]] = {}
        # cluster mode: partition -> the leader epoch this broker leads it at; its
        # records are stamped with it (None on the embedded broker: -1, as always)
        self.leader_epochs: dict[int, int] = {}

    # -- ownership ------------------------------------------------------------------------

    def partition_for(self, key: str) -> int:
        return partition_for(key, self.num_partitions)

    def state(self, partition: int) -> PartitionState | None:
        p = self._partitions.get(partition)
        return None if p is None else p.state

    def active_shards(self) -> list[tuple[int, S]]:
        return [
            (i, p.shard)
            for i, p in sorted(self._partitions.items())
            if p.state is PartitionState.ACTIVE and p.shard is not None
        ]

    def shard(self, partition: int) -> S:
        """The active shard of `partition`, or the error a client should see."""
        p = self._partitions.get(partition)
        if p is None:
            raise NotCoordinatorError(f"this node does not own {self.topic}-{partition}")
        if p.state is PartitionState.LOADING:
            raise CoordinatorLoadInProgressError(f"{self.topic}-{partition} is loading")
        if p.state is PartitionState.FAILED or p.shard is None:
            raise CoordinatorNotAvailableError(f"{self.topic}-{partition} is unavailable")
        return p.shard

    # -- loading --------------------------------------------------------------------------

    def begin_load(self, partition: int, log: Log) -> None:
        """Mark `partition` as loading (requests get COORDINATOR_LOAD_IN_PROGRESS)."""
        self._partitions[partition] = _Partition(partition, log)

    def load(self, partition: int, log: Log) -> tuple[S, LoadStats]:
        """Replay `log` into a new shard. Touches nothing shared, so it may run in a
        worker thread while the partition's requests are refused; `publish` it after.

        The cyclic garbage collector is paused meanwhile: replay allocates millions of
        small, acyclic objects, and collections triggered by them would rescan the
        growing state over and over (it more than halves the load time of 1M offsets).
        """
        with _gc_paused():
            return self._load(partition, log)

    def _load(self, partition: int, log: Log) -> tuple[S, LoadStats]:
        shard = self.shard_factory(partition)
        now = self.clock.now_ms()
        shard.set_time(now)
        pos, end = log.log_start_offset, log.log_end_offset
        batches = records = 0
        while pos < end:
            data = log.read(pos, self.load_buffer_bytes, max_offset=end)
            if not data:
                break
            for header, recs in iter_batches(data):
                batches += 1
                pos = header.last_offset + 1
                if header.is_control:
                    for r in recs:
                        kind, _epoch = parse_control_record(r.key, r.value)
                        shard.replay_marker(
                            header.producer_id, header.producer_epoch, kind is ControlType.COMMIT
                        )
                    continue
                records += len(recs)
                shard.replay(recs, header.producer_id, header.producer_epoch,
                             header.is_transactional)
        shard.on_loaded(self.clock.now_ms())
        return shard, LoadStats(partition, batches, records, end)

    def publish(self, partition: int, log: Log, shard: S) -> None:
        self._partitions[partition] = _Partition(partition, log, shard, PartitionState.ACTIVE)

    def fail(self, partition: int) -> None:
        p = self._partitions.get(partition)
        if p is not None:
            p.state = PartitionState.FAILED

    def unload(self, partition: int) -> None:
        self._partitions.pop(partition, None)

    # -- operations -----------------------------------------------------------------------

    def execute(self, partition: int, op: Callable[[S, int], Result[R]]) -> Outcome[R]:
        """Run `op` on the partition's shard, append and replay its records (module
        docstring). Raises the shard's coordinator errors (not loaded, failed), the
        log's error when it rejects a transactional batch (e.g. INVALID_PRODUCER_EPOCH:
        nothing written, the partition stays active; such operations must not change
        live state), and CoordinatorNotAvailableError —
        with the partition marked failed — if the append or the replay fails."""
        shard = self.shard(partition)
        lg = self._partitions[partition].log
        now = self.clock.now_ms()
        shard.set_time(now)
        result = op(shard, now)
        if not result.records:
            return Outcome(result, lg, lg.log_end_offset, 0)
        pid, epoch = result.producer_id, result.producer_epoch
        txn = pid >= 0
        builder = (BatchBuilder(producer_id=pid, producer_epoch=epoch, is_transactional=True)
                   if txn else BatchBuilder())
        for key, value in result.records:
            builder.append(now, key, value)
        data = builder.build()
        info = self._append(partition, lg, lambda: (
            lg.append_control(data, now_ms=now, leader_epoch=self.leader_epochs.get(partition))
            if txn or self.own_batches
            else lg.append(data, now_ms=now, leader_epoch=self.leader_epochs.get(partition))),
            rejectable=txn)
        try:
            shard.replay([LoggedRecord(info.first_offset + i, rec[0], rec[1],
                                       rec.known if type(rec) is KnownRecord else None)
                          for i, rec in enumerate(result.records)],
                         pid if txn else -1, epoch if txn else -1, txn)
        except Exception as e:
            raise self._failed(partition, e) from e
        return Outcome(result, lg, info.last_offset + 1, len(result.records))

    def execute_marker(self, partition: int, producer_id: int, producer_epoch: int,
                       coordinator_epoch: int, commit: bool) -> Outcome[None]:
        """Append a COMMIT/ABORT marker of `producer_id` to the partition and replay it
        (`shard.replay_marker`): what loading does with a marker found in the log.
        Errors as `execute`: a marker the log rejects (older producer epoch:
        INVALID_PRODUCER_EPOCH; older coordinator epoch: TRANSACTION_COORDINATOR_FENCED)
        raises the log's error and changes nothing."""
        shard = self.shard(partition)
        lg = self._partitions[partition].log
        now = self.clock.now_ms()
        shard.set_time(now)
        data = build_control_batch(
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            control_type=ControlType.COMMIT if commit else ControlType.ABORT,
            coordinator_epoch=coordinator_epoch,
            timestamp=now,
        )
        info = self._append(partition, lg, lambda: lg.append_control(
            data, now_ms=now, coordinator_epoch=coordinator_epoch,
            leader_epoch=self.leader_epochs.get(partition)), rejectable=True)
        try:
            shard.replay_marker(producer_id, producer_epoch, commit)
        except Exception as e:
            raise self._failed(partition, e) from e
        return Outcome(Result(None), lg, info.last_offset + 1, 1)

    def _append(self, partition: int, lg: Log, append: Callable[[], AppendInfo], *,
                rejectable: bool) -> AppendInfo:
        """Run `append`. If `rejectable` (the operation changed nothing in memory: a
        transactional write, a marker), a rejection by the log's checks (nothing
        written) is raised as is; any other failure fails the partition — an operation
        that changed live state expecting its records must be undone by a reload."""
        before = lg.log_end_offset
        try:
            info = append()
        except KafkaError as e:
            if (rejectable and not isinstance(e, KafkaStorageError)
                    and lg.log_end_offset == before):
                raise  # rejected before anything was written: memory and log agree
            raise self._failed(partition, e) from e
        except Exception as e:
            if ((rejectable or self.pure_ops) and disk_full_error(e) is not None
                    and lg.log_end_offset == before):
                # nothing written, nothing changed: memory and log still agree
                raise CoordinatorNotAvailableError(
                    f"cannot write to {self.topic}-{partition}: {e}") from e
            raise self._failed(partition, e) from e
        if info.first_offset < 0:
            raise self._failed(partition, RuntimeError("the log appended nothing"))
        return info

    def _failed(self, partition: int, e: BaseException) -> CoordinatorNotAvailableError:
        self.fail(partition)
        return CoordinatorNotAvailableError(f"cannot write to {self.topic}-{partition}: {e}")

    def poll(self, partition: int) -> Outcome[None] | None:
        """Run the partition's due deadlines, if it is active and any are due."""
        p = self._partitions.get(partition)
        if p is None or p.state is not PartitionState.ACTIVE or p.shard is None:
            return None
        deadline = p.shard.next_deadline()
        if deadline is None or deadline > self.clock.now_ms():
            return None
        return self.execute(partition, lambda shard, now: shard.poll(now))
