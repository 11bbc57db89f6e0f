"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics and the broker.

Topic resources (type 2) list every topic config with its effective value and source:
TOPIC_CONFIG (1) for an override, STATIC_BROKER_CONFIG (4) when a broker key such as
`log.retention.hours` set it, DYNAMIC_DEFAULT_BROKER_CONFIG (3) when changed at run
time, DEFAULT_CONFIG (5) otherwise, with the synonyms chain when asked. Broker
resources (type 4) list the broker's settings; altering them changes the dynamic
cluster-wide defaults of topic configs (e.g. `log.retention.ms`), which apply to every
topic without an override and persist across restarts, as in Kafka.
"""

from __future__ import annotations

import logging
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
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.handlers.common import error_fields
from tidegate.storage.config import BROKER_SYNONYMS, TOPIC_CONFIG_KEYS, LogConfig

log = logging.getLogger(__name__)

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SRC_TOPIC, SRC_DYNAMIC_BROKER, SRC_DYNAMIC_DEFAULT, SRC_STATIC, SRC_DEFAULT = 1, 2, 3, 4, 5
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
BROKER_TYPES = {"int": 5, "bool": 1, "str": 2, "list": 7}


def validate_topic_configs(configs: dict[str, str]) -> LogConfig:
    return LogConfig.from_props(configs)


def _synonyms(broker: Broker, name: str, overrides: dict[str, str]) -> list[dict[str, Any]]:
    out = []
    if name in overrides:
        out.append({"name": name, "value": overrides[name], "source": SRC_TOPIC})
    for bkey, _factor in BROKER_SYNONYMS.get(name, ()):
        if bkey in broker.dynamic_configs:
            out.append(
                {"name": bkey, "value": broker.dynamic_configs[bkey], "source": SRC_DYNAMIC_DEFAULT}
            )
        if bkey in broker.config.explicit:
            out.append({"name": bkey, "value": broker.config.get(bkey), "source": SRC_STATIC})
    key = TOPIC_CONFIG_KEYS[name]
    out.append({"name": name, "value": key.format(key.default), "source": SRC_DEFAULT})
    return out


def describe_topic_configs(
    broker: Broker, topic: str, overrides: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    if overrides is None:
        meta = broker.logs.topics.get(topic)
        if meta is None:
            raise UnknownTopicOrPartitionError(f"topic {topic} does not exist")
        overrides = dict(meta.configs)
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
                "config_source": syn[0]["source"],
                "is_sensitive": False,
                "synonyms": syn,
                "config_type": int(key.type),
                "documentation": key.doc,
            }
        )
    return result


def describe_broker_configs(broker: Broker) -> list[dict[str, Any]]:
    result = []
    props = dict(broker.config.props)
    props.update(broker.dynamic_configs)
    for name in sorted(props):
        spec = BROKER_KEYS.get(name)
        if name in broker.dynamic_configs:
            source = SRC_DYNAMIC_DEFAULT
        elif name in broker.config.explicit:
            source = SRC_STATIC
        else:
            source = SRC_DEFAULT
        result.append(
            {
                "name": name,
                "value": props[name],
                "read_only": name not in _dynamic_keys(),
                "config_source": source,
                "is_sensitive": False,
                "synonyms": [{"name": name, "value": props[name], "source": source}],
                "config_type": BROKER_TYPES.get(spec[1], 0) if spec else 0,
                "documentation": spec[2] if spec else None,
            }
        )
    return result


def _dynamic_keys() -> set[str]:
    return {bkey for syns in BROKER_SYNONYMS.values() for bkey, _ in syns}


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
            if r.resource_type == TOPIC:
                configs = describe_topic_configs(broker, r.resource_name)
            elif r.resource_type == BROKER:
                if r.resource_name not in ("", str(broker.node_id)):
                    raise InvalidRequestError(
                        f"broker {r.resource_name} is not this broker ({broker.node_id})"
                    )
                configs = describe_broker_configs(broker)
            else:
                raise InvalidRequestError(f"resource type {r.resource_type} is not supported")
            wanted = r.configuration_keys
            if wanted is not None:
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


def _apply_ops(
    current: dict[str, str | None], ops: list[tuple[str, int, str | None]], defaults: LogConfig
) -> dict[str, str | None]:
    """Apply incremental operations to a copy of `current`; None means delete."""
    result = dict(current)
    for name, op, value in ops:
        if op == SET:
            result[name] = value
        elif op == DELETE:
            result[name] = None
        elif op in (APPEND, SUBTRACT):
            key = TOPIC_CONFIG_KEYS.get(name)
            if key is None or key.type.name != "LIST":
                raise InvalidConfigError(
                    f"{name} is not a list config; APPEND/SUBTRACT apply only to lists"
                )
            base = result.get(name)
            if base is None:
                base = defaults.value_of(name)
            items = [x for x in (base or "").split(",") if x]
            new = [x for x in (value or "").split(",") if x]
            if op == APPEND:
                items += [x for x in new if x not in items]
            else:
                items = [x for x in items if x not in new]
            result[name] = ",".join(items)
        else:
            raise InvalidRequestError(f"unknown config operation {op}")
    return result


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
            if r.resource_type == TOPIC:
                meta = broker.logs.topics.get(r.resource_name)
                if meta is None:
                    raise UnknownTopicOrPartitionError(f"topic {r.resource_name} does not exist")
                base: dict[str, str | None] = dict(meta.configs) if incremental else {}
                new = _apply_ops(base, ops, broker.log_defaults)
                final = {k: v for k, v in new.items() if v is not None}
                LogConfig.from_props(final, broker.log_defaults)
                if not validate_only:
                    changes: dict[str, str | None] = {k: None for k in meta.configs}
                    changes.update(new)
                    broker.logs.alter_topic_configs(r.resource_name, changes, incremental=True)
                    log.info("topic %s configs now %s", r.resource_name, final)
            elif r.resource_type == BROKER:
                if r.resource_name not in ("", str(broker.node_id)):
                    raise InvalidRequestError(
                        f"broker {r.resource_name} is not this broker ({broker.node_id})"
                    )
                dyn = _dynamic_keys()
                for name, _, _ in ops:
                    if name not in dyn:
                        raise InvalidRequestError(
                            f"{name} cannot be changed at run time; dynamic broker configs "
                            f"are the topic defaults: {', '.join(sorted(dyn))}"
                        )
                base_b: dict[str, str | None] = dict(broker.dynamic_configs) if incremental else {}
                new_b = _apply_ops(base_b, ops, broker.log_defaults)
                final_b = {k: v for k, v in new_b.items() if v is not None}
                broker.validate_dynamic(final_b)
                if not validate_only:
                    broker.set_dynamic_configs(final_b)
            elif r.resource_type == BROKER_LOGGER:
                raise InvalidRequestError("broker logger configs are not supported")
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
