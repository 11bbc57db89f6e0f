"""The coordinator failover cases of the seeds (seed 004, 000, 002), on one 3-broker cluster.

ZooKeeper and three real brokers (tests/integration/cluster_txn_util.py: RF 3 everywhere,
`min.insync.replicas` and `transaction.state.log.min.isr` 2), confluent-kafka as the
client, raw requests to one exact broker where librdkafka would pick any. One fault at a
time; every case ends with the victim back and every partition in sync, so the cases
share the cluster.

1. The transaction coordinator dies BEFORE its PrepareCommit is replicated: both
   followers of the id's `__transaction_state` partition are paused (SIGSTOP) long
   enough for any fetch they had parked at the leader to be answered, then the commit
   begins (the Prepare lands in the coordinator's log only) and the coordinator is
   killed (kill -9) before the followers resume. The producer's commit is retried as
   librdkafka does; whatever the outcome, read_committed sees all of the transaction or
   none of it, and the producer carries on with its next transaction.
2. A data partition's leader dies while its marker is pending: the leader is paused, the
   commit begins (the coordinator shows PrepareCommit, the marker cannot land), then the
   leader is killed; the partition's new leader gets the marker. The values are read
   exactly once by read_committed, whose position reaches the high watermark (the LSO
   moved past them), and the partition holds one COMMIT marker of the producer.
3. A paused old coordinator resumes: the coordinator is paused with the transaction
   Ongoing, another broker becomes coordinator (the old one's ZooKeeper session
   expired), the producer commits through it, and the old coordinator resumes while it
   still holds the transaction open in memory and past its timeout. In every replica of
   every partition, no marker of the producer carries the old coordinator epoch, and
   read_committed sees the new coordinator's outcome (commit).
   Second variant: the old coordinator is paused in PrepareCommit with a marker job
   still running (the leader of one partition paused with it, then killed); the new
   coordinator replays the Prepare and writes its markers; the old one resumes. No
   marker with an older coordinator epoch follows a newer one in any replica. (Here the
   old job usually stops because its shard is unloaded first; with that check removed
   the partitions refuse it, TRANSACTION_COORDINATOR_FENCED, and with the partitions'
   check removed as well this test fails: both were tried on a copy of the tree.)
4. A TxnOffsetCommit lands on a group coordinator that moves before the marker: after
   send_offsets_to_transaction, the group coordinator's broker is killed, then the
   transaction is committed (or aborted): OffsetFetch with require_stable on the new
   group coordinator returns the transaction's offsets (abort: the previous ones).

Markers are read from the partitions' segment files on every broker (records/), so a
stale marker would be seen even where a consumer skips control batches. A coordinator
that counted an unwritten marker as written fails cases 2 and 4 (tried). The module
shares one cluster whose followers leave the ISR after 3 s (replica.lag.time.max.ms)
and whose ZooKeeper sessions last 8 s, so that a paused leader still leads when a
transaction's Prepare becomes durable.

`make soak` (TIDEGATE_SOAK=1) runs every case, about 2-3 minutes (`make test` has the
cluster's transaction tests of test_cluster_txn.py and test_cluster_eos.py).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from tests.integration.cluster import Cluster, wait_for
from tests.integration.cluster_txn_util import (
    GROUP_KEY,
    TXN_KEY,
    TXN_STATE,
    ask,
    coordinator,
    create_topics,
    partitions,
    txn_cluster,
    wait_identical,
    wait_in_sync,
    wait_no_open_transactions,
)
from tests.integration.test_eos_pipeline import read_committed_all

from tidegate.coordinator.runtime import partition_for
from tidegate.records.control import ControlType, parse_control_record
from tidegate.records.record import iter_batches

SOAK_ONLY = (pytest.mark.slow,
             pytest.mark.skipif(not os.environ.get("TIDEGATE_SOAK"),
                                reason="soak run: `make soak` (TIDEGATE_SOAK=1)"))


def soak_only(f):  # type: ignore[no-untyped-def]
    for mark in SOAK_ONLY:
        f = mark(f)
    return f

TXN_PARTITIONS = 50  # transaction.state.log.num.partitions
N_VALUES = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # a follower leaves the ISR (3 s) before its leader's ZooKeeper session expires (8 s):
    # a paused leader still leads when the transactions' Prepare becomes durable
    c = txn_cluster(tmp_path_factory.mktemp("failover"), {
        "replica.lag.time.max.ms": "3000", "zookeeper.session.timeout.ms": "8000"})
    c.start()
    try:
        yield c
    finally:
        c.stop()
        for bid, b in c.brokers.items():
            (c.base / f"broker-{bid}.out").write_text(b.logs())


@pytest.fixture()
def healed(cluster: Cluster) -> Iterator[Cluster]:
    """The cluster, given back whole after the case (the victim restarted or resumed,
    every partition led and in sync); its logs printed if the case failed."""
    ok = False
    try:
        yield cluster
        ok = True
    finally:
        if not ok:
            print(cluster.failure_report())
        for bid, b in cluster.brokers.items():
            if b.proc is None or b.proc.poll() is not None:
                cluster.restart(bid)
            else:
                cluster.resume(bid)
        wait_in_sync(cluster, timeout=90)
        # leaderships (so coordinators) back on their preferred brokers: after a few
        # failovers one broker would lead everything
        every = [TopicPartition(t, q) for t, q in partitions(cluster, 1)]
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # kept while waiting
        admin.elect_leaders(ElectionType.PREFERRED, every).result(30)
        wait_in_sync(cluster, timeout=60)


def _producer(c: Cluster, tid: str, **extra: object) -> Producer:
    conf: dict[str, object] = {"bootstrap.servers": c.bootstrap, "transactional.id": tid,
                               "transaction.timeout.ms": 30000, "linger.ms": 2, **extra}
    conf["message.timeout.ms"] = conf["transaction.timeout.ms"]  # librdkafka's upper bound
    return Producer(conf)


def _tid(c: Cluster, prefix: str, on: int | None = None, not_on: int | None = None) -> str:
    """A transactional id coordinated by broker `on` (or by any broker but `not_on`)."""
    for i in range(200):
        tid = f"{prefix}-{i}"
        node = coordinator(c, tid, TXN_KEY)
        if (on is None or node == on) and (not_on is None or node != not_on):
            return tid
    raise AssertionError(f"no transactional id {prefix}-* on {on} / not on {not_on}")


def _leader_epoch(c: Cluster, via: int, topic: str, partition: int) -> int:
    md = ask(c, via, 3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    return next(int(p.leader_epoch) for t in md.topics for p in t.partitions
                if p.partition_index == partition)


def _listed(c: Cluster, bid: int, tid: str) -> tuple[str, int]:
    """(state, producer id) of `tid` in broker `bid`'s ListTransactions (raw
    DescribeTransactions would do, but kio refuses its start time of -1)."""
    r = ask(c, bid, 66, 0, {"state_filters": [], "producer_id_filters": []})
    found = [(str(t.transaction_state), int(t.producer_id))
             for t in r.transaction_states if t.transactional_id == tid]
    return found[0] if found else ("not listed", -1)


def _state(c: Cluster, bid: int, tid: str) -> str:
    return _listed(c, bid, tid)[0]


def _begin(p: Producer, topic: str, tag: str) -> list[bytes]:
    values = [f"{tag}-{i}".encode() for i in range(N_VALUES)]
    p.begin_transaction()
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % 3)
    p.flush(30)
    return values


def _finish(p: Producer, commit: bool = True, deadline_s: float = 90) -> tuple[str, list[str]]:
    """commit_transaction (or abort) as librdkafka's contract says: repeated on a
    retriable error, abort_transaction on an abortable one. Returns the outcome
    ("committed" / "aborted") and the errors met."""
    errors: list[str] = []
    t0 = time.monotonic()
    while True:
        try:
            if commit:
                p.commit_transaction(20)
                return "committed", errors
            p.abort_transaction(20)
            return "aborted", errors
        except KafkaException as e:
            err = e.args[0]
            errors.append(str(err))
            assert not err.fatal(), errors
            assert time.monotonic() < t0 + deadline_s, errors
            if err.txn_requires_abort():
                commit = False
            elif not err.retriable():
                raise


@dataclass(frozen=True)
class MarkerSeen:
    broker: int
    partition: int
    offset: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


def _markers(c: Cluster, topic: str, producer_id: int) -> list[MarkerSeen]:
    """The transaction markers of `producer_id` in every broker's copy of `topic`'s
    partitions, read from the segment files."""
    found: list[MarkerSeen] = []
    for bid in c.brokers:
        for part_dir in sorted((c.base / f"broker-{bid}").glob(f"{topic}-*")):
            partition = int(part_dir.name.rpartition("-")[2])
            for segment in sorted(part_dir.glob("*.log")):
                for header, records in iter_batches(segment.read_bytes()):
                    if not header.is_control or header.producer_id != producer_id:
                        continue
                    for r in records:
                        kind, epoch = parse_control_record(r.key, r.value)
                        found.append(MarkerSeen(bid, partition, header.base_offset,
                                                header.producer_epoch,
                                                kind is ControlType.COMMIT, epoch))
    return found


def _log_end(c: Cluster, bid: int, topic: str, partition: int) -> int:
    """The next offset after the last batch in broker `bid`'s copy of the partition."""
    end = 0
    for segment in sorted((c.base / f"broker-{bid}" / f"{topic}-{partition}").glob("*.log")):
        for header, _records in iter_batches(segment.read_bytes()):
            end = max(end, header.next_offset)
    return end


