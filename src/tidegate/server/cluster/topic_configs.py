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
import contextlib
import logging
import time
from collections.abc import Callable, Hashable, Iterable, Mapping

from tidegate.common.errors import ErrorCode, KafkaError, UnknownTopicOrPartitionError
from tidegate.replication.zk_ops import Check, Create, SetData, ZkOp
from tidegate.replication.znodes import (
    CONFIG_CHANGE_PREFIX,
    CONFIG_CHANGES,
    MalformedZnodeError,
    topic_config_path,
    topic_path,
)
from tidegate.replication.znodes_admin import (
    config_change_sequence,
    decode_config_change,
    decode_entity_config,
    encode_config_change,
    encode_entity_config,
)
from tidegate.server.cluster.errors import (
    BadVersionError,
    ConnectionLossError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
    ZkClosedError,
    ZkError,
)
from tidegate.server.cluster.zk import SessionEvent, SessionState, WatchEvent, ZkClient
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

# Kafka's ZkConfigManager.changeExpirationMs: notifications older than this are purged.
CHANGE_EXPIRATION_MS = 15 * 60 * 1000
# Conditional writes lost to concurrent alters before giving up (each loss means another
# broker's alter of the same topic succeeded: progress is made).
_ATTEMPTS = 20
_TIMEOUT_S = 30.0
_RESYNC = object()

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
    path = topic_config_path(name)
    for _ in range(_ATTEMPTS):
        topic = await zk.exists(topic_path(name))
        if topic is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        got = await zk.get_or_none(path)
        current: dict[str, str] = {}
        if got is not None:
            with contextlib.suppress(MalformedZnodeError):  # overwritten by a good one
                current = decode_entity_config(got[0], path)
        new = change(dict(current))
        if validate_only:
            return new
        data = encode_entity_config(new)
        ops: list[ZkOp] = [
            # the topic is still there (deleted meanwhile: no orphan config is created)
            Check(topic_path(name), topic.version),
            Create(path, data) if got is None else SetData(path, data, got[1].version),
            Create(f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}",
                   encode_config_change(f"topics/{name}"), sequence=True),
        ]
        try:
            await zk.transaction(ops)
        except (BadVersionError, NodeExistsError, NoNodeError) as e:
            if e.path == CONFIG_CHANGES or (e.path or "").startswith(f"{CONFIG_CHANGES}/"):
                raise  # /config/changes itself is missing: not a race
            log.info("topic %s: configs changed concurrently; re-reading", name)
            continue  # another alter won the race: re-apply ours on top of it
        return new
    raise KafkaError(f"the configs of topic {name} kept changing concurrently; retry",
                     code=ErrorCode.request_timed_out)


def _unavailable(what: str, e: ZkError) -> KafkaError:
    log.warning("%s failed: %s", what, e)
    return KafkaError(f"{what} failed: ZooKeeper: {e}", code=ErrorCode.unknown_server_error)


def _timed_out(what: str) -> KafkaError:
    return KafkaError(f"{what} did not finish within {_TIMEOUT_S:.0f} s (ZooKeeper)",
                      code=ErrorCode.request_timed_out)


