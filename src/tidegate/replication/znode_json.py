"""JSON helpers of the znode codecs (`znodes.py`, `znodes_admin.py`): compact encoding
as Jackson writes it, and typed readers that raise `MalformedZnodeError` (a ValueError)
for anything that is not what Kafka's layout says, never another exception."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MalformedZnodeError",
    "dumps",
    "json_int",
    "json_int_list",
    "json_long_string",
    "json_object",
    "json_partition_list",
]


class MalformedZnodeError(ValueError):
    """A znode's data is not what Kafka's layout says it is."""


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def json_object(data: bytes | None, what: str) -> dict[str, Any]:
    if data is None:
        raise MalformedZnodeError(f"{what}: no data")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise MalformedZnodeError(f"{what}: not JSON ({e}): {data[:200]!r}") from None
    if not isinstance(value, dict):
        raise MalformedZnodeError(f"{what}: expected a JSON object: {data[:200]!r}")
    return value


def json_int(obj: Mapping[str, Any], key: str, what: str, default: int | None = None) -> int:
    value = obj.get(key, default)
    # bool is an int in Python but never one in Kafka's JSON.
    if isinstance(value, bool) or not isinstance(value, int):
        if value is None:
            raise MalformedZnodeError(f"{what}: missing {key!r}")
        raise MalformedZnodeError(f"{what}: {key!r} is not an integer: {value!r}")
    return value


def json_long_string(obj: Mapping[str, Any], key: str, what: str) -> int:
    """A long written as a JSON string (Kafka does this for timestamps and id blocks);
    a plain number is accepted too."""
    value = obj.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    if value is None:
        raise MalformedZnodeError(f"{what}: missing {key!r}")
    raise MalformedZnodeError(f"{what}: {key!r} is not a number: {value!r}")


def json_int_list(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or any(
        isinstance(x, bool) or not isinstance(x, int) for x in value
    ):
        raise MalformedZnodeError(f"{what}: expected a list of integers, got {value!r}")
    return tuple(value)


def json_partition_list(obj: Mapping[str, Any], what: str) -> list[dict[str, Any]]:
    parts = obj.get("partitions")
    if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
        raise MalformedZnodeError(f"{what}: 'partitions' must be a list of objects")
    for p in parts:
        if not isinstance(p.get("topic"), str):
            raise MalformedZnodeError(f"{what}: partition without a topic name: {p!r}")
        json_int(p, "partition", what)
    return parts
