"""Two replicas of one partition driven by Hypothesis: client appends of every kind on the
leader, fetches in random chunk sizes, flushes, follower crashes, and leader changes (the
old leader truncates its unreplicated tail with the OffsetForLeaderEpoch dialogue). At the
end, and after every leader change, the replicas must agree: same segment files, producer
state, `.txnindex`, LSO and epochs; no committed record is ever truncated."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import event, given, settings
from hypothesis import strategies as st

from tidegate.common.clock import ManualClock
from tidegate.common.errors import KafkaError
from tidegate.storage.log import Log

from ._replica import (
    advance_hw,
    assert_converged,
    epochs,
    fetch_into,
    follow_new_leader,
    idem,
    plain,
    producer_rows,
    txn,
)
from ._support import BASE_TS, SMALL

IDEMPOTENT = (100, 101)
TRANSACTIONAL = (200, 201)

_op = st.one_of(
    st.tuples(st.just("plain"), st.integers(1, 4), st.integers(0, 1200)),
    st.tuples(st.just("idem"), st.sampled_from(IDEMPOTENT), st.integers(1, 4)),
    st.tuples(st.just("txn"), st.sampled_from(TRANSACTIONAL), st.integers(1, 3)),
    st.tuples(st.just("marker"), st.sampled_from(TRANSACTIONAL), st.booleans()),
    st.tuples(st.just("fetch"), st.integers(60, 3000), st.integers(1, 4)),
    st.tuples(st.just("flush"), st.booleans(), st.just(0)),
    st.tuples(st.just("crash_follower"), st.just(0), st.just(0)),
    st.tuples(st.just("failover"), st.just(0), st.just(0)),
)


@dataclass
class Pair:
    root: Path
    clock: ManualClock
    logs: dict[str, Log]
    leader: str = "a"
    epoch: int = 0
    crashed: bool = False

    @property
    def lead(self) -> Log:
        return self.logs[self.leader]

    @property
    def follower_name(self) -> str:
        return "b" if self.leader == "a" else "a"

    @property
    def follow(self) -> Log:
        return self.logs[self.follower_name]

    def next_sequence(self, pid: int) -> tuple[int, int]:
        entry = self.lead.producer_state.last_entry(pid)
        if entry is None or entry.producer_epoch < 0:
            return 0, 0
        return max(entry.producer_epoch, 0), entry.last_seq + 1 if entry.last_seq >= 0 else 0


def run(pair: Pair, op: str, a: int, b: int) -> None:
    lead, tag = pair.lead, pair.lead.log_end_offset
    try:
        if op == "plain":
            lead.append(plain(a, tag=tag, size=b), leader_epoch=pair.epoch)
        elif op in ("idem", "txn"):
            epoch, seq = pair.next_sequence(a)
            build = idem if op == "idem" else txn
            lead.append(build(a, seq, b, epoch=epoch, tag=tag), leader_epoch=pair.epoch)
        elif op == "marker":
            epoch, _ = pair.next_sequence(a)
            lead.append_marker(a, epoch, 0, commit=bool(b), leader_epoch=pair.epoch)
    except KafkaError:
        pass  # e.g. a sequence the new leader never saw: the client would retry
    if op == "fetch":
        fetch_into(lead, pair.follow, max_bytes=a, rounds=b)
        advance_hw(lead, pair.follow)
    elif op == "flush":
        (lead if a else pair.follow).flush()
    elif op == "crash_follower":
        old = pair.follow
        before = epochs(old)
        again = Log.open(old.directory, SMALL, pair.clock, recovery_point=old.recovery_point,
                         high_watermark=old.high_watermark)  # fmt: skip
        assert again.log_end_offset == old.log_end_offset  # the page cache survived
        assert epochs(again) == before, "recovery rebuilt other epochs"
        assert producer_rows(again) == producer_rows(old)
        pair.logs[pair.follower_name] = again
        pair.crashed = True
    elif op == "failover":
        new, old = pair.follow, pair.lead
        old_bases = {seg.base_offset for seg in old.segments}
        pair.epoch += 1
        new.assign_leader_epoch(pair.epoch)
        pair.leader = pair.follower_name
        committed, end = old.high_watermark, old.log_end_offset
        cut = follow_new_leader(new, old)
        assert cut >= committed, "a committed record was truncated"
        if cut < end:
            event("failover truncating a tail")
            if any(seg.base_offset == cut for seg in new.segments) or cut in old_bases:
                event("failover truncating at a segment boundary")
        assert old.log_end_offset <= new.log_end_offset


@settings(max_examples=200, deadline=None)
@given(st.lists(_op, max_size=40))
def test_replicas_converge(ops: list[tuple[str, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        clock = ManualClock(BASE_TS)  # frozen: producer idle clocks agree too
        logs = {n: Log.open(root / n / "t-0", SMALL, clock) for n in "ab"}
        pair = Pair(root, clock, logs)
        pair.lead.assign_leader_epoch(0)
        for op in ops:
            run(pair, *op)
        fetch_into(pair.lead, pair.follow)
        assert_converged(pair.lead, pair.follow, snapshots=False)
        for lg in pair.logs.values():
            lg.close()
