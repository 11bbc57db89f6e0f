"""TransactionLogKey/Value against bytes computed by hand from Kafka's schemas, round
trips of every field combination, and typed errors for malformed input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.protocol.txn_records import (
    TxnLogValue,
    TxnRecordError,
    UnknownTxnKeyVersion,
    _decode_txn_value_checked,
    _decode_v1_fast,
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
)

H = bytes.fromhex

ONGOING = TxnLogValue(
    producer_id=1000, producer_epoch=5, timeout_ms=60000, status=1,
    partitions=(("t", (0, 2)),), last_update_ms=0x10, start_ms=0x20,
)

V0 = H(
    "0000"  # version 0
    "00000000000003e8"  # producer id 1000
    "0005"  # epoch
    "0000ea60"  # timeout 60000
    "01"  # status Ongoing
    "00000001"  # one topic
    "000174"  # "t"
    "00000002" "00000000" "00000002"  # partitions [0, 2]
    "0000000000000010"  # last update
    "0000000000000020"  # start
)

V1_BASE = (
    "0001"
    "00000000000003e8" "0005" "0000ea60" "01"
    "02"  # compact array: 1 topic
    "0274"  # compact string "t"
    "03" "00000000" "00000002"  # compact int32 array [0, 2]
    "00"  # the entry's tagged fields
    "0000000000000010" "0000000000000020"
)


def test_key_bytes() -> None:
    assert encode_txn_key("tx") == H("0000" "0002" "7478")
    assert decode_txn_key(H("000000027478")) == "tx"


def test_value_v0_bytes() -> None:
    assert encode_txn_value(ONGOING, 0) == V0
    assert decode_txn_value(V0) == ONGOING


def test_value_v1_without_tags() -> None:
    raw = H(V1_BASE + "00")
    assert encode_txn_value(ONGOING, 1) == raw
    assert decode_txn_value(raw) == ONGOING


def test_value_v1_tagged_fields() -> None:
    v = TxnLogValue(1000, 5, 60000, 1, (("t", (0, 2)),), 0x10, 0x20,
                    previous_producer_id=999, next_producer_id=1001, client_txn_version=2,
                    last_producer_epoch=4)
    raw = H(V1_BASE + "04"
            "00" "08" "00000000000003e7"  # tag 0 previous producer id
            "01" "08" "00000000000003e9"  # tag 1 next producer id
            "02" "02" "0002"  # tag 2 client transaction version
            "904e" "02" "0004")  # tag 10000 (Tidegate) last producer epoch
    assert encode_txn_value(v, 1) == raw
    assert decode_txn_value(raw) == v


def test_empty_state_null_partitions() -> None:
    v = TxnLogValue(7, 0, 1000, 0, None, 5, -1)
    assert encode_txn_value(v, 0) == H("0000" "0000000000000007" "0000" "000003e8" "00"
                                       "ffffffff" "0000000000000005" "ffffffffffffffff")
    assert encode_txn_value(v, 1) == H("0001" "0000000000000007" "0000" "000003e8" "00"
                                       "00" "0000000000000005" "ffffffffffffffff" "00")
    assert decode_txn_value(encode_txn_value(v, 1)) == v


def test_unknown_tags_are_skipped() -> None:
    """A future Kafka tag (here 5, three bytes) is skipped."""
    raw = H(V1_BASE + "01" "05" "03" "aabbcc")
    assert decode_txn_value(raw) == ONGOING


@pytest.mark.parametrize("raw", [
    H("0002" + V1_BASE[4:] + "00"),  # unknown value version
    H(V1_BASE.replace("0000ea6001", "0000ea6008", 1) + "00"),  # status 8
    H(V1_BASE + "00" + "ff"),  # trailing byte
    H(V1_BASE + "01" "00" "04" "0000000000000001"),  # tag 0 with the wrong size
    H(V1_BASE + "01" "00" "08" "0000"),  # tag data truncated
    H(V1_BASE.replace("0274", "02ff", 1) + "00"),  # topic not UTF-8
    V0[:-1],
    b"",
    b"\x00",
])
def test_malformed_values(raw: bytes) -> None:
    with pytest.raises(TxnRecordError):
        decode_txn_value(raw)


def test_every_truncation_is_an_error() -> None:
    full = encode_txn_value(TxnLogValue(1, 2, 3, 2, (("a", (1,)), ("bb", (2, 3))), 4, 5,
                                        7, 8, 2, 1), 1)
    for n in range(len(full)):
        with pytest.raises(TxnRecordError):
            decode_txn_value(full[:n])
    for n in range(len(V0)):
        with pytest.raises(TxnRecordError):
            decode_txn_value(V0[:n])


def test_malformed_keys() -> None:
    with pytest.raises(UnknownTxnKeyVersion) as e:
        decode_txn_key(H("0001" "0002" "7478"))
    assert e.value.version == 1
    for raw in (b"", H("00"), H("0000" "0003" "7478"), H("0000" "0002" "7478" "00"),
                H("0000" "ffff"), H("0000" "0001" "ff")):
        with pytest.raises(TxnRecordError):
            decode_txn_key(raw)


def test_encode_refuses_bad_input() -> None:
    with pytest.raises(TxnRecordError):
        encode_txn_value(ONGOING, 2)
    with pytest.raises(TxnRecordError):
        encode_txn_key("x" * 40000)


_int64 = st.integers(-(2**63), 2**63 - 1)
_int16 = st.integers(-(2**15), 2**15 - 1)
_values = st.builds(
    TxnLogValue,
    producer_id=_int64,
    producer_epoch=_int16,
    timeout_ms=st.integers(-(2**31), 2**31 - 1),
    status=st.integers(0, 7),
    partitions=st.none() | st.lists(
        st.tuples(st.text(max_size=5), st.lists(st.integers(-(2**31), 2**31 - 1),
                                                max_size=4).map(tuple)),
        max_size=4).map(tuple),
    last_update_ms=_int64,
    start_ms=_int64,
    previous_producer_id=_int64,
    next_producer_id=_int64,
    client_txn_version=_int16,
    last_producer_epoch=st.none() | _int16,
)


@given(_values)
def test_v1_round_trip(v: TxnLogValue) -> None:
    assert decode_txn_value(encode_txn_value(v, 1)) == v


@given(_values)
def test_v0_round_trip_keeps_the_v0_fields(v: TxnLogValue) -> None:
    back = decode_txn_value(encode_txn_value(v, 0))
    assert back == TxnLogValue(v.producer_id, v.producer_epoch, v.timeout_ms, v.status,
                               v.partitions, v.last_update_ms, v.start_ms)


@given(st.text(max_size=50))
def test_key_round_trip(txn_id: str) -> None:
    assert decode_txn_key(encode_txn_key(txn_id)) == txn_id


@given(st.binary(max_size=60))
def test_garbage_raises_only_typed_errors(raw: bytes) -> None:
    for fn in (decode_txn_value, decode_txn_key):
        try:
            fn(raw)
        except TxnRecordError:
            pass


def _outcome(fn: object, raw: bytes) -> object:
    try:
        return fn(raw)  # type: ignore[operator]
    except TxnRecordError as e:
        return ("error", type(e), str(e))


@settings(max_examples=300)
@given(_values, st.none() | _int16, st.data())
def test_fast_reader_agrees_with_the_checked_one(v: TxnLogValue, prepared: int | None,
                                                 data: st.DataObject) -> None:
    """decode_txn_value reads the coordinator's own v1 values in straight-line code and
    hands anything else to the checked reader: over values, truncations, a changed
    byte and extra bytes, both give the same value or the same error."""
    v = TxnLogValue(v.producer_id, v.producer_epoch, v.timeout_ms, v.status, v.partitions,
                    v.last_update_ms, v.start_ms, v.previous_producer_id, v.next_producer_id,
                    v.client_txn_version, v.last_producer_epoch, prepared)
    raw = encode_txn_value(v, 1)
    assert _decode_v1_fast(raw) == v  # the coordinator's own values: the fast path
    i = data.draw(st.integers(0, len(raw) - 1))
    variants = [raw, raw[:data.draw(st.integers(0, len(raw)))],
                raw[:i] + bytes([data.draw(st.integers(0, 255))]) + raw[i + 1:],
                raw + data.draw(st.binary(min_size=1, max_size=3))]
    for r in variants:
        assert _outcome(decode_txn_value, r) == _outcome(_decode_txn_value_checked, r)
