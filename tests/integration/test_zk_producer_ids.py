"""Producer ids from ZooKeeper stay unique while the allocators' sessions are lost.

Three allocators, as three brokers would be: each a `ProducerIdManager` whose blocks come
from its own `ZkProducerIdBlocks` (src/tidegate/server/cluster/producer_ids.py) over its
own `ZkClient` session and event loop thread, with a caller thread asking `next_id()` as
fast as it can (InitProducerId does the same from a worker thread). Blocks are tiny (3
ids) so that the allocators race on `/latest_producer_id_block` hundreds of times.

Meanwhile the test expires the allocators' ZooKeeper sessions on purpose, one every
~0.7 s (a second client attaches to the session id and password and closes it: the
known trick), and pauses the ZooKeeper server once beyond the session timeout. A
reservation cut by the expiry fails with COORDINATOR_LOAD_IN_PROGRESS, which the caller
retries as a client would; kazoo opens a new session.

Checked: no id was handed out twice, each allocator's ids grow, every allocator got ids
after each of its session losses, and the sessions really changed. That the duplicate
check bites is shown with an allocator whose writes ignore the znode version (the bug a
conditional write prevents): it hands out the same ids within seconds.

`make test`: 8 s of allocation; `make soak` (marked slow): a minute.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.zkserver import ZooKeeperServer, expire_session

from tidegate.common.errors import KafkaError
from tidegate.coordinator.producer_ids import ProducerIdManager
from tidegate.server.cluster.producer_ids import ZkProducerIdBlocks
from tidegate.server.cluster.registration import ensure_persistent_paths
from tidegate.server.cluster.zk import ZkClient

SESSION_MS = 1000
BLOCK = 3


@pytest.fixture(scope="module")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer(tmp_path_factory.mktemp("zk")) as server:
        yield server


class _UnconditionalZk(ZkClient):
    """The bug the versioned write prevents: last writer wins."""

    async def set(self, path: str, data: bytes, version: int = -1) -> Any:
        return await super().set(path, data, -1)


class Allocator:
    """One 'broker': a ZooKeeper session on its own loop thread, and a caller thread."""

    def __init__(self, bid: int, connect: str, state_dir: Path, zk_class: type[ZkClient]) -> None:
        self.bid = bid
        self.loop = asyncio.new_event_loop()
        self.loop_thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.loop_thread.start()
        self.zk = zk_class(connect, session_timeout_ms=SESSION_MS, connection_timeout_ms=15000)
        self._run(self._start())
        self.manager = ProducerIdManager(
            state_dir / f"unused-{bid}.json", BLOCK,
            reserve=ZkProducerIdBlocks(self.zk, bid, self.loop))
        self.ids: list[tuple[float, int]] = []  # (monotonic time, id)
        self.errors: Counter[str] = Counter()
        self.sessions: set[int] = set()
        self.stop = threading.Event()
        self.caller = threading.Thread(target=self._call, daemon=True)

    async def _start(self) -> None:
        await self.zk.start()
        await ensure_persistent_paths(self.zk)

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def _call(self) -> None:
        while not self.stop.is_set():
            try:
                pid = self.manager.next_id()
            except KafkaError as e:  # retriable, as for a client's InitProducerId
                self.errors[type(e).__name__] += 1
                time.sleep(0.02)
                continue
            self.ids.append((time.monotonic(), pid))

    def client_id(self) -> tuple[int, bytes] | None:
        cid = self.zk._client.client_id  # (session id, password) of the live session
        if cid and cid[0]:
            self.sessions.add(int(cid[0]))
            return int(cid[0]), bytes(cid[1])
        return None

    def close(self) -> None:
        self.stop.set()
        self.caller.join(30)
        self._run(self.zk.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.loop_thread.join(10)
        self.loop.close()


def _allocate(server: ZooKeeperServer, state_dir: Path, seconds: float,
              zk_class: type[ZkClient] = ZkClient, pause_at: float | None = None,
              ) -> tuple[list[Allocator], list[tuple[float, int]]]:
    """Three allocators for `seconds` while sessions are expired; returns them and the
    (time, allocator) of each expiry."""
    connect = server.chroot_connect()
    allocs = [Allocator(bid, connect, state_dir, zk_class) for bid in (1, 2, 3)]
    expiries: list[tuple[float, int]] = []
    rng = random.Random(16)
    try:
        for a in allocs:
            a.caller.start()
        t0 = time.monotonic()
        paused = False
        while time.monotonic() - t0 < seconds:
            time.sleep(rng.uniform(0.4, 1.0))
            if pause_at is not None and not paused and time.monotonic() - t0 > pause_at:
                # the server stops past every session's timeout: all three expire
                server.pause()
                time.sleep(SESSION_MS / 1000 * 2)
                server.resume()
                paused = True
                expiries += [(time.monotonic(), a.bid) for a in allocs]
                continue
            victim = rng.choice(allocs)
            cid = victim.client_id()
            if cid is None:
                continue  # between sessions: the last expiry is still being handled
            try:
                expire_session(server, *cid)
            except Exception as e:  # the session went already
                print(f"expiring allocator {victim.bid}: {e!r}")
                continue
            expiries.append((time.monotonic(), victim.bid))
        for a in allocs:
            a.client_id()
    finally:
        for a in allocs:
            a.close()
    return allocs, expiries


def _duplicates(allocs: list[Allocator]) -> list[int]:
    counts = Counter(pid for a in allocs for _t, pid in a.ids)
    return sorted(pid for pid, n in counts.items() if n > 1)


def test_producer_ids_unique_across_session_expiry(
        zk_server: ZooKeeperServer, tmp_path: Path) -> None:
    _unique_while_sessions_expire(zk_server, tmp_path, 8.0)


@pytest.mark.slow
def test_producer_ids_unique_for_a_minute(zk_server: ZooKeeperServer, tmp_path: Path) -> None:
    """`make soak`: the acceptance's minute."""
    _unique_while_sessions_expire(zk_server, tmp_path, 60.0)


