"""Stateful property test: model producers against ProducerStateManager and a toy log.

The machine plays a broker (validate -> assign offsets -> update) for several model
producers that send new batches, retry any cached batch, retry forgotten ones (answered
DUPLICATE_SEQUENCE_NUMBER), leave gaps, overlap, write with fenced epochs, bump epochs,
wrap sequences past INT32_MAX, and restart the broker from a snapshot plus a replay of
the log. Invariants: every accepted batch is in
the log exactly once, duplicates are answered with the original offsets, the broker's
cache of recent batches is exactly what Kafka's rules predict.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tidegate.records.batch import BatchHeader
from tidegate.storage.producer_snapshot import list_snapshots
from tidegate.storage.producer_state import (
    DuplicateBatch,
    DuplicateSequenceError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    ProducerStateManager,
)

from ._support import INT32_MAX, at, header

SEQ_MOD = 1 << 31


@dataclass(frozen=True)
class Acked:
    epoch: int
    first_seq: int
    count: int
    base_offset: int

    @property
    def last_seq(self) -> int:
        return (self.first_seq + self.count - 1) % SEQ_MOD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.count - 1


@dataclass
class Producer:
    epoch: int
    next_seq: int
    history: list[Acked] = field(default_factory=list)  # every acked batch, all epochs
    cache: list[Acked] = field(default_factory=list)  # what the broker should remember

    def forgotten(self) -> list[Acked]:
        return [a for a in self.history if a.epoch == self.epoch and a not in self.cache]


def expected_cache(history: list[Acked], snapshot_offset: int) -> list[Acked]:
    """Kafka's rebuild: the last batch before the snapshot, then replayed batches."""
    cache = [a for a in history if a.last_offset < snapshot_offset][-1:]
    for a in (a for a in history if a.base_offset >= snapshot_offset):
        if cache and cache[-1].epoch != a.epoch:
            cache = []
        cache = [*cache, a][-5:]
    return cache


class IdempotenceMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="tidegate-psm-"))
        self.psm = ProducerStateManager()
        self.log: list[BatchHeader] = []
        self.end = 0
        self.now = 0
        self.producers: dict[int, Producer] = {}

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- the broker ------------------------------------------------------------------

    def produce(self, h: BatchHeader) -> DuplicateBatch | Acked:
        self.now += 1
        dup = self.psm.validate(h)
        if dup is not None:
            return dup
        placed = at(h, self.end)
        self.psm.update(placed, self.now)
        self.log.append(placed)
        self.end = placed.next_offset
        return Acked(h.producer_epoch, h.base_sequence, h.records_count, placed.base_offset)

    def pick(self, data: st.DataObject) -> tuple[int, Producer]:
        pid = data.draw(st.sampled_from(sorted(self.producers)), label="pid")
        return pid, self.producers[pid]

    def send_next(self, pid: int, p: Producer, count: int) -> None:
        result = self.produce(header(pid, p.epoch, p.next_seq, count))
        assert isinstance(result, Acked), result
        p.history.append(result)
        p.cache = [*p.cache, result][-5:]
        p.next_seq = (p.next_seq + count) % SEQ_MOD

    # -- rules -----------------------------------------------------------------------

    @rule(
        start=st.one_of(st.just(0), st.integers(1, 10_000), st.integers(INT32_MAX - 6, INT32_MAX)),
        epoch=st.integers(0, 3),
    )
    def new_producer(self, start: int, epoch: int) -> None:
        # An unknown producer is accepted at any sequence (Kafka >= 2.5).
        pid = 1000 + len(self.producers)
        self.producers[pid] = p = Producer(epoch, start)
        self.send_next(pid, p, 1)

    @precondition(lambda self: self.producers)
    @rule(data=st.data(), count=st.integers(1, 5))
    def send(self, data: st.DataObject, count: int) -> None:
        pid, p = self.pick(data)
        self.send_next(pid, p, count)

    @precondition(lambda self: self.producers)
    @rule(count=st.integers(1, 5))
    def send_without_producer_id(self, count: int) -> None:
        assert isinstance(self.produce(header(-1, -1, -1, count)), Acked)

    @precondition(lambda self: self.producers)
    @rule(data=st.data())
    def retry_cached(self, data: st.DataObject) -> None:
        pid, p = self.pick(data)
        if not p.cache:
            return
        a = data.draw(st.sampled_from(p.cache), label="retried")
        before = self.end
        dup = self.produce(header(pid, a.epoch, a.first_seq, a.count))
        assert isinstance(dup, DuplicateBatch), dup
        assert (dup.first_offset, dup.last_offset) == (a.base_offset, a.last_offset)
        assert self.end == before

    @precondition(lambda self: any(p.forgotten() for p in self.producers.values()))
    @rule(data=st.data())
    def retry_forgotten(self, data: st.DataObject) -> None:
        pid = data.draw(st.sampled_from([k for k, p in self.producers.items() if p.forgotten()]))
        a = data.draw(st.sampled_from(self.producers[pid].forgotten()), label="forgotten")
        # written before the cached batches: delivered, offsets unknown (Kafka: 45)
        with pytest.raises(DuplicateSequenceError):
            self.produce(header(pid, a.epoch, a.first_seq, a.count))

    @precondition(lambda self: self.producers)
    @rule(data=st.data(), gap=st.integers(1, 100))
    def send_with_gap(self, data: st.DataObject, gap: int) -> None:
        pid, p = self.pick(data)
        with pytest.raises(OutOfOrderSequenceError):
            self.produce(header(pid, p.epoch, (p.next_seq + gap) % SEQ_MOD, 1))

    @precondition(lambda self: self.producers)
    @rule(data=st.data())
    def send_overlapping(self, data: st.DataObject) -> None:
        pid, p = self.pick(data)
        wide = [a for a in p.cache if a.count > 1]
        if not wide:
            return
        a = data.draw(st.sampled_from(wide))
        with pytest.raises(OutOfOrderSequenceError):
            self.produce(header(pid, a.epoch, a.first_seq, a.count - 1))

    @precondition(lambda self: any(p.epoch > 0 for p in self.producers.values()))
    @rule(data=st.data(), back=st.integers(1, 3), seq=st.integers(0, 50))
    def send_with_fenced_epoch(self, data: st.DataObject, back: int, seq: int) -> None:
        pid = data.draw(st.sampled_from([k for k, p in self.producers.items() if p.epoch > 0]))
        old = max(0, self.producers[pid].epoch - back)
        with pytest.raises(InvalidProducerEpochError):
            self.produce(header(pid, old, seq, 1))

    @precondition(lambda self: self.producers)
    @rule(data=st.data(), seq=st.integers(1, 50))
    def bump_epoch_not_at_zero(self, data: st.DataObject, seq: int) -> None:
        pid, p = self.pick(data)
        with pytest.raises(OutOfOrderSequenceError):
            self.produce(header(pid, p.epoch + 1, seq, 1))

    @precondition(lambda self: self.producers)
    @rule(data=st.data(), count=st.integers(1, 5))
    def bump_epoch(self, data: st.DataObject, count: int) -> None:
        pid, p = self.pick(data)
        p.epoch += 1
        p.next_seq = 0
        p.cache = []
        self.send_next(pid, p, count)

    @rule()
    def take_snapshot(self) -> None:
        self.psm.take_snapshot(self.dir)

    @rule()
    def restart(self) -> None:
        """Crash and reload: newest snapshot, then replay the log tail."""
        snaps = [off for off, _ in list_snapshots(self.dir)]
        self.psm = ProducerStateManager()
        start = self.psm.truncate_tail(self.dir, self.end, now_ms=self.now)
        assert start == (snaps[-1] if snaps else 0)
        for h in self.log:
            if h.base_offset >= start:
                self.psm.replay(h, self.now)
        for p in self.producers.values():
            p.cache = expected_cache(p.history, start)

    # -- invariants ------------------------------------------------------------------

    @invariant()
    def state_reflects_the_log(self) -> None:
        assert self.psm.map_end_offset == self.end
        assert len(self.list_snapshot_offsets()) <= 2

    @invariant()
    def every_accepted_batch_is_in_the_log_once(self) -> None:
        keys = [
            (h.producer_id, h.producer_epoch, h.base_sequence)
            for h in self.log
            if h.producer_id >= 0
        ]
        assert len(keys) == len(set(keys))
        acked = sum(len(p.history) for p in self.producers.values())
        assert acked == len(keys)

    @invariant()
    def cache_matches_the_model(self) -> None:
        for pid, p in self.producers.items():
            entry = self.psm.last_entry(pid)
            assert entry is not None
            assert entry.producer_epoch == p.epoch
            assert entry.last_seq == (p.next_seq - 1) % SEQ_MOD
            got = [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in entry.batches]
            want = [(a.first_seq, a.last_seq, a.base_offset, a.last_offset) for a in p.cache]
            assert got == want

    def list_snapshot_offsets(self) -> list[int]:
        return [off for off, _ in list_snapshots(self.dir)]


IdempotenceMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestIdempotence = IdempotenceMachine.TestCase
