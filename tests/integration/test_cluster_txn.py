"""Transactions on a 3-broker cluster: coordinators on other brokers than the partitions'
leaders, and the coordinator's broker killed (kill -9) while transactions go on.

ZooKeeper and three real broker processes (tests/integration/cluster_txn_util.py: every
topic, internal ones included, replication factor 3 and min.insync.replicas 2), with
confluent-kafka as the client and kafka-python's admin client as the oracle for
ListTransactions / DescribeTransactions.

1. A transaction writes to partitions led by different brokers, commits offsets of a
   group (TxnOffsetCommit: a marker in `__consumer_offsets` too) and commits; an
   aborted one and a committed one follow. A read_committed consumer reads exactly the
   committed values, once each; read_uncommitted proves the aborted ones are in the
   log; the group's offsets are the committed transactions'. ListTransactions on every
   broker shows the id only on its coordinator (FindCoordinator), DescribeTransactions
   its state and partitions while it is open and after. The end checks are shown to
   bite: they see the open transaction, and a byte flipped in one replica.
2. The history workload's workers (tests/integration/test_txn_history.py: transactions
   of 1-4 values, a fifth aborted, read_committed polls) run while the test kills the
   broker coordinating a worker's transactional id (`make soak`: four times, each new
   coordinator the next victim). The workers carry on as Kafka clients do (retry,
   abort, or a new producer whose InitProducerId fences the old one); the history
   checker finds nothing lost, duplicated, aborted-but-read or torn; each worker
   committed transactions begun after each kill; nothing stays open and replicas are
   identical.
3. The coordinator's broker dies (`tidegate.test.fault.point`) at each point of
   finishing a commit in turn, on brokers 1, 2, 3 and 1 again of one cluster: after
   PrepareCommit is durable, between markers, before CompleteCommit, and once
   CompleteCommit is appended but not yet replicated (the new coordinator finds
   PrepareCommit and finishes again; the victim's record is truncated). The victim is
   restarted with the fault point and given back its preferred `__transaction_state`
   leaderships (ElectLeaders), so that it coordinates the transaction; when it dies, another broker
   becomes the coordinator and finishes the commit (DescribeTransactions there:
   CompleteCommit), the producer's commit_transaction succeeds, and read_committed shows
   every value and the offsets before the victim returns.

`make test`: about 2 minutes in all.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka.admin import KafkaAdminClient, TransactionDescription
from tests.integration.cluster import Cluster, diverging_replicas, wait_for
from tests.integration.cluster_txn_util import (
    TXN_KEY,
    TXN_STATE,
    ask,
    coordinator,
    create_topics,
    open_transactions,
    read_all,
    running,
    txn_cluster,
    wait_identical,
    wait_in_sync,
    wait_no_open_transactions,
)
from tests.integration.history import History, Op, Read, check
from tests.integration.test_eos_pipeline import read_committed_all
from tests.integration.test_txn_history import PARTITIONS, TOPIC, Worker

SOAK = bool(os.environ.get("TIDEGATE_SOAK"))


def _producer(c: Cluster, tid: str, **extra: object) -> Producer:
    debug = {"debug": os.environ["RDKAFKA_DEBUG"]} if os.environ.get("RDKAFKA_DEBUG") else {}
    return Producer({"bootstrap.servers": c.bootstrap, "transactional.id": tid,
                     "transaction.timeout.ms": 10000, "linger.ms": 2, **debug, **extra})


def _wait_described(c: Cluster, tid: str, state: str, timeout: float = 30
                    ) -> TransactionDescription:
    """kafka-python's DescribeTransactions of `tid` once it shows `state` (retried while
    the coordinator moves: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS)."""
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=10000)
    try:
        def described() -> TransactionDescription | None:
            d: TransactionDescription = admin.describe_transactions([tid])[tid]
            return d if d.state.value == state else None

        found = wait_for(f"{tid} in state {state}", described, timeout=timeout, every=0.3)
        assert isinstance(found, TransactionDescription)
        return found
    finally:
        admin.close()


def _committed(c: Cluster, group: str, topic: str, n: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group})
    try:
        tps = [TopicPartition(topic, p) for p in range(n)]
        return [tp.offset for tp in consumer.committed(tps, timeout=20)]
    finally:
        consumer.close()


def test_transactions_across_brokers(tmp_path: Path) -> None:
    c = txn_cluster(tmp_path)
    c.start()
    kadmin: KafkaAdminClient | None = None
    try:
        leaders = create_topics(c, "orders", "src")
        order_leaders = {leaders[("orders", p)] for p in range(PARTITIONS)}
        assert len(order_leaders) >= 2, f"partitions led by one broker only: {leaders}"
        tid, group = "tx-orders", "orders-group"
        coord = coordinator(c, tid, TXN_KEY)
        p = _producer(c, tid)
        p.init_transactions(30)
        group_meta = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group}
                              ).consumer_group_metadata()

        def txn(tag: str, offsets: list[int] | None, commit: bool) -> list[bytes]:
            values = [f"{tag}-{i}".encode() for i in range(30)]
            p.begin_transaction()
            for i, v in enumerate(values):
                p.produce("orders", value=v, partition=i % PARTITIONS)
            if offsets is not None:
                p.send_offsets_to_transaction(
                    [TopicPartition("src", i, o) for i, o in enumerate(offsets)], group_meta, 30)
            if commit:
                p.commit_transaction(30)
            else:
                p.flush(30)  # the aborted records reach the log first
                p.abort_transaction(30)
            return values

        first = txn("a", [10, 20, 30], commit=True)
        aborted = txn("b", [99, 99, 99], commit=False)

        # an open transaction, as the admin clients show it
        p.begin_transaction()
        p.produce("orders", value=b"c-open", partition=0)
        p.produce("orders", value=b"c-open", partition=1)
        p.flush(30)
        kadmin = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=20000)
        listed = kadmin.list_transactions()
        holders = {bid: [(t.transactional_id, t.state.value) for t in rows]
                   for bid, rows in listed.items() if any(t.transactional_id == tid for t in rows)}
        assert sorted(listed) == [1, 2, 3], listed
        assert holders == {coord: [(tid, "Ongoing")]}, (coord, listed)
        assert open_transactions(c) == [(coord, tid, "Ongoing")]  # the end checks see it
        described = kadmin.describe_transactions([tid])[tid]
        assert described.coordinator_id == coord
        assert described.state.value == "Ongoing"
        assert {(tp.topic, tp.partition) for tp in described.topic_partitions} == \
            {("orders", 0), ("orders", 1)}
        p.abort_transaction(30)

        last = txn("d", [15, 25, 35], commit=True)

        committed = [v for _p, _o, v in read_committed_all(c.bootstrap, "orders")]
        assert sorted(committed) == sorted(first + last), "committed values, once each"
        everything = [v for _p, _o, v in read_all(c.bootstrap, "orders", "read_uncommitted")]
        assert set(aborted) <= set(everything) and b"c-open" in everything, \
            "the aborted records are in the log (read_uncommitted sees them)"
        assert _committed(c, group, "src", PARTITIONS) == [15, 25, 35]

        done = _wait_described(c, tid, "CompleteCommit", timeout=5)
        assert done.coordinator_id == coord and done.topic_partitions == set(), done
        assert [t.state.value for rows in kadmin.list_transactions().values()
                for t in rows if t.transactional_id == tid] == ["CompleteCommit"]
        print(f"\ncoordinator {coord}, orders leaders {sorted(order_leaders)}; "
              f"{wait_no_open_transactions(c)}; {wait_identical(c, ['orders', 'src'])}")
    except BaseException:
        print(c.failure_report())
        raise
    finally:
        if kadmin is not None:
            kadmin.close()
        c.stop()
    # the end checks' replica comparison sees a single flipped byte
    segment = next((tmp_path / "broker-3" / "orders-0").glob("*.log"))
    data = bytearray(segment.read_bytes())
    data[-1] ^= 1
    segment.write_bytes(bytes(data))
    assert diverging_replicas(c, ["orders"]) == ["orders-0"]


@pytest.mark.slow
@pytest.mark.skipif(not SOAK, reason="soak run: `make soak` (TIDEGATE_SOAK=1)")
def test_txn_coordinator_killed_mid_stream(tmp_path: Path) -> None:
    rounds = 4 if SOAK else 1
    c = txn_cluster(tmp_path)
    c.start()
    history = History()
    workers: list[Worker] = []
    try:
        create_topics(c, TOPIC)
        # the workers stop 3 s after the last round (stop_at is read as they go)
        workers = [Worker(i, c, history, time.monotonic() + 300, seed=40 + i)
                   for i in range(2)]
        for w in workers:
            w.start()
        kills: list[tuple[int, float, float]] = []  # victim, kill time, failover seconds
        time.sleep(3)
        for _ in range(rounds):
            victim = coordinator(c, "queue-0", TXN_KEY)
            survivors = [b for b in c.brokers if b != victim]
            t0 = time.monotonic()
            c.kill(victim)
            history.add("nemesis", "info", "kill", victim)
            coordinator(c, "queue-0", TXN_KEY, via=survivors, timeout=30, not_=victim)
            kills.append((victim, t0, time.monotonic() - t0))
            time.sleep(3)  # transactions go on with the new coordinator, one broker down
            c.restart(victim)
            wait_in_sync(c, timeout=60)
            time.sleep(2)
        for w in workers:
            w.stop_at = time.monotonic() + 3
        for w in workers:
            w.join(120)
        assert not any(w.is_alive() for w in workers), "a worker did not stop"
        final = read_committed_all(c.bootstrap, TOPIC, timeout=60)
        history.add("final", "ok", "final-read", [Read(p, o, v.decode()) for p, o, v in final])
        after = f"{wait_no_open_transactions(c)}; {wait_identical(c, [TOPIC])}"
    except BaseException:
        print(c.failure_report())
        raise
    finally:
        c.stop()
    report = check(history.ops)
    committed = _committed_txns(history.ops)
    # each worker committed transactions begun after each kill (before the next one)
    ends = [t0 for _v, t0, _f in kills[1:]] + [float("inf")]
    after_kill = {(w.idx, k): sum(1 for proc, at in committed
                                  if proc == w.idx and t0 < at < ends[k])
                  for w in workers for k, (_v, t0, _f) in enumerate(kills)}
    summary = (f"{report.summary()}\nkills (victim, failover s): "
               f"{[(v, round(f, 2)) for v, _t, f in kills]}; commits invoked after each "
               f"kill {after_kill}; producers made {[w.producers_made for w in workers]}; "
               f"client errors {[e for w in workers for e in w.errors][:6]}; {after}")
    print(summary)
    assert not [e for w in workers for e in w.errors if e.startswith("worker crashed")], summary
    assert report.valid, summary
    assert report.stats["ok"] >= 20 and report.stats["fail"] >= 3, summary
    assert all(n > 0 for n in after_kill.values()), summary


def _committed_txns(ops: list[Op]) -> list[tuple[int | str, float]]:
    """(process, monotonic time in s of its invoke) of every committed (ok) txn."""
    invoked: dict[int | str, float] = {}
    out = []
    for op in ops:
        if op.f != "txn":
            continue
        if op.type == "invoke":
            invoked[op.process] = op.time_ns / 1e9
        elif op.type == "ok":
            out.append((op.process, invoked[op.process]))
    return out


FAULT = "tidegate.test.fault.point"
ALL_POINTS = ("after-prepare-durable", "between-markers", "before-complete",
              "after-complete-appended")
# make test: the seeds' headline case (the coordinator dies once PrepareCommit is in the
# ISR; the next one must send the markers); make soak: every point
POINTS = ALL_POINTS if SOAK else ALL_POINTS[:1]


def _arm(c: Cluster, bid: int, point: str) -> str:
    """Restarts broker `bid` with the fault point `point`, gives it back the leadership
    of its preferred `__transaction_state` partitions (it has none after a restart) and
    returns a transactional id it coordinates."""
    c.brokers[bid].stop()  # controlled shutdown: its leaderships move first
    c.brokers[bid].overrides[FAULT] = point
    c.restart(bid)
    wait_in_sync(c, timeout=60)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    tps = [TopicPartition(TXN_STATE, p) for p in range(50)]
    admin.elect_leaders(ElectionType.PREFERRED, tps).result(30)

    def led_id() -> str | None:
        for i in range(100):
            tid = f"fp-{point}-{i}"
            if coordinator(c, tid, TXN_KEY) == bid:
                return tid
        return None

    tid = wait_for(f"a transactional id coordinated by broker {bid}", led_id, timeout=30)
    assert isinstance(tid, str)
    # each broker learns of the election from its own ZooKeeper watch: until all have,
    # a client may be sent to the previous leader. The test is about the fault point,
    # so it starts once every broker names `bid`
    for other in running(c):
        wait_for(f"broker {other} to name broker {bid} coordinator of {tid}",
                 lambda other=other: coordinator(c, tid, TXN_KEY, via=[other]) == bid,
                 timeout=30)
    return tid


def _commit_and_lose_the_coordinator(c: Cluster, victim: int, tid: str, group: str,
                                     round_: int) -> str:
    """A transaction of 30 values over 3 partitions + offsets, committed; the victim (its
    coordinator) dies at its fault point; another broker must finish the commit."""
    point = c.brokers[victim].overrides[FAULT]
    p = _producer(c, tid, **{"transaction.timeout.ms": 30000, "message.timeout.ms": 30000})
    p.init_transactions(30)
    meta = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group}
                    ).consumer_group_metadata()
    values = [f"r{round_}-v{i}".encode() for i in range(30)]
    p.begin_transaction()
    for i, v in enumerate(values):
        p.produce("fp", value=v, partition=i % PARTITIONS)
    p.send_offsets_to_transaction([TopicPartition("src", 0, 10 + round_)], meta, 30)
    t0 = time.monotonic()
    errors: list[str] = []
    while True:  # librdkafka's contract: repeat commit_transaction on retriable errors
        try:
            p.commit_transaction(20)
            break
        except KafkaException as e:
            err = e.args[0]
            errors.append(str(err))
            assert err.retriable() and not err.txn_requires_abort(), \
                f"{point}: the commit was decided (PrepareCommit durable), yet: {errors}"
            assert time.monotonic() < t0 + 60, errors
    committed_after = time.monotonic() - t0
    proc = c.brokers[victim].proc
    assert proc is not None
    proc.wait(30)
    assert f"test fault point {point} reached" in c.brokers[victim].logs()
    survivors = [b for b in c.brokers if b != victim]
    new = coordinator(c, tid, TXN_KEY, via=survivors, not_=victim)
    done = _wait_described(c, tid, "CompleteCommit")
    assert done.coordinator_id == new, (done, new)
    # before the victim comes back: every value once, the offsets committed
    got = {v for _p, _o, v in read_committed_all(c.bootstrap, "fp", timeout=60)}
    assert set(values) <= got, f"{point}: missing {sorted(set(values) - got)[:10]}"
    assert _committed(c, group, "src", 1) == [10 + round_], point
    # the victim returns without its fault point; the id starts cleanly
    c.brokers[victim].overrides.pop(FAULT)
    c.restart(victim)
    p.begin_transaction()
    p.produce("fp", value=f"r{round_}-after".encode(), partition=0)
    p.commit_transaction(30)
    return (f"{point}: coordinator {victim} -> {new}, commit returned after "
            f"{committed_after:.1f}s (retried on {errors})")


def test_coordinator_killed_while_finishing_a_commit(tmp_path: Path) -> None:
    """Each fault point in turn on brokers 1, 2, 3 of one cluster."""
    c = txn_cluster(tmp_path)
    c.start()
    rounds: list[str] = []
    try:
        create_topics(c, "fp", "src")
        # the first FindCoordinator of a group creates __consumer_offsets and answers its
        # leader in the same request: COORDINATOR_NOT_AVAILABLE there left librdkafka's
        # send_offsets_to_transaction waiting for a broker state change, past the
        # transaction timeout (handlers/find_coordinator.py)
        first = ask(c, 2, 10, 3, {"key": "fp-0", "key_type": 0})
        assert first.error_code == 0 and first.node_id in c.brokers, first
        for r, point in enumerate(POINTS):
            victim = r % len(c.brokers) + 1
            tid = _arm(c, victim, point)
            rounds.append(_commit_and_lose_the_coordinator(c, victim, tid, f"fp-{r}", r))
            wait_in_sync(c, timeout=60)
        got = [v for _p, _o, v in read_committed_all(c.bootstrap, "fp", timeout=60)]
        expected = [f"r{r}-v{i}".encode() for r in range(len(POINTS)) for i in range(30)] + \
            [f"r{r}-after".encode() for r in range(len(POINTS))]
        assert sorted(got) == sorted(expected), "every committed value once, nothing else"
        print("\n" + "\n".join(rounds) + f"\n{wait_no_open_transactions(c)}; "
              f"{wait_identical(c, ['fp', 'src'])}")
    except BaseException:
        print("\n".join(rounds) + "\n" + c.failure_report())
        raise
    finally:
        c.stop()
