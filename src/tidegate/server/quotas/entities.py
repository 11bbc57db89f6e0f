"""Quota entities, their configs, Kafka's precedence, validation and describe filters.

Sans-IO and pure. An entity is what DescribeClientQuotas / AlterClientQuotas carry: a
set of (entity type, name) components with at most one of each type, `user` and/or
`client-id`; a name of None is that type's default (`<default>` in Kafka's ZooKeeper
paths). `Entity` keeps the components sorted by type so equal entities compare equal.

Which quota applies to a connection (`resolve`) follows Kafka's order, first match
wins, for each quota type separately:

    /config/users/<user>/clients/<client-id>
    /config/users/<user>/clients/<default>
    /config/users/<user>
    /config/users/<default>/clients/<client-id>
    /config/users/<default>/clients/<default>
    /config/users/<default>
    /config/clients/<client-id>
    /config/clients/<default>

The match also says who shares a rate (Kafka's metric tags): a quota set on
`users/alice` is shared by all of alice's clients; one set on `clients/<default>` gives
each client id its own rate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"

# Kafka's QuotaConfigs: the keys of user / client-id entities, True where the value is a
# LONG (a whole number), False where it is a DOUBLE.
QUOTA_KEYS: dict[str, bool] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}

LONG_MAX = 2**63 - 1

# DescribeClientQuotas match types
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

Component = tuple[str, str | None]
Entity = tuple[Component, ...]


class QuotaRequestError(ValueError):
    """An entity, key, value or filter Kafka refuses with INVALID_REQUEST."""


def make_entity(components: Iterable[Component]) -> Entity:
    """A validated entity from wire components (duplicates and unknown types refused)."""
    out: dict[str, str | None] = {}
    for etype, name in components:
        if etype in out:
            raise QuotaRequestError(f"Duplicate {etype} entity type")
        if etype == IP:
            raise QuotaRequestError("ip entities (connection_creation_rate) are not "
                                    "supported by Tidegate")
        if etype not in (USER, CLIENT_ID):
            raise QuotaRequestError(f"Unhandled client quota entity type: {etype}")
        if name == "":  # no znode path could name it (use the default instead)
            raise QuotaRequestError(f"Empty {etype} entity name")
        out[etype] = name
    if not out:
        raise QuotaRequestError("Invalid empty client quota entity")
    return tuple(sorted(out.items()))


def validate_value(key: str, value: float) -> float:
    """The value of `key` if Kafka would accept it, else QuotaRequestError."""
    long_type = QUOTA_KEYS.get(key)
    if long_type is None:
        raise QuotaRequestError(f"Invalid configuration key {key}")
    if math.isnan(value) or math.isinf(value) or value <= 0:
        raise QuotaRequestError(f"Invalid value {value} for configuration {key}: "
                                "must be a positive number")
    if long_type and (value != int(value) or value > LONG_MAX):
        raise QuotaRequestError(f"Configuration {key} must be a Long value")
    return value


def entity_path(entity: Entity) -> str:
    """Kafka's ZooKeeper-style path of an entity (`users/alice/clients/<default>`),
    for logs, the CLI and the cluster's znodes."""
    parts = dict(entity)
    out = []
    if USER in parts:
        out += ["users", parts[USER] or "<default>"]
    if CLIENT_ID in parts:
        out += ["clients", parts[CLIENT_ID] or "<default>"]
    return "/".join(out)


def user_name(principal: str) -> str:
    """The user part of a principal (`User:alice` -> `alice`), as Kafka's quotas use."""
    return principal.split(":", 1)[1] if ":" in principal else principal


@dataclass(frozen=True, slots=True)
class Match:
    """The quota that applies and who shares its rate: (user tag, client tag), each
    empty when the matched entity has no component of that type."""

    bound: float
    user_tag: str
    client_tag: str


def candidates(user: str, client_id: str) -> list[Entity]:
    """The entities that may apply to (user, client_id), in Kafka's precedence."""
    u, c = (USER, user), (CLIENT_ID, client_id)
    du, dc = (USER, None), (CLIENT_ID, None)
    return [(c, u), (dc, u), (u,), (c, du), (dc, du), (du,), (c,), (dc,)]


def resolve(quotas: Mapping[Entity, Mapping[str, float]], key: str, user: str,
            client_id: str) -> Match | None:
    """The quota of type `key` for (user, client_id) and its sharing, or None."""
    for entity in candidates(user, client_id):
        configs = quotas.get(entity)
        if configs is None or key not in configs:
            continue
        types = {t for t, _ in entity}
        return Match(configs[key], user if USER in types else "",
                     client_id if CLIENT_ID in types else "")
    return None


@dataclass(frozen=True, slots=True)
class FilterComponent:
    entity_type: str
    match_type: int
    match: str | None


def check_filter(components: Sequence[FilterComponent]) -> None:
    """Refuse what Kafka refuses in a DescribeClientQuotas filter."""
    seen: set[str] = set()
    for comp in components:
        if comp.entity_type in seen:
            raise QuotaRequestError(f"Duplicate {comp.entity_type} filter component entity type")
        seen.add(comp.entity_type)
        if comp.entity_type not in (USER, CLIENT_ID, IP):
            raise QuotaRequestError(f"Custom entity type {comp.entity_type!r} not supported")
        if comp.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            raise QuotaRequestError(f"Unknown match type {comp.match_type}")
        if comp.match_type == MATCH_EXACT and comp.match is None:
            raise QuotaRequestError("An exact match filter component needs a name")
    if IP in seen and len(seen) > 1:
        raise QuotaRequestError("Invalid entity filter component combination: ip with "
                                "user or client-id")


def matches(entity: Entity, components: Sequence[FilterComponent], strict: bool) -> bool:
    """Whether `entity` passes the filter (Kafka's describe semantics: each component
    must be present and match; with `strict`, the entity has no other components)."""
    parts = dict(entity)
    for comp in components:
        if comp.entity_type not in parts:
            return False
        name = parts[comp.entity_type]
        if comp.match_type == MATCH_EXACT and name != comp.match:
            return False
        if comp.match_type == MATCH_DEFAULT and name is not None:
            return False
        if comp.match_type == MATCH_SPECIFIED and name is None:
            return False  # "any specified name": a default is not a name (KRaft's rule)
    return not strict or len(parts) == len(components)
