"""KIP-848 (`group.protocol=consumer`) with librdkafka consumers on a real broker.

One broker for the module, with a short consumer session (3 s) and heartbeat interval
(300 ms) so that membership changes settle in about a second.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.conftest import BrokerProcess

pytestmark = pytest.mark.interop

PARTITIONS = 12


@pytest.fixture(scope="module")
def kbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("kip848") / "data", overrides={
        "group.consumer.session.timeout.ms": "3000",
        "group.consumer.heartbeat.interval.ms": "300",
        "group.initial.rebalance.delay.ms": "0",  # classic groups (the mixed-group test)
    })
    b.start()
    try:
        yield b
    finally:
        b.stop()


def _topic(b: BrokerProcess, name: str, n: int) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(name, str(i).encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0


def _consumer(b: BrokerProcess, group: str, **extra: Any) -> Consumer:
    return Consumer({"bootstrap.servers": b.bootstrap, "group.id": group,
                     "group.protocol": "consumer", "auto.offset.reset": "earliest", **extra})


def _parts(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def _poll_until(cs: list[Consumer], done: Any, timeout: float = 20.0) -> dict[int, set[bytes]]:
    got: dict[int, set[bytes]] = {i: set() for i in range(len(cs))}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for i, c in enumerate(cs):
            m = c.poll(0.05)
            if m is not None and m.error() is None:
                got[i].add(m.value())
        if done(got):
            return got
    raise AssertionError(f"not done in {timeout}s: {[sorted(_parts(c)) for c in cs]}")


def test_three_members_split_disjointly_then_rebalance_on_close(kbroker: BrokerProcess) -> None:
    _topic(kbroker, "split", 120)
    cs = [_consumer(kbroker, "g-split") for _ in range(3)]
    for c in cs:
        c.subscribe(["split"])
    got = _poll_until(cs, lambda g: sum(map(len, g.values())) == 120
                      and all(len(_parts(c)) == 4 for c in cs))
    parts = [_parts(c) for c in cs]
    assert set().union(*parts) == set(range(PARTITIONS))
    assert sum(map(len, parts)) == PARTITIONS  # disjoint
    assert set().union(*got.values()) == {str(i).encode() for i in range(120)}
    # the group as ConsumerGroupDescribe shows it
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})  # alive until answered
    desc = admin.describe_consumer_groups(["g-split"])["g-split"].result(10)
    assert len(desc.members) == 3
    assert sorted(p for m in desc.members for p in
                  (tp.partition for tp in m.assignment.topic_partitions)) == list(range(12))
    cs[2].close()  # a leave (epoch -1): its partitions go to the others
    _poll_until(cs[:2], lambda g: len(_parts(cs[0]) | _parts(cs[1])) == PARTITIONS
                and not _parts(cs[0]) & _parts(cs[1]))
    for c in cs[:2]:
        c.close()


VICTIM = """
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "g-kill",
              "group.protocol": "consumer", "auto.offset.reset": "earliest",
              "enable.auto.commit": False})
c.subscribe(["kill"])
while True:
    m = c.poll(0.1)
    if m is not None and m.error() is None:
        c.commit(m, asynchronous=False)
        print(m.value().decode(), flush=True)
