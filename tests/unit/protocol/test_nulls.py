"""Nulls where the schema allows none are refused at decode, for every request class.

kio decodes a length of -1 as None whatever the schema says; handlers trust the types
and would fail on `None` with a TypeError. The guard refuses such bodies, so a decoded
request never holds None in a non-nullable field.
"""

from __future__ import annotations

import dataclasses
import struct
import typing
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.index import api_key_map, schema_name_map

from tidegate.protocol.guard import GuardError, check
from tidegate.protocol.messages import DecodeError, decode, request_class

REQUESTS = [
    (key, version)
    for key, name in sorted(api_key_map.items())
    for version in sorted(schema_name_map[name])
]


def _nullable(annotation: Any) -> bool:
    return type(None) in typing.get_args(annotation)


def _nones_in_non_nullable(entity: Any, path: str = "") -> list[str]:
    """Every field path holding None although its annotation has no None."""
    bad: list[str] = []
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        where = f"{path}.{f.name}"
        if value is None:
            if not _nullable(f.type):
                bad.append(where)
            continue
        if isinstance(value, tuple):
            item_types = [a for a in typing.get_args(f.type) if typing.get_origin(a) is tuple]
            inner = typing.get_args(item_types[0] if item_types else f.type)
            for i, item in enumerate(value):
                if item is None and inner and not _nullable(inner[0]):
                    bad.append(f"{where}[{i}]")
                elif dataclasses.is_dataclass(item):
                    bad += _nones_in_non_nullable(item, f"{where}[{i}]")
        elif dataclasses.is_dataclass(value):
            bad += _nones_in_non_nullable(value, where)
    return bad


# Bodies rich in -1 lengths (0xff.. legacy, 0x00 compact) so nulls decode often.
_CHUNKS = st.sampled_from(
    [b"\xff\xff", b"\xff\xff\xff\xff", b"\x00", b"\x00\x00", b"\x00\x00\x00\x01", b"\x01", b"\x02a"]
)


@pytest.mark.parametrize(("key", "version"), REQUESTS)
def test_decoded_requests_hold_no_forbidden_null(key: int, version: int) -> None:
    cls = request_class(key, version)

    @settings(
        max_examples=60, suppress_health_check=list(HealthCheck), deadline=None, database=None
    )
    @given(st.lists(_CHUNKS, max_size=24).map(b"".join))
    def run(body: bytes) -> None:
        try:
            entity = decode(cls, body)
        except DecodeError:
            return
        assert _nones_in_non_nullable(entity) == []

    run()


@pytest.mark.parametrize(
    ("key", "version", "body", "field"),
    [
        (2, 1, struct.pack(">ii", -1, -1), "topics"),  # ListOffsets
        (0, 3, struct.pack(">hhii", -1, 1, 1000, -1), "topic_data"),  # Produce
        (32, 1, struct.pack(">i?", -1, False), "resources"),  # DescribeConfigs
        (44, 0, struct.pack(">i?", -1, False), "resources"),  # IncrementalAlterConfigs
        (19, 2, struct.pack(">ii?", -1, 1000, False), "topics"),  # CreateTopics
        (37, 0, struct.pack(">ii?", -1, 1000, False), "topics"),  # CreatePartitions
        (9, 1, struct.pack(">h", 1) + b"g" + struct.pack(">i", -1), "topics"),  # OffsetFetch
        (10, 4, b"\x00" + b"\x00" + b"\x00", "coordinator_keys"),  # FindCoordinator v4
        (16, 4, b"\x00" + b"\x00", "states_filter"),  # ListGroups v4
        (3, 0, struct.pack(">i", -1), "topics"),  # Metadata v0: null is not "all topics"
    ],
)
def test_null_array_is_refused(key: int, version: int, body: bytes, field: str) -> None:
    cls = request_class(key, version)
    with pytest.raises(GuardError, match=f"non-nullable field {field}"):
        check(cls, body)
    with pytest.raises(DecodeError):
        decode(cls, body)


def test_nullable_array_still_decodes() -> None:
    # Metadata v1+: a null topics array means "all topics".
    assert decode(request_class(3, 1), struct.pack(">i", -1)).topics is None  # type: ignore[attr-defined]
    assert decode(request_class(3, 12), b"\x00\x01\x00\x00\x00").topics is None  # type: ignore[attr-defined]


def test_null_string_in_string_array_is_refused() -> None:
    # DescribeConfigs v1: one resource (type 2, name "t") whose configuration_keys is
    # nullable, holding one null element.
    body = struct.pack(">ibh", 1, 2, 1) + b"t" + struct.pack(">ih", 1, -1) + b"\x00"
    with pytest.raises(GuardError, match="configuration_keys"):
        check(request_class(32, 1), body)
