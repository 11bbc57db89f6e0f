"""Topic metadata: names validated as Kafka does, persisted in `tidegate-topics.json`.

`TopicMeta` is what the broker knows about a topic: name, id, partition count and the
topic-level config overrides that were explicitly set (defaults are not stored, so a
broker default change reaches every topic that did not override it).

Invariant: the file is replaced atomically, so after a crash it holds either the old or
the new set of topics. It is the source of truth for which topics exist.

Overrides an older release stored with keys Kafka 4 removed (`message.format.version`,
...) are dropped by `drop_removed_configs` when the broker loads the file (one warning),
and leave the file at its next write.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tidegate.common.errors import InvalidTopicError
from tidegate.storage.config import without_removed_keys
from tidegate.storage.errors import LogDirectoryError
from tidegate.storage.files import atomic_write, kafka_uuid, parse_kafka_uuid, read_single_value

__all__ = [
    "MAX_TOPIC_NAME_LENGTH",
    "TOPICS_FILE",
    "TopicMeta",
    "collides",
    "drop_removed_configs",
    "load_topics",
    "save_topics",
    "validate_topic_name",
]

log = logging.getLogger(__name__)

TOPICS_FILE = "tidegate-topics.json"
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


@dataclass(frozen=True)
class TopicMeta:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)  # explicit overrides only
    # Cluster mode: the partitions this broker holds a replica of (the controller's
    # assignment decides). None on the embedded broker: every partition is here.
    hosted: frozenset[int] | None = None

    def local_partitions(self) -> range | list[int]:
        if self.hosted is None:
            return range(self.partitions)
        return sorted(p for p in self.hosted if p < self.partitions)


def validate_topic_name(name: str) -> None:
    """Kafka's `Topic.validate`, with its messages."""
    if not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError('Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} "
            f"characters, topic name: {name}"
        )
    if not _LEGAL.match(name):
        raise InvalidTopicError(
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )


def collides(a: str, b: str) -> bool:
    """'.' and '_' collide in metric names, so Kafka refuses topics differing only so."""
    return a != b and a.replace(".", "_") == b.replace(".", "_")


def save_topics(log_dir: Path, topics: Mapping[str, TopicMeta]) -> None:
    data = {
        "version": 1,
        "topics": [
            {
                "name": t.name,
                "topic_id": kafka_uuid(t.topic_id),
                "partitions": t.partitions,
                "configs": dict(sorted(t.configs.items())),
                **({} if t.hosted is None else {"hosted": sorted(t.hosted)}),
            }
            for t in sorted(topics.values(), key=lambda t: t.name)
        ],
    }
    atomic_write(log_dir / TOPICS_FILE, json.dumps(data, indent=1).encode("utf-8"))


def load_topics(log_dir: Path) -> dict[str, TopicMeta]:
    path = log_dir / TOPICS_FILE
    text = read_single_value(path)
    if text is None:
        return {}
    try:
        data = json.loads(text)
        if data.get("version") != 1:
            raise ValueError(f"unsupported version {data.get('version')!r}")
        topics = {}
        for t in data["topics"]:
            meta = TopicMeta(
                name=str(t["name"]),
                topic_id=parse_kafka_uuid(str(t["topic_id"])),
                partitions=int(t["partitions"]),
                configs={str(k): str(v) for k, v in t["configs"].items()},
                hosted=(frozenset(int(p) for p in t["hosted"]) if "hosted" in t else None),
            )
            topics[meta.name] = meta
        return topics
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise LogDirectoryError(f"{path} is unreadable: {exc}") from exc


def drop_removed_configs(topics: dict[str, TopicMeta]) -> None:
    """Drop, in place, the overrides with keys Kafka 4 removed (`storage.config.
    REMOVED_TOPIC_KEYS`) that an older release stored; one warning names them all."""
    dropped: dict[str, set[str]] = {}
    for name, meta in topics.items():
        kept = without_removed_keys(meta.configs)
        if len(kept) != len(meta.configs):
            for key in set(meta.configs) - set(kept):
                dropped.setdefault(key, set()).add(name)
            topics[name] = dataclasses.replace(meta, configs=kept)
    if dropped:
        log.warning(
            "ignoring topic configs Kafka 4 removed, stored by an older release: %s",
            "; ".join(f"{key} on {len(names)} topic(s) ({', '.join(sorted(names)[:5])}"
                      f"{', ...' if len(names) > 5 else ''})"
                      for key, names in sorted(dropped.items())))
