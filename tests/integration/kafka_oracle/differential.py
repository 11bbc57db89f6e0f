"""The differential harness: the same raw requests to Apache Kafka and to Tidegate, compared.

A `Case` is a list of `Step`s (an API key, a request as plain values for
`tidegate.protocol.messages.build`, an optional version). `run_case` sends the steps to
one broker over a `RawClient` at the highest version both brokers (and kio) serve, unless
the step names one, and returns each response as plain values (`to_plain`). `normalize`
masks what legitimately differs between two brokers -- node ids, hosts, ports, cluster
and topic ids, producer ids, throttle times, timestamps, error messages' text -- and
`differences` lists every remaining field that differs, by its path in the response.
`KNOWN` holds the differences docs/compatibility.md explains ("Differences from Apache
Kafka 4.x"), by case and step; `unexplained` drops them.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.integration.rawclient import RawClient

from tidegate.protocol.messages import request_class

# Fields whose values differ between any two brokers (or two runs): masked to "*" so that
# their presence, not their value, is compared.
MASKED = frozenset({
    "throttle_time", "throttle_time_ms", "node_id", "leader_id", "broker_id",
    "controller_id", "host", "port", "rack", "cluster_id", "topic_id", "error_message",
    "timestamp", "log_append_time", "log_append_time_ms", "producer_id",
    "finalized_features_epoch", "member_id", "coordinator_key",
})
# Error messages: their text, and whether there is one at all, are free to differ
ALWAYS_MASKED = frozenset({"error_message"})

# Per step, versions above these need topic ids the harness does not know in advance
# (Produce v13, Fetch v13+) or are broker-to-broker only (AddPartitionsToTxn v4+).
VERSION_CAP = {0: 12, 1: 12, 24: 3}


def to_plain(value: Any) -> Any:
    """A kio entity as dicts, lists and scalars (durations and times in milliseconds)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [to_plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(bytes(value))} bytes>"
    return value


def normalize(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("*" if k in ALWAYS_MASKED or (k in MASKED and v is not None)
                    else normalize(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    return value


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Every path where `a` (Kafka) and `b` (Tidegate) differ, as 'path: a != b'."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in a.keys() | b.keys():
            out += differences(a.get(k), b.get(k), f"{path}.{k}")
        return sorted(out)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} entries != {len(b)}: {a!r} != {b!r}"]
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out += differences(x, y, f"{path}[{i}]")
        return out
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


@dataclass(frozen=True)
class Step:
    api_key: int
    # the request, or a function of the earlier steps' responses (as kio entities) that
    # makes it: a producer id one broker assigned is used with that broker
    data: Mapping[str, Any] | Callable[[list[Any]], Mapping[str, Any]]
    version: int | None = None
    # a projection of the plain response to what is compared (None: all of it)
    view: Callable[[Any], Any] | None = None
    # run after the step on the same broker, e.g. to wait until a created topic serves
    settle: Callable[[RawClient, Any], None] | None = None
    # sends hand-made bytes instead of `data` (at `version`) and returns the response
    # entity: for requests kio cannot encode, such as a version no broker serves
    send: Callable[[RawClient], Any] | None = None


@dataclass(frozen=True)
class Case:
    name: str
    steps: list[Step]
    sample: bool = False  # part of the short run in `make test`
    notes: str = ""


@dataclass
class Broker:
    """A connection to one broker plus the versions it serves."""

    client: RawClient
    versions: dict[int, tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def connect(cls, bootstrap: str) -> Broker:
        c = RawClient(bootstrap)
        r = c.call(18, 3, {"client_software_name": "oracle", "client_software_version": "1"})
        return cls(c, {k.api_key: (k.min_version, k.max_version) for k in r.api_keys})


@functools.cache
def kio_max(api_key: int) -> int:
    """The highest version kio can encode (it lacks some old ones, so scan them all)."""
    best = -1
    for v in range(40):
        try:
            request_class(api_key, v)
        except Exception:  # kio raises its own lookup errors for a version it lacks
            continue
        best = v
    return best


def common_version(api_key: int, a: Broker, b: Broker) -> int | None:
    if api_key not in a.versions or api_key not in b.versions:
        return None
    lo = max(a.versions[api_key][0], b.versions[api_key][0])
    hi = min(a.versions[api_key][1], b.versions[api_key][1], kio_max(api_key),
             VERSION_CAP.get(api_key, 1 << 15))
    return hi if hi >= lo else None


@functools.cache
def _field_names(api_key: int) -> frozenset[str]:
    names: set[str] = set()
    for v in range(kio_max(api_key) + 1):
        try:
            names.update(f.name for f in dataclasses.fields(request_class(api_key, v)))
        except Exception:  # kio raises its own lookup errors for a version it lacks
            continue
    return frozenset(names)


def warm_up(broker: Broker, timeout: float = 30.0) -> None:
    """Wait until the group and transaction coordinators serve: Kafka creates their
    internal topics on first use and answers COORDINATOR_NOT_AVAILABLE until then, a
    start-up transient the cases are not about."""
    deadline = time.monotonic() + timeout
    for key_type in (0, 1):
        while True:
            r = broker.client.call(10, 4, {"key_type": key_type,
                                           "coordinator_keys": ["oracle-warm-up"]})
            if r.coordinators[0].error_code == 0:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"coordinator {key_type} not available: {r}")
            time.sleep(0.1)
    while True:
        r = broker.client.call(22, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                       "producer_id": -1, "producer_epoch": -1})
        if r.error_code == 0:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"InitProducerId not served: {r}")
        time.sleep(0.1)