"""


def test_killed_member_replaced_after_session_timeout(kbroker: BrokerProcess) -> None:
    _topic(kbroker, "kill", 0)
    victim = subprocess.Popen([sys.executable, "-c", VICTIM, kbroker.bootstrap],
                              stdout=subprocess.PIPE, text=True)
    survivor = _consumer(kbroker, "g-kill", **{"enable.auto.commit": False})
    survivor.subscribe(["kill"])
    try:
        _poll_until([survivor], lambda g: 0 < len(_parts(survivor)) < PARTITIONS)
        p = Producer({"bootstrap.servers": kbroker.bootstrap, "linger.ms": 0})
        for i in range(60):
            p.produce("kill", str(i).encode(), partition=i % PARTITIONS)
        assert p.flush(30) == 0
        time.sleep(1.0)  # the victim reads and commits its share
        victim.kill()  # kill -9: no leave; the session timeout (3 s) removes it
        victim.wait(10)
        seen = {line.strip().encode() for line in (victim.stdout.read() if victim.stdout
                                                   else "").splitlines() if line.strip()}
        got = _poll_until([survivor], lambda g: len(_parts(survivor)) == PARTITIONS
                          and len(g[0] | seen) == 60, timeout=20)
        assert got[0] | seen == {str(i).encode() for i in range(60)}
    finally:
        if victim.poll() is None:
            victim.kill()
        survivor.close()


def test_transactional_consume_transform_produce_commits_offsets(kbroker: BrokerProcess
                                                                  ) -> None:
    """KIP-447 with member epochs: the offsets sent to the transaction are committed."""
    _topic(kbroker, "txn-in", 24)
    c = _consumer(kbroker, "g-txn", **{"enable.auto.commit": False,
                                       "isolation.level": "read_committed"})
    c.subscribe(["txn-in"])
    p = Producer({"bootstrap.servers": kbroker.bootstrap, "transactional.id": "kip848-t"})
    p.init_transactions(30)
    got = _poll_until([c], lambda g: len(g[0]) == 24)
    p.begin_transaction()
    for v in got[0]:
        p.produce("txn-in-out", v)
    p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
    p.commit_transaction(30)
    committed = c.committed(c.assignment(), 10)
    assert sum(tp.offset for tp in committed) == 24
    c.close()


def test_regex_subscription_follows_a_topic_created_later(kbroker: BrokerProcess) -> None:
    """librdkafka sends a `^`-prefixed subscription to the broker as SubscribedTopicRegex;
    the broker resolves it, and again when a matching topic is created."""
    _topic(kbroker, "rx-one", 12)
    _topic(kbroker, "norx", 12)
    c = _consumer(kbroker, "g-regex")
    c.subscribe(["^rx-.*"])
    try:
        _poll_until([c], lambda g: len(g[0]) == 12 and len(c.assignment()) == PARTITIONS)
        assert {tp.topic for tp in c.assignment()} == {"rx-one"}
        _topic(kbroker, "rx-two", 12)  # created after the subscription
        got = _poll_until([c], lambda g: len(g[0]) == 12
                          and {tp.topic for tp in c.assignment()} == {"rx-one", "rx-two"})
        assert got[0] == {str(i).encode() for i in range(12)}
        admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
        desc = admin.describe_consumer_groups(["g-regex"])["g-regex"].result(10)
        assert {tp.topic for m in desc.members for tp in m.assignment.topic_partitions} == {
            "rx-one", "rx-two"}
    finally:
        c.close()


def test_regex_matches_internal_topics_as_kafka(kbroker: BrokerProcess) -> None:
    """As Kafka, the broker resolves a regex against every topic, `__consumer_offsets`
    included (franz-go's Test848RegexBrokerResolves); the Tidegate client, under
    exclude.internal.topics (the default), acknowledges such a partition but leaves it
    out of its assignment."""
    from tidegate.client import Consumer as TgConsumer

    _topic(kbroker, "rxi-data", 12)
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})

    def described(group: str) -> set[str]:
        desc = admin.describe_consumer_groups([group])[group].result(10)
        return {tp.topic for m in desc.members for tp in m.assignment.topic_partitions}

    c = _consumer(kbroker, "g-rx-internal")
    c.subscribe(["^(__consumer_offsets|rxi-data)"])
    tg = TgConsumer(bootstrap_servers=kbroker.bootstrap, group_id="g-rx-internal-tg",
                    group_protocol="consumer", auto_offset_reset="earliest")
    tg.subscribe([re.compile("__consumer_offsets|rxi-data")])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            c.poll(0.05)
            tg.poll(timeout_ms=50)
            if (described("g-rx-internal") == {"__consumer_offsets", "rxi-data"}
                    and described("g-rx-internal-tg") == {"__consumer_offsets", "rxi-data"}
                    and len(tg.assignment()) == PARTITIONS):
                break
        else:
            raise AssertionError(f"{described('g-rx-internal')} "
                                 f"{described('g-rx-internal-tg')} {tg.assignment()}")
        assert {tp.topic for tp in tg.assignment()} == {"rxi-data"}
    finally:
        c.close()
        tg.close()


def test_tidegate_client_shares_a_group_with_librdkafka(kbroker: BrokerProcess) -> None:
    """The Tidegate client's `group.protocol=consumer`: it and a librdkafka member split
    the partitions disjointly, commit with their member epochs, and the Tidegate member's
    partitions move to the other on close (revoked before anyone else gets them)."""
    from tidegate.client import Consumer as TgConsumer

    _topic(kbroker, "mixed-clients", 48)
    events: list[tuple[str, list[int]]] = []

    class Listener:
        def on_partitions_revoked(self, ps: Any) -> None:
            events.append(("revoked", sorted(p.partition for p in ps)))

        def on_partitions_assigned(self, ps: Any) -> None:
            events.append(("assigned", sorted(p.partition for p in ps)))

    tg = TgConsumer(bootstrap_servers=kbroker.bootstrap, group_id="g-tgclient",
                    group_protocol="consumer", auto_offset_reset="earliest",
                    enable_auto_commit=False)
    rd = _consumer(kbroker, "g-tgclient", **{"enable.auto.commit": False})
    tg.subscribe(["mixed-clients"], listener=Listener())
    rd.subscribe(["mixed-clients"])
    got: tuple[set[bytes], set[bytes]] = (set(), set())
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            got[0].update(r.value for r in tg.poll(timeout_ms=50) if r.value is not None)
            m = rd.poll(0.05)
            if m is not None and m.error() is None:
                got[1].add(m.value())
            mine = {tp.partition for tp in tg.assignment()}
            if (len(got[0] | got[1]) == 48 and mine and _parts(rd)
                    and not mine & _parts(rd) and len(mine | _parts(rd)) == PARTITIONS):
                break
        else:
            raise AssertionError(f"no disjoint split: {tg.assignment()} {rd.assignment()}")
        assert got[0] | got[1] == {str(i).encode() for i in range(48)}
        tg.commit()  # OffsetCommit v9 with the member epoch
        committed = tg.committed(set(tg.assignment()))
        assert all(v is not None for v in committed.values())
        tg.close()
        assert events[-1][0] == "revoked" and events[-1][1] == sorted(mine)
        _poll_until([rd], lambda g: len(_parts(rd)) == PARTITIONS)
    finally:
        tg.close()
        rd.close()


def test_mixed_group_upgrade_and_downgrade(kbroker: BrokerProcess) -> None:
    """A classic librdkafka consumer's group is upgraded online when a
    `group.protocol=consumer` member joins: they split the partitions disjointly (the
    classic member through JoinGroup/SyncGroup, served from the target assignment). The
    consumer-protocol member leaving downgrades the group (the classic member gets
    everything through a classic rebalance); another one upgrades it again, and then the
    classic member leaves."""
    _topic(kbroker, "mixed", 120)
    classic = _consumer(kbroker, "g-mixed", **{"group.protocol": "classic",
                                               "heartbeat.interval.ms": 300,
                                               "session.timeout.ms": 6000})
    classic.subscribe(["mixed"])
    new: Consumer | None = None
    try:
        _poll_until([classic], lambda g: len(_parts(classic)) == PARTITIONS)
        for _round in range(2):
            new = _consumer(kbroker, "g-mixed")
            new.subscribe(["mixed"])
            pair = [classic, new]

            def split(_g: Any, a: Consumer = classic, b: Consumer = new) -> bool:
                return (bool(_parts(a)) and bool(_parts(b)) and not _parts(a) & _parts(b)
                        and len(_parts(a) | _parts(b)) == PARTITIONS)

            _poll_until(pair, split)
            if _round == 0:  # downgrade: the classic member gets everything back
                new.close()
                new = None
                _poll_until([classic], lambda g: len(_parts(classic)) == PARTITIONS)
        assert new is not None
        classic.close()
        only = new
        _poll_until([only], lambda g: len(_parts(only)) == PARTITIONS)
        admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
        desc = admin.describe_consumer_groups(["g-mixed"])["g-mixed"].result(10)
        assert len(desc.members) == 1 and str(desc.type).endswith("CONSUMER")
    finally:
        classic.close()
        if new is not None:
            new.close()
