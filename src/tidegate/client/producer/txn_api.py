"""`AsyncProducer`'s transactional calls (Kafka's and kafka-python's names), each handed
to the `TransactionManager` (`txn_manager`); a mixin so the producer module stays about
sending."""

from __future__ import annotations

from collections.abc import Mapping

from tidegate.client.consumer.group_offsets import OffsetAndMetadata
from tidegate.client.errors import ClientClosedError, IllegalStateError
from tidegate.client.producer.transactions import PreparedTxnState, TxnState
from tidegate.client.producer.txn_manager import TransactionManager
from tidegate.client.types import ConsumerGroupMetadata, TopicPartition

__all__ = ["TransactionalMixin"]


class TransactionalMixin:
    """The transactional API of `AsyncProducer` (which sets `_txn` and `_closed`)."""

    _txn: TransactionManager | None
    _closed: bool

    def _transactions(self) -> TransactionManager:
        if self._txn is None:
            raise IllegalStateError("this producer has no transactional.id: set one to use "
                                    "transactions")
        if self._closed:
            raise ClientClosedError("the producer is closed")
        return self._txn

    @property
    def transaction_state(self) -> TxnState | None:
        """The transaction manager's state (None without transactional.id)."""
        return None if self._txn is None else self._txn.state.state

    async def init_transactions(self, keep_prepared_txn: bool = False,
                                timeout_ms: int | None = None) -> PreparedTxnState | None:
        """Get the producer id of ``transactional.id`` (fencing older producers with it
        and ending their transactions). With `keep_prepared_txn` (KIP-939) a prepared
        transaction left by an earlier process is kept and returned: finish it with
        `complete_transaction()`. Else returns None."""
        return await self._transactions().init_transactions(keep_prepared_txn, timeout_ms)

    def begin_transaction(self) -> None:
        self._transactions().begin_transaction()

    async def send_offsets_to_transaction(
            self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
            group_metadata: ConsumerGroupMetadata, timeout_ms: int | None = None) -> None:
        """Commit a consumer group's offsets (the next offset to read per partition)
        with the transaction; `group_metadata` is the consumer's `group_metadata()`."""
        await self._transactions().send_offsets_to_transaction(offsets, group_metadata,
                                                               timeout_ms)

    async def commit_transaction(self, timeout_ms: int | None = None) -> None:
        """Flush, then commit. KafkaTimeoutError: the outcome is unknown; call again."""
        await self._transactions().commit_transaction(timeout_ms)

    async def abort_transaction(self, timeout_ms: int | None = None) -> None:
        """Drop unsent records, wait for those in flight, then abort."""
        await self._transactions().abort_transaction(timeout_ms)

    async def prepare_transaction(self, timeout_ms: int | None = None) -> PreparedTxnState:
        """KIP-939: flush and hand the transaction to an outside decision."""
        return await self._transactions().prepare_transaction(timeout_ms)

    async def complete_transaction(self, prepared_state: PreparedTxnState, commit: bool = True,
                                   timeout_ms: int | None = None) -> None:
        """KIP-939: commit (or abort) the prepared transaction `prepared_state`, which
        must be the one this producer holds (PreparedTxnMismatchError otherwise)."""
        await self._transactions().complete_transaction(prepared_state, commit, timeout_ms)
