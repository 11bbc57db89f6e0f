"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics, the broker and
groups.

Topic resources (type 2) list every topic config with its effective value and source:
TOPIC_CONFIG (1) for an override, STATIC_BROKER_CONFIG (4) when a broker key such as
`log.retention.hours` set it, DYNAMIC_BROKER_CONFIG (2) or DYNAMIC_DEFAULT_BROKER_CONFIG
(3) when changed at run time on this broker's id or on the cluster default,
DEFAULT_CONFIG (5) otherwise, with the synonyms chain when asked. Broker resources
(type 4) list every broker setting with the same sources (the cluster default resource
"" only its dynamic ones, as in Kafka; server/dynamic_store.py keeps the two levels).
Altering a broker resource accepts every key Kafka can change at run time
(`server.dynamic_config`) and refuses read-only ones with INVALID_REQUEST; the topic
defaults among them (e.g. `log.retention.ms`) apply to every topic without an override.
Dynamic values persist across restarts, as in Kafka. A SUBTRACT may empty a list config.

As a Kafka 4.1+ broker (KIP-966), the cluster default `min.insync.replicas` is written at
first start (server/dynamic_config.py), so every topic reports it with source
DYNAMIC_DEFAULT_BROKER_CONFIG; it cannot be altered on a broker id nor removed.

Topic overrides are read and written through the `TopicAdmin` port
(server/topic_admin.py): the local topics file on the embedded broker; in cluster mode
ZooKeeper's `/config/topics/<t>`, which every broker applies and describes alike.

