"""read_committed filtering (consumer/aborted.py through state.parse_partition_records),
checked with Hypothesis against a model of a partition log.

The model writes a partition the way a broker does: data batches of several
transactional producers interleaved with non-transactional (idempotent) ones, COMMIT
and ABORT markers ending transactions, some transactions left open. From it follow the
last stable offset, the records a read_committed reader must see (non-transactional
plus committed, below the LSO), and — for any fetch — the aborted transactions the
broker would list (those overlapping the returned range). The test then reads the log
in fetches of random sizes (cut mid-batch, aborted list in random order) from a random
start, as the consumer's fetcher does, and checks the records, their order and the
final position (== LSO: lag zero).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.client.consumer.aborted import AbortedFilter, AbortedTransaction
from tidegate.client.consumer.state import parse_partition_records
from tidegate.client.types import ConsumerRecord, TopicPartition
from tidegate.records.builder import build_batch
from tidegate.records.control import ControlType, build_control_batch, encode_control_key

TP = TopicPartition("t", 0)
IDEMPOTENT_PID = 50  # a non-transactional producer with a producer id
TXN_PIDS = (100, 101)


@dataclass
class Txn:
    pid: int
    first: int
    outcome: str = "open"  # open | commit | abort
    marker: int = -1


@dataclass
class Model:
    batches: list[tuple[int, int, bytes]] = field(default_factory=list)  # base, next, bytes
    records: list[tuple[int, bytes, Txn | None]] = field(default_factory=list)
    txns: list[Txn] = field(default_factory=list)
    open: dict[int, Txn] = field(default_factory=dict)
    end: int = 0

    def data(self, pid: int | None, n: int, codec: int) -> None:
        txn = None
        if pid is not None:
            txn = self.open.get(pid)
            if txn is None:
                txn = self.open[pid] = Txn(pid, self.end)
                self.txns.append(txn)
        values = [b"v%d" % (self.end + i) for i in range(n)]
        raw = build_batch(
            [(1000 + i, None, v) for i, v in enumerate(values)], base_offset=self.end,
            producer_id=IDEMPOTENT_PID if pid is None else pid, producer_epoch=0,
            base_sequence=0, is_transactional=pid is not None, compression=codec)
        for i, v in enumerate(values):
            self.records.append((self.end + i, v, txn))
        self.batches.append((self.end, self.end + n, raw))
        self.end += n

    def marker(self, pid: int, commit: bool) -> None:
        txn = self.open.pop(pid, None)
        if txn is None:
            return  # no transaction of pid in this partition: no marker is written
        txn.outcome = "commit" if commit else "abort"
        txn.marker = self.end
        raw = build_control_batch(
            producer_id=pid, producer_epoch=0,
            control_type=ControlType.COMMIT if commit else ControlType.ABORT,
            coordinator_epoch=0, timestamp=1, base_offset=self.end)
        self.batches.append((self.end, self.end + 1, raw))
        self.end += 1

    @property
    def lso(self) -> int:
        return min((t.first for t in self.open.values()), default=self.end)

    def committed(self, start: int) -> list[tuple[int, bytes]]:
        return [(o, v) for o, v, t in self.records
                if start <= o < self.lso and (t is None or t.outcome == "commit")]

    def uncommitted(self, start: int) -> list[tuple[int, bytes]]:
        return [(o, v) for o, v, _ in self.records if o >= start]

    def aborted_overlapping(self, fetch_offset: int, upper: int) -> list[AbortedTransaction]:
        """What the broker lists: aborted transactions with first offset below the end
        of the returned data whose marker is at or after the fetch offset."""
        return [AbortedTransaction(t.pid, t.first) for t in self.txns
                if t.outcome == "abort" and t.first < upper and t.marker >= fetch_offset]


OPS = st.lists(
    st.tuples(st.sampled_from(["data", "data", "plain", "commit", "abort", "abort"]),
              st.sampled_from(TXN_PIDS), st.integers(1, 3), st.sampled_from([0, 0, 1])),
    min_size=4, max_size=40)


def build(ops: list[tuple[str, int, int, int]]) -> Model:
    m = Model()
    for op, pid, n, codec in ops:
        if op == "data":
            m.data(pid, n, codec)
        elif op == "plain":
            m.data(None, n, codec)
        else:
            m.marker(pid, op == "commit")
    return m


def read(m: Model, start: int, limit: int, data: st.DataObject, committed: bool
         ) -> tuple[list[tuple[int, bytes]], int]:
    """Fetch from `start` until the end (LSO or high watermark) as the fetcher does."""
    out: list[ConsumerRecord] = []
    pos = start
    for _ in range(10_000):
        visible = [b for b in m.batches if b[1] > pos and b[0] < limit]
        if not visible:
            break
        k = data.draw(st.integers(1, len(visible)), label="batches in this fetch")
        chunk = b"".join(raw for _, _, raw in visible[:k])
        if k < len(visible) and data.draw(st.booleans(), label="cut mid-batch"):
            nxt = visible[k][2]
            chunk += nxt[: data.draw(st.integers(1, len(nxt) - 1), label="cut")]
        aborted = None
        if committed:
            listed = m.aborted_overlapping(pos, visible[k - 1][1])
            aborted = data.draw(st.permutations(listed), label="aborted list order")
        pr = parse_partition_records(TP, pos, chunk, True, aborted)
        assert pr.next_offset > pos  # a fetch always makes progress
        while not pr.exhausted:
            new_pos = pr.take(data.draw(st.integers(1, 4), label="max_records"), out)
            assert new_pos is not None
            pos = new_pos
        pos = max(pos, pr.next_offset)
    return [(r.offset, r.value) for r in out if r.value is not None], pos


@settings(max_examples=300, deadline=None)
@given(ops=OPS, data=st.data())
def test_read_committed_returns_exactly_the_committed_records(
        ops: list[tuple[str, int, int, int]], data: st.DataObject) -> None:
    m = build(ops)
    start = data.draw(st.integers(0, m.lso), label="start")
    got, position = read(m, start, m.lso, data, committed=True)
    assert got == m.committed(start)
    assert position == max(start, m.lso)


@settings(max_examples=200, deadline=None)
@given(ops=OPS, data=st.data())
def test_read_uncommitted_returns_all_data_but_no_control_records(
        ops: list[tuple[str, int, int, int]], data: st.DataObject) -> None:
    m = build(ops)
    start = data.draw(st.integers(0, m.end), label="start")
    got, position = read(m, start, m.end, data, committed=False)
    assert got == m.uncommitted(start)
    assert position == max(start, m.end)


def test_abort_marker_ends_only_that_producers_aborted_transaction() -> None:
    f = AbortedFilter([AbortedTransaction(7, 10), AbortedTransaction(7, 30)])

    def data(last: int, pid: int = 7, txn: bool = True) -> bool:
        return f.accept(last_offset=last, producer_id=pid, is_transactional=txn,
                        is_control=False, records=[])

    def marker(last: int, kind: ControlType, pid: int = 7) -> bool:
        rec = (last, 0, encode_control_key(kind), b"\x00\x00\x00\x00\x00\x00", [])
        return f.accept(last_offset=last, producer_id=pid, is_transactional=True,
                        is_control=True, records=[rec])

    assert data(5)  # before the aborted transaction: a committed one
    assert not marker(6, ControlType.COMMIT)  # markers are never returned
    assert not data(10)
    assert data(11, pid=8)  # another producer is not affected
    assert data(12, pid=7, txn=False)  # nor non-transactional batches
    assert not data(13)
    assert f.aborted_producers == {7}
    assert not marker(14, ControlType.ABORT)
    assert f.aborted_producers == frozenset()
    assert data(20)  # the next transaction of 7 committed: not listed
    assert not marker(21, ControlType.COMMIT)
    assert not data(30)  # and the one after was aborted again
    assert not marker(31, ControlType.ABORT)
    assert data(32)


def test_other_control_records_are_dropped_without_ending_an_abort() -> None:
    f = AbortedFilter([AbortedTransaction(7, 0)])
    assert not f.accept(last_offset=0, producer_id=7, is_transactional=True,
                        is_control=False, records=[])
    leader_change = (1, 0, b"\x00\x00\x00\x02", b"", [])  # KRaft's LEADER_CHANGE
    assert not f.accept(last_offset=1, producer_id=7, is_transactional=True,
                        is_control=True, records=[leader_change])
    assert f.aborted_producers == {7}
    assert not f.accept(last_offset=2, producer_id=7, is_transactional=True,
                        is_control=False, records=[])
