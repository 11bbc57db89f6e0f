"""The broker's client quotas: the configured values and the rates measured against them.

Sans-IO (time comes in as `now_ms`); the I/O around it is server/quotas/store.py
(durability), cluster.py (ZooKeeper) and throttle.py (the connection hook).

`QuotaManager` holds every entity's quota configs (entities.py) and one rate per
*sensor*, as Kafka's ClientQuotaManager does: a sensor is keyed by the quota type and
the (user, client-id) tags of the entity that matched (entities.resolve), so clients
sharing a quota share a rate. `record(...)` counts a value and returns the throttle
time it earns (rate.py). Which entity matches is cached per (type, user, client) and
the cache is dropped whenever the configs change, so a change applies to the very next
request. `active` is False while no quota is configured: the listener then skips
everything with one attribute check. Sensors idle for an hour are dropped (Kafka's
inactive sensor expiry), so client ids that come and go do not pile up.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from tidegate.server.quotas.entities import (
    CONTROLLER_MUTATION_RATE,
    Entity,
    FilterComponent,
    Match,
    QuotaRequestError,
    check_filter,
    matches,
    resolve,
    validate_value,
)
from tidegate.server.quotas.rate import SampledRate, TokenBucket, record_and_throttle

SENSOR_EXPIRY_MS = 3_600_000
_SWEEP_EVERY_MS = 60_000

Quotas = dict[Entity, dict[str, float]]
# (key, value, remove) as AlterClientQuotas carries them
Op = tuple[str, float, bool]


class QuotaManager:
    def __init__(self, window_num: int = 11, window_ms: int = 1000,
                 mutation_num: int = 11, mutation_window_ms: int = 1000) -> None:
        self.window_num = max(1, window_num)
        self.window_ms = max(1, window_ms)
        self.mutation_num = max(1, mutation_num)
        self.mutation_window_ms = max(1, mutation_window_ms)
        self.quotas: Quotas = {}
        self.active = False
        self.keys: frozenset[str] = frozenset()  # quota types configured on some entity
        self._matches: dict[tuple[str, str, str], Match | None] = {}
        self._rates: dict[tuple[str, str, str], tuple[SampledRate, list[int]]] = {}
        self._buckets: dict[tuple[str, str], tuple[TokenBucket, list[int]]] = {}
        self._next_sweep = 0

    # -- configs ----------------------------------------------------------------------

    def replace(self, quotas: Mapping[Entity, Mapping[str, float]]) -> None:
        """Install a whole new set of configs (loaded from disk or ZooKeeper)."""
        self.quotas = {e: dict(c) for e, c in quotas.items() if c}
        self._changed()

    def set_entity(self, entity: Entity, configs: Mapping[str, float]) -> None:
        if configs:
            self.quotas[entity] = dict(configs)
        else:
            self.quotas.pop(entity, None)
        self._changed()

    def _changed(self) -> None:
        self.active = bool(self.quotas)
        self.keys = frozenset(k for c in self.quotas.values() for k in c)
        self._matches.clear()

    @staticmethod
    def altered(current: Mapping[str, float], ops: Sequence[Op]) -> dict[str, float]:
        """`current` with AlterClientQuotas' ops applied (QuotaRequestError if invalid)."""
        seen: set[str] = set()
        out = dict(current)
        for key, value, remove in ops:
            if key in seen:
                raise QuotaRequestError(f"Duplicate quota key {key} in one entity's ops")
            seen.add(key)
            if remove:
                validate_value(key, 1.0)  # the key must still be one Kafka knows
                out.pop(key, None)
            else:
                out[key] = validate_value(key, value)
        return out

    def describe(self, components: Sequence[FilterComponent],
                 strict: bool) -> list[tuple[Entity, dict[str, float]]]:
        check_filter(components)
        return [(e, dict(c)) for e, c in sorted(self.quotas.items(), key=_sort_key)
                if matches(e, components, strict)]

    # -- measuring --------------------------------------------------------------------

    def match(self, key: str, user: str, client_id: str) -> Match | None:
        cache_key = (key, user, client_id)
        try:
            return self._matches[cache_key]
        except KeyError:
            found = resolve(self.quotas, key, user, client_id)
            self._matches[cache_key] = found
            return found

    def record(self, key: str, user: str, client_id: str, value: float, now_ms: int,
               cap_ms: int | None = None) -> int:
        """Count `value` for the client's quota of type `key`; the throttle time (ms)."""
        m = self.match(key, user, client_id)
        if m is None:
            return 0
        rate = self._rate(key, m, now_ms)
        return record_and_throttle(rate, value, m.bound, now_ms, cap_ms)

    def unrecord(self, key: str, user: str, client_id: str, value: float, now_ms: int) -> None:
        m = self.match(key, user, client_id)
        if m is not None:
            self._rate(key, m, now_ms).unrecord(value, now_ms)

    def _rate(self, key: str, m: Match, now_ms: int) -> SampledRate:
        self._sweep(now_ms)
        sensor = (key, m.user_tag, m.client_tag)
        got = self._rates.get(sensor)
        if got is None:
            # min_windows=1: no ten-second bursts (rate.py's docstring)
            rate = SampledRate(self.window_num, self.window_ms, min_windows=1)
            got = self._rates[sensor] = (rate, [now_ms])
        got[1][0] = now_ms
        return got[0]

    # -- controller mutations (KIP-599) -----------------------------------------------

    def mutation_throttle(self, user: str, client_id: str, now_ms: int) -> int:
        """How long the client must wait before mutating again (0: it may now)."""
        found = self._bucket(user, client_id, now_ms)
        if found is None:
            return 0
        bucket, bound = found
        return bucket.throttle_ms(bound, self.mutation_num, self.mutation_window_ms, now_ms)

    def record_mutations(self, user: str, client_id: str, partitions: int, now_ms: int) -> int:
        """Count created/deleted partitions (negative: give back what a failed topic
        had taken); the throttle time they earn."""
        found = self._bucket(user, client_id, now_ms)
        if found is None or partitions == 0:
            return 0
        bucket, bound = found
        bucket.record(partitions, bound, self.mutation_num, self.mutation_window_ms, now_ms)
        return bucket.throttle_ms(bound, self.mutation_num, self.mutation_window_ms, now_ms)

    def _bucket(self, user: str, client_id: str,
                now_ms: int) -> tuple[TokenBucket, float] | None:
        m = self.match(CONTROLLER_MUTATION_RATE, user, client_id)
        if m is None:
            return None
        self._sweep(now_ms)
        sensor = (m.user_tag, m.client_tag)
        got = self._buckets.get(sensor)
        if got is None:
            bucket = TokenBucket(m.bound, self.mutation_num, self.mutation_window_ms, now_ms)
            got = self._buckets[sensor] = (bucket, [now_ms])
        got[1][0] = now_ms
        return got[0], m.bound

    def _sweep(self, now_ms: int) -> None:
        if now_ms < self._next_sweep:
            return
        self._next_sweep = now_ms + _SWEEP_EVERY_MS
        old = now_ms - SENSOR_EXPIRY_MS
        for rk in [k for k, (_, last) in self._rates.items() if last[0] < old]:
            del self._rates[rk]
        for bk in [k for k, (_, last) in self._buckets.items() if last[0] < old]:
            del self._buckets[bk]


def _sort_key(item: tuple[Entity, object]) -> tuple[tuple[str, str, int], ...]:
    return tuple((t, n or "", n is None) for t, n in item[0])


def to_json(quotas: Mapping[Entity, Mapping[str, float]]) -> list[dict[str, object]]:
    """The configs as JSON-able rows (the store's file, the CLI's output)."""
    return [{"entity": [{"entity_type": t, "entity_name": n} for t, n in e],
             "configs": dict(c)} for e, c in sorted(quotas.items(), key=_sort_key)]


def from_json(rows: Iterable[Mapping[str, object]]) -> Quotas:
    """Inverse of `to_json`; QuotaRequestError/ValueError/TypeError on a malformed row."""
    from tidegate.server.quotas.entities import make_entity

    out: Quotas = {}
    for row in rows:
        comps = row["entity"]
        configs = row["configs"]
        if not isinstance(comps, list) or not isinstance(configs, dict):
            raise ValueError(f"malformed quota row {row!r}")
        entity = make_entity((str(c["entity_type"]),
                              None if c["entity_name"] is None else str(c["entity_name"]))
                             for c in comps)
        out[entity] = {str(k): validate_value(str(k), float(v)) for k, v in configs.items()}
    return out
