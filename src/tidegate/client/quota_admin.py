"""Client quotas through the admin API: DescribeClientQuotas and AlterClientQuotas
(KIP-546), as `AsyncAdmin` exposes them.

An entity is a mapping of entity type (`user`, `client-id`) to a name, None meaning
that type's default (Kafka's `<default>`). Describe takes filter components
`(entity_type, name)` where name is a string (exactly this name), None (the default)
or `ANY` (any specified name); `strict` keeps only entities with no other component.
Alter takes per entity the values to set and the keys to remove; its result is per
entity: None on success, else the broker's error as a `KafkaError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from tidegate.client.net import NetworkClient
from tidegate.common.errors import KafkaError, error_for_code

__all__ = ["ANY", "QuotaAlteration", "alter_quotas", "describe_quotas"]

DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49
ANY = "\x00any"  # a filter component matching any specified (non-default) name

QuotaEntity = tuple[tuple[str, str | None], ...]


@dataclass(frozen=True)
class QuotaAlteration:
    entity: Mapping[str, str | None]
    set: Mapping[str, float] = field(default_factory=dict)
    remove: Iterable[str] = ()


def _error(code: ErrorCode, message: str | None, what: str) -> KafkaError | None:
    if code == ErrorCode.none:
        return None
    return error_for_code(code.value, f"{what}: {message}" if message else what)


async def describe_quotas(net: NetworkClient, components: Iterable[tuple[str, str | None]] = (),
                          strict: bool = False) -> dict[QuotaEntity, dict[str, float]]:
    """The entities matching the filter and their quota values."""
    comps = []
    for etype, name in components:
        if name == ANY:
            comps.append({"entity_type": etype, "match_type": 2, "match": None})
        elif name is None:
            comps.append({"entity_type": etype, "match_type": 1, "match": None})
        else:
            comps.append({"entity_type": etype, "match_type": 0, "match": name})
    resp = await net.request(None, DESCRIBE_CLIENT_QUOTAS,
                             {"components": comps, "strict": strict})
    err = _error(resp.error_code, resp.error_message, "cannot describe client quotas")
    if err is not None:
        raise err
    out: dict[QuotaEntity, dict[str, float]] = {}
    for entry in resp.entries or ():
        entity = tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity))
        out[entity] = {v.key: float(v.value) for v in entry.values}
    return out


async def alter_quotas(net: NetworkClient, alterations: Iterable[QuotaAlteration],
                       validate_only: bool = False) -> list[KafkaError | None]:
    """Apply each alteration; the result of each, in order."""
    entries = []
    for a in alterations:
        ops = [{"key": k, "value": float(v), "remove": False} for k, v in a.set.items()]
        ops += [{"key": k, "value": 0.0, "remove": True} for k in a.remove]
        entries.append({"entity": [{"entity_type": t, "entity_name": n}
                                   for t, n in a.entity.items()], "ops": ops})
    resp = await net.request(None, ALTER_CLIENT_QUOTAS,
                             {"entries": entries, "validate_only": validate_only})
    return [_error(e.error_code, e.error_message,
                   "entity " + ",".join(f"{c.entity_type}={c.entity_name or '<default>'}"
                                        for c in e.entity))
            for e in resp.entries]
