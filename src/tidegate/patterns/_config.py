"""One settings mapping for the several clients a pattern opens.

Tidegate's client refuses keys it does not know (a typo must not pass silently), so a
pattern that opens a consumer and a producer from the application's one mapping gives
each only the keys its kind knows; a key neither knows is still refused.
"""

from __future__ import annotations

from collections.abc import Mapping

from tidegate.client import ConsumerConfig, ProducerConfig

__all__ = ["consumer_settings", "producer_settings"]


def _check(config: Mapping[str, object]) -> None:
    known = ConsumerConfig.keys().keys() | ProducerConfig.keys().keys()
    unknown = sorted(k for k in config if k not in known)
    if unknown:
        raise ValueError(f"unknown client settings: {', '.join(unknown)}")


def consumer_settings(config: Mapping[str, object]) -> dict[str, object]:
    _check(config)
    return {k: v for k, v in config.items() if k in ConsumerConfig.keys()}  # noqa: SIM118 (a classmethod)


def producer_settings(config: Mapping[str, object]) -> dict[str, object]:
    _check(config)
    return {k: v for k, v in config.items() if k in ProducerConfig.keys()}  # noqa: SIM118 (a classmethod)
