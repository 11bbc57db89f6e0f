"""Client quotas in ZooKeeper (server/cluster/client_quotas.py) against a real ZooKeeper,
without broker processes: the znodes an alter writes (Kafka's layouts, names
sanitized, other keys of a user's znode kept), concurrent alters from two "brokers"
that must not lose one another's change, and the watcher that brings a change made
through one broker to another's QuotaManager within a second, and re-reads
everything when it starts. Last, the same end to end with two broker processes.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from tests.integration.cluster import Cluster
from tests.integration.rawclient import RawClient
from tests.integration.zkserver import ZooKeeperServer

from tidegate.replication.znodes import CONFIG_CHANGES
from tidegate.server.cluster.client_quotas import ZkQuotaStore, entity_znode
from tidegate.server.cluster.registration import ensure_persistent_paths
from tidegate.server.cluster.zk import ZkClient
from tidegate.server.quotas.entities import make_entity
from tidegate.server.quotas.manager import QuotaManager


@pytest.fixture(scope="module")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer(tmp_path_factory.mktemp("zk")) as server:
        yield server


async def connect(where: str) -> ZkClient:
    zk = ZkClient(where, session_timeout_ms=4000, connection_timeout_ms=15000)
    await zk.start()
    await ensure_persistent_paths(zk)
    return zk


async def eventually(cond: Callable[[], bool], timeout: float = 5.0) -> float:
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)
    return time.monotonic() - start


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


ALICE_APP = make_entity([("user", "alice"), ("client-id", "app")])
ODD = make_entity([("client-id", "a/b <default>")])
CLIENTS_DEFAULT = make_entity([("client-id", None)])


def test_quota_set_through_one_broker_applies_on_another(zk_server: ZooKeeperServer) -> None:
    async def main() -> None:
        where = zk_server.chroot_connect()
        za, zb = await connect(where), await connect(where)
        ma, mb = QuotaManager(), QuotaManager()
        a, b = ZkQuotaStore(za, ma), ZkQuotaStore(zb, mb)
        try:
            # a user znode holding another key (Kafka keeps SCRAM credentials there)
            await za.create("/config/users/alice", json.dumps(
                {"version": 1, "config": {"SCRAM-SHA-256": "salt=..."}}).encode())
            await a.start()
            await b.start()
            await asyncio.wait_for(b.synced.wait(), 5)

            await a.alter([(ALICE_APP, [("producer_byte_rate", 1048576.0, False)])])
            assert ma.quotas[ALICE_APP] == {"producer_byte_rate": 1048576.0}  # at once here
            took = await eventually(lambda: ALICE_APP in mb.quotas)
            assert took < 1.0 and mb.quotas[ALICE_APP] == {"producer_byte_rate": 1048576.0}
            data, _ = await za.get("/config/users/alice/clients/app")
            assert json.loads(data) == {"version": 1,
                                        "config": {"producer_byte_rate": "1048576"}}
            notes = sorted(await za.get_children(CONFIG_CHANGES))
            note, _ = await za.get(f"{CONFIG_CHANGES}/{notes[-1]}")
            assert json.loads(note) == {"version": 2,
                                        "entity_path": "users/alice/clients/app"}

            # alice's own quota: her SCRAM key stays
            alice = make_entity([("user", "alice")])
            await b.alter([(alice, [("request_percentage", 25.0, False)])])
            await eventually(lambda: alice in ma.quotas)
            data, _ = await za.get("/config/users/alice")
            assert json.loads(data)["config"] == {"SCRAM-SHA-256": "salt=...",
                                                  "request_percentage": "25.0"}

            # a name that looks like a path or a default is sanitized
            await a.alter([(ODD, [("consumer_byte_rate", 10.0, False)]),
                           (CLIENTS_DEFAULT, [("consumer_byte_rate", 20.0, False)])])
            assert entity_znode(ODD) == "clients/a%2Fb%20%3Cdefault%3E"
            await eventually(lambda: ODD in mb.quotas and CLIENTS_DEFAULT in mb.quotas)
            assert mb.quotas[CLIENTS_DEFAULT] == {"consumer_byte_rate": 20.0}

            # twenty alters of one entity from both brokers at once: none is lost
            keys = [("producer_byte_rate", "consumer_byte_rate")[i % 2] for i in range(2)]
            await asyncio.gather(*(
                (a if i % 2 else b).alter([(ALICE_APP, [(keys[i % 2], 1000.0 + i, False)])])
                for i in range(20)))
            await eventually(lambda: len(mb.quotas.get(ALICE_APP, {})) == 2)
            got = json.loads((await za.get("/config/users/alice/clients/app"))[0])["config"]
            assert set(got) == {"producer_byte_rate", "consumer_byte_rate"}

            # removal reaches the other broker; a new broker reads everything at start
            await b.alter([(ODD, [("consumer_byte_rate", 0.0, True)])])
            await eventually(lambda: ODD not in ma.quotas)
            mc = QuotaManager()
            c = ZkQuotaStore(zb, mc)
            await c.start()
            await asyncio.wait_for(c.synced.wait(), 5)
            assert mc.quotas == ma.quotas == mb.quotas
            assert set(mc.quotas) == {ALICE_APP, alice, CLIENTS_DEFAULT}
            await c.stop()
        finally:
            await a.stop()
            await b.stop()
            await za.close()
            await zb.close()

    run(main())


def test_brokers_of_a_cluster_share_quotas(tmp_path: Path) -> None:
    """End to end: AlterClientQuotas through broker 1, DescribeClientQuotas on broker 2."""
    c = Cluster(tmp_path / "cluster", size=2)
    c.start()
    try:
        r1, r2 = RawClient(c.brokers[1].bootstrap), RawClient(c.brokers[2].bootstrap)
        resp = r1.call(49, 1, {"validate_only": False, "entries": [{
            "entity": [{"entity_type": "client-id", "entity_name": "shared"}],
            "ops": [{"key": "producer_byte_rate", "value": 1000.0, "remove": False}]}]})
        assert [e.error_code.value for e in resp.entries] == [0]
        start = time.monotonic()
        while not (got := r2.call(48, 1, {"strict": False, "components": []})).entries:
            assert time.monotonic() - start < 1.0, "not on broker 2 within a second"
            time.sleep(0.02)
        assert [(v.key, v.value) for v in got.entries[0].values] == [
            ("producer_byte_rate", 1000.0)]
        r1.close()
        r2.close()
    finally:
        c.stop()
