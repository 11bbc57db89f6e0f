"""The coordinators on a full disk (an in-process broker whose file writes fail,
tests/unit/storage/disk_faults.py).

- Loading writes nothing: the coordinator starts, and serves reads, on a disk that
  refuses every write (its coordinator epochs are made durable before the first marker
  that carries them, not before the load).
- A transaction that times out while the disk is full is aborted as soon as space
  returns: the partition keeps serving (a refused write changed nothing), its abort
  check retries at every interval, and the marker's epoch is persisted first.
- The full disk is logged once, not per attempt.
- A group coordinator partition failed by a full disk (its operations may change live
  state, so it is reloaded) comes back as soon as space returns, not after the backoff
  its repeated failures grew.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

import pytest
from tests.unit.storage.disk_faults import Disk

from tidegate.common.config import BrokerConfig
from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.coordinator.group.messages import CommitPartition, OffsetCommitRequest
from tidegate.coordinator.runtime import PartitionState
from tidegate.coordinator.txn.messages import InitProducerIdRequest
from tidegate.records.builder import build_batch
from tidegate.server.broker import Broker
from tidegate.server.coordinator_epochs import EPOCHS_FILE, CoordinatorEpochs
from tidegate.storage.disk_space import SpaceUsage

TIMEOUT_MS = 300
INTERVAL_MS = 100


def _broker(tmp_path: Path) -> Broker:
    b = Broker(BrokerConfig({
        "log.dirs": str(tmp_path), "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "2",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": str(INTERVAL_MS)}))
    b.load()
    return b


async def _start(b: Broker) -> None:
    await b.group_coordinator.start()
    await b.txn_coordinator.start()


async def _stop(b: Broker) -> None:
    await b.txn_coordinator.stop()
    await b.group_coordinator.stop()
    b.close()


async def _state(b: Broker, tid: str) -> str:
    [d] = await b.txn_coordinator.describe_transactions([tid])
    return d.state


async def _open_transaction(b: Broker, tid: str) -> tuple[int, int]:
    """InitProducerId, AddPartitionsToTxn t-0, one transactional batch in t-0."""
    tc = b.txn_coordinator
    init = await tc.init_producer_id(InitProducerIdRequest(tid, TIMEOUT_MS), 7)
    pid, epoch = init.producer_id, init.producer_epoch
    assert await tc.add_partitions(tid, pid, epoch, [("t", 0)]) == {("t", 0): 0}
    lg = b.get_log("t", 0)
    assert lg is not None
    info = lg.append(build_batch([(int(time.time() * 1000), b"k", b"v")], producer_id=pid,
                                 producer_epoch=epoch, base_sequence=0,
                                 is_transactional=True))
    b.after_append("t", 0, lg)
    await b.wait_durable(lg, info.last_offset + 1)
    return pid, epoch


def test_a_transaction_timing_out_on_a_full_disk_ends_when_space_returns(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    disk = Disk(tmp_path)

    async def main() -> None:
        b = _broker(tmp_path)
        await _start(b)
        b.create_topic("t", 1, {})
        tc = b.txn_coordinator
        p = tc.partition_for("tx")
        await _open_transaction(b, "tx")
        lg = b.get_log("t", 0)
        assert lg is not None and lg.last_stable_offset == 0 < lg.high_watermark
        with disk.installed():
            disk.strict = True
            await asyncio.sleep(TIMEOUT_MS / 1000 + 1.5)  # past a reload backoff
            assert disk.refused, "the abort was not attempted"
            state_while_full = tc.runtime.state(p)  # looked at, not asked (no reload)
            disk.strict = False
            freed = time.monotonic()
            while lg.last_stable_offset < lg.high_watermark and \
                    time.monotonic() - freed < 5:
                await asyncio.sleep(0.01)
            took = time.monotonic() - freed
            assert lg.last_stable_offset == lg.high_watermark == lg.log_end_offset
            assert took < 3 * INTERVAL_MS / 1000 + 0.5, f"aborted {took:.2f}s after space"
            for _ in range(100):
                if await _state(b, "tx") == "CompleteAbort":
                    break
                await asyncio.sleep(0.01)
            assert await _state(b, "tx") == "CompleteAbort"
            assert state_while_full is PartitionState.ACTIVE  # it kept serving
        await _stop(b)

    asyncio.run(main())
    loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len([m for m in loud if m.startswith("disk full:")]) == 1, loud
    assert len(loud) <= 2, loud  # the disk full line (and at most one other)
    assert not any(r.exc_info for r in caplog.records)


def test_loading_writes_nothing(tmp_path: Path) -> None:
    """A restart on a disk that refuses every write: both coordinators load and serve
    reads; the coordinator epochs are larger than any persisted, and become durable
    with the first marker once space returns."""
    disk = Disk(tmp_path)

    async def first_life() -> None:
        b = _broker(tmp_path)
        await _start(b)
        b.create_topic("t", 1, {})
        await _open_transaction(b, "tx")  # times out: a marker, so its epoch is durable
        for _ in range(300):
            if await _state(b, "tx") == "CompleteAbort":
                break
            await asyncio.sleep(0.01)
        await _open_transaction(b, "tx")  # left open
        await _stop(b)

    async def second_life() -> None:
        b = _broker(tmp_path)
        before = json.loads((tmp_path / EPOCHS_FILE).read_text())
        with disk.installed():
            disk.strict = True
            await _start(b)
            tc = b.txn_coordinator
            assert await _state(b, "tx") == "Ongoing"
            p = tc.partition_for("tx")
            assert tc.runtime.shard(p).coordinator_epoch > before[str(p)]
            assert not tc.epochs.persisted(p, tc.runtime.shard(p).coordinator_epoch)
            await asyncio.sleep((TIMEOUT_MS + 3 * INTERVAL_MS) / 1000)
            disk.strict = False
            for _ in range(300):
                if await _state(b, "tx") == "CompleteAbort":
                    break
                await asyncio.sleep(0.01)
            assert await _state(b, "tx") == "CompleteAbort"
            assert tc.epochs.persisted(p, tc.runtime.shard(p).coordinator_epoch)
            epoch = tc.runtime.shard(p).coordinator_epoch
        await _stop(b)
        assert CoordinatorEpochs(tmp_path / EPOCHS_FILE).persisted(p, epoch)

    asyncio.run(first_life())
    asyncio.run(second_life())


def test_a_group_partition_failed_by_a_full_disk_reloads_when_space_returns(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    disk = Disk(tmp_path)

    async def main() -> None:
        b = _broker(tmp_path)
        # what statvfs would say of the injected disk
        b.logs.space.usage = lambda: SpaceUsage(1 << 30, 0 if disk.strict else 1 << 29)
        await b.group_coordinator.start()
        gc = b.group_coordinator
        p = gc.partition_for("g")
        req = OffsetCommitRequest("g", -1, "", partitions=(CommitPartition("t", 0, 1),))
        with disk.installed():
            disk.strict = True
            failures = 0
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline:  # a committer retrying: backoff grows
                try:
                    await gc.commit(req)
                except KafkaError:
                    failures += 1
                await asyncio.sleep(0.05)
            assert failures and gc.runtime.state(p) is PartitionState.FAILED
            disk.strict = False
            freed = time.monotonic()
            while gc.runtime.state(p) is not PartitionState.ACTIVE and \
                    time.monotonic() - freed < 10:
                await asyncio.sleep(0.01)
            took = time.monotonic() - freed
            assert took < 0.6, f"reloaded {took:.2f}s after space returned"
            assert await gc.commit(req) == [(("t", 0), ErrorCode.none)]
        await b.group_coordinator.stop()
        b.close()

    asyncio.run(main())
    loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(loud) == 1 and loud[0].startswith("disk full:"), loud


def test_coordinator_epochs_are_durable_before_use_and_grow_across_restarts(
        tmp_path: Path) -> None:
    path = tmp_path / EPOCHS_FILE
    epochs = CoordinatorEpochs(path)
    assert [epochs.next(0), epochs.next(0), epochs.next(1)] == [0, 1, 0]  # no I/O
    assert not path.exists() and not epochs.persisted(0, 0)
    epochs.persist(0, 1)  # one write records every epoch handed out
    assert json.loads(path.read_text()) == {"0": 1, "1": 0}
    assert epochs.persisted(1, 0)
    assert epochs.next(0) == 2  # handed out, never persisted, never used
    again = CoordinatorEpochs(path)  # a restart: above every epoch a marker may carry
    assert again.next(0) == 2 and again.next(1) == 1 and again.next(2) == 0
