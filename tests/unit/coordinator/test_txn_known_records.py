"""The transaction coordinator's identity cache (`runtime.KnownRecord`): a record an
operation builds carries the value it encodes, and replay uses that instead of decoding.
That is only sound if decoding the bytes gives exactly that value: proved here for every
metadata `to_record` can encode (every state; value v1), and v0 values (which drop the
v1 tags) are never cached. The live path must still agree with a load from the log."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegate.coordinator.runtime import KnownRecord
from tidegate.coordinator.txn import shard as shard_mod
from tidegate.coordinator.txn.config import TxnConfig
from tidegate.coordinator.txn.model import TxnMetadata
from tidegate.coordinator.txn.states import TxnState
from tidegate.protocol.txn_records import TxnLogValue, decode_txn_key, decode_txn_value

from .test_txn_ops import TIMEOUT, TxnDriver

_int64 = st.integers(-(2**63), 2**63 - 1)
_int32 = st.integers(-(2**31), 2**31 - 1)
_int16 = st.integers(-(2**15), 2**15 - 1)
_metadata = st.builds(
    TxnMetadata,
    transactional_id=st.text(max_size=40),
    producer_id=_int64,
    producer_epoch=_int16,
    timeout_ms=_int32,
    state=st.sampled_from(list(TxnState)),
    partitions=st.frozensets(st.tuples(st.text(max_size=140), _int32), max_size=6),
    txn_start_ms=_int64,
    last_update_ms=_int64,
    previous_producer_id=_int64,
    next_producer_id=_int64,
    last_producer_epoch=_int16,
    client_txn_version=_int16,
    prepare_offset=_int64,
    prepared_epoch=_int16,
)


@given(_metadata, st.sampled_from([0, 1]))
def test_a_known_record_decodes_to_what_it_carries(meta: TxnMetadata, version: int) -> None:
    rec = meta.to_record(version)
    if version == 0:  # v0 drops the v1 tags: replay must decode what is stored
        assert type(rec) is not KnownRecord
        return
    assert isinstance(rec, KnownRecord)
    key, value = rec
    assert value is not None
    txn_id, known = rec.known  # type: ignore[misc]
    assert isinstance(known, TxnLogValue)
    assert decode_txn_key(key) == txn_id == meta.transactional_id
    assert decode_txn_value(value) == known
    assert (key, value) == (rec[0], rec[1]) and len(rec) == 2  # still a plain Record


def _count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    seen: list[bytes] = []
    real = shard_mod.decode_txn_value

    def counting(raw: bytes) -> TxnLogValue:
        seen.append(raw)
        return real(raw)

    monkeypatch.setattr(shard_mod, "decode_txn_value", counting)
    return seen


def _transactions(d: TxnDriver) -> None:
    """Commits, an abort, a KIP-890 end, an abort on timeout, then expiry (tombstones):
    every kind of record the operations write."""
    for txn_id, commit, version in (("a", True, 0), ("b", False, 0), ("c", True, 2)):
        pid, epoch = d.begin(txn_id, tps=(("t", 0), ("u", 3)))
        assert d.end(pid, epoch, commit, txn_id=txn_id, version=version).error.value == 0
        d.markers()
    d.begin("late")
    d.advance(TIMEOUT + d.config.abort_timed_out_interval_ms + 1)  # aborted for it
    d.markers()


def test_live_replay_skips_the_decode_and_agrees_with_a_load(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = TxnDriver(tmp_path)
    seen = _count_decodes(monkeypatch)
    _transactions(d)
    assert seen == []  # every record came with its value
    live = dict(d.shard.txns)
    assert live["late"].state is TxnState.COMPLETE_ABORT
    assert d.reloaded() == live  # loading decodes, and finds the same state
    assert len(seen) >= 10
    d.advance(d.config.transactional_id_expiration_ms + d.config.remove_expired_interval_ms)
    assert d.shard.txns == {} == d.reloaded()  # tombstones: decoded keys, no value


def test_v0_values_are_decoded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = TxnDriver(tmp_path, TxnConfig(transaction_version=0))
    seen = _count_decodes(monkeypatch)
    pid, epoch = d.begin("a")
    assert d.end(pid, epoch, True, txn_id="a").error.value == 0
    d.markers()
    assert len(seen) >= 4  # init, add, prepare, complete: each decoded
    assert d.reloaded() == d.shard.txns
