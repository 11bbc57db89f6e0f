"""Dynamic broker configs Tidegate has no spec for: Kafka's static ones are refused as
read-only, keys nobody knows are accepted unused and described as sensitive (Kafka 4.1's
answers: the oracle's alter_broker_configs_unknown_keys case)."""

from __future__ import annotations

import pytest

from tidegate.common.config import BROKER_KEYS
from tidegate.common.errors import InvalidRequestError
from tidegate.server.dynamic_config import (
    DYNAMIC_KEYS,
    SYNONYM_KEYS,
    check_alterable,
    is_sensitive,
)
from tidegate.server.kafka_broker_keys import KAFKA_PASSWORD_KEYS, KAFKA_STATIC_KEYS


def test_kafkas_static_keys_are_the_ones_tidegate_has_no_spec_for() -> None:
    assert not KAFKA_STATIC_KEYS & (set(DYNAMIC_KEYS) | set(BROKER_KEYS) | set(SYNONYM_KEYS))
    assert KAFKA_PASSWORD_KEYS <= KAFKA_STATIC_KEYS


@pytest.mark.parametrize("per_broker", [True, False])
@pytest.mark.parametrize("name", [
    "log.message.format.version",  # Kafka 4 removed it
    "log.message.timestamp.difference.max.ms",
    "confluent.some.plugin.setting",
    "listener.name.plaintext.some.plugin.setting",
])
def test_a_key_nobody_knows_is_accepted_unused(name: str, per_broker: bool) -> None:
    assert check_alterable(name, per_broker=per_broker) is None
    assert is_sensitive(name)


@pytest.mark.parametrize("name", [
    "socket.send.buffer.bytes",  # Kafka's, static
    "controller.quorum.voters",
    "node.id",  # Kafka's and Tidegate's, static
    "console.read.only",  # Tidegate's own, static
    "log.retention.check.interval.ms",
])
def test_read_only_keys_are_refused_in_kafkas_words(name: str) -> None:
    if name in DYNAMIC_KEYS:
        pytest.fail(f"{name} is dynamic: pick a static key")
    with pytest.raises(InvalidRequestError,
                       match=rf"^Cannot update these configs dynamically: Set\({name}\)$"):
        check_alterable(name, per_broker=True)


def test_sensitivity_follows_the_type() -> None:
    assert check_alterable("log.retention.ms", per_broker=False) is DYNAMIC_KEYS[
        "log.retention.ms"]
    assert not is_sensitive("log.retention.ms")
    assert not is_sensitive("socket.send.buffer.bytes")  # Kafka knows it: an int
    assert not is_sensitive("console.read.only")
    assert is_sensitive("delegation.token.secret.key")  # Kafka's PASSWORD
    assert is_sensitive("listener.name.sasl_ssl.ssl.key.password")
