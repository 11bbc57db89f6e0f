"""Kafka message classes from `kio`: lookup, decode, encode, and a version-free builder.

kio generates one frozen dataclass per (API, version). Handlers should not care which
version they answer, so `build(cls, data)` constructs any entity from plain values:
nested mappings become nested entities, sequences of mappings become entity tuples,
integer milliseconds become timedeltas/datetimes where the schema wants them, and
fields the version lacks are ignored while fields it needs but `data` lacks get their
schema default (or a zero value). Requests are read with `view(entity, name, default)`
for the same reason: a field missing in an old version reads as the default.

APIs kio lacks (ControlledShutdown) are hand-written (protocol/hand_written.py): the
lookups, `decode` and `encode` here serve them too, so callers need no special case.
`decode` reads Produce requests (v3-v12) with `protocol/produce_request.py` instead of
kio: their records fields stay slices of the frame, not copies. AddPartitionsToTxn and
EndTxn (v0-v5) are read by `protocol/txn_requests.py`, AddOffsetsToTxn (v0-v4) and
TxnOffsetCommit (v0-v5) by `protocol/txn_offsets.py`: cheaper than kio's entities.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
)
from kio.static.constants import EntityType
from kio.static.protocol import Entity

from tidegate.protocol import (
    controlled_shutdown,  # noqa: F401  (registers API 7)
    guard,
    hand_written,
    produce_request,
    txn_offsets,
    txn_requests,
)
from tidegate.protocol.guard import GuardError
from tidegate.protocol.hand_written import HandWrittenMessage

E = TypeVar("E")

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_ONE_MS = datetime.timedelta(milliseconds=1)  # `ms`'s divisor, built once (every Produce)


class DecodeError(Exception):
    """A request body could not be decoded at the version its header names."""


@functools.cache
def request_class(api_key: int, version: int) -> type[Entity]:
    hand = hand_written.REQUESTS.get((api_key, version))  # APIs kio lacks
    if hand is not None:
        return cast(type[Entity], hand)
    return cast(type[Entity], load_request_schema(api_key, version))


@functools.cache
def response_class(api_key: int, version: int) -> type[Entity]:
    hand = hand_written.RESPONSES.get((api_key, version))
    if hand is not None:
        return cast(type[Entity], hand)
    return cast(type[Entity], load_response_schema(api_key, version))


@functools.cache
def is_flexible(api_key: int, version: int) -> bool:
    return bool(getattr(request_class(api_key, version), "__flexible__", False))


@functools.cache
def _reader(cls: type[Entity]) -> Callable[[bytes | memoryview, int], tuple[Entity, int]]:
    # kio reads any read-only buffer (the listener hands big requests on as memoryviews)
    return cast(Callable[[bytes | memoryview, int], tuple[Entity, int]], entity_reader(cls))


@functools.cache
def _writer(cls: type[Entity]) -> Callable[[io.BytesIO, Entity], None]:
    return cast(Callable[[io.BytesIO, Entity], None], entity_writer(cls))


def load_codecs(api_key: int, version: int) -> None:
    """Build and cache what a request at `version` and its response need (kio's schema
    modules, their reader and writer), so the first such request does not pay for it:
    a client's start calls it for the APIs its steady state sends (Fetch v17: ~18 ms)."""
    request = request_class(api_key, version)
    _fields(request)
    _writer(request)
    _reader(response_class(api_key, version))


_HandDecoder = Callable[[bytes | memoryview, int, int], tuple[Any, int]]


# the transaction APIs read by hand: API key -> (decoder, first and last version)
_TXN_DECODERS = {**txn_requests.decoders(), **txn_offsets.decoders()}
# the API keys `_hand_decoder` covers (Produce, AddPartitionsToTxn, AddOffsetsToTxn,
# EndTxn, TxnOffsetCommit)
_HAND_DECODED_KEYS = frozenset({produce_request.API_KEY, *_TXN_DECODERS})


@functools.cache
def _hand_decoder(cls: type[Entity]) -> tuple[_HandDecoder, int] | None:
    """The hand-written decoder (protocol/produce_request.py, txn_requests.py,
    txn_offsets.py) that reads kio's request class `cls` instead of kio, with the
    version it decodes; None for any other class. Looked up by the class's own API key
    and version: a table of every covered class would import kio's 32 schema modules at
    the first Produce (~0.2 s on this machine: a fresh broker's first produce took
    0.5 s)."""
    key = getattr(cls, "__api_key__", None)
    version = getattr(cls, "__version__", None)
    if (key not in _HAND_DECODED_KEYS or not isinstance(version, int)
            or getattr(cls, "__type__", None) is not EntityType.request):
        return None
    if key == produce_request.API_KEY:
        fn: _HandDecoder = produce_request.decode
        first, last = produce_request.MIN_VERSION, produce_request.MAX_VERSION
    else:
        fn, first, last = _TXN_DECODERS[key]
    if not first <= version <= last or request_class(key, version) is not cls:
        return None  # a version the decoder does not read, or not kio's class
    return fn, version


