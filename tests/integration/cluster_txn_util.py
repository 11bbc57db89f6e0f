"""Exactly-once on a 3-broker cluster: what test_cluster_txn.py and test_cluster_eos.py
share.

- `txn_cluster`: a `Cluster` (tests/integration/cluster.py) configured as the
  exactly-once tests want it: internal topics with replication factor 3 and
  `transaction.state.log.min.isr` 2, user topics RF 3 with `min.insync.replicas` 2, and
  the quick abort of timed-out transactions of the single-broker tests.
- Questions asked of one exact broker over a raw connection (`RawClient`), because
  librdkafka would ask whichever broker it likes: who coordinates a key
  (FindCoordinator), what a broker's metadata says, which transactions a broker's
  coordinator shards hold open (ListTransactions, asked of every broker: each lists
  only the `__transaction_state` partitions it leads).
- Checks after a run: no open transaction anywhere, every partition (user and internal)
  byte-identical on the three brokers.
- `ClusterTarget`: the `Target` of the single-broker workloads
  (tests/integration/test_eos_pipeline.py) for the cluster. Its faults pick a victim by
  role — the transaction coordinator of one of the workload's transactional ids, the
  group coordinator of its group, or the leader of one of its partitions — and kill it
  (kill -9, restarted after 0.5-6 s: before or after its ZooKeeper session of 4 s
  expires), pause it (SIGSTOP for 1-8 s: beyond the session, it wakes up as a deposed
  leader and coordinator) or cut it off from ZooKeeper and the other brokers with
  iptables (tests/integration/netpartition.py, when this machine allows it). One fault
  at a time: each ends with every partition led and fully in sync again, so that two
  overlapping faults never take a partition below `min.insync.replicas` for long.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.cluster import Cluster, diverging_replicas, wait_for
from tests.integration.netpartition import Host, Network, PartitionUnavailable
from tests.integration.rawclient import RawClient
from tests.integration.test_eos_pipeline import PARTITIONS, TXN_OVERRIDES

OFFSETS = "__consumer_offsets"
TXN_STATE = "__transaction_state"
INTERNAL = (OFFSETS, TXN_STATE)
GROUP_KEY, TXN_KEY = 0, 1
# states in which a transaction holds nothing open (ListTransactions lists them too)
DONE_STATES = frozenset({"Empty", "CompleteCommit", "CompleteAbort", "Dead"})
ROLES = ("leader", "txn coordinator", "group coordinator")  # whom ClusterTarget's faults hit

TXN_CLUSTER_OVERRIDES = {
    **TXN_OVERRIDES,
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
}


def txn_cluster(base: Path, overrides: dict[str, str] | None = None) -> Cluster:
    return Cluster(base, 3, {**TXN_CLUSTER_OVERRIDES, **(overrides or {})})


def ask(c: Cluster, bid: int, api_key: int, version: int, data: dict[str, Any],
        timeout: float = 5.0) -> Any:
    """One request to exactly broker `bid`."""
    client = RawClient(c.brokers[bid].bootstrap, timeout=timeout)
    try:
        return client.call(api_key, version, data)
    finally:
        client.close()


def running(c: Cluster) -> list[int]:
    return [bid for bid, b in c.brokers.items() if b.proc is not None and b.proc.poll() is None]


def coordinator(c: Cluster, key: str, key_type: int, via: Iterable[int] | None = None,
                timeout: float = 30.0, not_: int | None = None) -> int:
    """The broker that coordinates `key` (a transactional id or a group), as the first
    broker of `via` (default: the running ones) that knows answers; with `not_`, waits
    until that answer is another broker (a dead coordinator stays in the metadata until
    the controller sees its ZooKeeper session expire)."""
    def ask_all() -> int | None:
        for bid in via if via is not None else running(c):
            try:
                r = ask(c, bid, 10, 3, {"key": key, "key_type": key_type})
            except OSError:
                continue
            if r.error_code == 0 and r.node_id != not_:
                return int(r.node_id)
        return None

    node = wait_for(f"the coordinator of {key!r}", ask_all, timeout=timeout)
    assert isinstance(node, int)
    return node


PartitionKey = tuple[str, int]


def partitions(c: Cluster, via: int, topics: Iterable[str] | None = None
               ) -> dict[PartitionKey, tuple[int, tuple[int, ...]]]:
    """(topic, partition) -> (leader, ISR) in broker `via`'s metadata; every topic,
    internal ones included, when `topics` is None."""
    wanted = None if topics is None else [{"name": t} for t in topics]
    md = ask(c, via, 3, 12, {"topics": wanted, "allow_auto_topic_creation": False})
    out: dict[PartitionKey, tuple[int, tuple[int, ...]]] = {}
    for t in md.topics:
        if t.error_code != 0:
            continue
        for p in t.partitions:
            out[(t.name, p.partition_index)] = (p.leader_id, tuple(sorted(p.isr_nodes)))
    return out


def not_in_sync(c: Cluster, topics: Iterable[str] | None = None) -> list[str]:
    """Partitions that some running broker's metadata shows without a leader or
    without the full ISR (every broker; empty list: all in sync)."""
    wanted = None if topics is None else list(topics)
    bad: list[str] = []
    for bid in running(c):
        try:
            view = partitions(c, bid, wanted)
        except OSError as e:
            bad.append(f"broker {bid}: {e}")
            continue
        if wanted is not None and {t for t, _p in view} != set(wanted):
            bad.append(f"broker {bid} lacks topics {set(wanted) - {t for t, _p in view}}")
        bad += [f"{t}-{p} on broker {bid}: leader {leader}, ISR {isr}"
                for (t, p), (leader, isr) in sorted(view.items())
                if leader < 0 or len(isr) < len(c.brokers)]
    return bad


def wait_in_sync(c: Cluster, topics: Iterable[str] | None = None, timeout: float = 60) -> None:
    last: list[str] = []

    def check() -> bool:
        nonlocal last
        last = not_in_sync(c, topics)
        return not last

    try:
        wait_for("every partition led and fully in sync", check, timeout=timeout, every=0.3)
    except AssertionError as e:
        raise AssertionError(f"{e}: {last[:8]}") from None


def create_topics(c: Cluster, *topics: str, partitions_: int = PARTITIONS
                  ) -> dict[PartitionKey, int]:
    """RF 3, `min.insync.replicas` 2; returns each partition's leader once all are led
    and fully in sync."""
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    new = [NewTopic(t, partitions_, 3, config={"min.insync.replicas": "2"}) for t in topics]
    for f in admin.create_topics(new).values():
        f.result(30)
    wait_in_sync(c, topics)
    return {k: leader for k, (leader, _isr) in partitions(c, running(c)[0], topics).items()}


def open_transactions(c: Cluster) -> list[tuple[int, str, str]]:
    """(broker, transactional id, state) of every transaction not in a final state, from
    ListTransactions on every broker. Raises AssertionError if a broker does not answer
    cleanly (a shard still loading, a broker unreachable): callers retry."""
    found: list[tuple[int, str, str]] = []
    for bid in c.brokers:
        try:
            r = ask(c, bid, 66, 0, {"state_filters": [], "producer_id_filters": []})
        except OSError as e:
            raise AssertionError(f"broker {bid}: ListTransactions failed: {e}") from None
        if r.error_code != 0:
            raise AssertionError(f"broker {bid}: ListTransactions error {r.error_code!r}")
        found += [(bid, t.transactional_id, t.transaction_state) for t in r.transaction_states
                  if t.transaction_state not in DONE_STATES]
    return found


def wait_no_open_transactions(c: Cluster, timeout: float = 60) -> str:
    """Waits until no broker lists an open transaction (an abandoned one is aborted
    after its transaction.timeout.ms). Returns a summary for the test's report."""
    last: object = None
    t0 = time.monotonic()

    def none_open() -> bool:
        nonlocal last
        try:
            last = open_transactions(c)
        except AssertionError as e:
            last = str(e)
            return False
        return last == []

    try:
        wait_for("no open transaction on any broker", none_open, timeout=timeout, every=0.5)
    except AssertionError:
        raise AssertionError(f"transactions still open after {timeout}s "
                             f"(ListTransactions on every broker): {last}") from None
    return f"no open transaction (ListTransactions x{len(c.brokers)}, " \
           f"{time.monotonic() - t0:.1f}s)"


