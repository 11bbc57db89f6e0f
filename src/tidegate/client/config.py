"""Typed producer, consumer and admin configurations with Kafka's keys and defaults.

Users pass a mapping with Kafka's dotted keys (``{"bootstrap.servers": "host:9092",
"linger.ms": 10}``) and/or keyword arguments with underscores (``linger_ms=10``).
Values may be typed or strings, as in a ``.properties`` file. The result is a frozen
dataclass whose attribute names are the keys with dots as underscores.

Invariants: every key is Kafka's name with Kafka's default, except where a comment says
why not; an unknown key or an invalid value raises `ConfigError` naming the key and
what is allowed; cross-key rules (e.g. ``delivery.timeout.ms >= linger.ms +
request.timeout.ms``) are checked once, here.

Idempotence (``enable.idempotence``) defaults to true, as in Kafka 3+, and needs
``acks=all``, ``max.in.flight.requests.per.connection <= 5`` and ``retries > 0``. As in
the Java client: if the user set ``enable.idempotence=true`` explicitly, a conflicting
key is a `ConfigError`; if idempotence is only the default, a conflicting key quietly
turns it off (``acks=1`` alone means "no idempotence", as it does in Kafka).
A ``transactional.id`` makes a transactional producer (see `producer.transactions`):
it needs idempotence, so an explicit ``enable.idempotence=false`` or a conflicting key
is a `ConfigError` there, never a quiet downgrade.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tidegate.client.errors import ConfigError

__all__ = ["AdminConfig", "ClientConfig", "ConfigError", "ConsumerConfig", "ProducerConfig",
           "Serializer"]

# A key/value serializer: any callable from the user's object to bytes (or None).
Serializer = Callable[[Any], bytes | None]
Parse = Callable[[str, object], object]
C = TypeVar("C", bound="ClientConfig")
INT32_MAX = 2_147_483_647
# The broker caches the last 5 batches per producer, so more in flight cannot be
# de-duplicated (Kafka's limit for enable.idempotence=true).
MAX_IDEMPOTENT_IN_FLIGHT = 5
LONG_MAX = 9_223_372_036_854_775_807


def _int(lo: int = 0, hi: int = LONG_MAX) -> Parse:
    def parse(key: str, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ConfigError(f"{key} must be an integer in [{lo}, {hi}], not {value!r}")
        try:
            n = int(value)
        except ValueError:
            raise ConfigError(f"{key} must be an integer in [{lo}, {hi}], not {value!r}") from None
        if not lo <= n <= hi:
            raise ConfigError(f"{key}={n} is out of range: allowed values are [{lo}, {hi}]")
        return n
    return parse


def _bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(f"{key} must be true or false, not {value!r}")


def _choice(*allowed: str) -> Parse:
    def parse(key: str, value: object) -> str:
        text = value.lower() if isinstance(value, str) else None
        if text is None or text not in allowed:
            raise ConfigError(f"{key}={value!r} is invalid: allowed values are "
                              f"{', '.join(allowed)}")
        return text
    return parse


def _str(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{key} must be a string, not {value!r}")
    return value


def _opt_str(key: str, value: object) -> str | None:
    return None if value is None else _str(key, value)


def _servers(key: str, value: object) -> tuple[str, ...]:
    items: list[str]
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
    elif isinstance(value, list | tuple):
        items = [str(v).strip() for v in value]
    else:
        raise ConfigError(f"{key} must be a list of host:port, not {value!r}")
    items = [i for i in items if i]
    if not items:
        raise ConfigError(f"{key} is empty: give at least one host:port, e.g. localhost:9092")
    for item in items:
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"{key} entry {item!r} must look like host:port, "
                              "e.g. localhost:9092")
    return tuple(items)


def _acks(key: str, value: object) -> int:
    text = str(value).lower()
    table = {"all": -1, "-1": -1, "0": 0, "1": 1}
    if text not in table or isinstance(value, bool):
        raise ConfigError(f"{key}={value!r} is invalid: allowed values are all, -1, 0, 1")
    return table[text]


def _callable(key: str, value: object) -> object:
    if value is not None and not callable(value):
        raise ConfigError(f"{key} must be a callable taking the object and returning bytes")
    return value


def _security(key: str, value: object) -> str:
    return str(_choice("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")(key, value)).upper()


def _pem(key: str, value: object) -> str:
    # The standard library's ssl module reads PEM only (no JKS / PKCS12 stores).
    return str(_choice("pem")(key, value)).upper()


def _endpoint_algorithm(key: str, value: object) -> str:
    # Java's clients turn host name checking off with an empty value, librdkafka's
    # with "none": accept both.
    if value == "":
        return "none"
    return str(_choice("https", "none")(key, value))


def _mechanism(key: str, value: object) -> str | None:
    if value is None:
        return None
    text = _str(key, value).strip().upper()
    allowed = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    if text not in allowed:
        raise ConfigError(f"{key}={value!r} is not supported: allowed values are "
                          f"{', '.join(allowed)}")
    return text


def _assignors(key: str, value: object) -> tuple[str, ...]:
    """partition.assignment.strategy: protocol or Java class names, in preference order."""
    from tidegate.assignors import lookup as lookup_assignor  # only consumers load them
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise ConfigError(f"{key} must list assignors, e.g. range,cooperative-sticky")
    names: list[str] = []
    for item in items:
        try:
            names.append(lookup_assignor(str(item)).name)
        except KeyError as e:
            raise ConfigError(f"{key}: {e.args[0]}") from None
    if len(set(names)) != len(names):
        raise ConfigError(f"{key} names an assignor twice: {value!r}")
    return tuple(names)


def _opt(key: str, default: object, parse: Parse, *, secret: bool = False) -> Any:
    # A secret (a password, a JAAS line holding one) stays out of the dataclass's repr,
    # so logging a config never prints it.
    return field(default=default, repr=not secret, metadata={"key": key, "parse": parse})


@dataclass(frozen=True, kw_only=True)
class ClientConfig:
    """Settings every client shares."""

    bootstrap_servers: tuple[str, ...] = _opt("bootstrap.servers", ("localhost:9092",), _servers)
    client_id: str = _opt("client.id", "tidegate", _str)
    request_timeout_ms: int = _opt("request.timeout.ms", 30_000, _int(0, INT32_MAX))
    retry_backoff_ms: int = _opt("retry.backoff.ms", 100, _int())
    retry_backoff_max_ms: int = _opt("retry.backoff.max.ms", 1000, _int())
    reconnect_backoff_ms: int = _opt("reconnect.backoff.ms", 50, _int())
    reconnect_backoff_max_ms: int = _opt("reconnect.backoff.max.ms", 1000, _int())
    socket_connection_setup_timeout_ms: int = _opt(
        "socket.connection.setup.timeout.ms", 10_000, _int())
    metadata_max_age_ms: int = _opt("metadata.max.age.ms", 300_000, _int())
    connections_max_idle_ms: int = _opt("connections.max.idle.ms", 540_000, _int())
    security_protocol: str = _opt("security.protocol", "PLAINTEXT", _security)
    # TLS (security.protocol SSL / SASL_SSL): librdkafka's names, and Java's PEM ones
    # as aliases, so a properties file written for either client works (client/tls.py).
    ssl_ca_location: str | None = _opt("ssl.ca.location", None, _opt_str)
    ssl_truststore_location: str | None = _opt("ssl.truststore.location", None, _opt_str)
    ssl_truststore_type: str = _opt("ssl.truststore.type", "PEM", _pem)
    ssl_certificate_location: str | None = _opt("ssl.certificate.location", None, _opt_str)
    ssl_key_location: str | None = _opt("ssl.key.location", None, _opt_str)
    ssl_keystore_location: str | None = _opt("ssl.keystore.location", None, _opt_str)
    ssl_keystore_type: str = _opt("ssl.keystore.type", "PEM", _pem)
    ssl_key_password: str | None = _opt("ssl.key.password", None, _opt_str,
                                         secret=True)
    ssl_endpoint_identification_algorithm: str = _opt(
        "ssl.endpoint.identification.algorithm", "https", _endpoint_algorithm)
    # SASL (SASL_PLAINTEXT / SASL_SSL): sasl.mechanism is Java's key, sasl.mechanisms
    # librdkafka's; sasl.jaas.config may carry the user and password (client/sasl.py).
    sasl_mechanism: str | None = _opt("sasl.mechanism", None, _mechanism)
    sasl_mechanisms: str | None = _opt("sasl.mechanisms", None, _mechanism)
    sasl_username: str | None = _opt("sasl.username", None, _opt_str)
    sasl_password: str | None = _opt("sasl.password", None, _opt_str, secret=True)
    sasl_jaas_config: str | None = _opt("sasl.jaas.config", None, _opt_str,
                                          secret=True)

    @classmethod
    def keys(cls) -> dict[str, dataclasses.Field[Any]]:
        return {f.metadata["key"]: f for f in dataclasses.fields(cls) if "key" in f.metadata}

    @classmethod
    def from_dict(cls: type[C], config: Mapping[str, object] | None = None,
                  **overrides: object) -> C:
        """Parse `config` (dotted keys) plus `overrides` (underscored keys)."""
        merged: dict[str, object] = dict(config or {})
        for k, v in overrides.items():
            merged[k.replace("_", ".")] = v
        known = cls.keys()
        kwargs: dict[str, Any] = {}
        for key, value in merged.items():
            f = known.get(key)
            if f is None:
                hint = difflib.get_close_matches(key, list(known), n=1)
                more = f"; did you mean {hint[0]}?" if hint else ""
                raise ConfigError(f"unknown {cls._kind()} config {key!r}{more}")
            kwargs[f.name] = f.metadata["parse"](key, value)
        cfg = cls(**kwargs)
        cfg._check(set(merged))
        return cfg

    @classmethod
    def _kind(cls) -> str:
        return "client"

    def _check(self, explicit: set[str]) -> None:
        """Cross-key rules; `explicit` is the set of keys the user gave."""


@dataclass(frozen=True, kw_only=True)
class ProducerConfig(ClientConfig):
    acks: int = _opt("acks", -1, _acks)
    linger_ms: int = _opt("linger.ms", 5, _int(0, INT32_MAX))
    batch_size: int = _opt("batch.size", 16_384, _int(0, INT32_MAX))
    buffer_memory: int = _opt("buffer.memory", 33_554_432, _int(1))
    compression_type: str = _opt("compression.type", "none",
                                 _choice("none", "gzip", "snappy", "lz4", "zstd"))
    max_in_flight_requests_per_connection: int = _opt(
        "max.in.flight.requests.per.connection", 5, _int(1, INT32_MAX))
    retries: int = _opt("retries", INT32_MAX, _int(0, INT32_MAX))
    delivery_timeout_ms: int = _opt("delivery.timeout.ms", 120_000, _int(0, INT32_MAX))
    max_request_size: int = _opt("max.request.size", 1_048_576, _int(1, INT32_MAX))
    max_block_ms: int = _opt("max.block.ms", 60_000, _int())
    # Kafka 3+'s default; conflicting acks / in-flight / retries turn it off unless
    # it was set explicitly (see _check_idempotence).
    enable_idempotence: bool = _opt("enable.idempotence", True, _bool)
    # Whether the user set enable.idempotence=true (not just the default): then a broker
    # without InitProducerId is an error; otherwise the producer goes on without.
    idempotence_explicit: bool = field(default=False, init=False, repr=False, compare=False)
    transactional_id: str | None = _opt("transactional.id", None, _opt_str)
    transaction_timeout_ms: int = _opt("transaction.timeout.ms", 60_000, _int(1, INT32_MAX))
    # KIP-939's client-side switch: InitProducerId with enable_2pc (no transaction
    # timeout; prepare_transaction / complete_transaction).
    transaction_two_phase_commit_enable: bool = _opt(
        "transaction.two.phase.commit.enable", False, _bool)
    # Tidegate's: the highest transaction version (KIP-890) to use; the broker's
    # finalized `transaction.version` feature caps it. 1 forces AddPartitionsToTxn and
    # EndTxn < v5 (for tests and for brokers that mis-advertise).
    tidegate_transaction_version_max: int = _opt("tidegate.transaction.version.max", 2,
                                                 _int(1, 2))
    partitioner_ignore_keys: bool = _opt("partitioner.ignore.keys", False, _bool)
    key_serializer: Serializer | None = _opt("key.serializer", None, _callable)  # noqa: RUF009
    value_serializer: Serializer | None = _opt(  # noqa: RUF009
        "value.serializer", None, _callable)

    @classmethod
    def _kind(cls) -> str:
        return "producer"

    def _check(self, explicit: set[str]) -> None:
        if self.transactional_id is not None:
            self._check_transactional(explicit)
        elif self.transaction_two_phase_commit_enable:
            raise ConfigError("transaction.two.phase.commit.enable=true needs a "
                              "transactional.id")
        self._check_idempotence(explicit)
        if self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            if "delivery.timeout.ms" in explicit:
                raise ConfigError(
                    f"delivery.timeout.ms={self.delivery_timeout_ms} must be at least "
                    f"linger.ms + request.timeout.ms = "
                    f"{self.linger_ms + self.request_timeout_ms}")
            # As Kafka does when the user did not set it: raise it to the minimum.
            object.__setattr__(self, "delivery_timeout_ms",
                               self.linger_ms + self.request_timeout_ms)


    def _check_transactional(self, explicit: set[str]) -> None:
        """A transactional producer is idempotent: conflicting keys are errors."""
        if not self.transactional_id:
            raise ConfigError("transactional.id must not be empty; leave it out for a "
                              "producer without transactions")
        if not self.enable_idempotence:
            raise ConfigError("transactional.id needs enable.idempotence=true (the "
                              "default); remove enable.idempotence=false")
        explicit.add("enable.idempotence")  # conflicts are errors, not a downgrade

    def _check_idempotence(self, explicit: set[str]) -> None:
        """Kafka's rules (ProducerConfig.postProcessAndValidateIdempotenceConfigs)."""
        if not self.enable_idempotence:
            return
        object.__setattr__(self, "idempotence_explicit", "enable.idempotence" in explicit)
        conflicts: list[str] = []
        if self.acks != -1:
            conflicts.append(f"acks must be all (-1), not {self.acks}")
        if self.max_in_flight_requests_per_connection > MAX_IDEMPOTENT_IN_FLIGHT:
            conflicts.append(
                "max.in.flight.requests.per.connection must be at most "
                f"{MAX_IDEMPOTENT_IN_FLIGHT}, not {self.max_in_flight_requests_per_connection}")
        if self.retries == 0:
            conflicts.append("retries must be greater than 0")
        if not conflicts:
            return
        if "enable.idempotence" in explicit:
            raise ConfigError(
                "enable.idempotence=true needs " + "; ".join(conflicts)
                + ". Either change those settings or set enable.idempotence=false "
                "(retries may then duplicate or reorder records)")
        # Idempotence was only the default: the user's explicit choice wins, as in Kafka.
        object.__setattr__(self, "enable_idempotence", False)


