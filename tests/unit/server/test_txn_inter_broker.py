"""Transaction traffic between brokers, end to end in one process: a "local" broker whose
metadata says some partitions (and the transaction coordinator of an id) live on a
"remote" broker, a real Tidegate broker serving its real listener on 127.0.0.1.

- `MarkerChannel.write` writes the local leader's partitions here and sends the
  others' markers to their leader as WriteTxnMarkers; concurrent transactions share
  requests; codes as the finisher needs them (UNKNOWN_TOPIC_OR_PARTITION only for a
  partition the metadata does not know; no leader, a leader that does not know the
  partition yet: retriable; a stale coordinator epoch: TRANSACTION_COORDINATOR_FENCED);
- `write_markers` answers NOT_LEADER_OR_FOLLOWER for a `__consumer_offsets` partition
  whose group shard is not loaded;
- `RemoteTxnVerifier.verify` asks the remote coordinator (verify_only, or add for
  transaction version 2) and answers as the local coordinator would;
- the produce path and TxnOffsetCommit translate a verification the coordinator could
  not make into codes clients retry (NOT_ENOUGH_REPLICAS, COORDINATOR_LOAD_IN_PROGRESS).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidegate.common.config import BrokerConfig
from tidegate.common.errors import ErrorCode
from tidegate.common.topics import CONSUMER_OFFSETS, TRANSACTION_STATE
from tidegate.coordinator.txn.messages import InitProducerIdRequest
from tidegate.protocol.messages import build, request_class
from tidegate.records.batch import parse_header
from tidegate.records.builder import build_batch
from tidegate.server.broker import Broker
from tidegate.server.cluster.marker_channel import MarkerChannel
from tidegate.server.cluster.txn_verify import RemoteTxnVerifier
from tidegate.server.context import RequestContext
from tidegate.server.handlers.transactions import handle_txn_offset_commit
from tidegate.server.handlers.txn_produce import verify_transactional
from tidegate.server.listener import Listener
from tidegate.server.markers import Marker, write_markers
from tidegate.server.metadata_view import PartitionView, TopicView

LOCAL, REMOTE = 1, 2
TXN_PARTITIONS = 2


class FakeMetadata:
    """The local broker's view of the cluster: topic -> leader per partition."""

    def __init__(self, leaders: dict[str, list[int]]) -> None:
        self.leaders = leaders

    def topic(self, name: str) -> TopicView | None:
        leaders = self.leaders.get(name)
        if leaders is None:
            return None
        return TopicView(name, uuid.UUID(int=0), tuple(
            PartitionView(i, leader, 0, (LOCAL, REMOTE), (LOCAL, REMOTE))
            for i, leader in enumerate(leaders)))