def _producer_id(c: Cluster, bid: int, tid: str) -> int:
    return _listed(c, bid, tid)[1]


def _values(c: Cluster, topic: str) -> list[bytes]:
    return [v for _p, _o, v in read_committed_all(c.bootstrap, topic, timeout=60)]


@soak_only
def test_coordinator_dies_before_prepare_is_replicated(healed: Cluster) -> None:
    c = healed
    create_topics(c, "fo1")
    tid = _tid(c, "fo1")
    coord = coordinator(c, tid, TXN_KEY)
    followers = [b for b in c.brokers if b != coord]
    p = _producer(c, tid)
    p.init_transactions(30)
    values = _begin(p, "fo1", "a")
    paused_at = time.monotonic()
    for b in followers:
        c.pause(b)
    # a fetch the followers had parked at the leader is answered within
    # replica.fetch.wait.max.ms (200 ms), empty: from now on nothing reaches them
    time.sleep(0.6)
    outcome: list[tuple[str, list[str]]] = []
    committer = threading.Thread(target=lambda: outcome.append(_finish(p)), daemon=True)
    committer.start()
    # EndTxn is in: the Prepare is in the coordinator's log only. Kill it well before the
    # followers could leave the ISR (replica.lag.time.max.ms, 3 s here) or lose their
    # ZooKeeper sessions (8 s): an ISR of the dead leader alone would keep the partition
    # offline until it returns, as in Kafka without unclean election
    time.sleep(0.8)
    c.kill(coord)
    paused_for = time.monotonic() - paused_at
    # the scenario's premise, read from the files: the dead coordinator's log holds a
    # record (the Prepare) that neither paused follower has
    state_part = partition_for(tid, TXN_PARTITIONS)
    ends = {b: _log_end(c, b, TXN_STATE, state_part) for b in c.brokers}
    assert all(ends[b] < ends[coord] for b in followers), ends
    for b in followers:
        c.resume(b)
    new = coordinator(c, tid, TXN_KEY, via=followers, not_=coord, timeout=40)
    committer.join(120)
    assert outcome, "commit_transaction never returned"
    result, errors = outcome[0]
    got = _values(c, "fo1")
    if result == "committed":
        assert sorted(got) == sorted(values), "committed: every value once"
    else:
        assert not set(values) & set(got), "aborted: nothing visible"
    after = _begin(p, "fo1", "after")
    assert _finish(p)[0] == "committed"
    got = _values(c, "fo1")
    assert set(after) <= set(got) and len(got) == len(set(got)), "the producer carries on"
    c.restart(coord)
    wait_in_sync(c, timeout=60)
    print(f"\ncoordinator {coord} killed with PrepareCommit unreplicated -> {new}: "
          f"{result} (errors {errors}); followers paused {paused_for:.1f}s; log ends at the "
          f"kill {ends}; "
          f"{wait_no_open_transactions(c)}; "
          f"{wait_identical(c, ['fo1'])}")