def decode(
    cls: type[Entity], buf: bytes | memoryview, pos: int = 0, *, strict: bool = False
) -> Entity:
    """Decode a body; truncation is a DecodeError.

    Trailing bytes after a complete body are ignored unless `strict`, as the Java
    broker ignores them: librdkafka, for one, sends Metadata v13 requests with three
    extra bytes after the tagged fields.
    """
    # (a client that never decodes a request imports none of the hand-decoded APIs'
    # classes: its blocking consumer ran ~30 % slower with them loaded)
    hand_decoder = _hand_decoder(cls)
    if hand_decoder is not None:  # Produce: records fields as slices of buf, not copies
        fn, version = hand_decoder
        try:
            request, end = fn(buf, pos, version)
        except (produce_request.ProduceDecodeError, txn_requests.TxnDecodeError) as e:
            raise DecodeError(f"malformed {cls.__name__} v{version}: {e}") from e
        if strict and end != len(buf):
            raise DecodeError(f"{cls.__name__} body has {len(buf) - end} trailing bytes")
        return cast(Entity, request)
    if isinstance(cls, type) and issubclass(cls, HandWrittenMessage):
        try:
            hand, end = cls.decode_body(bytes(buf), pos)  # small: copying costs nothing
        except (ValueError, IndexError) as e:
            raise DecodeError(f"malformed {cls.__name__}: {e}") from e
        if strict and end != len(buf):
            raise DecodeError(f"{cls.__name__} body has {len(buf) - end} trailing bytes")
        return cast(Entity, hand)
    try:
        guard.check(cls, buf, pos)
    except GuardError as e:
        raise DecodeError(f"malformed {cls.__name__}: {e}") from e
    try:
        # kio reads at an offset: slicing would copy the whole body (records included).
        entity, size = _reader(cls)(buf, pos)
    except Exception as e:  # kio raises a variety of errors on malformed input
        raise DecodeError(f"cannot decode {cls.__name__}: {e}") from e
    if strict and size != len(buf) - pos:
        raise DecodeError(
            f"{cls.__name__} body has {len(buf) - pos - size} unexpected trailing bytes"
        )
    return entity


# Encodings of immutable responses answered again and again (ApiVersions'), by the
# entity's id; the entity is held here, so its id cannot be reused while cached.
_ENCODED: dict[int, tuple[Entity, bytes]] = {}
_ENCODED_MAX = 256


def remember_encoding(entity: Entity) -> None:
    """`encode(entity)` returns these bytes from now on, without encoding again: for an
    entity the caller answers many times (kio's entities are frozen, so the bytes stay
    right). A bounded cache: when full it starts again."""
    if len(_ENCODED) >= _ENCODED_MAX:
        _ENCODED.clear()
    _ENCODED[id(entity)] = (entity, encode(entity))


def encode(entity: Entity) -> bytes:
    if isinstance(entity, HandWrittenMessage):
        return entity.encode_body()
    hit = _ENCODED.get(id(entity))
    if hit is not None and hit[0] is entity:
        return hit[1]
    out = io.BytesIO()
    _writer(type(entity))(out, entity)
    return out.getvalue()


@functools.cache
def _fields(cls: Any) -> tuple[tuple[str, Any, Any, str, Any], ...]:
    """(name, classification, default, kafka_type, default_factory) per field."""
    result = []
    for f in dataclasses.fields(cls):
        cl = classify_field(f)
        kafka_type = f.metadata.get("kafka_type", "")
        result.append((f.name, cl, f.default, kafka_type, f.default_factory))
    return tuple(result)


def _zero(kafka_type: str) -> object:
    if kafka_type in ("string",):
        return ""
    if kafka_type == "bool":
        return False
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if kafka_type == "error_code":
        return ErrorCode.none
    if kafka_type == "uuid":
        return uuid.UUID(int=0)
    if kafka_type in ("bytes", "records"):
        return b""
    if kafka_type == "float64":
        return 0.0
    if kafka_type == "datetime_i64":
        return _EPOCH
    return 0


def _convert(kafka_type: str, value: object) -> object:
    if value is None:
        return None
    if kafka_type in ("timedelta_i32", "timedelta_i64") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    if kafka_type == "datetime_i64" and isinstance(value, int):
        return _EPOCH + datetime.timedelta(milliseconds=value)
    if kafka_type == "error_code" and not isinstance(value, ErrorCode):
        return ErrorCode(cast(int, value))
    return value


def build(cls: type[E], data: Mapping[str, Any]) -> E:
    """Construct entity `cls` from plain values (see the module docstring)."""
    kwargs: dict[str, Any] = {}
    for name, cl, default, kafka_type, factory in _fields(cast(Any, cls)):
        if name in data:
            value = data[name]
            if isinstance(cl, EntityTupleField):
                if value is not None:
                    value = tuple(
                        v if isinstance(v, cl.type_) else build(cl.type_, v)
                        for v in cast(Sequence[Any], value)
                    )
            elif isinstance(cl, EntityField):
                if value is not None and not isinstance(value, cl.type_):
                    value = build(cl.type_, value)
            elif isinstance(cl, PrimitiveTupleField):
                if value is not None:
                    value = tuple(_convert(kafka_type, v) for v in value)
            elif isinstance(cl, PrimitiveField):
                value = _convert(kafka_type, value)
            kwargs[name] = value
        elif default is not dataclasses.MISSING or factory is not dataclasses.MISSING:
            continue
        elif isinstance(cl, EntityTupleField | PrimitiveTupleField):
            kwargs[name] = ()
        elif isinstance(cl, EntityField):
            kwargs[name] = None
        else:
            kwargs[name] = _zero(kafka_type)
    return cls(**kwargs)


def view(entity: object, name: str, default: Any = None) -> Any:
    """Read a request field that older versions may lack."""
    return getattr(entity, name, default)


def ms(value: object) -> int:
    """Milliseconds of a kio timedelta/datetime field (or an int)."""
    if isinstance(value, datetime.timedelta):
        return int(value / _ONE_MS)
    if isinstance(value, datetime.datetime):
        return int((value - _EPOCH) / _ONE_MS)
    return int(cast(int, value))