def _broker(path: Path, node: int) -> Broker:
    b = Broker(BrokerConfig({
        "log.dirs": str(path), "node.id": str(node), "listeners": "PLAINTEXT://127.0.0.1:0",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": str(TXN_PARTITIONS)}))
    b.load()
    b.create_topic("t", 2, {})
    return b


@dataclass
class Pair:
    local: Broker
    remote: Broker
    port: int
    metadata: FakeMetadata
    requests: dict[int, int]  # api key -> requests the remote served

    def endpoint(self, broker_id: int) -> tuple[str, int] | None:
        return ("127.0.0.1", self.port) if broker_id == REMOTE else None


@asynccontextmanager
async def _pair(tmp_path: Path) -> AsyncIterator[Pair]:
    remote = _broker(tmp_path / "remote", REMOTE)
    local = _broker(tmp_path / "local", LOCAL)
    await remote.group_coordinator.start()
    await remote.txn_coordinator.start()
    requests: dict[int, int] = {}
    for key in (24, 27):
        api = remote.dispatcher.apis[key]

        def counted(h: Callable[..., Any], k: int = key) -> Callable[..., Any]:
            async def handler(broker: Broker, ctx: RequestContext, req: Any) -> Any:
                requests[k] = requests.get(k, 0) + 1
                return await h(broker, ctx, req)
            return handler

        remote.dispatcher.apis[key] = dataclasses.replace(api, handler=counted(api.handler))
    listener = Listener(remote)
    [(_, port)] = await listener.start()
    md = FakeMetadata({"t": [REMOTE, LOCAL], "new-elsewhere": [REMOTE], "orphan": [-1],
                       CONSUMER_OFFSETS: [REMOTE],
                       TRANSACTION_STATE: [REMOTE] * TXN_PARTITIONS})
    local.metadata = md  # type: ignore[assignment]
    try:
        yield Pair(local, remote, port, md, requests)
    finally:
        await listener.stop()
        for b in (remote, local):
            await b.txn_coordinator.stop()
            await b.group_coordinator.stop()
            b.close()


async def _open_txn(b: Broker, topic: str, p: int, pid: int, seq: int = 0) -> None:
    lg = b.get_log(topic, p)
    assert lg is not None
    info = lg.append(build_batch([(int(time.time() * 1000), b"k", b"v")], producer_id=pid,
                                 producer_epoch=0, base_sequence=seq, is_transactional=True))
    b.after_append(topic, p, lg)
    await b.wait_durable(lg, info.last_offset + 1)


def _open_pids(b: Broker, topic: str, p: int) -> set[int]:
    lg = b.get_log(topic, p)
    assert lg is not None
    return set(lg.ongoing_transactions())


def test_markers_go_to_each_partitions_leader(tmp_path: Path) -> None:
    async def main() -> None:
        async with _pair(tmp_path) as c:
            await _open_txn(c.remote, "t", 0, 100)
            await _open_txn(c.local, "t", 1, 100)
            ch = MarkerChannel(c.local, c.endpoint, "broker-1-markers")
            got = await ch.write(Marker(100, 0, 5, True), [
                ("t", 0), ("t", 1), ("new-elsewhere", 0), ("orphan", 0), ("nowhere", 0),
                ("t", 7), (CONSUMER_OFFSETS, 0)])
            assert got == {
                ("t", 0): ErrorCode.none,  # written by the remote leader
                ("t", 1): ErrorCode.none,  # written here
                # the leader does not know it yet: retriable, not "gone"
                ("new-elsewhere", 0): ErrorCode.not_leader_or_follower,
                ("orphan", 0): ErrorCode.leader_not_available,
                ("nowhere", 0): ErrorCode.unknown_topic_or_partition,
                ("t", 7): ErrorCode.unknown_topic_or_partition,
                (CONSUMER_OFFSETS, 0): ErrorCode.none,  # the remote group coordinator
            }
            assert _open_pids(c.remote, "t", 0) == set() == _open_pids(c.local, "t", 1)
            assert c.requests[27] == 1
            # a coordinator with an older epoch is refused by the leader, and told so
            await _open_txn(c.remote, "t", 0, 100, seq=1)
            stale = await ch.write(Marker(100, 0, 4, False), [("t", 0)])
            assert stale == {("t", 0): ErrorCode.transaction_coordinator_fenced}
            assert _open_pids(c.remote, "t", 0) == {100}
            await ch.stop()

    asyncio.run(main())


def test_concurrent_transactions_share_marker_requests(tmp_path: Path) -> None:
    async def main() -> None:
        async with _pair(tmp_path) as c:
            pids = range(200, 240)
            for pid in pids:
                await _open_txn(c.remote, "t", 0, pid)
            ch = MarkerChannel(c.local, c.endpoint, "broker-1-markers")
            results = await asyncio.gather(*(
                ch.write(Marker(pid, 0, 1, pid % 2 == 0), [("t", 0)]) for pid in pids))
            assert all(r == {("t", 0): ErrorCode.none} for r in results)
            assert _open_pids(c.remote, "t", 0) == set()
            # all queued before the sender ran: one request for the 40 transactions
            assert c.requests[27] == 1
            await ch.stop()

    asyncio.run(main())


def test_an_unloaded_offsets_partition_is_not_leader_or_follower(tmp_path: Path) -> None:
    async def main() -> None:
        b = _broker(tmp_path, LOCAL)  # group coordinator not started: nothing loaded
        try:
            got = await write_markers(b, Marker(1, 0, 0, True), [(CONSUMER_OFFSETS, 0)])
            assert got == {(CONSUMER_OFFSETS, 0): ErrorCode.not_leader_or_follower}
        finally:
            b.close()

    asyncio.run(main())


def test_verification_asks_the_remote_coordinator(tmp_path: Path) -> None:
    async def main() -> None:
        async with _pair(tmp_path) as c:
            tc = c.remote.txn_coordinator
            init = await tc.init_producer_id(InitProducerIdRequest("tx", 60000), 300)
            pid, epoch = init.producer_id, init.producer_epoch
            assert await tc.add_partitions("tx", pid, epoch, [("t", 0)]) == \
                {("t", 0): ErrorCode.none}
            v = RemoteTxnVerifier(c.local, c.endpoint, "broker-1-verifier")
            assert await v.verify("tx", pid, epoch, ("t", 0), add=False) == ErrorCode.none
            assert await v.verify("tx", pid, epoch, ("t", 1), add=False) == \
                ErrorCode.transaction_abortable
            assert await v.verify("tx", pid, epoch + 1, ("t", 0), add=False) == \
                ErrorCode.producer_fenced
            # a group coordinator verifying a TxnOffsetCommit names __consumer_offsets
            assert await v.verify("tx", pid, epoch, (CONSUMER_OFFSETS, 0), add=False) == \
                ErrorCode.transaction_abortable
            assert await tc.add_offsets("tx", pid, epoch, "g") == ErrorCode.none
            assert await v.verify("tx", pid, epoch, (CONSUMER_OFFSETS, 0), add=False) == \
                ErrorCode.none
            # transaction version 2: the leader adds the partition
            assert await v.verify("tx", pid, epoch, ("t", 1), add=True) == ErrorCode.none
            [d] = await tc.describe_transactions(["tx"])
            assert d.topics == {"t": [0, 1], CONSUMER_OFFSETS: [0]}
            # concurrent verifications share requests
            before = c.requests[24]
            codes = await asyncio.gather(*(
                v.verify("tx", pid, epoch, ("t", i % 2), add=False) for i in range(30)))
            assert codes == [ErrorCode.none] * 30
            assert c.requests[24] - before == 1
            # the coordinator checks topics in the cluster metadata, not in its own logs
            # (a cluster's coordinator need not hold a replica of the transaction's topics)
            c.remote.metadata = FakeMetadata(  # type: ignore[assignment]
                {"t": [REMOTE, LOCAL], "held-elsewhere": [LOCAL]})
            assert c.remote.get_log("held-elsewhere", 0) is None
            assert await v.verify("tx", pid, epoch, ("held-elsewhere", 0), add=True) == \
                ErrorCode.none
            assert await v.verify("tx", pid, epoch, ("unknown", 0), add=True) == \
                ErrorCode.unknown_topic_or_partition
            # nobody leads the id's partition / the metadata names this broker
            c.metadata.leaders[TRANSACTION_STATE] = [-1] * TXN_PARTITIONS
            assert await v.verify("tx", pid, epoch, ("t", 0), add=False) == \
                ErrorCode.coordinator_not_available
            c.metadata.leaders[TRANSACTION_STATE] = [LOCAL] * TXN_PARTITIONS
            assert await v.verify("tx", pid, epoch, ("t", 0), add=False) == \
                ErrorCode.coordinator_load_in_progress
            await v.stop()
            # an unreachable coordinator
            c.metadata.leaders[TRANSACTION_STATE] = [REMOTE] * TXN_PARTITIONS
            dead = RemoteTxnVerifier(c.local, lambda _b: ("127.0.0.1", 1), "broker-1-verifier")
            assert await dead.verify("tx", pid, epoch, ("t", 0), add=False) == \
                ErrorCode.network_exception
            await dead.stop()

    asyncio.run(main())


class _Unverifiable:
    """A transaction coordinator that cannot answer (unreachable, moving)."""

    def __init__(self, code: ErrorCode) -> None:
        self.code = code

    async def verify_partition(self, *_a: Any, **_k: Any) -> ErrorCode:
        return self.code

    async def verify_offsets(self, *_a: Any, **_k: Any) -> ErrorCode:
        return self.code


def test_callers_turn_unmade_verifications_into_codes_clients_retry(tmp_path: Path) -> None:
    async def main() -> None:
        b = _broker(tmp_path, LOCAL)
        real = b.txn_coordinator
        lg = b.get_log("t", 0)
        assert lg is not None

        @dataclass
        class ProduceReq:
            transactional_id: str = "tx"

        commit = build(request_class(28, 3), {
            "transactional_id": "tx", "group_id": "g", "producer_id": 7, "producer_epoch": 0,
            "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]})
        ctx = RequestContext(28, 3, 1, "test", "peer")
        try:
            expected = {
                ErrorCode.network_exception: (ErrorCode.not_enough_replicas,
                                              ErrorCode.coordinator_load_in_progress),
                ErrorCode.not_coordinator: (ErrorCode.not_enough_replicas,
                                            ErrorCode.not_coordinator),
                ErrorCode.coordinator_load_in_progress: (
                    ErrorCode.not_enough_replicas, ErrorCode.coordinator_load_in_progress),
                ErrorCode.coordinator_not_available: (
                    ErrorCode.not_enough_replicas, ErrorCode.coordinator_not_available),
                ErrorCode.producer_fenced: (ErrorCode.invalid_producer_epoch,
                                            ErrorCode.producer_fenced),
            }
            for code, (on_produce, on_commit) in expected.items():
                b.txn_coordinator = _Unverifiable(code)  # type: ignore[assignment]
                got, _guard = await verify_transactional(
                    b, ProduceReq(), "t", 0, lg, (7, 0), None, implicit_add=False)
                assert got == on_produce, code
                resp = await handle_txn_offset_commit(b, ctx, commit)
                assert resp.topics[0].partitions[0].error_code == on_commit, code
        finally:
            b.txn_coordinator = real
            b.close()

    asyncio.run(main())


def test_in_a_cluster_only_the_leader_writes_a_marker_stamped_with_its_epoch(
        tmp_path: Path) -> None:
    """write_markers on a cluster-mode broker (no ZooKeeper needed: roles are set by
    hand): the leader's marker carries the leader epoch and waits for the ISR (acks=all,
    within request.timeout.ms); a follower's partition is NOT_LEADER_OR_FOLLOWER."""

    async def main() -> None:
        b = Broker(BrokerConfig({
            "log.dirs": str(tmp_path), "node.id": str(LOCAL),
            "listeners": "PLAINTEXT://127.0.0.1:0", "zookeeper.connect": "127.0.0.1:1",
            "request.timeout.ms": "300"}))
        b.load()
        b.create_topic("t", 3, {})
        try:
            b.replicas.become_leader("t", 0, 3, replicas=[LOCAL], isr=[LOCAL])
            b.replicas.become_follower("t", 1, REMOTE, 4)
            # a follower that never fetches is in the ISR: acks=all cannot complete
            b.replicas.become_leader("t", 2, 5, replicas=[LOCAL, REMOTE], isr=[LOCAL, REMOTE])
            got = await write_markers(b, Marker(9, 0, 0, True), [("t", 0), ("t", 1), ("t", 2)])
            assert got == {("t", 0): ErrorCode.none,
                           ("t", 1): ErrorCode.not_leader_or_follower,
                           ("t", 2): ErrorCode.request_timed_out}
            lg = b.get_log("t", 0)
            assert lg is not None
            batch = lg.read(0, 1 << 20)
            assert parse_header(batch, 0).is_control
            assert parse_header(batch, 0).partition_leader_epoch == 3
            assert lg.high_watermark == lg.log_end_offset == 1
        finally:
            b.close()

    asyncio.run(main())
