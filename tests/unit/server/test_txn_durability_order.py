"""What a one-record transaction may answer before its coordinator record is durable.

AddPartitionsToTxn (client versions) and AddOffsetsToTxn are answered as soon as their
`__transaction_state` record is appended, before the fsync (docs/transactions.md, "What
is durable when"). That is safe only because nothing acts on the answer before the
record is durable: the data a transactional Produce would append waits for the KIP-890
verification, which waits for the coordinator's log to be durable to its end; the
implicit add of transaction version 2 (Produce v12) waits for its own record; EndTxn
answers once PrepareCommit (after the add) is durable. These tests hold the
`__transaction_state` partition's fsync and check each of those waits: they fail if data
is appended, or EndTxn answered, before the add is durable.

An in-process broker (no kills, no timing assertions beyond "not before the fsync"):
light.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from tests.unit.server.held_flush import hold_fsync

from tidegate.common.config import BrokerConfig
from tidegate.common.errors import ErrorCode
from tidegate.common.topics import TRANSACTION_STATE
from tidegate.coordinator.runtime import PartitionState
from tidegate.coordinator.txn.messages import InitProducerIdRequest
from tidegate.protocol.messages import build, request_class
from tidegate.records.builder import build_batch
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.handlers import produce
from tidegate.server.handlers.transactions import handle_add_partitions, handle_end_txn
from tidegate.storage.log import Log

HELD_S = 0.3  # how long the fsync is held: whatever waits for it must still wait


def _broker(tmp_path: Path, *, create: bool = True) -> Broker:
    b = Broker(BrokerConfig({
        "log.dirs": str(tmp_path), "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1"}))
    b.load()
    if create:
        b.create_topic("t", 1, {})
    return b



def _produce(version: int, pid: int, epoch: int, sequence: int = 0) -> Any:
    batch = build_batch([(int(time.time() * 1000), b"k", b"v")], producer_id=pid,
                        producer_epoch=epoch, base_sequence=sequence, is_transactional=True)
    return build(request_class(0, version), {
        "transactional_id": "tx", "acks": -1, "timeout": 30000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch}]}]})


def _produce_error(resp: Any) -> int:
    return int(resp.responses[0].partition_responses[0].error_code)


async def _started(tmp_path: Path) -> tuple[Broker, Log, Log, int, int]:
    b = _broker(tmp_path)
    await b.group_coordinator.start()
    await b.txn_coordinator.start()
    init = await b.txn_coordinator.init_producer_id(InitProducerIdRequest("tx", 60000), 9)
    state, data = b.get_log(TRANSACTION_STATE, 0), b.get_log("t", 0)
    assert state is not None and data is not None
    return b, state, data, init.producer_id, init.producer_epoch


async def _stop(b: Broker) -> None:
    await b.txn_coordinator.stop()
    await b.group_coordinator.stop()
    b.close()


def test_data_waits_for_an_add_answered_before_its_fsync(tmp_path: Path) -> None:
    async def main() -> None:
        b, state, data, pid, epoch = await _started(tmp_path)
        gate = hold_fsync(state)
        try:
            add = build(request_class(24, 3), {
                "v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": pid,
                "v3_and_below_producer_epoch": epoch,
                "v3_and_below_topics": [{"name": "t", "partitions": [0]}]})
            resp = await asyncio.wait_for(
                handle_add_partitions(b, RequestContext(24, 3, 1, "c", "peer"), add), 5)
            [topic] = resp.results_by_topic_v3_and_below
            assert topic.results_by_partition[0].partition_error_code == ErrorCode.none
            # answered while its record is not yet durable (the point of the change)
            assert state.recovery_point < state.log_end_offset
            sent = asyncio.ensure_future(produce.handle(
                b, RequestContext(0, 9, 2, "c", "peer"), _produce(9, pid, epoch)))
            await asyncio.sleep(HELD_S)
            assert data.log_end_offset == 0, "data appended before the add was durable"
            assert not sent.done()
            gate.set()
            assert _produce_error(await asyncio.wait_for(sent, 10)) == ErrorCode.none
            assert data.log_end_offset == 1
            assert state.recovery_point == state.log_end_offset
            # EndTxn: answered only once PrepareCommit (and so the add) is durable
            gate = hold_fsync(state)
            end = build(request_class(26, 3), {
                "transactional_id": "tx", "producer_id": pid, "producer_epoch": epoch,
                "committed": True})
            ended = asyncio.ensure_future(handle_end_txn(
                b, RequestContext(26, 3, 3, "c", "peer"), end))
            await asyncio.sleep(HELD_S)
            assert not ended.done(), "EndTxn answered before PrepareCommit was durable"
            gate.set()
            assert (await asyncio.wait_for(ended, 10)).error_code == ErrorCode.none
        finally:
            gate.set()
            await _stop(b)

    asyncio.run(main())


def test_transaction_version_2_adds_durably_before_appending(tmp_path: Path) -> None:
    """Produce v12 adds the partition itself (no AddPartitionsToTxn): that add's answer
    lets the data be appended at once, so it must wait for its record's fsync."""
    async def main() -> None:
        b, state, data, pid, epoch = await _started(tmp_path)
        gate = hold_fsync(state)
        try:
            sent = asyncio.ensure_future(produce.handle(
                b, RequestContext(0, 12, 2, "c", "peer"), _produce(12, pid, epoch)))
            await asyncio.sleep(HELD_S)
            assert state.recovery_point < state.log_end_offset  # the add is appended
            assert data.log_end_offset == 0, "data appended before the add was durable"
            assert not sent.done()
            gate.set()
            assert _produce_error(await asyncio.wait_for(sent, 10)) == ErrorCode.none
            assert data.log_end_offset == 1
        finally:
            gate.set()
            await _stop(b)

    asyncio.run(main())



