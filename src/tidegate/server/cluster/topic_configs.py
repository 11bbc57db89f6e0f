"""Topic config overrides in cluster mode, Kafka's ZooKeeper way (`AdminZkClient`'s
`changeTopicConfig` and the brokers' `ZkConfigManager`).

Writing, by whichever broker receives AlterConfigs / IncrementalAlterConfigs
(`alter_topic_config_in_zk`): the topic's whole new set of overrides goes to
`/config/topics/<t>` (`{"version":1,"config":{...}}`) together with a sequential
notification `/config/changes/config_change_<seq>` (`{"version":2,"entity_path":
"topics/<t>"}`), in one ZooKeeper multi conditional on the config znode's version. Two
brokers altering one topic at once therefore cannot lose one another's change: the
loser re-reads the znode and applies its operations again. (Kafka writes the two
unconditionally, one after the other.) `validate_only` writes nothing.

Applying, on every broker (`TopicConfigWatcher`): a watch on `/config/changes`' children;
each new notification naming `topics/<t>` makes the broker re-read `/config/topics/<t>`
and, if it holds replicas of `<t>`, give them the new config through the LogManager
(what a local alter did on the embedded broker). After a (re)connection the watches are
gone and notifications may have been missed, so the config of every topic held here is
re-read instead. Notifications older than 15 minutes are deleted by whichever broker
sees them, as Kafka's brokers do (`changeExpirationMs`): a broker that was away longer
re-reads everything when it comes back anyway.

A config znode written by another tool may hold keys or values Tidegate does not know
(`message.format.version` of an old Kafka, a typo): those are left out, logged once, and
the rest applies, as Kafka ignores configs it does not use.

Reads of the truth for DescribeConfigs come from ZooKeeper too (`read_topic_config`), so
every broker answers the same at once, whatever it has applied so far.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Mapping, Sequence

from tidegate.common.errors import ErrorCode, KafkaError, UnknownTopicOrPartitionError
from tidegate.replication.zk_ops import Check, ZkOp
from tidegate.replication.znodes import MalformedZnodeError, topic_config_path, topic_path
from tidegate.replication.znodes_admin import decode_entity_config
from tidegate.server.cluster.config_changes import (
    CHANGE_EXPIRATION_MS,
    ConfigChangeWatcher,
    alter_entity_config,
)
from tidegate.server.cluster.errors import ZkError
from tidegate.server.cluster.zk import ZkClient
from tidegate.storage.config import TOPIC_CONFIG_KEYS
from tidegate.storage.log_manager import LogManager

__all__ = [
    "CHANGE_EXPIRATION_MS",
    "TopicConfigWatcher",
    "alter_topic_config_in_zk",
    "read_topic_config",
    "usable_topic_config",
]

log = logging.getLogger(__name__)

_TIMEOUT_S = 30.0

Change = Callable[[dict[str, str]], dict[str, str]]


def usable_topic_config(
    topic: str, configs: Mapping[str, str], say_once: Callable[[Hashable, str], None]
) -> dict[str, str]:
    """The overrides Tidegate can apply: unknown keys and unparsable values are left out,
    each reported once through `say_once(key, message)`."""
    out: dict[str, str] = {}
    for name, value in configs.items():
        key = TOPIC_CONFIG_KEYS.get(name)
        if key is None:
            say_once(("unknown", topic, name),
                     f"topic {topic}: ignoring config {name}={value!r} (not a topic config "
                     f"Tidegate knows)")
            continue
        try:
            key.parse(value)
        except (KafkaError, ValueError) as e:
            say_once(("invalid", topic, name, value),
                     f"topic {topic}: ignoring config {name}={value!r}: {e}")
            continue
        out[name] = value
    return out


async def read_topic_config(zk: ZkClient, name: str) -> dict[str, str]:
    """The overrides ZooKeeper holds for topic `name` (UNKNOWN_TOPIC_OR_PARTITION if the
    topic does not exist); a malformed config znode reads as none, with a warning."""
    try:
        async with asyncio.timeout(_TIMEOUT_S):
            if await zk.exists(topic_path(name)) is None:
                raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
            got = await zk.get_or_none(topic_config_path(name))
    except ZkError as e:
        raise _unavailable(f"reading the configs of topic {name}", e) from e
    except TimeoutError:
        raise _timed_out(f"reading the configs of topic {name}") from None
    if got is None:
        return {}
    try:
        return decode_entity_config(got[0], topic_config_path(name))
    except MalformedZnodeError as e:
        log.warning("%s; describing the topic with no overrides", e)
        return {}


async def alter_topic_config_in_zk(
    zk: ZkClient, name: str, change: Change, *, validate_only: bool
) -> dict[str, str]:
    """Replace topic `name`'s overrides with `change(current)` (which validates and may
    raise a KafkaError) and notify every broker; returns the new overrides. Nothing is
    written with `validate_only`."""
    try:
        async with asyncio.timeout(_TIMEOUT_S):
            return await _alter(zk, name, change, validate_only)
    except ZkError as e:
        raise _unavailable(f"altering the configs of topic {name}", e) from e
    except TimeoutError:
        raise _timed_out(f"altering the configs of topic {name}") from None


async def _alter(zk: ZkClient, name: str, change: Change, validate_only: bool) -> dict[str, str]:
    async def topic_exists() -> list[ZkOp]:
        topic = await zk.exists(topic_path(name))
        if topic is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        # the topic is still there (deleted meanwhile: no orphan config is created)
        return [Check(topic_path(name), topic.version)]

    return await alter_entity_config(zk, f"topics/{name}", change,
                                     what=f"the configs of topic {name}",
                                     guard=topic_exists, validate_only=validate_only)


def _unavailable(what: str, e: ZkError) -> KafkaError:
    log.warning("%s failed: %s", what, e)
    return KafkaError(f"{what} failed: ZooKeeper: {e}", code=ErrorCode.unknown_server_error)


def _timed_out(what: str) -> KafkaError:
    return KafkaError(f"{what} did not finish within {_TIMEOUT_S:.0f} s (ZooKeeper)",
                      code=ErrorCode.request_timed_out)


class TopicConfigWatcher(ConfigChangeWatcher):
    """Applies ZooKeeper's topic configs to this broker's replicas (module docstring),
    and purges old notifications of every kind.

    `lock` is the one the broker holds while it opens or drops replicas
    (server/cluster/node.py): a replica opened meanwhile reads the config itself, and
    holding the lock while reading and applying keeps an older read from being applied
    after a newer one."""

    what = "topic configs"
    task_name = "topic-config-watcher"

    def __init__(self, zk: ZkClient, logs: LogManager, lock: asyncio.Lock, *,
                 expiration_ms: int = CHANGE_EXPIRATION_MS,
                 wall_clock_ms: Callable[[], int] | None = None) -> None:
        super().__init__(zk, expiration_ms=expiration_ms, wall_clock_ms=wall_clock_ms)
        self.logs = logs
        self.lock = lock

    async def reload_all(self) -> None:
        async with self.lock:  # replicas are opened in a worker thread meanwhile
            topics = set(self.logs.topics)
        for topic in sorted(topics):
            await self._apply(topic)

    async def apply_changes(self, entity_paths: Sequence[str]) -> None:
        topics = {p[len("topics/"):] for p in entity_paths if p.startswith("topics/")}
        for topic in sorted(topics):
            await self._apply(topic)

    async def _apply(self, topic: str) -> None:
        """Re-read `topic`'s config and give it to the replicas held here, if any."""
        async with self.lock:
            if topic not in self.logs.topics:
                return  # no replica here: one opened later reads the config itself
            path = topic_config_path(topic)
            got = await self.zk.get_or_none(path)
            if got is None:
                return  # the topic is being deleted; its replicas will go
            try:
                raw = decode_entity_config(got[0], path)
            except MalformedZnodeError as e:
                self.say_once(("config", topic, got[1].mzxid), f"{e}; keeping the current configs")
                return
            configs = usable_topic_config(topic, raw, self.say_once)
            meta = self.logs.topics.get(topic)
            if meta is None or dict(meta.configs) == configs:
                return
            # saving the topics file fsyncs: not on the event loop
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: self.logs.alter_topic_configs(topic, configs, incremental=False))
            log.info("topic %s: configs now %s (from ZooKeeper)", topic, configs)