def wait_identical(c: Cluster, topics: Iterable[str], timeout: float = 60) -> str:
    """Waits until every partition of `topics` and of the internal topics is
    byte-identical on every broker; returns a summary."""
    names = [*topics, *INTERNAL]
    last: list[str] = []

    def check() -> bool:
        nonlocal last
        last = diverging_replicas(c, names)
        return not last

    try:
        wait_for("byte-identical replicas", check, timeout=timeout, every=0.5)
    except AssertionError:
        raise AssertionError(f"replicas differ after {timeout}s: {last[:10]}") from None
    count = sum(1 for d in (c.base / "broker-1").iterdir()
                if d.is_dir() and d.name.rpartition("-")[0] in names)
    return f"{count} partitions byte-identical on {len(c.brokers)} brokers"


def read_all(bootstrap: str, topic: str, isolation: str, timeout: float = 30
             ) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record `isolation` lets a consumer read,
    from the start of every partition to where the consumer's fetches stop."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.monotonic_ns()}",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "enable.partition.eof": True})
    try:
        n = len(c.list_topics(topic, timeout=10).topics[topic].partitions)
        c.assign([TopicPartition(topic, p, 0) for p in range(n)])
        out: list[tuple[int, int, bytes]] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < n and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                err, partition = m.error(), int(m.partition() or 0)
                if err is None:
                    out.append((partition, int(m.offset() or 0), bytes(m.value() or b"")))
                elif err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(partition)
        return out
    finally:
        c.close()