def _add(pid: int, epoch: int) -> Any:
    return build(request_class(24, 3), {
        "v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": "t", "partitions": [0]}]})


_ADD_CTX = RequestContext(24, 3, 1, "c", "peer")


async def _add_and_produce(b: Broker, pid: int, epoch: int) -> None:
    """The transaction's AddPartitionsToTxn for t-0, then its first record there."""
    await asyncio.wait_for(handle_add_partitions(b, _ADD_CTX, _add(pid, epoch)), 5)
    assert _produce_error(await asyncio.wait_for(produce.handle(
        b, RequestContext(0, 9, 2, "c", "peer"), _produce(9, pid, epoch)), 10)) == 0


async def _commit(b: Broker, pid: int, epoch: int) -> None:
    """EndTxn(commit) of "tx", answered without error."""
    end = build(request_class(26, 3), {
        "transactional_id": "tx", "producer_id": pid, "producer_epoch": epoch,
        "committed": True})
    resp = await asyncio.wait_for(handle_end_txn(
        b, RequestContext(26, 3, 3, "c", "peer"), end), 10)
    assert resp.error_code == ErrorCode.none


def test_next_transaction_starts_on_an_appended_complete_commit(tmp_path: Path) -> None:
    """CompleteCommit is answered once appended, so the producer's next AddPartitionsToTxn
    runs (and is answered) while CompleteCommit is not yet durable; the next transaction's
    data still waits until CompleteCommit and the new add are. Fails if that data is
    appended before, or if the next add waits for CompleteCommit's fsync again."""
    async def main() -> None:
        b, state, data, pid, epoch = await _started(tmp_path)
        gate = threading.Event()
        try:
            await _add_and_produce(b, pid, epoch)
            # the fsync that would make CompleteCommit durable (the record after
            # PrepareCommit) is held; PrepareCommit's goes through
            prepare = state.log_end_offset
            gate = hold_fsync(state, prepare + 2)
            await _commit(b, pid, epoch)
            # the next transaction's add, sent at once as librdkafka does: it waits for
            # the markers and the append of CompleteCommit, not for its fsync (held
            # 10 s; a coordinator that waited for it would answer after the 2 s
            # `_CONCURRENT_WAIT_S`, having run the add on the appended state anyway)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            resp2 = await asyncio.wait_for(
                handle_add_partitions(b, _ADD_CTX, _add(pid, epoch)), 5)
            assert loop.time() - t0 < 1.5, "the next add waited for CompleteCommit's fsync"
            [topic] = resp2.results_by_topic_v3_and_below
            assert topic.results_by_partition[0].partition_error_code == ErrorCode.none
            assert state.log_end_offset == prepare + 3  # PrepareCommit, Complete, add
            assert state.recovery_point == prepare + 1, "CompleteCommit was durable"
            assert data.log_end_offset == 2  # the first transaction's record and marker
            sent = asyncio.ensure_future(produce.handle(
                b, RequestContext(0, 9, 4, "c", "peer"), _produce(9, pid, epoch, 1)))
            await asyncio.sleep(HELD_S)
            assert data.log_end_offset == 2, \
                "data appended before CompleteCommit and the next add were durable"
            assert not sent.done()
            gate.set()
            assert _produce_error(await asyncio.wait_for(sent, 10)) == ErrorCode.none
            assert data.log_end_offset == 3
            assert state.recovery_point == state.log_end_offset
        finally:
            gate.set()
            await _stop(b)

    asyncio.run(main())