Group resources (type 32, KIP-848) list every group config (server/group_config.py)
with source GROUP_CONFIG (8) when the group overrides it and DEFAULT_CONFIG otherwise,
whether or not the group exists; altering one validates the group's whole new set
against the broker's bounds and stores it durably. Broker-logger resources (type 8, by
this broker's id) are the process's log levels (server/broker_loggers.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from tidegate.common.config import BROKER_KEYS
from tidegate.common.errors import (
    ErrorCode,
    InvalidConfigError,
    InvalidRequestError,
    KafkaError,
    UnknownTopicOrPartitionError,
)
from tidegate.protocol.messages import build, view
from tidegate.server.authz import AclOperation as Op
from tidegate.server.authz import ResourceType as Res
from tidegate.server.authz import check, check_cluster
from tidegate.server.broker import Broker
from tidegate.server.broker_loggers import alter_loggers, describe_loggers
from tidegate.server.config_ops import (
    APPEND,
    SET,
    SUBTRACT,
    apply_ops,
    not_a_list,
    not_a_list_base,
)
from tidegate.server.context import RequestContext
from tidegate.server.dynamic_config import (
    DYNAMIC_KEYS,
    SYNONYM_KEYS,
    base_name,
    check_alterable,
    check_elr_min_isr,
    is_sensitive,
    parse_dynamic,
)
from tidegate.server.group_config import describe_group_configs, validate_group_configs
from tidegate.server.handlers.common import error_fields
from tidegate.storage.config import (
    BROKER_SYNONYMS,
    TOPIC_CONFIG_KEYS,
    ConfigType,
    LogConfig,
    without_removed_keys,
)

log = logging.getLogger(__name__)

TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32
SRC_TOPIC, SRC_DYNAMIC_BROKER, SRC_DYNAMIC_DEFAULT, SRC_STATIC, SRC_DEFAULT = 1, 2, 3, 4, 5
BROKER_TYPES = {"int": 5, "bool": 1, "str": 2, "list": 7}


def _synonyms(broker: Broker, name: str, overrides: dict[str, str]) -> list[dict[str, Any]]:
    """Kafka's chain for a topic config: the topic's override, then the broker keys
    behind it, by source first (dynamic, static, built-in default) and in synonym order
    within one; each named by its broker key, so an untouched `retention.ms` lists
    `log.retention.hours=168` as its DEFAULT_CONFIG, as Kafka's Java Admin shows. A
    topic config without a broker key (e.g. the throttled replicas) has no synonyms."""
    out = []
    if name in overrides:
        out.append({"name": name, "value": overrides[name], "source": SRC_TOPIC})
    bkeys = [bkey for bkey, _factor in BROKER_SYNONYMS.get(name, ())]
    own, default = broker.dynamic.broker, broker.dynamic.default
    out += [{"name": b, "value": own[b], "source": SRC_DYNAMIC_BROKER}
            for b in bkeys if b in own]
    out += [{"name": b, "value": default[b], "source": SRC_DYNAMIC_DEFAULT}
            for b in bkeys if b in default]
    out += [{"name": b, "value": broker.config.get(b), "source": SRC_STATIC}
            for b in bkeys if b in broker.config.explicit]
    for b in bkeys:
        key = SYNONYM_KEYS.get(b)
        if key is not None and key.default is not None:
            out.append({"name": b, "value": key.format(key.default), "source": SRC_DEFAULT})
    return out


def describe_topic_configs(
    broker: Broker, topic: str, overrides: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    if overrides is None:
        meta = broker.logs.topics.get(topic)
        if meta is None:
            raise UnknownTopicOrPartitionError(f"topic {topic} does not exist")
        overrides = dict(meta.configs)
    overrides = without_removed_keys(overrides)  # e.g. an old release's config znode
    effective = LogConfig.from_props(overrides, broker.log_defaults)
    result = []
    for name in sorted(TOPIC_CONFIG_KEYS):
        key = TOPIC_CONFIG_KEYS[name]
        syn = _synonyms(broker, name, overrides)
        result.append(
            {
                "name": name,
                "value": effective.value_of(name),
                "read_only": False,
                "config_source": syn[0]["source"] if syn else SRC_DEFAULT,
                "is_sensitive": False,
                "synonyms": syn,
                "config_type": int(key.type),
                "documentation": key.doc,
            }
        )
    return result


def _broker_default(name: str) -> str | None:
    spec = BROKER_KEYS.get(name)
    if spec is not None:
        return spec[0] or None
    key = DYNAMIC_KEYS.get(base_name(name)) or SYNONYM_KEYS.get(name)
    if key is None or key.default is None:
        return None
    return key.format(key.default)


def _broker_type(name: str) -> int:
    key = DYNAMIC_KEYS.get(base_name(name)) or SYNONYM_KEYS.get(name)
    if key is not None:
        return int(key.type)
    spec = BROKER_KEYS.get(name)
    return BROKER_TYPES.get(spec[1], 0) if spec else 0


def describe_broker_configs(broker: Broker, per_broker: bool = True) -> list[dict[str, Any]]:
    """Every broker config with Kafka's sources, in Kafka's order of precedence:
    DYNAMIC_BROKER_CONFIG for a value set at run time on this broker's id,
    DYNAMIC_DEFAULT_BROKER_CONFIG for one set on the cluster default, STATIC_BROKER_CONFIG
    for one from the properties file, environment or --override, DEFAULT_CONFIG
    otherwise. The cluster-default resource ("") lists only its dynamic values, as in
    Kafka."""
    own = broker.dynamic.broker if per_broker else {}
    cluster = broker.dynamic.default
    names = (set(broker.config.props) | set(SYNONYM_KEYS) | set(DYNAMIC_KEYS) | set(own)
             | set(cluster))
    result = []
    for name in sorted(names):
        syn: list[dict[str, Any]] = []
        if name in own:
            syn.append({"name": name, "value": own[name], "source": SRC_DYNAMIC_BROKER})
        if name in cluster:
            syn.append({"name": name, "value": cluster[name], "source": SRC_DYNAMIC_DEFAULT})
        if per_broker and name in broker.config.explicit:
            syn.append({"name": name, "value": broker.config.get(name), "source": SRC_STATIC})
        default = _broker_default(name)
        if per_broker and default is not None:
            syn.append({"name": name, "value": default, "source": SRC_DEFAULT})
        if not per_broker and not syn:
            continue
        sensitive = is_sensitive(name)
        if sensitive:
            for entry in syn:
                entry["value"] = None
        spec = BROKER_KEYS.get(name)
        key = DYNAMIC_KEYS.get(base_name(name)) or SYNONYM_KEYS.get(name)
        result.append(
            {
                "name": name,
                "value": syn[0]["value"] if syn else None,
                "read_only": base_name(name) not in DYNAMIC_KEYS,
                "config_source": syn[0]["source"] if syn else SRC_DEFAULT,
                "is_sensitive": sensitive,
                "synonyms": syn,
                "config_type": _broker_type(name),
                "documentation": spec[2] if spec else (key.doc if key else None),
            }
        )
    return result


def _authorize(broker: Broker, ctx: RequestContext, op: Op, rtype: int, name: str) -> None:
    """Kafka's ACLs on config resources: the op on the topic or the group, and on the
    cluster for a broker or broker-logger resource."""
    if broker.authorizer is None:
        return
    if rtype == TOPIC and not check(broker, ctx, op, Res.TOPIC, name):
        raise KafkaError(code=ErrorCode.topic_authorization_failed)
    if rtype == GROUP and not check(broker, ctx, op, Res.GROUP, name):
        raise KafkaError(code=ErrorCode.group_authorization_failed)
    if rtype in (BROKER, BROKER_LOGGER) and not check_cluster(broker, ctx, op):
        raise KafkaError(code=ErrorCode.cluster_authorization_failed)


def _this_broker(broker: Broker, name: str) -> None:
    if name != str(broker.node_id):  # Kafka's words
        raise InvalidRequestError(f"Unexpected broker id, expected {broker.node_id} but "
                                  f"received {name}" if name else "Broker id must not be empty")


async def handle_describe_configs(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    include_synonyms = bool(view(req, "include_synonyms", False))
    include_docs = bool(view(req, "include_documentation", False))
    results = []
    for r in req.resources:
        out: dict[str, Any] = {
            "error_code": 0,
            "error_message": None,
            "resource_type": r.resource_type,
            "resource_name": r.resource_name,
            "configs": [],
        }
        try:
            _authorize(broker, ctx, Op.DESCRIBE_CONFIGS, int(r.resource_type),
                       str(r.resource_name))
            if r.resource_type == TOPIC:
                overrides = await broker.topic_admin.topic_config(r.resource_name)
                configs = describe_topic_configs(broker, r.resource_name, overrides)
            elif r.resource_type == BROKER:
                if r.resource_name not in ("", str(broker.node_id)):
                    raise InvalidRequestError(
                        f"broker {r.resource_name} is not this broker ({broker.node_id})"
                    )
                configs = describe_broker_configs(broker, per_broker=r.resource_name != "")
            elif r.resource_type == GROUP:
                if not r.resource_name:
                    raise InvalidRequestError("Group name must not be empty")
                overrides = broker.group_configs.get(r.resource_name)
                configs = describe_group_configs(overrides, broker.config)
            elif r.resource_type == BROKER_LOGGER:
                _this_broker(broker, r.resource_name)
                configs = describe_loggers()
            else:
                raise InvalidRequestError(f"resource type {r.resource_type} is not supported")
            wanted = r.configuration_keys
            if wanted:  # null or empty: every config, as in Kafka
                configs = [c for c in configs if c["name"] in set(wanted)]
            for c in configs:
                if not include_synonyms:
                    c["synonyms"] = []
                if not include_docs:
                    c["documentation"] = None
            out["configs"] = configs
        except KafkaError as e:
            out["error_code"], out["error_message"] = error_fields(e)
        results.append(out)
    return build(ctx.response_class, {"throttle_time": 0, "results": results})


def _topic_list_base(defaults: LogConfig) -> Callable[[str], str]:
    def base(name: str) -> str:
        key = TOPIC_CONFIG_KEYS.get(name)
        if key is None or key.type != ConfigType.LIST:
            raise not_a_list(name)
        return defaults.value_of(name)

    return base


def _broker_list_base(broker: Broker) -> Callable[[str], str]:
    def base(name: str) -> str:
        key = DYNAMIC_KEYS.get(base_name(name))
        if key is None or key.type != ConfigType.LIST:
            raise not_a_list(name)
        if name in broker.config.explicit:
            return broker.config.get(name)
        return _broker_default(name) or ""

    return base


def _topic_change(
    broker: Broker, ops: list[tuple[str, int, str | None]], incremental: bool
) -> Callable[[dict[str, str]], dict[str, str]]:
    """A topic's current overrides -> its new ones, validated (the TopicAdmin port may
    call it again on a newer current set if another alter won a race). Keys Kafka 4
    removed, stored by an older release, are dropped from the current set."""

    def change(current: dict[str, str]) -> dict[str, str]:
        base: dict[str, str | None] = dict(without_removed_keys(current)) if incremental else {}
        new = apply_ops(base, ops, _topic_list_base(broker.log_defaults))
        final = {k: v for k, v in new.items() if v is not None}
        LogConfig.from_props(final, broker.log_defaults)  # unknown names, bad values
        return final

    return change


async def _alter_broker(broker: Broker, name: str, ops: Any, incremental: bool,
                        dry: bool) -> None:
    """Dynamic broker configs: Kafka's alterable keys, validated, and keys nobody knows,
    as given; then persisted (the data directory, or ZooKeeper in cluster mode)."""
    per_broker = name != ""
    typed = [key for key, _, _ in ops if check_alterable(key, per_broker=per_broker)]

    def change(current: dict[str, str]) -> dict[str, str]:
        base: dict[str, str | None] = dict(current) if incremental else {}
        new = apply_ops(base, ops, _broker_list_base(broker))
        final = {k: v for k, v in new.items() if v is not None}
        touched = {key for key, _, _ in ops} | (set(current) - set(final))
        check_elr_min_isr(per_broker, {key: final.get(key) for key in touched})
        for key in typed:  # (a key Tidegate does not know is stored as given)
            if final.get(key) is not None:
                parse_dynamic(key, final[key])
        broker.validate_dynamic(final, per_broker)
        return final

    await broker.broker_configs.alter(name, change, validate_only=dry)


async def _alter_group(broker: Broker, group: str, ops: Any, incremental: bool, dry: bool) -> None:
    """Validate the group's whole new set of overrides, then store it durably (off the
    event loop, one change at a time so concurrent changes of a group are not lost)."""
    store = broker.group_configs
    async with store.lock:
        current = store.get(group)
        base: dict[str, str | None] = dict(current) if incremental else {}
        for key, op, _ in ops:  # no group config is a list; Kafka's controller's words
            if op in (APPEND, SUBTRACT):
                verb = "APPEND" if op == APPEND else "SUBTRACT"
                raise InvalidConfigError(f"Can't {verb} to key {key} because its type is not LIST.")
        new = apply_ops(base, ops, not_a_list_base)
        final = {k: v for k, v in new.items() if v is not None}
        validate_group_configs(group, final, broker.config)
        if dry or final == current:
            return
        await asyncio.get_running_loop().run_in_executor(None, store.set, group, final)
        log.info("group %s configs now %s", group, final)


async def _alter(broker: Broker, ctx: RequestContext, req: Any, incremental: bool) -> Any:
    validate_only = bool(view(req, "validate_only", False))
    responses = []
    for r in req.resources:
        out: dict[str, Any] = {
            "error_code": 0,
            "error_message": None,
            "resource_type": r.resource_type,
            "resource_name": r.resource_name,
        }
        try:
            if incremental:
                ops = [(c.name, int(c.config_operation), c.value) for c in r.configs]
            else:
                ops = [(c.name, SET, c.value) for c in r.configs]
            _authorize(broker, ctx, Op.ALTER_CONFIGS, int(r.resource_type),
                       str(r.resource_name))
            if r.resource_type == TOPIC:
                final = await broker.topic_admin.alter_topic_config(
                    r.resource_name, _topic_change(broker, ops, incremental),
                    validate_only=validate_only)
                if not validate_only:
                    log.info("topic %s configs now %s", r.resource_name, final)
            elif r.resource_type == BROKER:
                await _alter_broker(broker, r.resource_name, ops, incremental, validate_only)
            elif r.resource_type == GROUP:
                await _alter_group(broker, r.resource_name, ops, incremental, validate_only)
            elif r.resource_type == BROKER_LOGGER:
                _this_broker(broker, r.resource_name)
                alter_loggers(ops, validate_only)
            else:
                raise InvalidRequestError(f"resource type {r.resource_type} is not supported")
        except KafkaError as e:
            out["error_code"], out["error_message"] = error_fields(e)
        except ValueError as e:
            out["error_code"], out["error_message"] = ErrorCode.invalid_config, str(e)
        responses.append(out)
    return build(ctx.response_class, {"throttle_time": 0, "responses": responses})


async def handle_alter_configs(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    return await _alter(broker, ctx, req, incremental=False)


async def handle_incremental_alter_configs(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    return await _alter(broker, ctx, req, incremental=True)