def _unique_while_sessions_expire(zk_server: ZooKeeperServer, tmp_path: Path,
                                  seconds: float) -> None:
    allocs, expiries = _allocate(zk_server, tmp_path, seconds, pause_at=seconds / 2)
    total = sum(len(a.ids) for a in allocs)
    summary = (f"{total} ids in {seconds:.0f}s ({[len(a.ids) for a in allocs]} per allocator), "
               f"{len(expiries)} session expiries, sessions per allocator "
               f"{[len(a.sessions) for a in allocs]}, retried errors "
               f"{[dict(a.errors) for a in allocs]}")
    print("\n" + summary)
    assert not _duplicates(allocs), f"ids handed out twice: {_duplicates(allocs)[:20]}; {summary}"
    for a in allocs:
        ids = [pid for _t, pid in a.ids]
        assert ids == sorted(ids) and len(set(ids)) == len(ids), \
            f"allocator {a.bid}: ids do not grow"
        # each expiry of its session was followed by fresh ids (the allocator recovered)
        for at, bid in expiries:
            if bid == a.bid and at < a.ids[-1][0] - 2:
                assert any(t > at for t, _pid in a.ids), f"allocator {a.bid} stuck after {at}"
        assert len(a.sessions) >= 2, f"allocator {a.bid}'s session never changed: {summary}"
    assert total >= 100 * seconds, summary
    assert len(expiries) >= seconds / 2, summary


def test_the_duplicate_check_bites(zk_server: ZooKeeperServer, tmp_path: Path) -> None:
    """Unconditional writes of /latest_producer_id_block: the same ids twice."""
    allocs, _expiries = _allocate(zk_server, tmp_path, 4.0, zk_class=_UnconditionalZk)
    dups = _duplicates(allocs)
    print(f"\nunconditional writes: {len(dups)} ids handed out twice "
          f"of {sum(len(a.ids) for a in allocs)}")
    assert dups, "racing allocators without the versioned write should collide"