@soak_only
def test_partition_leader_dies_with_its_marker_pending(healed: Cluster) -> None:
    c = healed
    leaders = create_topics(c, "fo2")
    tid = _tid(c, "fo2")
    coord = coordinator(c, tid, TXN_KEY)
    part, victim = next((p, leader) for (_t, p), leader in sorted(leaders.items())
                        if leader != coord)
    p = _producer(c, tid)
    p.init_transactions(30)
    values = _begin(p, "fo2", "b")
    pid = _producer_id(c, coord, tid)
    c.pause(victim)
    paused_at = time.monotonic()
    outcome: list[tuple[str, list[str]]] = []
    committer = threading.Thread(target=lambda: outcome.append(_finish(p)), daemon=True)
    committer.start()
    # The Prepare is durable once the coordinator's ISR drops the paused broker
    # (replica.lag.time.max.ms, 3 s here), before its ZooKeeper session expires (8 s):
    # then the markers go out, and land on the other partitions' leaders at once
    others = [q for q in range(3) if q != part]

    def landed_elsewhere() -> bool:
        seen = {m.partition for m in _markers(c, "fo2", pid)
                if m.broker == leaders[("fo2", m.partition)]}
        return set(others) <= seen

    wait_for("the markers of the other partitions", landed_elsewhere, timeout=30, every=0.05)
    pending = [m for m in _markers(c, "fo2", pid) if m.partition == part]
    assert not pending, f"the paused leader's partition has its marker already: {pending}"
    c.kill(victim)
    killed_after = time.monotonic() - paused_at
    t0 = time.monotonic()
    wait_for("CompleteCommit", lambda: _state(c, coord, tid) == "CompleteCommit",
             timeout=60, every=0.2)
    completed_after = time.monotonic() - t0
    committer.join(60)
    assert outcome and outcome[0][0] == "committed", outcome
    def led_again() -> int | None:
        leader = partitions(c, coord, ["fo2"])[("fo2", part)][0]
        return leader if leader not in (victim, -1) else None

    new_leader = wait_for(f"a new leader of fo2-{part}", led_again, timeout=30)
    got = _values(c, "fo2")  # reaches the high watermark: the LSO moved past them
    assert sorted(got) == sorted(values), "every committed value exactly once"
    c.restart(victim)
    wait_in_sync(c, timeout=60)
    identical = wait_identical(c, ["fo2"])
    markers = [m for m in _markers(c, "fo2", pid) if m.broker == new_leader]
    assert sorted(m.partition for m in markers) == [0, 1, 2], markers
    assert all(m.commit for m in markers), markers
    print(f"\nleader {victim} of fo2-{part} paused then killed with its marker pending; "
          f"coordinator {coord}; killed {killed_after:.1f}s into its pause, other markers "
          f"already in; new leader {new_leader}; commit complete "
          f"{completed_after:.1f}s after the kill; {wait_no_open_transactions(c)}; {identical}")


