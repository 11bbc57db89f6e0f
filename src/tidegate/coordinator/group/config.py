"""Group coordinator settings, with Kafka's broker config names and defaults."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["NEW_MEMBER_JOIN_TIMEOUT_MS", "GroupConfig"]

# Kafka's GroupCoordinator.NewMemberJoinTimeoutMs: a member that joined during the
# rebalance in progress and disappears is dropped after this long rather than holding
# the rebalance up until the rebalance timeout.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


@dataclass(frozen=True)
class GroupConfig:
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1800000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    max_size: int = 2147483647  # group.max.size
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    offsets_retention_ms: int = 10080 * 60000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600000  # offsets.retention.check.interval.ms
    # KIP-848 consumer-protocol groups
    consumer_session_timeout_ms: int = 45000  # group.consumer.session.timeout.ms
    consumer_heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms
    consumer_assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors
    consumer_migration_policy: str = "bidirectional"  # group.consumer.migration.policy

    @property
    def upgrade(self) -> bool:
        return self.consumer_migration_policy in ("bidirectional", "upgrade")

    @property
    def downgrade(self) -> bool:
        return self.consumer_migration_policy in ("bidirectional", "downgrade")

    @classmethod
    def from_broker(cls, get_int: Callable[[str, int], int | None],
                    get: Callable[[str, str], str] | None = None) -> GroupConfig:
        """Build from broker config accessors (`BrokerConfig.get_int`, `.get`)."""
        d = cls()
        assignors = d.consumer_assignors
        policy = d.consumer_migration_policy
        if get is not None:
            policy = (get("group.consumer.migration.policy", policy) or policy).lower()
            names = tuple(a.strip() for a in get("group.consumer.assignors", "").split(",")
                          if a.strip())
            assignors = names or assignors

        def val(key: str, default: int) -> int:
            v = get_int(key, default)
            return default if v is None else v

        return cls(
            min_session_timeout_ms=val("group.min.session.timeout.ms", d.min_session_timeout_ms),
            max_session_timeout_ms=val("group.max.session.timeout.ms", d.max_session_timeout_ms),
            initial_rebalance_delay_ms=val(
                "group.initial.rebalance.delay.ms", d.initial_rebalance_delay_ms
            ),
            max_size=val("group.max.size", d.max_size),
            offset_metadata_max_bytes=val(
                "offset.metadata.max.bytes", d.offset_metadata_max_bytes
            ),
            offsets_retention_ms=val("offsets.retention.minutes", 10080) * 60000,
            offsets_retention_check_interval_ms=val(
                "offsets.retention.check.interval.ms", d.offsets_retention_check_interval_ms
            ),
            consumer_session_timeout_ms=val(
                "group.consumer.session.timeout.ms", d.consumer_session_timeout_ms),
            consumer_heartbeat_interval_ms=val(
                "group.consumer.heartbeat.interval.ms", d.consumer_heartbeat_interval_ms),
            consumer_assignors=assignors,
            consumer_migration_policy=policy,
        )
