"""Options of the `tidegate` data source, with the names of Spark's Kafka connector.

`ReadOptions.parse` / `WriteOptions.parse` turn Spark's (case-insensitive) string
options into typed values once, on the driver, so every mistake is a `ValueError` naming
the option before any task starts. Kafka settings are the options prefixed ``kafka.``;
`client_config` hands each client (consumer, producer, admin) the keys it knows.

Offsets JSON (`startingOffsets`, `endingOffsets`, a streaming query's offsets) is Spark's:
``{"topic": {"partition": offset}}`` with -2 for earliest and -1 for latest;
`offsets_to_json` writes it with a fixed key order (topics sorted, partitions by number),
so the same offsets always give the same text.

Differences from Spark's connector, on purpose: ``kafka.isolation.level`` defaults to
``read_committed`` (Spark's defaults to read_uncommitted); ``kafka.group.id``,
``kafka.enable.auto.commit`` and ``kafka.auto.offset.reset`` are refused, since the
source tracks offsets itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from tidegate.client import AdminConfig, ConsumerConfig, ProducerConfig

__all__ = [
    "EARLIEST",
    "LATEST",
    "Offsets",
    "ReadOptions",
    "Subscription",
    "WriteOptions",
    "client_config",
    "offsets_from_json",
    "offsets_to_json",
]

EARLIEST = -2
LATEST = -1

# {(topic, partition): offset}, the decoded form of Spark's offsets JSON.
Offsets = dict[tuple[str, int], int]

_REFUSED = {
    "group.id": "the source tracks offsets itself; consumer groups are not used",
    "enable.auto.commit": "the source never commits offsets to a group",
    "auto.offset.reset": "use startingOffsets instead",
    "key.deserializer": "keys and values are always bytes",
    "value.deserializer": "keys and values are always bytes",
    "key.serializer": "write key and value columns as binary or string",
    "value.serializer": "write key and value columns as binary or string",
}

Kind = Literal["consumer", "producer", "admin"]
_KEYS = {"consumer": ConsumerConfig.keys(), "producer": ProducerConfig.keys(),
         "admin": AdminConfig.keys()}


def lower(options: Mapping[str, str]) -> dict[str, str]:
    """Spark's options are case-insensitive: one lower-case key each."""
    return {str(k).lower(): str(v) for k, v in options.items()}


