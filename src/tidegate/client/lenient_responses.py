"""Response classes for the fields where Kafka sends a value kio cannot decode.

kio types DescribeTransactions' `TransactionStartTimeMs` as a timezone-aware datetime
and refuses negative values, but Kafka (and Tidegate) send -1 there when no transaction
is running (state Empty, CompleteCommit, ...) and for an unknown transactional id.
The classes here have the same wire layout with that field read as a plain int64;
`connection.ClientConnection` decodes the responses listed in `LENIENT_RESPONSES`
with them. Invariant: each class matches its kio counterpart field for field, in
order (the byte layout), differing only in the Python type of the named fields.

No `from __future__ import annotations` here: kio's readers need real types.
"""

from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.describe_transactions.v0.response import TopicData
from kio.schema.errors import ErrorCode
from kio.schema.response_header.v1.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32Timedelta, i64

__all__ = ["LENIENT_RESPONSES"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedTransactionState:
    """DescribeTransactions v0's TransactionState; `transaction_start_time` in ms, -1
    when none is running."""
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(65)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    transactional_id: str = field(metadata={"kafka_type": "string"})
    transaction_state: str = field(metadata={"kafka_type": "string"})
    transaction_timeout: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    transaction_start_time: i64 = field(metadata={"kafka_type": "int64"})
    producer_id: i64 = field(metadata={"kafka_type": "int64"})
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    topics: tuple[TopicData, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeTransactionsResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(65)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    transaction_states: tuple[DescribedTransactionState, ...]


LENIENT_RESPONSES: dict[tuple[int, int], type] = {
    (65, 0): DescribeTransactionsResponse,
}