@soak_only
def test_paused_old_coordinator_is_fenced(healed: Cluster) -> None:
    c = healed
    create_topics(c, "fo3")
    tid = _tid(c, "fo3")
    old = coordinator(c, tid, TXN_KEY)
    others = [b for b in c.brokers if b != old]
    state_part = partition_for(tid, TXN_PARTITIONS)
    old_epoch = _leader_epoch(c, old, TXN_STATE, state_part)
    # the old coordinator wakes up with the transaction past its timeout in its memory
    timeout_ms = 18000
    p = _producer(c, tid, **{"transaction.timeout.ms": timeout_ms, "socket.timeout.ms": 4000})
    p.init_transactions(30)
    values = _begin(p, "fo3", "c")
    pid = _producer_id(c, old, tid)
    t0 = time.monotonic()
    c.pause(old)
    new = coordinator(c, tid, TXN_KEY, via=others, not_=old, timeout=40)
    new_epoch = _leader_epoch(c, new, TXN_STATE, state_part)
    result, errors = _finish(p)
    assert result == "committed", errors
    took = time.monotonic() - t0
    wait_for("CompleteCommit at the new coordinator",
             lambda: _state(c, new, tid) == "CompleteCommit", timeout=30)
    time.sleep(max(0.0, timeout_ms / 1000 + 2 - (time.monotonic() - t0)))
    c.resume(old)
    time.sleep(3)  # its timeout checker and marker channel run before it hears the news
    wait_in_sync(c, timeout=60)
    got = _values(c, "fo3")
    assert sorted(got) == sorted(values), "the new coordinator's outcome: committed"
    identical = wait_identical(c, ["fo3"])
    markers = _markers(c, "fo3", pid)
    stale = [m for m in markers if m.coordinator_epoch <= old_epoch or not m.commit]
    assert not stale and not _stale_after_newer(markers), \
        f"markers of the old coordinator (epoch {old_epoch}): {stale}"
    assert {(m.broker, m.partition) for m in markers} == \
        {(b, q) for b in c.brokers for q in range(3)}, markers
    assert len(markers) == 9 and all(m.coordinator_epoch == new_epoch for m in markers), markers
    said = [line[24:] for line in c.brokers[old].log_lines
            if tid in line or f"{TXN_STATE}-{state_part}:" in line]
    print(f"\ncoordinator {old} (epoch {old_epoch}) paused {timeout_ms / 1000 + 2:.0f}s; "
          f"{new} (epoch {new_epoch}) committed after {took:.1f}s (errors {errors}); "
          f"9 COMMIT markers of epoch {new_epoch}, none older; old coordinator said "
          f"{said[-3:]}; {wait_no_open_transactions(c)}; {identical}")


