"""The batching channel between brokers (server/cluster/broker_channel.py), with the two
request kinds that use it (WriteTxnMarkers, AddPartitionsToTxn), against a real socket
(`FakePeer`):

- items queued while a request is in flight leave together in the next request, one
  request in flight per destination;
- an item whose key (producer id, transactional id) is already taken by a different
  entry waits for the next request; equal entries are merged;
- an unreachable, silent or vanished destination fails the items with a retriable code,
  logged once per episode; the channel reconnects, following a new endpoint;
- a cancelled caller's item is not sent; `stop()` answers what is still queued.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from tidegate.common.errors import ErrorCode
from tidegate.server.cluster.broker_channel import BrokerChannel
from tidegate.server.cluster.marker_channel import MarkerItem, WriteTxnMarkers
from tidegate.server.cluster.txn_verify import AddPartitionsToTxn, Verification
from tidegate.server.markers import Marker

from .peer import FakePeer

PEER = 2


def _markers_ok(key: int, version: int, req: Any) -> dict[str, Any]:
    assert (key, version) == (27, 1)
    return {"markers": [
        {"producer_id": m.producer_id, "topics": [
            {"name": t.name, "partitions": [
                {"partition_index": p, "error_code": 0 if p % 2 == 0 else 6}
                for p in t.partition_indexes]}
            for t in m.topics]}
        for m in req.markers]}


def _item(pid: int, *tps: tuple[str, int], epoch: int = 0) -> MarkerItem:
    return MarkerItem(Marker(pid, epoch, 3, True), tuple(tps))


def test_items_queued_during_a_request_leave_together_in_the_next() -> None:
    async def main() -> None:
        peer = FakePeer(_markers_ok)
        await peer.start()
        ch = BrokerChannel(WriteTxnMarkers(), lambda b: peer.endpoint if b == PEER else None,
                           "test-markers", timeout_s=5)
        peer.gate.clear()  # hold the first answer back
        first = asyncio.ensure_future(ch.send(PEER, _item(1, ("t", 0))))
        await asyncio.wait_for(peer.received.wait(), 5)
        later = [asyncio.ensure_future(ch.send(PEER, _item(pid, ("t", 0), ("t", 1), ("u", 4))))
                 for pid in range(10, 30)]
        await asyncio.sleep(0.05)
        assert len(peer.requests) == 1  # one in flight, the rest wait
        peer.gate.set()
        assert await first == {("t", 0): ErrorCode.none}
        results = await asyncio.gather(*later)
        assert all(r == {("t", 0): ErrorCode.none, ("t", 1): ErrorCode.not_leader_or_follower,
                         ("u", 4): ErrorCode.none} for r in results)
        assert len(peer.requests) == 2
        second = peer.requests[1][2]
        assert sorted(m.producer_id for m in second.markers) == list(range(10, 30))
        m = second.markers[0]
        assert (m.producer_epoch, m.coordinator_epoch, m.transaction_result) == (0, 3, True)
        assert {str(t.name): list(t.partition_indexes) for t in m.topics} == \
            {"t": [0, 1], "u": [4]}
        await ch.stop()
        await peer.stop()

    asyncio.run(main())


def test_one_entry_per_producer_id_per_request() -> None:
    async def main() -> None:
        peer = FakePeer(_markers_ok)
        await peer.start()
        ch = BrokerChannel(WriteTxnMarkers(), lambda b: peer.endpoint, "test", timeout_s=5)
        peer.gate.clear()
        blocker = asyncio.ensure_future(ch.send(PEER, _item(1, ("t", 0))))
        await asyncio.wait_for(peer.received.wait(), 5)
        # the same producer twice (say a marker of epoch 0 and one of epoch 1): never in
        # one request, whose answer is keyed by producer id
        a = asyncio.ensure_future(ch.send(PEER, _item(7, ("t", 0))))
        b = asyncio.ensure_future(ch.send(PEER, _item(7, ("t", 2), epoch=1)))
        c = asyncio.ensure_future(ch.send(PEER, _item(8, ("t", 2))))
        await asyncio.sleep(0.02)
        peer.gate.set()
        await asyncio.gather(blocker, a, b, c)
        pids = [[int(m.producer_id) for m in r.markers] for _, _, r in peer.requests]
        assert pids == [[1], [7, 8], [7]]
        assert int(peer.requests[2][2].markers[0].producer_epoch) == 1
        await ch.stop()
        await peer.stop()

    asyncio.run(main())


def _verify_answers(codes: dict[tuple[str, str, int], int]) -> Any:
    def handler(key: int, version: int, req: Any) -> dict[str, Any]:
        assert key == 24
        return {"throttle_time": 0, "error_code": 0, "results_by_transaction": [
            {"transactional_id": txn.transactional_id, "topic_results": [
                {"name": t.name, "results_by_partition": [
                    {"partition_index": p,
                     "partition_error_code": codes.get((txn.transactional_id, t.name, p), 0)}
                    for p in t.partitions]}
                for t in txn.topics]}
            for txn in req.transactions]}
    return handler


def test_verifications_batch_one_entry_per_transactional_id() -> None:
    async def main() -> None:
        peer = FakePeer(_verify_answers({("a", "t", 1): 48}))
        await peer.start()
        ch = BrokerChannel(AddPartitionsToTxn(), lambda b: peer.endpoint, "test", timeout_s=5)
        peer.gate.clear()
        first = asyncio.ensure_future(ch.send(PEER, Verification("z", 9, 0, ("t", 0), False)))
        await asyncio.wait_for(peer.received.wait(), 5)
        same = [asyncio.ensure_future(ch.send(PEER, Verification("a", 5, 2, ("t", p), False)))
                for p in (0, 1, 0)]
        other_epoch = asyncio.ensure_future(
            ch.send(PEER, Verification("a", 5, 3, ("t", 2), False)))
        add = asyncio.ensure_future(ch.send(PEER, Verification("b", 6, 0, ("u", 0), True)))
        await asyncio.sleep(0.02)
        peer.gate.set()
        assert await first == ErrorCode.none
        assert await asyncio.gather(*same) == [ErrorCode.none, ErrorCode.invalid_txn_state,
                                               ErrorCode.none]
        assert await add == ErrorCode.none
        assert await other_epoch == ErrorCode.none
        assert [v for _, v, _ in peer.requests] == [4, 5, 4]  # v5 only to add
        second = peer.requests[1][2]
        entries = {str(t.transactional_id): t for t in second.transactions}
        assert sorted(entries) == ["a", "b"]
        a = entries["a"]
        assert (a.producer_id, a.producer_epoch, a.verify_only) == (5, 2, True)
        assert [(str(t.name), list(t.partitions)) for t in a.topics] == [("t", [0, 1])]
        assert entries["b"].verify_only is False
        third = peer.requests[2][2]
        assert [(str(t.transactional_id), int(t.producer_epoch))
                for t in third.transactions] == [("a", 3)]
        await ch.stop()
        await peer.stop()

    asyncio.run(main())


def test_unreachable_destination_fails_quickly_logs_once_and_recovers(
        caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        peer = FakePeer(_markers_ok)
        await peer.start()
        port = peer.port
        await peer.stop()  # nobody listens there now
        where: dict[int, tuple[str, int] | None] = {PEER: ("127.0.0.1", port)}
        ch = BrokerChannel(WriteTxnMarkers(), where.get, "test", timeout_s=5)
        for _ in range(5):
            assert await ch.send(PEER, _item(1, ("t", 0))) == \
                {("t", 0): ErrorCode.network_exception}
        where[PEER] = None  # unregistered
        assert await ch.send(PEER, _item(1, ("t", 0))) == \
            {("t", 0): ErrorCode.network_exception}
        # the broker comes back at a new address
        peer2 = FakePeer(_markers_ok)
        await peer2.start()
        where[PEER] = peer2.endpoint
        assert await ch.send(PEER, _item(1, ("t", 0))) == {("t", 0): ErrorCode.none}
        await ch.stop()
        await peer2.stop()

    with caplog.at_level(logging.INFO, logger="tidegate.server.cluster.broker_channel"):
        asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records]
    assert len([m for m in lines if "not delivered" in m]) == 1, lines
    assert len([m for m in lines if "answered again" in m]) == 1, lines


def test_a_silent_destination_times_out_and_the_next_request_reconnects() -> None:
    async def main() -> None:
        silent = {"on": True}

        def handler(key: int, version: int, req: Any) -> dict[str, Any] | None:
            return None if silent["on"] else _markers_ok(key, version, req)

        peer = FakePeer(handler)
        await peer.start()
        ch = BrokerChannel(WriteTxnMarkers(), lambda b: peer.endpoint, "test", timeout_s=0.2)
        assert await ch.send(PEER, _item(1, ("t", 0))) == \
            {("t", 0): ErrorCode.request_timed_out}
        silent["on"] = False
        # the late answer of the timed-out request must not be taken for this one's:
        # the connection was closed and a new one is used
        assert await ch.send(PEER, _item(2, ("t", 2))) == {("t", 2): ErrorCode.none}
        # verification failures are NETWORK_EXCEPTION whatever the cause (Kafka's)
        assert AddPartitionsToTxn().failed(Verification("a", 1, 0, ("t", 0), False),
                                           ErrorCode.request_timed_out) \
            == ErrorCode.network_exception
        await ch.stop()
        await peer.stop()

    asyncio.run(main())


def test_cancelled_items_are_not_sent_and_stop_answers_the_queue() -> None:
    async def main() -> None:
        peer = FakePeer(_markers_ok)
        await peer.start()
        ch = BrokerChannel(WriteTxnMarkers(), lambda b: peer.endpoint, "test", timeout_s=5)
        peer.gate.clear()
        first = asyncio.ensure_future(ch.send(PEER, _item(1, ("t", 0))))
        await asyncio.wait_for(peer.received.wait(), 5)
        gone = asyncio.ensure_future(ch.send(PEER, _item(2, ("t", 0))))
        kept = asyncio.ensure_future(ch.send(PEER, _item(3, ("t", 0))))
        await asyncio.sleep(0.01)
        gone.cancel()
        peer.gate.set()
        await first
        await kept
        assert [[int(m.producer_id) for m in r.markers] for _, _, r in peer.requests] == \
            [[1], [3]]
        # stop while a request is in flight and another item waits
        peer.gate.clear()
        busy = asyncio.ensure_future(ch.send(PEER, _item(4, ("t", 0))))
        peer.received.clear()
        await asyncio.wait_for(peer.received.wait(), 5)
        queued = asyncio.ensure_future(ch.send(PEER, _item(5, ("t", 0))))
        await asyncio.sleep(0.01)
        await ch.stop()
        assert await queued == {("t", 0): ErrorCode.network_exception}
        assert await busy == {("t", 0): ErrorCode.network_exception}
        assert await ch.send(PEER, _item(6, ("t", 0))) == \
            {("t", 0): ErrorCode.network_exception}  # stopped: no new sender
        peer.gate.set()
        await peer.stop()

    asyncio.run(main())


def test_a_connection_closed_by_the_other_side_is_replaced_without_a_failure(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        peer = FakePeer(_markers_ok)
        await peer.start()
        port = peer.port
        ch = BrokerChannel(WriteTxnMarkers(), lambda b: ("127.0.0.1", port), "test",
                           timeout_s=5)
        assert await ch.send(PEER, _item(1, ("t", 0))) == {("t", 0): ErrorCode.none}
        await peer.stop()  # the broker restarts at the same address
        peer = FakePeer(_markers_ok)
        await peer.start(port)
        assert await ch.send(PEER, _item(2, ("t", 0))) == {("t", 0): ErrorCode.none}
        assert peer.connections == 1
        # an idle connection is replaced before the other side closes it
        assert await ch.send(PEER, _item(3, ("t", 0))) == {("t", 0): ErrorCode.none}
        assert peer.connections == 1
        monkeypatch.setattr("tidegate.server.cluster.broker_channel.IDLE_CLOSE_S", 0.0)
        assert await ch.send(PEER, _item(4, ("t", 0))) == {("t", 0): ErrorCode.none}
        assert peer.connections == 2
        await ch.stop()
        await peer.stop()

    with caplog.at_level(logging.INFO, logger="tidegate.server.cluster.broker_channel"):
        asyncio.run(main())
    assert not caplog.records, [r.getMessage() for r in caplog.records]
