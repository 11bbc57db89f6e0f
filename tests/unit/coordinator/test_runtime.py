"""The generic coordinator runtime: ownership hashing, deadlines, load, write path."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from tidegate.common.clock import ManualClock
from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.coordinator.runtime import (
    PARKED,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    CoordinatorRuntime,
    NotCoordinatorError,
    PartitionState,
    ReplayRecord,
    Result,
    java_string_hash,
    partition_for,
)
from tidegate.coordinator.timers import DeadlineQueue
from tidegate.records.control import ControlType, build_control_batch, parse_control_record
from tidegate.records.record import iter_batches
from tidegate.storage.config import LogConfig
from tidegate.storage.log import Log


def test_java_string_hash() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    assert java_string_hash("ü") == 252
    assert java_string_hash("\U0001F600") == 31 * 0xD83D + 0xDE00  # UTF-16 surrogates
    assert java_string_hash("Aa") == java_string_hash("BB")  # Java's classic collision
    # cached (every transactional request hashes its id): a second call, from the cache,
    # agrees with a fresh computation
    for s in ("hello", "polygenelubricants", "\U0001F600", "txn-42"):
        assert java_string_hash(s) == java_string_hash.__wrapped__(s) == java_string_hash(s)


def test_partition_for_uses_utils_abs() -> None:
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0  # abs(MIN_VALUE) is 0
    neg = next(s for s in (f"consumer-group-{i}" for i in range(1000)) if java_string_hash(s) < 0)
    assert partition_for(neg, 7) == abs(java_string_hash(neg)) % 7


def test_deadline_queue() -> None:
    q = DeadlineQueue()
    q.schedule("a", 30)
    q.schedule("b", 10)
    q.schedule("c", 20)
    q.schedule("a", 5)  # rescheduled earlier
    q.cancel("c")
    assert q.next_deadline() == 5 and len(q) == 2
    assert q.pop_next(4) is None
    assert q.pop_due(10) == ["a", "b"]
    assert q.next_deadline() is None
    for i in range(500):  # lazy deletion stays bounded
        q.schedule("x", i)
    assert len(q._heap) < 100 and q.pop_due(1000) == ["x"]


class Recorder:
    """A minimal shard: remembers what it replayed."""

    def __init__(self, partition: int) -> None:
        self.replayed: list[tuple[int, bytes | None, bytes | None, int, bool]] = []
        self.markers: list[tuple[int, bool]] = []
        self.loaded_at: int | None = None
        self.now = 0

    def replay(self, records: Sequence[ReplayRecord], producer_id: int, producer_epoch: int,
               transactional: bool) -> None:
        for r in records:
            self.replayed.append((r.offset, r.key, r.value, producer_id, transactional))

    def replay_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        self.markers.append((producer_id, commit))

    def set_time(self, now_ms: int) -> None:
        self.now = now_ms

    def on_loaded(self, now_ms: int) -> None:
        self.loaded_at = now_ms

    def poll(self, now_ms: int) -> Result[None]:
        return Result(None, [(b"tick", b"%d" % now_ms)])

    def next_deadline(self) -> int | None:
        return 0


@pytest.fixture
def setup(tmp_path: Path) -> tuple[CoordinatorRuntime[Recorder], Log, ManualClock]:
    clock = ManualClock()
    lg = Log.open(tmp_path / "__consumer_offsets-0",
                  LogConfig.from_props({"cleanup.policy": "compact"}), clock)
    rt: CoordinatorRuntime[Recorder] = CoordinatorRuntime("__consumer_offsets", 1, Recorder, clock)
    return rt, lg, clock


def test_ownership_states(setup: tuple[CoordinatorRuntime[Recorder], Log, ManualClock]) -> None:
    rt, lg, _ = setup
    with pytest.raises(NotCoordinatorError):
        rt.shard(0)
    rt.begin_load(0, lg)
    with pytest.raises(CoordinatorLoadInProgressError):
        rt.shard(0)
    shard, stats = rt.load(0, lg)
    assert stats.records == 0 and shard.loaded_at is not None
    rt.publish(0, lg, shard)
    assert rt.shard(0) is shard and rt.state(0) is PartitionState.ACTIVE


def test_execute_appends_then_replays_and_load_replays_the_same(
        setup: tuple[CoordinatorRuntime[Recorder], Log, ManualClock]) -> None:
    rt, lg, clock = setup
    shard, _ = rt.load(0, lg)
    rt.publish(0, lg, shard)
    out = rt.execute(0, lambda s, now: Result("ok", [(b"k1", b"v1"), (b"k2", None)]))
    assert out.result.response == "ok" and out.appended == 2 and out.end_offset == 2
    assert shard.replayed == [(0, b"k1", b"v1", -1, False), (1, b"k2", None, -1, False)]
    out = rt.execute(0, lambda s, now: Result(PARKED, replies=[(7, "later")]))
    assert out.appended == 0 and out.end_offset == 2 and out.result.replies == [(7, "later")]
    # a transaction marker written by someone else (the future transaction coordinator)
    lg.append_control(build_control_batch(producer_id=9, producer_epoch=0,
                                          control_type=ControlType.COMMIT,
                                          coordinator_epoch=0, timestamp=clock.now_ms()))
    fresh, stats = rt.load(0, lg)
    assert fresh.replayed == shard.replayed and stats.records == 2
    assert fresh.markers == [(9, True)]


def test_poll_runs_due_deadlines(setup: tuple[CoordinatorRuntime[Recorder], Log, ManualClock]
                                 ) -> None:
    rt, lg, _ = setup
    shard, _ = rt.load(0, lg)
    rt.publish(0, lg, shard)
    out = rt.poll(0)
    assert out is not None and out.appended == 1


def test_a_failed_append_fails_the_partition(
        setup: tuple[CoordinatorRuntime[Recorder], Log, ManualClock]) -> None:
    rt, lg, _ = setup
    shard, _ = rt.load(0, lg)
    rt.publish(0, lg, shard)
    lg.close()  # appends now fail
    with pytest.raises(CoordinatorNotAvailableError):
        rt.execute(0, lambda s, now: Result("x", [(b"k", b"v")]))
    assert rt.state(0) is PartitionState.FAILED and shard.replayed == []
    with pytest.raises(CoordinatorNotAvailableError):
        rt.shard(0)


def test_a_transactional_result_is_one_transactional_batch(
        setup: tuple[CoordinatorRuntime[Recorder], Log, ManualClock]) -> None:
    rt, lg, _ = setup
    shard, _ = rt.load(0, lg)
    rt.publish(0, lg, shard)
    out = rt.execute(0, lambda s, now: Result("ok", [(b"k1", b"v1"), (b"k2", b"v2")],
                                              producer_id=77, producer_epoch=2))
    assert out.appended == 2 and out.end_offset == 2
    assert shard.replayed == [(0, b"k1", b"v1", 77, True), (1, b"k2", b"v2", 77, True)]
    (header, _recs), = list(iter_batches(lg.read(0, 1 << 20)))
    assert header.is_transactional and not header.is_control
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 2, -1)
    # a second write of the same transaction: no sequence, so not taken for a duplicate
    out = rt.execute(0, lambda s, now: Result("ok", [(b"k3", b"v3")],
                                              producer_id=77, producer_epoch=2))
    assert out.appended == 1 and out.end_offset == 3
    fresh, _ = rt.load(0, lg)
    assert fresh.replayed == shard.replayed


def test_a_fenced_epoch_fails_the_operation_not_the_partition(
        setup: tuple[CoordinatorRuntime[Recorder], Log, ManualClock]) -> None:
    rt, lg, _ = setup
    shard, _ = rt.load(0, lg)
    rt.publish(0, lg, shard)
    rt.execute(0, lambda s, now: Result("ok", [(b"k", b"v")], producer_id=5, producer_epoch=3))
    with pytest.raises(KafkaError) as e:
        rt.execute(0, lambda s, now: Result("x", [(b"k", b"v")], producer_id=5,
                                            producer_epoch=2))
    assert e.value.code == ErrorCode.invalid_producer_epoch
    assert not isinstance(e.value, CoordinatorNotAvailableError)
    assert rt.state(0) is PartitionState.ACTIVE and lg.log_end_offset == 1
    assert len(shard.replayed) == 1
    with pytest.raises(KafkaError) as e:
        rt.execute_marker(0, 5, 2, 0, True)
    assert e.value.code == ErrorCode.invalid_producer_epoch
    assert rt.state(0) is PartitionState.ACTIVE and shard.markers == []


def test_execute_marker_appends_a_control_batch_then_replays_it(
        setup: tuple[CoordinatorRuntime[Recorder], Log, ManualClock]) -> None:
    rt, lg, _ = setup
    shard, _ = rt.load(0, lg)
    rt.publish(0, lg, shard)
    rt.execute(0, lambda s, now: Result("ok", [(b"k", b"v")], producer_id=5, producer_epoch=0))
    out = rt.execute_marker(0, 5, 0, 7, False)
    assert out.appended == 1 and out.end_offset == 2 and shard.markers == [(5, False)]
    batches = list(iter_batches(lg.read(0, 1 << 20)))
    header, recs = batches[-1]
    assert header.is_control and header.is_transactional and header.producer_id == 5
    assert parse_control_record(recs[0].key, recs[0].value) == (ControlType.ABORT, 7)
    fresh, _ = rt.load(0, lg)
    assert fresh.markers == shard.markers and fresh.replayed == shard.replayed
    lg.close()  # an I/O failure, unlike a rejection, fails the partition
    with pytest.raises(CoordinatorNotAvailableError):
        rt.execute_marker(0, 5, 0, 7, True)
    assert rt.state(0) is PartitionState.FAILED