def _stale_after_newer(markers: list[MarkerSeen]) -> list[MarkerSeen]:
    """Markers written after a marker of a newer coordinator epoch in the same copy of
    a partition: what fencing must prevent."""
    stale: list[MarkerSeen] = []
    newest: dict[tuple[int, int], int] = {}
    for m in sorted(markers, key=lambda m: (m.broker, m.partition, m.offset)):
        key = (m.broker, m.partition)
        if m.coordinator_epoch < newest.get(key, -1):
            stale.append(m)
        newest[key] = max(newest.get(key, -1), m.coordinator_epoch)
    return stale


@soak_only
def test_paused_coordinator_with_markers_pending_is_fenced(healed: Cluster) -> None:
    """The old coordinator is paused in PrepareCommit with a marker job still running
    (the leader of one partition, L, paused as well, then killed); the new coordinator
    replays the Prepare and writes its markers; then the old one resumes and its job
    retries the partition whose leader moved."""
    c = healed
    leaders = create_topics(c, "fo5")
    tid = _tid(c, "fo5")
    old = coordinator(c, tid, TXN_KEY)
    part, victim = next((p, leader) for (_t, p), leader in sorted(leaders.items())
                        if leader != old)
    third = next(b for b in c.brokers if b not in (old, victim))
    state_part = partition_for(tid, TXN_PARTITIONS)
    old_epoch = _leader_epoch(c, old, TXN_STATE, state_part)
    p = _producer(c, tid)
    p.init_transactions(30)
    values = _begin(p, "fo5", "e")
    pid = _producer_id(c, old, tid)
    c.pause(victim)
    outcome: list[tuple[str, list[str]]] = []
    committer = threading.Thread(target=lambda: outcome.append(_finish(p)), daemon=True)
    committer.start()

    def landed_elsewhere() -> bool:
        seen = {m.partition for m in _markers(c, "fo5", pid)
                if m.broker == leaders[("fo5", m.partition)]}
        return {q for q in range(3) if q != part} <= seen

    wait_for("the markers of the other partitions", landed_elsewhere, timeout=30, every=0.05)
    assert not [m for m in _markers(c, "fo5", pid) if m.partition == part]
    c.pause(old)  # in PrepareCommit, its marker to the paused leader outstanding
    c.kill(victim)
    new = coordinator(c, tid, TXN_KEY, via=[third], not_=old, timeout=40)
    assert new == third
    c.restart(victim)  # __transaction_state needs 2 in-sync replicas for the new writes
    wait_for("CompleteCommit at the new coordinator",
             lambda: _state(c, new, tid) == "CompleteCommit", timeout=60, every=0.2)
    new_epoch = _leader_epoch(c, new, TXN_STATE, state_part)
    c.resume(old)
    time.sleep(3)  # its marker job retries before it hears that it was deposed
    committer.join(60)
    assert outcome and outcome[0][0] == "committed", outcome
    wait_in_sync(c, timeout=60)
    got = _values(c, "fo5")
    assert sorted(got) == sorted(values), "committed, every value once"
    identical = wait_identical(c, ["fo5"])
    markers = _markers(c, "fo5", pid)
    assert not _stale_after_newer(markers), markers
    assert all(m.commit for m in markers), markers
    # the new coordinator wrote the marker of the partition whose leader died
    assert {m.coordinator_epoch for m in markers if m.partition == part} == {new_epoch}, markers
    fenced = [line for line in c.brokers[old].log_lines if "newer coordinator" in line]
    print(f"\ncoordinator {old} (epoch {old_epoch}) paused in PrepareCommit with the marker "
          f"of fo5-{part} pending (leader {victim} paused, killed); {new} (epoch {new_epoch}) "
          f"finished; markers (partition, coordinator epoch) "
          f"{sorted({(m.partition, m.coordinator_epoch) for m in markers})}; the old one "
          f"said {fenced[:1]}; {wait_no_open_transactions(c)}; {identical}")