class TopicConfigWatcher:
    """Applies ZooKeeper's topic configs to this broker's replicas (module docstring).

    `lock` is the one the broker holds while it opens or drops replicas
    (server/cluster/node.py): a replica opened meanwhile reads the config itself, and
    holding the lock while reading and applying keeps an older read from being applied
    after a newer one."""

    def __init__(self, zk: ZkClient, logs: LogManager, lock: asyncio.Lock, *,
                 expiration_ms: int = CHANGE_EXPIRATION_MS,
                 wall_clock_ms: Callable[[], int] | None = None) -> None:
        self.zk = zk
        self.logs = logs
        self.lock = lock
        self.expiration_ms = expiration_ms
        # compared with the notifications' ctime, ZooKeeper's wall clock
        self.wall_clock_ms = wall_clock_ms or (lambda: int(time.time() * 1000))
        self.last_seen = -1  # the newest notification handled
        self._ctimes: dict[str, int] = {}
        self._said: set[Hashable] = set()
        self._events: asyncio.Queue[object] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.synced = asyncio.Event()  # set after the first full pass

    async def start(self) -> None:
        self.zk.subscribe(self._events)
        self._events.put_nowait(_RESYNC)
        self._task = asyncio.create_task(self._run(), name="topic-config-watcher")

    async def stop(self) -> None:
        self.zk.unsubscribe(self._events)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _say_once(self, key: Hashable, msg: str) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning("%s", msg)

    async def _run(self) -> None:
        while True:
            batch = [await self._events.get()]
            while not self._events.empty():
                batch.append(self._events.get_nowait())
            resync = any(e is _RESYNC or (isinstance(e, SessionEvent)
                                          and e.state is SessionState.CONNECTED) for e in batch)
            changed = any(isinstance(e, WatchEvent) and e.kind != "none" for e in batch)
            if not (resync or changed):
                continue
            try:
                await self._pass(resync)
                self.synced.set()
            except (ConnectionLossError, SessionExpiredError):
                log.info("topic configs: ZooKeeper unavailable; re-reading when it is back")
            except ZkClosedError:
                return
            except Exception:
                log.exception("topic configs: update failed; re-reading everything soon")
                asyncio.get_running_loop().call_later(1.0, self._events.put_nowait, _RESYNC)

    async def _pass(self, resync: bool) -> None:
        children = await self.zk.get_children(CONFIG_CHANGES,
                                              self.zk.watch(self._events, "changes"))
        seqs = sorted((s, c) for c in children if (s := config_change_sequence(c)) is not None)
        topics: set[str] = set()
        if resync:  # notifications may have been missed (or purged): re-read them all
            async with self.lock:  # replicas are opened in a worker thread meanwhile
                topics = set(self.logs.topics)
        else:
            for seq, child in seqs:
                if seq > self.last_seen:
                    entity = await self._entity(child)
                    if entity is not None and entity.startswith("topics/"):
                        topics.add(entity[len("topics/"):])
        self._ctimes = {c: t for c, t in self._ctimes.items() if c in children}
        if seqs:
            self.last_seen = max(self.last_seen, seqs[-1][0])
        for topic in sorted(topics):
            await self._apply(topic)
        await self._purge([c for s, c in seqs if s <= self.last_seen])

    async def _entity(self, child: str) -> str | None:
        """The entity path a notification names (None: gone, or not one we read)."""
        path = f"{CONFIG_CHANGES}/{child}"
        try:
            data, stat = await self.zk.get(path)
        except NoNodeError:
            return None  # purged meanwhile by another broker
        self._ctimes[child] = stat.ctime_ms
        try:
            return decode_config_change(data)
        except MalformedZnodeError as e:
            self._say_once(("notification", child), f"{path}: {e}; ignoring it")
            return None

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
                self._say_once(("config", topic, got[1].mzxid), f"{e}; keeping the current configs")
                return
            configs = usable_topic_config(topic, raw, self._say_once)
            meta = self.logs.topics.get(topic)
            if meta is None or dict(meta.configs) == configs:
                return
            # saving the topics file fsyncs: not on the event loop
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: self.logs.alter_topic_configs(topic, configs, incremental=False))
            log.info("topic %s: configs now %s (from ZooKeeper)", topic, configs)

    async def _purge(self, handled: Iterable[str]) -> None:
        """Delete notifications older than `expiration_ms` (every broker may: a broker
        away longer re-reads every config when it reconnects)."""
        now = self.wall_clock_ms()
        for child in handled:
            ctime = self._ctimes.get(child)
            path = f"{CONFIG_CHANGES}/{child}"
            if ctime is None:
                stat = await self.zk.exists(path)
                if stat is None:
                    continue
                ctime = self._ctimes[child] = stat.ctime_ms
            if now - ctime < self.expiration_ms:
                continue
            with contextlib.suppress(NoNodeError):
                await self.zk.delete(path)
            self._ctimes.pop(child, None)
