"""Client configs: Kafka's keys and defaults, clear errors for bad input."""

from __future__ import annotations

import pytest

from tidegate.client.config import AdminConfig, ConsumerConfig, ProducerConfig
from tidegate.client.errors import ConfigError


def test_producer_defaults_are_kafkas() -> None:
    c = ProducerConfig.from_dict({})
    assert c.bootstrap_servers == ("localhost:9092",)
    assert c.acks == -1  # "all"
    assert c.linger_ms == 5  # Kafka 4.0
    assert c.batch_size == 16384
    assert c.buffer_memory == 33554432
    assert c.compression_type == "none"
    assert c.max_in_flight_requests_per_connection == 5
    assert c.retries == 2147483647
    assert c.delivery_timeout_ms == 120000
    assert c.request_timeout_ms == 30000
    assert c.retry_backoff_ms == 100
    assert c.max_request_size == 1048576
    assert c.max_block_ms == 60000
    assert c.enable_idempotence is True  # Kafka 3+


def test_consumer_defaults_are_kafkas() -> None:
    c = ConsumerConfig.from_dict({})
    assert c.auto_offset_reset == "latest"
    assert (c.fetch_min_bytes, c.fetch_max_wait_ms) == (1, 500)
    assert c.fetch_max_bytes == 52428800
    assert c.max_partition_fetch_bytes == 1048576
    assert c.max_poll_records == 500
    assert c.isolation_level == "read_uncommitted" and c.isolation == 0
    assert ConsumerConfig.from_dict({"isolation.level": "read_committed"}).isolation == 1


def test_dotted_keys_underscored_kwargs_and_string_values() -> None:
    c = ProducerConfig.from_dict({"bootstrap.servers": "a:1, b:2", "linger.ms": "10"},
                                 batch_size=100, acks="1")
    assert c.bootstrap_servers == ("a:1", "b:2")
    assert (c.linger_ms, c.batch_size, c.acks) == (10, 100, 1)
    assert ProducerConfig.from_dict({"acks": 0}).acks == 0
    assert ProducerConfig.from_dict({"acks": "all"}).acks == -1
    assert ProducerConfig.from_dict({"bootstrap.servers": ["h:9"]}).bootstrap_servers == ("h:9",)


def test_unknown_key_names_the_key_and_suggests() -> None:
    with pytest.raises(ConfigError, match=r"unknown producer config 'linger\.msec'.*linger\.ms"):
        ProducerConfig.from_dict({"linger.msec": 1})
    with pytest.raises(ConfigError, match="unknown consumer config 'acks'"):
        ConsumerConfig.from_dict({"acks": "all"})
    assert issubclass(ConfigError, ValueError)


@pytest.mark.parametrize(("cls", "key", "value", "pattern"), [
    (ProducerConfig, "acks", "2", "allowed values are all, -1, 0, 1"),
    (ProducerConfig, "compression.type", "brotli", "allowed values are none, gzip, snappy, lz4"),
    (ProducerConfig, "linger.ms", -1, r"linger\.ms=-1 is out of range"),
    (ProducerConfig, "batch.size", "big", "batch.size must be an integer"),
    (ProducerConfig, "max.in.flight.requests.per.connection", 0, "out of range"),
    (ProducerConfig, "bootstrap.servers", "nohost", "must look like host:port"),
    (ProducerConfig, "bootstrap.servers", "", "is empty"),
    (ProducerConfig, "key.serializer", "not callable", "must be a callable"),
    (ConsumerConfig, "auto.offset.reset", "smallest", "allowed values are earliest, latest, none"),
    (ConsumerConfig, "isolation.level", "dirty", "read_uncommitted, read_committed"),
    (ConsumerConfig, "check.crcs", "yes", "must be true or false"),
    (AdminConfig, "security.protocol", "TLS", "allowed values are plaintext, ssl"),
])
def test_invalid_values_name_key_and_allowed(cls: type[ProducerConfig], key: str,
                                             value: object, pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern) as info:
        cls.from_dict({key: value})
    assert key in str(info.value)


def test_idempotence_rules_and_transactions_rejected_clearly() -> None:
    assert ProducerConfig.from_dict({"enable.idempotence": True}).enable_idempotence is True
    assert ProducerConfig.from_dict({"enable.idempotence": "false"}).enable_idempotence is False
    # Explicitly enabled: a contradicting setting is an error, as in the Java client.
    with pytest.raises(ConfigError, match=r"enable\.idempotence=true needs acks must be all"):
        ProducerConfig.from_dict({"enable.idempotence": True, "acks": 1})
    with pytest.raises(ConfigError, match=r"max\.in\.flight\.requests\.per\.connection"):
        ProducerConfig.from_dict({"enable.idempotence": True,
                                  "max.in.flight.requests.per.connection": 6})
    with pytest.raises(ConfigError, match=r"retries must be greater than 0"):
        ProducerConfig.from_dict({"enable.idempotence": "true", "retries": 0})
    # Only the default: the explicit conflicting setting turns idempotence off.
    assert ProducerConfig.from_dict({"acks": "1"}).enable_idempotence is False
    assert ProducerConfig.from_dict({"retries": 0}).enable_idempotence is False
    assert ProducerConfig.from_dict(
        {"max.in.flight.requests.per.connection": 10}).enable_idempotence is False
    assert ProducerConfig.from_dict({"acks": "all"}).enable_idempotence is True
    # transactional: a conflicting key is an error, never a quiet downgrade
    with pytest.raises(ConfigError, match=r"enable\.idempotence=true needs acks"):
        ProducerConfig.from_dict({"transactional.id": "tx", "acks": "1"})


def test_delivery_timeout_rule() -> None:
    with pytest.raises(ConfigError, match=r"delivery\.timeout\.ms=1000 must be at least"):
        ProducerConfig.from_dict({"delivery.timeout.ms": 1000})
    # Not set explicitly: raised to linger.ms + request.timeout.ms, as Kafka does.
    c = ProducerConfig.from_dict({"request.timeout.ms": 200_000})
    assert c.delivery_timeout_ms == 200_005


def test_consumer_request_timeout_must_exceed_fetch_wait() -> None:
    with pytest.raises(ConfigError, match=r"larger than fetch\.max\.wait\.ms"):
        ConsumerConfig.from_dict({"request.timeout.ms": 100, "fetch.max.wait.ms": 500})


def test_serializer_callables_are_kept() -> None:
    c = ProducerConfig.from_dict({"value.serializer": str.encode})
    assert c.value_serializer is str.encode