def _offset_fetch(c: Cluster, bid: int, group: str, topic: str) -> list[int]:
    r = ask(c, bid, 9, 7, {"group_id": group, "require_stable": True,
                           "topics": [{"name": topic, "partition_indexes": [0, 1, 2]}]})
    assert r.error_code == 0, r
    parts = [q for t in r.topics for q in t.partitions]
    assert all(q.error_code == 0 for q in parts), r
    return [int(q.committed_offset) for q in sorted(parts, key=lambda q: q.partition_index)]


@soak_only
@pytest.mark.parametrize("commit", [True, pytest.param(False, marks=SOAK_ONLY)],
                         ids=["commit", "abort"])
def test_txn_offsets_while_the_group_coordinator_moves(healed: Cluster, commit: bool) -> None:
    c = healed
    topic = f"fo4-{'c' if commit else 'a'}"
    src = f"{topic}-src"
    create_topics(c, topic, src)
    group = f"fo4-group-{'c' if commit else 'a'}"
    gcoord = coordinator(c, group, GROUP_KEY)
    tid = _tid(c, f"fo4-{commit}", not_on=gcoord)
    p = _producer(c, tid)
    p.init_transactions(30)
    meta = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group}
                    ).consumer_group_metadata()
    # a first committed transaction: the offsets an abort must leave in place
    _begin(p, topic, "first")
    p.send_offsets_to_transaction([TopicPartition(src, q, 5) for q in range(3)], meta, 30)
    assert _finish(p)[0] == "committed"
    # UNSTABLE_OFFSET_COMMIT (retried) until the marker reaches __consumer_offsets:
    # commit_transaction returns once the Prepare is durable, as in Kafka
    wait_for("the first offsets", lambda: _offset_fetch(c, gcoord, group, src) == [5, 5, 5],
             timeout=30)
    values = _begin(p, topic, "second")
    p.send_offsets_to_transaction([TopicPartition(src, q, 9 + q) for q in range(3)],
                                  meta, 30)
    c.kill(gcoord)
    result, errors = _finish(p, commit=commit)
    assert result == ("committed" if commit else "aborted"), errors
    survivors = [b for b in c.brokers if b != gcoord]
    new = coordinator(c, group, GROUP_KEY, via=survivors, not_=gcoord, timeout=40)
    expected = [9, 10, 11] if commit else [5, 5, 5]
    wait_for(f"offsets {expected} (require_stable) at {new}",
             lambda: _offset_fetch(c, new, group, src) == expected, timeout=60)
    got = _values(c, topic)
    assert (set(values) <= set(got)) == commit and len(got) == len(set(got)), got
    c.restart(gcoord)
    wait_in_sync(c, timeout=60)
    # the restarted broker may lead the group again: it agrees
    wait_for("the same offsets after the restart", lambda: _offset_fetch(
        c, coordinator(c, group, GROUP_KEY), group, src) == expected, timeout=30)
    print(f"\ngroup coordinator {gcoord} killed after TxnOffsetCommit -> {new}; "
          f"{result} (errors {errors}); offsets {expected}; {wait_no_open_transactions(c)}; "
          f"{wait_identical(c, [topic, src])}")

