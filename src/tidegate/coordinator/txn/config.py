"""Transaction coordinator settings, with Kafka's broker config names and defaults."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["TxnConfig"]


@dataclass(frozen=True)
class TxnConfig:
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000  # transactional.id.expiration.ms
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    abort_timed_out_interval_ms: int = 10_000
    # transaction.remove.expired.transaction.cleanup.interval.ms
    remove_expired_interval_ms: int = 3_600_000
    # transaction.two.phase.commit.enable (KIP-939): true by default in Tidegate (false
    # in Kafka), for the exactly-once Spark sink and the check-back helper
    two_phase_commit_enable: bool = True
    # Kafka's `transaction.version` feature level: >= 1 writes TransactionLogValue v1
    # (flexible), 2 lets clients bump the epoch on every EndTxn (KIP-890 part 2) and is
    # the version used for aborts the coordinator starts itself.
    transaction_version: int = 2

    @property
    def log_value_version(self) -> int:
        return 1 if self.transaction_version >= 1 else 0

    @classmethod
    def from_broker(
        cls,
        get_int: Callable[[str, int], int | None],
        get_bool: Callable[[str], bool] | None = None,
    ) -> TxnConfig:
        """Build from a broker config's accessors (`BrokerConfig.get_int`, `get_bool`)."""
        d = cls()

        def val(key: str, default: int) -> int:
            v = get_int(key, default)
            return default if v is None else v

        return cls(
            max_timeout_ms=val("transaction.max.timeout.ms", d.max_timeout_ms),
            transactional_id_expiration_ms=val(
                "transactional.id.expiration.ms", d.transactional_id_expiration_ms
            ),
            abort_timed_out_interval_ms=val(
                "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                d.abort_timed_out_interval_ms,
            ),
            remove_expired_interval_ms=val(
                "transaction.remove.expired.transaction.cleanup.interval.ms",
                d.remove_expired_interval_ms,
            ),
            two_phase_commit_enable=(
                get_bool("transaction.two.phase.commit.enable") if get_bool
                else d.two_phase_commit_enable
            ),
        )
