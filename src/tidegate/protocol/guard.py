"""A cheap structural pre-check of request bodies before kio decodes them.

kio's native decoder reserves memory for an array from its declared length before
reading the elements, so a garbled or hostile request declaring 2^31 elements makes
the process abort on allocation (seen with kio 0.6.5). `check(cls, buf, pos)` walks
the schema of `cls` over the bytes without building anything and rejects any length
(array, string, bytes, tagged field) that claims more than the bytes left. After it
passes, every array length is bounded by the frame size, which is bounded by
`socket.request.max.bytes`.

It also rejects a null (length -1) where the schema of that version does not allow
one: a non-nullable array, string, bytes field or array element. kio would decode it
as None and hand the handler a request its types promise cannot exist; Kafka's own
parser refuses such a request ("non-nullable field ... was serialized as null") and
the broker closes the connection, as it does for any undecodable request.

The walk costs O(number of fields), independent of record payload sizes.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)

from tidegate.protocol.flexible import read_uvarint, skip_tagged_fields

Buffer = bytes | memoryview  # the listener hands big requests on as memoryviews

_FIXED = {
    "int8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}


class GuardError(Exception):
    pass


@dataclasses.dataclass(frozen=True, slots=True)
class _F:
    kind: str  # "fixed", "string", "bytes", "entity", "entities", "prims"
    kafka_type: str
    size: int
    sub: Any
    optional: bool  # the field may be null
    name: str = ""
    items_optional: bool = True  # elements of a primitive array may be null


def _nullable(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    return origin in (types.UnionType, typing.Union) and type(None) in typing.get_args(annotation)


def _items_nullable(annotation: Any) -> bool:
    for arg in typing.get_args(annotation) or ():
        if typing.get_origin(arg) is tuple:
            return _nullable(typing.get_args(arg)[0])
    if typing.get_origin(annotation) is tuple:
        return _nullable(typing.get_args(annotation)[0])
    return True


@functools.cache
def _plan(cls: Any) -> tuple[tuple[_F, ...], dict[int, _F], bool]:
    flexible = bool(getattr(cls, "__flexible__", False))
    regular: list[_F] = []
    tagged: dict[int, _F] = {}
    for f in dataclasses.fields(cls):
        cl = classify_field(f)
        kt = f.metadata.get("kafka_type", "")
        nullable = _nullable(f.type)
        if isinstance(cl, EntityTupleField):
            spec = _F("entities", kt, 0, cl.type_, nullable, f.name)
        elif isinstance(cl, EntityField):
            spec = _F("entity", kt, 0, cl.type_, is_optional(f), f.name)
        elif isinstance(cl, PrimitiveTupleField):
            spec = _F(
                "prims", kt, _FIXED.get(kt, 0), None, nullable, f.name, _items_nullable(f.type)
            )
        elif kt in _FIXED:
            spec = _F("fixed", kt, _FIXED[kt], None, False, f.name)
        elif kt == "string":
            spec = _F("string", kt, 0, None, nullable, f.name)
        elif kt in ("bytes", "records"):
            spec = _F("bytes", kt, 0, None, nullable, f.name)
        else:
            spec = _F("fixed", kt, 0, None, False, f.name)
        tag = f.metadata.get("tag")
        if tag is not None:
            tagged[int(tag)] = spec
        else:
            regular.append(spec)
    return tuple(regular), tagged, flexible


def _int(buf: Buffer, pos: int, size: int, end: int) -> int:
    if pos + size > end:
        raise GuardError("truncated integer")
    return int.from_bytes(buf[pos : pos + size], "big", signed=True)


def _length(buf: Buffer, pos: int, end: int, flexible: bool, size: int) -> tuple[int, int]:
    """Read a length prefix; -1 means null. `size` is 2 or 4 for legacy prefixes."""
    if flexible:
        n, pos = read_uvarint(buf, pos, end, GuardError)
        return n - 1, pos
    return _int(buf, pos, size, end), pos + size


def _walk(cls: Any, buf: Buffer, pos: int, end: int, flexible_override: bool | None) -> int:
    regular, tagged, flexible = _plan(cls)
    if flexible_override is not None:
        flexible = flexible_override
    for spec in regular:
        pos = _field(spec, buf, pos, end, flexible)
    if flexible and pos < end and buf[pos] == 0:
        pos += 1  # no tagged fields, the usual case: a call less per structure
    elif flexible:
        visit = None
        if tagged:
            def visit(tag: int, start: int, stop: int) -> None:
                tagged_spec = tagged.get(tag)
                if tagged_spec is not None:
                    _field(tagged_spec, buf, start, stop, flexible)
        pos = skip_tagged_fields(buf, pos, end, GuardError, visit)
    return pos


def _null_check(spec: _F, n: int) -> None:
    if n < -1:
        raise GuardError(f"field {spec.name} has negative length {n}")
    if n == -1 and not spec.optional:
        raise GuardError(f"non-nullable field {spec.name} was serialized as null")


def _field(spec: _F, buf: Buffer, pos: int, end: int, flexible: bool) -> int:
    kind = spec.kind
    if kind == "fixed":
        pos += spec.size
    elif kind == "string":
        n, pos = _length(buf, pos, end, flexible, 2)
        _null_check(spec, n)
        if n > 0:
            pos += n
    elif kind == "bytes":
        n, pos = _length(buf, pos, end, flexible, 4)
        _null_check(spec, n)
        if n > 0:
            pos += n
    elif kind == "entity":
        if spec.optional:
            # Nullable nested structs carry a presence byte (-1 null, 1 present).
            marker = _int(buf, pos, 1, end)
            pos += 1
            if marker < 0:
                return pos
        pos = _walk(spec.sub, buf, pos, end, None)
    else:
        n, pos = _length(buf, pos, end, flexible, 4)
        _null_check(spec, n)
        if n > 0:
            if kind == "prims" and spec.size:
                if n * spec.size > end - pos:
                    raise GuardError(f"array of {n} x {spec.size} bytes runs past the end")
                pos += n * spec.size
            else:
                if n > end - pos:
                    raise GuardError(f"array of {n} elements in {end - pos} bytes")
                for _ in range(n):
                    if kind == "entities":
                        pos = _walk(spec.sub, buf, pos, end, None)
                    else:
                        pos = _field(
                            _F(
                                "string" if spec.kafka_type == "string" else "bytes",
                                spec.kafka_type,
                                0,
                                None,
                                spec.items_optional,
                                f"{spec.name}[]",
                            ),
                            buf,
                            pos,
                            end,
                            flexible,
                        )
    if pos > end:
        raise GuardError("field runs past the end of the request")
    return pos


def check(cls: type[Any], buf: Buffer, pos: int = 0) -> None:
    """Raise GuardError if any declared length in the body exceeds the bytes present."""
    _walk(cls, buf, pos, len(buf), None)
