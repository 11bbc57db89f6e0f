"""Topic configs against a real ZooKeeper (server/cluster/topic_configs.py), without
broker processes: the znodes an alter writes (Kafka's layouts), concurrent alters that
must not lose one another, validate_only, and the watcher that applies changes to a
broker's replicas (through a real LogManager), re-reads everything after a restart,
ignores what it cannot use and purges old notifications.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from tests.integration.zkserver import ZooKeeperServer

from tidegate.common.clock import ManualClock
from tidegate.common.errors import InvalidConfigError, UnknownTopicOrPartitionError
from tidegate.replication.znodes import (
    CONFIG_CHANGES,
    TopicAssignment,
    topic_config_path,
    topic_path,
)
from tidegate.server.cluster.registration import ensure_persistent_paths
from tidegate.server.cluster.topic_configs import (
    TopicConfigWatcher,
    alter_topic_config_in_zk,
    read_topic_config,
)
from tidegate.server.cluster.zk import ZkClient
from tidegate.storage.config import LogConfig
from tidegate.storage.log_manager import LogManager


@pytest.fixture(scope="module")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer(tmp_path_factory.mktemp("zk")) as server:
        yield server


async def eventually(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def setter(**values: str) -> Callable[[dict[str, str]], dict[str, str]]:
    """An incremental SET of `values` (underscores for dots)."""
    return lambda cur: {**cur, **{k.replace("_", "."): v for k, v in values.items()}}


async def connect(connect: str) -> ZkClient:
    zk = ZkClient(connect, session_timeout_ms=4000, connection_timeout_ms=15000)
    await zk.start()
    await ensure_persistent_paths(zk)
    return zk


async def make_topic(zk: ZkClient, name: str) -> None:
    assignment = TopicAssignment(name, {0: (1,)}, topic_id=uuid.uuid4())
    await zk.create(topic_path(name), assignment.encode())


def test_alters_write_kafkas_znodes_and_never_lose_a_concurrent_change(
        zk_server: ZooKeeperServer) -> None:
    async def main() -> None:
        where = zk_server.chroot_connect()
        a, b = await connect(where), await connect(where)
        try:
            with pytest.raises(UnknownTopicOrPartitionError):
                await alter_topic_config_in_zk(a, "t", setter(retention_ms="1"),
                                               validate_only=False)
            await make_topic(a, "t")
            assert await read_topic_config(b, "t") == {}
            got = await alter_topic_config_in_zk(a, "t", setter(retention_ms="1000"),
                                                 validate_only=True)
            assert got == {"retention.ms": "1000"}
            assert await a.exists(topic_config_path("t")) is None
            assert await a.get_children(CONFIG_CHANGES) == []

            # twenty alters of different keys from two brokers at once: all land
            keys = [f"k{i}" for i in range(20)]
            await asyncio.gather(*(
                alter_topic_config_in_zk(a if i % 2 else b, "t", setter(**{k: "1"}),
                                         validate_only=False)
                for i, k in enumerate(keys)))
            data, _ = await a.get(topic_config_path("t"))
            assert json.loads(data) == {"version": 1, "config": {k: "1" for k in keys}}
            notes = await a.get_children(CONFIG_CHANGES)
            assert len(notes) == 20 and all(n.startswith("config_change_") for n in notes)
            note, _ = await a.get(f"{CONFIG_CHANGES}/{notes[0]}")
            assert json.loads(note) == {"version": 2, "entity_path": "topics/t"}

            def refuse(cur: dict[str, str]) -> dict[str, str]:
                raise InvalidConfigError("no")

            with pytest.raises(InvalidConfigError):
                await alter_topic_config_in_zk(a, "t", refuse, validate_only=False)
            assert len(await a.get_children(CONFIG_CHANGES)) == 20
        finally:
            await a.close()
            await b.close()

    run(main())


def test_the_watcher_applies_changes_to_the_replicas_held_here(
        zk_server: ZooKeeperServer, tmp_path: Path) -> None:
    async def main() -> None:
        where = zk_server.chroot_connect()
        zk = await connect(where)
        logs = LogManager(tmp_path, LogConfig(), ManualClock(1_700_000_000_000), cluster=True)
        logs.load()
        lock = asyncio.Lock()
        watcher = TopicConfigWatcher(zk, logs, lock)
        try:
            await make_topic(zk, "held")
            await make_topic(zk, "elsewhere")
            lg = logs.ensure_replica("held", uuid.uuid4(), 1, 0, {})
            await watcher.start()
            await asyncio.wait_for(watcher.synced.wait(), 10)

            await alter_topic_config_in_zk(zk, "held", setter(retention_ms="4242"),
                                           validate_only=False)
            await alter_topic_config_in_zk(zk, "elsewhere", setter(retention_ms="1"),
                                           validate_only=False)
            await eventually(lambda: lg.config.retention_ms == 4242)
            assert logs.topics["held"].configs == {"retention.ms": "4242"}
            assert "elsewhere" not in logs.topics  # no replica here: nothing opened

            # written by another tool: a key Tidegate does not know and a bad value are
            # left out; the rest applies. A malformed notification is skipped.
            await zk.create(f"{CONFIG_CHANGES}/config_change_", b"not json", sequence=True)
            await zk.set(topic_config_path("held"), json.dumps({"version": 1, "config": {
                "retention.ms": "5151", "x.custom": "1", "segment.ms": "soon"}}).encode())
            await zk.create(f"{CONFIG_CHANGES}/config_change_", json.dumps(
                {"version": 2, "entity_path": "topics/held"}).encode(), sequence=True)
            await eventually(lambda: lg.config.retention_ms == 5151)
            assert logs.topics["held"].configs == {"retention.ms": "5151"}

            # a broker that was away re-reads every config it holds when it comes back
            await watcher.stop()
            await alter_topic_config_in_zk(zk, "held", setter(cleanup_policy="compact"),
                                           validate_only=False)
            await asyncio.sleep(0.3)
            assert not lg.config.compact
            watcher = TopicConfigWatcher(zk, logs, lock, expiration_ms=0)
            await watcher.start()
            await eventually(lambda: lg.config.compact)

            # notifications past changeExpirationMs are purged (here: at once)
            await alter_topic_config_in_zk(zk, "held", setter(retention_ms="6000"),
                                           validate_only=False)
            await eventually(lambda: lg.config.retention_ms == 6000)

            async def purged() -> bool:
                return await zk.get_children(CONFIG_CHANGES) == []

            deadline = time.monotonic() + 10
            while not await purged():
                assert time.monotonic() < deadline, await zk.get_children(CONFIG_CHANGES)
                await asyncio.sleep(0.05)
        finally:
            await watcher.stop()
            await zk.close()
            logs.close()

    run(main())