def test_coordinator_records_take_the_broker_built_path_and_reload_alike(
        tmp_path: Path) -> None:
    """The transaction coordinator appends its own records with `Log.append_control`,
    not the client path (`own_batches`, coordinator/runtime.py: the client checks were
    half of each append's cost). Fails if a record of a whole transaction takes the
    client path again, or if loading those records gives other state than the live one."""
    async def main() -> None:
        b, state, _data, pid, epoch = await _started(tmp_path)

        def client_path(*_a: object, **_kw: object) -> object:
            raise AssertionError("a coordinator record took the client path")

        tc = b.txn_coordinator
        try:
            state.append = client_path  # type: ignore[method-assign,assignment]
            await _add_and_produce(b, pid, epoch)
            await _commit(b, pid, epoch)
            for _ in range(200):
                [d] = await tc.describe_transactions(["tx"])
                if d.state == "CompleteCommit":
                    break
                await asyncio.sleep(0.01)
            assert d.state == "CompleteCommit"
            live = tc.runtime.shard(tc.partition_for("tx")).txns["tx"]
        finally:
            await _stop(b)
        b = _broker(tmp_path, create=False)
        await b.group_coordinator.start()
        await b.txn_coordinator.start()
        try:
            tc = b.txn_coordinator
            for _ in range(200):  # the partition loads in the background
                if tc.runtime.state(tc.partition_for("tx")) is PartitionState.ACTIVE:
                    break
                await asyncio.sleep(0.01)
            loaded = tc.runtime.shard(tc.partition_for("tx")).txns["tx"]
            assert loaded == live
        finally:
            await _stop(b)

    asyncio.run(main())


def test_an_answered_adds_durability_wait_is_a_callback_that_waits_for_the_fsync(
        tmp_path: Path) -> None:
    """What follows an add answered before its fsync (reporting the log durable to the
    transaction coordinator, replies to parked requests) runs in a callback on the group
    commit's future, with no Task per operation; it still runs only once the fsync has
    returned."""
    async def main() -> None:
        b, state, _data, pid, epoch = await _started(tmp_path)
        shell = b.txn_coordinator.shell
        gate = hold_fsync(state)
        try:
            tasks = len(asyncio.all_tasks())
            ctx = RequestContext(24, 3, 1, "c", "peer")
            resp = await asyncio.wait_for(handle_add_partitions(b, ctx, _add(pid, epoch)), 5)
            [topic] = resp.results_by_topic_v3_and_below
            assert topic.results_by_partition[0].partition_error_code == ErrorCode.none
            assert len(asyncio.all_tasks()) == tasks, "a Task waits for the add's fsync"
            assert len(shell._durable_waits) == 1
            reported = shell._durable.get(0, -1)
            await asyncio.sleep(HELD_S)
            assert shell._durable.get(0, -1) == reported, "reported durable before the fsync"
            gate.set()
            for _ in range(100):
                if shell._durable.get(0, -1) == state.log_end_offset:
                    break
                await asyncio.sleep(0.02)
            assert shell._durable.get(0, -1) == state.log_end_offset
            assert not shell._durable_waits
        finally:
            gate.set()
            await _stop(b)

    asyncio.run(main())