@dataclass(frozen=True, kw_only=True)
class ConsumerConfig(ClientConfig):
    group_id: str | None = _opt("group.id", None, _opt_str)
    auto_offset_reset: str = _opt("auto.offset.reset", "latest",
                                  _choice("earliest", "latest", "none"))
    fetch_min_bytes: int = _opt("fetch.min.bytes", 1, _int(0, INT32_MAX))
    fetch_max_wait_ms: int = _opt("fetch.max.wait.ms", 500, _int(0, INT32_MAX))
    fetch_max_bytes: int = _opt("fetch.max.bytes", 52_428_800, _int(0, INT32_MAX))
    max_partition_fetch_bytes: int = _opt("max.partition.fetch.bytes", 1_048_576,
                                          _int(0, INT32_MAX))
    max_poll_records: int = _opt("max.poll.records", 500, _int(1, INT32_MAX))
    # librdkafka's name: fetched bytes held before fetching ahead stops (0: never fetch
    # a partition ahead while its last fetch is still being read; consumer/fetcher.py).
    queued_max_messages_kbytes: int = _opt("queued.max.messages.kbytes", 65_536,
                                           _int(0, 2_097_151))
    isolation_level: str = _opt("isolation.level", "read_uncommitted",
                                _choice("read_uncommitted", "read_committed"))
    check_crcs: bool = _opt("check.crcs", True, _bool)
    enable_auto_commit: bool = _opt("enable.auto.commit", True, _bool)
    client_rack: str = _opt("client.rack", "", _str)
    allow_auto_create_topics: bool = _opt("allow.auto.create.topics", True, _bool)
    default_api_timeout_ms: int = _opt("default.api.timeout.ms", 60_000, _int(0, INT32_MAX))
    # -- consumer groups (client/consumer/group.py) ------------------------------------
    group_instance_id: str | None = _opt("group.instance.id", None, _opt_str)
    session_timeout_ms: int = _opt("session.timeout.ms", 45_000, _int(1, INT32_MAX))
    heartbeat_interval_ms: int = _opt("heartbeat.interval.ms", 3_000, _int(1, INT32_MAX))
    max_poll_interval_ms: int = _opt("max.poll.interval.ms", 300_000, _int(1, INT32_MAX))
    auto_commit_interval_ms: int = _opt("auto.commit.interval.ms", 5_000, _int(0, INT32_MAX))
    partition_assignment_strategy: tuple[str, ...] = _opt(
        "partition.assignment.strategy", ("range", "cooperative-sticky"), _assignors)
    exclude_internal_topics: bool = _opt("exclude.internal.topics", True, _bool)
    # KIP-848 (client/consumer/consumer_protocol.py): "consumer" lets the broker assign
    group_protocol: str = _opt("group.protocol", "classic", _choice("classic", "consumer"))
    group_remote_assignor: str | None = _opt("group.remote.assignor", None, _opt_str)

    @classmethod
    def _kind(cls) -> str:
        return "consumer"

    def _check(self, explicit: set[str]) -> None:
        if self.request_timeout_ms <= self.fetch_max_wait_ms:
            raise ConfigError(
                f"request.timeout.ms={self.request_timeout_ms} must be larger than "
                f"fetch.max.wait.ms={self.fetch_max_wait_ms}")
        # -- consumer groups ----------------------------------------------------------
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError(
                f"heartbeat.interval.ms={self.heartbeat_interval_ms} must be lower than "
                f"session.timeout.ms={self.session_timeout_ms} (at most a third of it is "
                "usual)")
        if self.group_protocol == "consumer":
            # As Kafka's client: under KIP-848 these are the broker's business
            # (group.consumer.session.timeout.ms, ...heartbeat.interval.ms, ...assignors)
            clash = sorted(explicit & {"session.timeout.ms", "heartbeat.interval.ms",
                                       "partition.assignment.strategy"})
            if clash:
                raise ConfigError(
                    f"{', '.join(clash)} cannot be set with group.protocol=consumer: the "
                    "broker decides them (group.consumer.* broker settings; choose a "
                    "server-side assignor with group.remote.assignor)")
        if self.group_id is None:
            if self.group_instance_id is not None:
                raise ConfigError("group.instance.id needs a group.id")
            if self.enable_auto_commit and "enable.auto.commit" in explicit:
                raise ConfigError("enable.auto.commit=true needs a group.id to commit to")
            # As Kafka: without a group there is nothing to auto-commit to.
            object.__setattr__(self, "enable_auto_commit", False)
        elif not self.group_id:
            raise ConfigError("group.id must not be empty; leave it out to consume "
                              "without a group (assign() only)")

    @property
    def isolation(self) -> int:
        """The wire value of isolation.level (0 read_uncommitted, 1 read_committed)."""
        return 1 if self.isolation_level == "read_committed" else 0


@dataclass(frozen=True, kw_only=True)
class AdminConfig(ClientConfig):
    default_api_timeout_ms: int = _opt("default.api.timeout.ms", 60_000, _int(0, INT32_MAX))

    @classmethod
    def _kind(cls) -> str:
        return "admin"