class ClusterTarget:
    """A `Target` (tests/integration/test_eos_pipeline.py) on 3 brokers. `txn_ids` and
    `groups` name the workload's transactional ids and groups, whose coordinators the
    faults aim at; `faults` the kinds allowed ("partition" is dropped, and said so, when
    iptables cannot be used here), `roles` the victims' roles."""

    def __init__(self, base: Path, txn_ids: Iterable[str], groups: Iterable[str],
                 faults: Iterable[str] = ("kill", "pause", "partition"),
                 roles: Iterable[str] = ROLES,
                 overrides: dict[str, str] | None = None) -> None:
        self.cluster = txn_cluster(base, overrides)
        self.txn_ids, self.groups = list(txn_ids), list(groups)
        self.kinds = list(faults)
        self.roles = [r for r in roles if (r != "txn coordinator" or self.txn_ids)
                      and (r != "group coordinator" or self.groups)]
        self.topics: list[str] = []
        self.net: Network | None = None
        self.hosts: dict[int, Host] = {}
        self.done: list[str] = []  # what the faults did, in order
        self.no_partitions = ""

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    def start(self) -> None:
        if "partition" in self.kinds:
            try:
                self.net = Network()
            except PartitionUnavailable as e:
                self.kinds.remove("partition")
                self.no_partitions = f"no network partitions: {e}"
                print(self.no_partitions)
            else:
                for bid, b in self.cluster.brokers.items():
                    self.hosts[bid] = self.net.add_host(f"broker-{bid}", [b.port])
                    b.group = self.hosts[bid].gid
        self.cluster.start()

    def stop(self) -> None:
        try:
            if self.net is not None:
                self.net.heal_all()
            self.cluster.stop()
        finally:
            if self.net is not None:
                self.net.close()
            for bid, b in self.cluster.brokers.items():
                (self.cluster.base / f"broker-{bid}.out").write_text(b.logs())
            print(f"faults: {self.done}\nbroker logs: {self.cluster.base}/broker-N.out")

    def create_topics(self, *topics: str, partitions: int = PARTITIONS) -> None:
        create_topics(self.cluster, *topics, partitions_=partitions)
        self.topics += topics

    def victim(self, rng: random.Random) -> tuple[int, str]:
        role = rng.choice(self.roles)
        if role == "txn coordinator":
            tid = rng.choice(self.txn_ids)
            return coordinator(self.cluster, tid, TXN_KEY), f"txn coordinator of {tid}"
        if role == "group coordinator":
            group = rng.choice(self.groups)
            return coordinator(self.cluster, group, GROUP_KEY), f"group coordinator of {group}"
        view = partitions(self.cluster, rng.choice(running(self.cluster)), self.topics)
        (topic, p), (leader, _isr) = rng.choice(sorted(view.items()))
        return leader, f"leader of {topic}-{p}"

    def fault(self, rng: random.Random, note: Callable[[str], object],
              kind: str | None = None) -> str:
        kind = kind or rng.choice(self.kinds)
        assert kind in self.kinds, kind
        bid, role = self.victim(rng)
        what = f"{kind} broker {bid} ({role})"
        note(what)
        t0 = time.monotonic()
        if kind == "kill":
            self.cluster.kill(bid)
            time.sleep(rng.uniform(0.5, 6.0))
            self.cluster.restart(bid)
        elif kind == "pause":
            self.cluster.pause(bid)
            try:
                time.sleep(rng.uniform(1.0, 8.0))
            finally:
                self.cluster.resume(bid)
        else:
            assert self.net is not None
            self.net.isolate(self.hosts[bid])
            try:
                time.sleep(rng.uniform(5.0, 9.0))
            finally:
                self.net.heal(self.hosts[bid])
        t1 = time.monotonic()
        wait_in_sync(self.cluster, timeout=90)
        self.done.append(f"{what}: {t1 - t0:.1f}s, in sync {time.monotonic() - t1:.1f}s later")
        return kind

    def heal(self) -> None:
        if self.net is not None:
            self.net.heal_all()
        for bid, b in self.cluster.brokers.items():
            if b.proc is None or b.proc.poll() is not None:
                self.cluster.restart(bid)
            else:
                self.cluster.resume(bid)
        wait_in_sync(self.cluster, timeout=90)

    def check_after(self) -> str:
        return (f"{wait_no_open_transactions(self.cluster)}; "
                f"{wait_identical(self.cluster, self.topics)}")

    def error_lines(self) -> list[str]:
        return [f"broker {bid}: {line}" for bid, b in self.cluster.brokers.items()
                for line in b.log_lines if " ERROR " in line or "Traceback" in line]