def kafka_params(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options without their prefix; unknown or refused keys raise."""
    params: dict[str, str] = {}
    every = set().union(*_KEYS.values())
    for key, value in lower(options).items():
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka."):]
        if name in _REFUSED:
            raise ValueError(f"option kafka.{name} is not supported: {_REFUSED[name]}")
        if name not in every:
            raise ValueError(f"unknown Kafka client setting kafka.{name}")
        params[name] = value
    if "bootstrap.servers" not in params:
        raise ValueError("option kafka.bootstrap.servers is required")
    return params


def client_config(params: Mapping[str, str], kind: Kind, **extra: object) -> dict[str, object]:
    """The settings of `params` that a `kind` client knows, plus `extra` (dotted keys)."""
    known = _KEYS[kind]
    config: dict[str, object] = {k: v for k, v in params.items() if k in known}
    config.update(extra)
    return config


def offsets_to_json(offsets: Offsets) -> str:
    """Spark's offsets JSON with a fixed key order: topics sorted, partitions by number."""
    return json.dumps(offsets_to_dict(offsets), separators=(",", ":"))


def offsets_to_dict(offsets: Offsets) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = offsets[(topic, partition)]
    return out


def offsets_from_json(text: str | Mapping[str, object], what: str) -> Offsets:
    """Decode ``{"topic": {"0": 23}}`` (text or an already-decoded dict)."""
    try:
        data = json.loads(text) if isinstance(text, str) else text
        if not isinstance(data, Mapping):
            raise TypeError("not an object")
        offsets: Offsets = {}
        for topic, parts in data.items():
            if not isinstance(parts, Mapping):
                raise TypeError(f"topic {topic!r} does not map to an object")
            for p, off in parts.items():
                offsets[(str(topic), int(p))] = int(off)
        return offsets
    except (ValueError, TypeError) as e:
        raise ValueError(f'{what}: expected JSON like {{"topic":{{"0":23}}}}, got {text!r}: '
                         f"{e}") from None


@dataclass(frozen=True)
class Subscription:
    """Which partitions to read: exactly one of subscribe, subscribePattern, assign."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, int], ...] = ()

    @classmethod
    def parse(cls, opts: Mapping[str, str]) -> Subscription:
        given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k)]
        if len(given) != 1:
            raise ValueError("exactly one of the options subscribe, subscribePattern and "
                             f"assign must be given (got {len(given)})")
        if "subscribe" in given:
            topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
            if not topics:
                raise ValueError("option subscribe names no topic")
            return cls(topics=topics)
        if "subscribepattern" in given:
            try:
                re.compile(opts["subscribepattern"])
            except re.error as e:
                raise ValueError(f"option subscribePattern is not a regex: {e}") from None
            return cls(pattern=opts["subscribepattern"])
        try:
            data = json.loads(opts["assign"])
            assigned = tuple(sorted((str(t), int(p)) for t, ps in data.items() for p in ps))
        except (ValueError, TypeError, AttributeError):
            raise ValueError('option assign: expected JSON like {"topicA":[0,1]}, got '
                             f"{opts['assign']!r}") from None
        return cls(assigned=assigned)


def _offset_spec(opts: Mapping[str, str], key: str, default: str,
                 allowed: tuple[str, ...]) -> str | Offsets:
    text = opts.get(key, default).strip()
    if text.lower() in allowed:
        return text.lower()
    if text.lower() in ("earliest", "latest"):
        raise ValueError(f"option {key}={text} is not allowed here")
    return offsets_from_json(text, f"option {key}")


def _int_opt(opts: Mapping[str, str], key: str, minimum: int) -> int | None:
    if key not in opts:
        return None
    try:
        value = int(opts[key])
    except ValueError:
        raise ValueError(f"option {key} must be an integer, got {opts[key]!r}") from None
    if value < minimum:
        raise ValueError(f"option {key} must be at least {minimum}, got {value}")
    return value


def _bool_opt(opts: Mapping[str, str], key: str, default: bool) -> bool:
    value = opts.get(key, str(default)).strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"option {key} must be true or false, got {opts[key]!r}")
    return value == "true"


@dataclass(frozen=True)
class ReadOptions:
    """A read's options, parsed. `streaming` selects the rules that differ."""

    kafka: dict[str, str]
    subscription: Subscription
    starting: str | Offsets
    ending: str | Offsets
    starting_by_timestamp: Offsets | None
    ending_by_timestamp: Offsets | None
    timestamp_strategy: str
    min_partitions: int | None
    max_records_per_partition: int | None
    # Tidegate's own: at most this many Spark tasks, several ranges each (`pack_ranges`)
    max_partitions: int | None
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    include_headers: bool
    poll_timeout_ms: int
    # Tasks yield Arrow record batches (Tidegate's own option ``arrowBatches``, default
    # true); false yields rows, the slower path kept to compare against.
    arrow_batches: bool = True
    # With arrowBatches, the task's consumer decodes fetches straight into column
    # buffers (C extension `records._columnar`, when built); false (Tidegate's own
    # ``columnarDecode``) makes record objects first, as before. Same rows either way.
    columnar_decode: bool = True
    # The columns tasks produce, in order, when the user gave a subset of the read
    # schema with .schema(...) (`source.project`); None: all of them.
    select: tuple[str, ...] | None = None

    @property
    def consumer_config(self) -> dict[str, object]:
        """Executor-side consumer settings: read_committed unless set otherwise,
        fetch.max.wait.ms 10 unless set otherwise (see below). Tasks
        seek before reading and check for removed offsets themselves (`ranges`);
        auto.offset.reset only covers the moment between assign() and seek()."""
        return client_config(self.kafka, "consumer", **{
            "isolation.level": self.kafka.get("isolation.level", "read_committed"),
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "allow.auto.create.topics": False,
            "max.poll.records": self.kafka.get("max.poll.records", "10000"),
            # A range ends at or below the LSO / high watermark, so its records are all
            # there: a fetch only waits once the task has read past them (a prefetch at
            # the range's end). Parked for 500 ms at the broker, that fetch would hold
            # up the next range of a packed task (maxPartitions) on the same connection.
            "fetch.max.wait.ms": self.kafka.get("fetch.max.wait.ms", "10")})

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
        opts = lower(options)
        kafka = kafka_params(opts)
        level = kafka.get("isolation.level", "read_committed")
        if level not in ("read_committed", "read_uncommitted"):
            raise ValueError("option kafka.isolation.level must be read_committed or "
                             f"read_uncommitted, got {level!r}")
        starting = _offset_spec(opts, "startingoffsets", "latest" if streaming else "earliest",
                                ("earliest", "latest") if streaming else ("earliest",))
        if not streaming and isinstance(starting, dict) and LATEST in starting.values():
            raise ValueError("startingOffsets: -1 (latest) is not allowed in a batch query")
        ending = _offset_spec(opts, "endingoffsets", "latest", ("latest",))
        if streaming and "endingoffsets" in opts:
            raise ValueError("option endingOffsets is for batch queries only")
        if isinstance(ending, dict) and EARLIEST in ending.values():
            raise ValueError("endingOffsets: -2 (earliest) is not allowed")
        by_ts = {k: offsets_from_json(opts[k], f"option {k}") if k in opts else None
                 for k in ("startingoffsetsbytimestamp", "endingoffsetsbytimestamp")}
        strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
        if strategy not in ("error", "latest"):
            raise ValueError("option startingOffsetsByTimestampStrategy must be error or latest")
        return cls(
            kafka=kafka,
            subscription=Subscription.parse(opts),
            starting=starting,
            ending=ending,
            starting_by_timestamp=by_ts["startingoffsetsbytimestamp"],
            ending_by_timestamp=by_ts["endingoffsetsbytimestamp"],
            timestamp_strategy=strategy,
            min_partitions=_int_opt(opts, "minpartitions", 1),
            max_records_per_partition=_int_opt(opts, "maxrecordsperpartition", 1),
            max_partitions=_int_opt(opts, "maxpartitions", 1),
            max_offsets_per_trigger=_int_opt(opts, "maxoffsetspertrigger", 1),
            fail_on_data_loss=_bool_opt(opts, "failondataloss", True),
            include_headers=_bool_opt(opts, "includeheaders", False),
            poll_timeout_ms=_int_opt(opts, "kafkaconsumer.polltimeoutms", 1) or 120_000,
            arrow_batches=_bool_opt(opts, "arrowbatches", True),
            columnar_decode=_bool_opt(opts, "columnardecode", True),
        )


@dataclass(frozen=True)
class WriteOptions:
    """A write's options, parsed: Kafka settings, the default topic, and for the
    streaming sink ``exactlyOnce`` (default true), ``eos.commitTopic`` (partition 0
    carries the decision records as a group's committed offset; default: ``topic``) and
    ``eos.transactionalIdPrefix`` (default ``tidegate-spark``)."""

    kafka: dict[str, str]
    topic: str | None
    exactly_once: bool = True  # streaming sink only
    commit_topic: str | None = None
    txn_prefix: str = "tidegate-spark"
    # tasks take Arrow record batches (``arrowBatches``, default true), else Spark's rows
    arrow_batches: bool = True

    @property
    def producer_config(self) -> dict[str, object]:
        return client_config(self.kafka, "producer")

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        opts = lower(options)
        kafka = kafka_params(opts)
        if "transactional.id" in kafka:
            raise ValueError("option kafka.transactional.id is not supported: the sink "
                             "derives transactional ids itself")
        topic = opts.get("topic") or None
        return cls(kafka=kafka, topic=topic,
                   exactly_once=_bool_opt(opts, "exactlyonce", True),
                   commit_topic=opts.get("eos.committopic") or topic,
                   txn_prefix=opts.get("eos.transactionalidprefix") or "tidegate-spark",
                   arrow_batches=_bool_opt(opts, "arrowbatches", True))
