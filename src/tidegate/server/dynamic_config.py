"""Kafka's dynamic broker configs: the broker keys AlterConfigs may change at run time.

`DYNAMIC_KEYS` lists every key Kafka's DynamicBrokerConfig accepts (with its type and
default for DescribeConfigs), so clients and tools that set them — librdkafka's admin
test sets `sasl.kerberos.min.time.before.relogin`, operators set thread counts — get
NO_ERROR as from Kafka. Of these, the topic defaults (`log.retention.ms`,
`message.max.bytes`, `min.insync.replicas`, ...) change every topic without an
override; the rest (thread pools, SASL/SSL listener settings, connection quotas) are
validated, persisted and described but change nothing on a single asyncio process
without TLS or SASL.

`check_alterable(name, per_broker)` raises `InvalidRequestError` with Kafka's wording
for a key that cannot change at run time (Tidegate's read-only keys and Kafka's,
`server/kafka_broker_keys.py`); a key neither knows is accepted, stored and used for
nothing, as Kafka 4.1 accepts any such key (a plugin's, or one Kafka 4 removed such as
`log.message.format.version`), and described as sensitive (`is_sensitive`), as Kafka
describes a config it cannot type. `parse_dynamic(name, value)` validates a value's
type. Listener keys may carry Kafka's `listener.name.<listener>.` prefix; the
keystore/truststore keys must (as in Kafka), and listener keys may be set only on a
broker id, not on the cluster default resource ("").

Kafka 4.1 and later enable KIP-966 (eligible leader replicas) on a new cluster: the
controller writes a cluster-level `min.insync.replicas`, the value of its own static
config, when it first becomes active, and from then on refuses it on a broker resource
and refuses to remove it. `activate_cluster_defaults` does the same once per data
directory, so DescribeConfigs lists `min.insync.replicas` on every topic with source
DYNAMIC_DEFAULT_BROKER_CONFIG, as a 4.1 broker does; `check_elr_min_isr` holds the two
refusals. Like any cluster default it can still be changed on the "" resource.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping

from tidegate.common.config import BROKER_KEYS
from tidegate.common.errors import InvalidConfigError, InvalidRequestError
from tidegate.server.kafka_broker_keys import KAFKA_PASSWORD_KEYS, KAFKA_STATIC_KEYS
from tidegate.storage.config import BROKER_SYNONYMS, TOPIC_CONFIG_KEYS
from tidegate.storage.config_types import (
    INT_MAX,
    LONG_MAX,
    Anything,
    ConfigKey,
    ConfigType,
    Range,
)

__all__ = [
    "DYNAMIC_KEYS",
    "ELR_CLUSTER_KEYS",
    "SYNONYM_KEYS",
    "activate_cluster_defaults",
    "base_name",
    "check_alterable",
    "check_elr_min_isr",
    "is_sensitive",
    "is_unknown",
    "parse_dynamic",
]

log = logging.getLogger(__name__)

_T = ConfigType
_ANY = Anything()
_POSITIVE = Range(1)
_NON_NEGATIVE = Range(0)


def _k(name: str, typ: ConfigType, default: object, doc: str, v: object = _ANY) -> ConfigKey:
    return ConfigKey(name, typ, default, doc, v)  # type: ignore[arg-type]


_NOT_HERE = "Accepted and stored; Tidegate runs one asyncio process and does not use it."
_NO_TLS = ("Accepted and stored; listeners read their TLS and SASL settings from the "
           "broker's properties at start (docs/security.md).")

# Keystore/truststore keys: Kafka accepts them only with a listener prefix.
_SSL_RECONFIGURABLE = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
    }
)
# Listener keys that are cluster-wide (everything else listener-related is per-broker).
_CLUSTER_LEVEL_LISTENER = frozenset(
    {"max.connections", "max.connection.creation.rate", "num.network.threads"}
)

_OWN: tuple[ConfigKey, ...] = (
    # thread pools (Kafka's DynamicThreadPool)
    _k("num.io.threads", _T.INT, 8, _NOT_HERE, _POSITIVE),
    _k("num.network.threads", _T.INT, 3, _NOT_HERE, _POSITIVE),
    _k("num.replica.fetchers", _T.INT, 1, _NOT_HERE, _POSITIVE),
    _k("num.recovery.threads.per.data.dir", _T.INT, 1, _NOT_HERE, _POSITIVE),
    _k("background.threads", _T.INT, 10, _NOT_HERE, _POSITIVE),
    # log cleaner
    _k("log.cleaner.threads", _T.INT, 1, _NOT_HERE, _NON_NEGATIVE),
    _k("log.cleaner.dedupe.buffer.size", _T.LONG, 134217728, _NOT_HERE),
    _k("log.cleaner.io.buffer.load.factor", _T.DOUBLE, 0.9, _NOT_HERE),
    _k("log.cleaner.io.buffer.size", _T.INT, 524288, _NOT_HERE, _NON_NEGATIVE),
    _k("log.cleaner.io.max.bytes.per.second", _T.DOUBLE, 1.7976931348623157e308, _NOT_HERE),
    _k("log.cleaner.backoff.ms", _T.LONG, 15000, "Sleep between cleaner passes.", _NON_NEGATIVE),
    # socket server quotas
    _k("max.connections", _T.INT, INT_MAX, _NOT_HERE, _NON_NEGATIVE),
    _k("max.connections.per.ip", _T.INT, INT_MAX, _NOT_HERE, _NON_NEGATIVE),
    _k("max.connections.per.ip.overrides", _T.STRING, "", _NOT_HERE),
    _k("max.connection.creation.rate", _T.INT, INT_MAX, _NOT_HERE, _NON_NEGATIVE),
    # producer state, metrics, config providers
    _k("producer.id.expiration.ms", _T.INT, 86400000, "Idle producer id expiry.", _POSITIVE),
    _k("transaction.partition.verification.enable", _T.BOOLEAN, True, _NOT_HERE),
    _k("metric.reporters", _T.LIST, (), _NOT_HERE),
    _k("config.providers", _T.LIST, (), _NOT_HERE),
    # tiered storage
    _k("remote.log.index.file.cache.total.size.bytes", _T.LONG, 1073741824, _NOT_HERE),
    _k("remote.log.manager.copy.max.bytes.per.second", _T.LONG, LONG_MAX, _NOT_HERE),
    _k("remote.log.manager.fetch.max.bytes.per.second", _T.LONG, LONG_MAX, _NOT_HERE),
    _k("remote.fetch.max.wait.ms", _T.INT, 500, _NOT_HERE),
    # SASL listener settings
    _k("sasl.enabled.mechanisms", _T.LIST, ("GSSAPI",), _NO_TLS),
    _k("sasl.mechanism.inter.broker.protocol", _T.STRING, "GSSAPI", _NO_TLS),
    _k("sasl.jaas.config", _T.PASSWORD, None, _NO_TLS),
    _k("sasl.kerberos.service.name", _T.STRING, None, _NO_TLS),
    _k("sasl.kerberos.kinit.cmd", _T.STRING, "/usr/bin/kinit", _NO_TLS),
    _k("sasl.kerberos.ticket.renew.window.factor", _T.DOUBLE, 0.8, _NO_TLS),
    _k("sasl.kerberos.ticket.renew.jitter", _T.DOUBLE, 0.05, _NO_TLS),
    _k("sasl.kerberos.min.time.before.relogin", _T.LONG, 60000, _NO_TLS),
    _k("sasl.kerberos.principal.to.local.rules", _T.LIST, ("DEFAULT",), _NO_TLS),
    _k("sasl.login.refresh.window.factor", _T.DOUBLE, 0.8, _NO_TLS),
    _k("sasl.login.refresh.window.jitter", _T.DOUBLE, 0.05, _NO_TLS),
    _k("sasl.login.refresh.min.period.seconds", _T.SHORT, 60, _NO_TLS),
    _k("sasl.login.refresh.buffer.seconds", _T.SHORT, 300, _NO_TLS),
    _k("sasl.login.class", _T.CLASS, None, _NO_TLS),
    _k("sasl.login.callback.handler.class", _T.CLASS, None, _NO_TLS),
    _k("sasl.server.callback.handler.class", _T.CLASS, None, _NO_TLS),
    _k("connections.max.reauth.ms", _T.LONG, 0, _NO_TLS),
    # SSL listener settings
    _k("ssl.protocol", _T.STRING, "TLSv1.3", _NO_TLS),
    _k("ssl.provider", _T.STRING, None, _NO_TLS),
    _k("ssl.cipher.suites", _T.LIST, (), _NO_TLS),
    _k("ssl.enabled.protocols", _T.LIST, ("TLSv1.2", "TLSv1.3"), _NO_TLS),
    _k("ssl.keymanager.algorithm", _T.STRING, "SunX509", _NO_TLS),
    _k("ssl.trustmanager.algorithm", _T.STRING, "PKIX", _NO_TLS),
    _k("ssl.endpoint.identification.algorithm", _T.STRING, "https", _NO_TLS),
    _k("ssl.secure.random.implementation", _T.STRING, None, _NO_TLS),
    _k("ssl.client.auth", _T.STRING, "none", _NO_TLS),
    _k("ssl.engine.factory.class", _T.CLASS, None, _NO_TLS),
    _k("ssl.principal.mapping.rules", _T.STRING, "DEFAULT", _NO_TLS),
    _k("ssl.keystore.type", _T.STRING, "JKS", _NO_TLS),
    _k("ssl.keystore.location", _T.STRING, None, _NO_TLS),
    _k("ssl.keystore.password", _T.PASSWORD, None, _NO_TLS),
    _k("ssl.key.password", _T.PASSWORD, None, _NO_TLS),
    _k("ssl.keystore.key", _T.PASSWORD, None, _NO_TLS),
    _k("ssl.keystore.certificate.chain", _T.PASSWORD, None, _NO_TLS),
    _k("ssl.truststore.type", _T.STRING, "JKS", _NO_TLS),
    _k("ssl.truststore.location", _T.STRING, None, _NO_TLS),
    _k("ssl.truststore.password", _T.PASSWORD, None, _NO_TLS),
    _k("ssl.truststore.certificates", _T.PASSWORD, None, _NO_TLS),
)

# Broker keys behind topic configs Kafka keeps read-only: the flush scheduler interval
# (only a fallback of log.flush.interval.ms).
_READ_ONLY_SYNONYMS = frozenset({"log.flush.scheduler.interval.ms"})


def _synonym_keys() -> dict[str, ConfigKey]:
    out: dict[str, ConfigKey] = {}
    for topic_key, synonyms in BROKER_SYNONYMS.items():
        tkey = TOPIC_CONFIG_KEYS[topic_key]
        for i, (bkey, factor) in enumerate(synonyms):
            if factor == 1:
                # The first synonym holds the default when it is the only one.
                default = tkey.default if len(synonyms) == 1 else None
                out[bkey] = _k(bkey, tkey.type, default, tkey.doc, tkey.validator)
            else:
                last = i == len(synonyms) - 1
                value = tkey.default
                default = value // factor if last and isinstance(value, int) else None
                out[bkey] = _k(bkey, _T.INT, default, f"{tkey.doc} (in units of {factor} ms)")
    return out


SYNONYM_KEYS: dict[str, ConfigKey] = _synonym_keys()
DYNAMIC_KEYS: dict[str, ConfigKey] = {
    **{k: v for k, v in SYNONYM_KEYS.items() if k not in _READ_ONLY_SYNONYMS},
    **{k.name: k for k in _OWN},
}

_LISTENER_PREFIX = re.compile(r"^listener\.name\.[^.]+\.(.+)$")


def base_name(name: str) -> str:
    """`listener.name.<listener>.<key>` -> `<key>` (a mechanism prefix is kept)."""
    m = _LISTENER_PREFIX.match(name)
    if m is None:
        return name
    rest = m.group(1)
    # listener.name.x.<mechanism>.sasl.jaas.config: the key after the mechanism.
    for key in DYNAMIC_KEYS:
        if rest == key or rest.endswith("." + key):
            return key
    return rest


def _is_listener_key(key: str) -> bool:
    return key.startswith(("ssl.", "sasl.")) or key == "connections.max.reauth.ms"


def check_alterable(name: str, *, per_broker: bool) -> ConfigKey | None:
    """The key's spec, None for a key neither Kafka nor Tidegate knows (accepted, unused),
    or InvalidRequestError as Kafka words it."""
    base = base_name(name)
    key = DYNAMIC_KEYS.get(base)
    if key is None:
        if _known(base):
            raise InvalidRequestError(f"Cannot update these configs dynamically: Set({name})")
        return None
    if base in _SSL_RECONFIGURABLE and base == name:
        raise InvalidRequestError(
            "These security configs can be dynamically updated only per-listener using the "
            f"listener prefix: Set({name})"
        )
    listener_scoped = base != name or _is_listener_key(base)
    if not per_broker and listener_scoped and base not in _CLUSTER_LEVEL_LISTENER:
        raise InvalidRequestError(
            "Cannot update these configs at default cluster level, broker id must be "
            f"specified: Set({name})"
        )
    return key


def parse_dynamic(name: str, value: str) -> None:
    """Validate `value` for dynamic key `name` (InvalidConfigError if it is wrong)."""
    key = DYNAMIC_KEYS[base_name(name)]
    if key.type == ConfigType.SHORT:
        key = ConfigKey(key.name, ConfigType.INT, key.default, key.doc, Range(-32768, 32767))
    key.parse(value, source=name)


def _known(base: str) -> bool:
    return (base in DYNAMIC_KEYS or base in BROKER_KEYS or base in SYNONYM_KEYS
            or base in KAFKA_STATIC_KEYS)


def is_unknown(name: str) -> bool:
    """A key neither Kafka nor Tidegate knows: stored and described, used for nothing."""
    return not _known(base_name(name))


def is_sensitive(name: str) -> bool:
    """A password, or a key nobody knows the type of (Kafka: `maybeSensitive(None)`)."""
    base = base_name(name)
    key = DYNAMIC_KEYS.get(base)
    if key is not None:
        return key.type == ConfigType.PASSWORD
    return base in KAFKA_PASSWORD_KEYS or not _known(base)


# Cluster-level keys a Kafka 4.1+ controller writes at activation (KIP-966).
ELR_CLUSTER_KEYS = ("min.insync.replicas",)
_MIN_ISR = "min.insync.replicas"


def activate_cluster_defaults(
    dynamic: Mapping[str, str],
    static: Mapping[str, str],
    save: Callable[[dict[str, str]], None],
) -> dict[str, str]:
    """The dynamic cluster defaults with the KIP-966 keys added where missing, each
    with its static value (the properties file, environment or --override) or Kafka's
    default, saved with `save` when anything was added. Done once: a later change of
    the static value does not move the dynamic one, as in Kafka. A failed save (disk
    full) is logged and retried at the next start; the values apply meanwhile."""
    missing = {}
    for name in ELR_CLUSTER_KEYS:
        if name not in dynamic:
            static_value = static.get(name, "").strip()
            key = SYNONYM_KEYS[name]
            if static_value:
                key.parse(static_value, source=name)  # a bad value stops the start unsaved
            missing[name] = static_value or key.format(key.default)
    if not missing:
        return dict(dynamic)
    configs = {**dynamic, **missing}
    try:
        save(configs)
    except OSError as e:
        log.warning(
            "cannot save the cluster-level defaults %s (retried at next start): %s", missing, e
        )
    else:
        log.info("wrote the cluster-level defaults %s (KIP-966, as Kafka 4.1+)", missing)
    return configs


def check_elr_min_isr(per_broker: bool, altered: Mapping[str, str | None]) -> None:
    """Kafka's refusals while ELR is enabled: `min.insync.replicas` may not be set or
    deleted on a broker id, nor removed from the cluster default ("").
    `altered` maps each key the request touches to its new value (None: removed)."""
    if _MIN_ISR not in altered:
        return
    if per_broker:
        raise InvalidConfigError(
            "Broker-level min.insync.replicas cannot be altered while ELR is enabled."
        )
    if altered[_MIN_ISR] is None:
        raise InvalidConfigError(
            "Cluster-level min.insync.replicas cannot be removed while ELR is enabled."
        )