def wait_topics_served(client: RawClient, created: Any, timeout: float = 15.0) -> None:
    """After CreateTopics: wait until every new partition answers ListOffsets. Kafka's
    controller answers before its broker has made the partitions (a Produce sent at once
    may meet NOT_LEADER_OR_FOLLOWER); Tidegate's are there before it answers."""
    deadline = time.monotonic() + timeout
    for t in created.topics:
        if t.error_code != 0 or int(t.num_partitions) <= 0:
            continue
        while True:
            r = client.call(2, 1, {"replica_id": -1, "topics": [
                {"name": t.name, "partitions": [{"partition_index": i, "timestamp": -1}
                                                for i in range(int(t.num_partitions))]}]})
            if all(p.error_code == 0 for p in r.topics[0].partitions):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {t.name} not served: {r}")
            time.sleep(0.05)


def run_case(broker: Broker, case: Case, versions: Mapping[int, int]) -> list[Any]:
    out = []
    raw: list[Any] = []
    for step in case.steps:
        data = step.data(raw) if callable(step.data) else step.data
        # `build` ignores names a version lacks: a misspelt field would go unnoticed
        unknown = set(data) - _field_names(step.api_key)
        assert not unknown, f"{case.name}: API {step.api_key} has no fields {unknown}"
        version = step.version if step.version is not None else versions[step.api_key]
        response = (step.send(broker.client) if step.send is not None
                    else broker.client.call(step.api_key, version, dict(data)))
        raw.append(response)
        if step.settle is not None:
            step.settle(broker.client, response)
        plain = normalize(to_plain(response))
        out.append(step.view(plain) if step.view else plain)
    return out


def compare_case(kafka: Broker, tidegate: Broker, case: Case) -> list[str]:
    versions: dict[int, int] = {}
    for step in case.steps:
        if step.version is None:
            v = common_version(step.api_key, kafka, tidegate)
            if v is None:
                return [f"{case.name}: API {step.api_key} not served by both"]
            versions[step.api_key] = v
    a = run_case(kafka, case, versions)
    b = run_case(tidegate, case, versions)
    out = []
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        step = case.steps[i]
        v = step.version if step.version is not None else versions[step.api_key]
        out += [f"{case.name} step {i} (API {step.api_key} v{v}){d}"
                for d in differences(x, y)]
    return out


# "case step N" -> why Tidegate answers differently there (docs/compatibility.md)
KNOWN = {
    "api_versions step 0":
        "Kafka also finalizes eligible.leader.replicas.version; Tidegate has no ELR",
    "metadata_auto_create step 0":
        "Kafka's controller creates an auto-created topic after the answer "
        "(UNKNOWN_TOPIC_OR_PARTITION first); Tidegate creates it before answering",
    "create_topics_valid_and_exists step 2":
        "validate_only: Kafka returns a made-up topic id, Tidegate the zero id",
    "delete_groups_and_offsets step 5":
        "an Empty group whose last offset OffsetDelete removed: Kafka drops it at its next "
        "offsets cleanup, Tidegate at once (DeleteGroups: NONE vs GROUP_ID_NOT_FOUND)",
    "incremental_alter_configs_invalid step 4":
        "an unknown config operation: Kafka answers UNKNOWN_SERVER_ERROR, Tidegate "
        "INVALID_REQUEST",
    "txn_sequence_reused_after_abort step 6":
        "a transactional batch repeating an aborted batch's sequences in the next "
        "transaction (same epoch): Kafka answers NONE with the aborted batch's offset, "
        "Tidegate OUT_OF_ORDER_SEQUENCE_NUMBER (beyond Kafka: REUSED_AFTER_MARKER)",
}


def unexplained(diffs: list[str]) -> list[str]:
    return [d for d in diffs if not any(d.startswith(k + " ") for k in KNOWN)]
