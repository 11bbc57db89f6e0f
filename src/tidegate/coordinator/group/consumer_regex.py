"""Regex subscriptions of KIP-848 consumer groups (`SubscribedTopicRegex`), resolved by the broker.

A member may subscribe to a regular expression instead of (or beside) topic names.
The coordinator resolves each regex of a group against the cluster's topics and keeps
the result as Kafka's ConsumerGroupRegularExpression record (key: group + regex; value:
the matching topics, the topic-metadata version it was resolved at, a timestamp), so a
restarted coordinator knows every member's topics without resolving again.

Resolution is lazy and cheap: `refresh` re-resolves a group's regexes only when the
broker's topic set has changed since they were last checked (`TopicNames.version`,
kept in memory), and writes a record only when a regex's topics changed — which
changes the group's subscribed topics and so bumps the group epoch (new target
assignment). A topic created or deleted after the subscription is therefore picked up
at the next heartbeat of any member of the group.

Syntax: Kafka evaluates RE2/J; Tidegate evaluates Python's `re`, matching the whole
topic name (as RE2/J's `matches()`). Constructs RE2 does not have — lookaround
(`(?=`, `(?!`, `(?<=`, `(?<!`) and backreferences (`\\1`, `(?P=name)`) — are refused
with INVALID_REGULAR_EXPRESSION, as Kafka refuses them, so a regex accepted here is
accepted by Kafka too. As on Kafka, every topic may match, internal ones
(`__consumer_offsets`, `__transaction_state`) included: `exclude.internal.topics` is a
client setting for patterns the client resolves, and a client that sends its regex to
the broker filters what it fetches itself (Tidegate's client does; franz-go's adopts
such a topic). A member only gets the topics its principal may DESCRIBE.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tidegate.coordinator.group.consumer_model import ConsumerGroup
from tidegate.coordinator.runtime import Record
from tidegate.protocol import consumer_group_records as cr
from tidegate.protocol.consumer_group_records import ConsumerGroupKey, RegexValue

__all__ = ["TopicNames", "compile_regex", "refresh", "regex_error"]


@dataclass(frozen=True)
class TopicNames:
    """The broker's topic names and a version that changes whenever they change."""

    version: int
    names: frozenset[str]


_NOT_RE2 = re.compile(r"\(\?(?:=|!|<=|<!|P=)")


def regex_error(pattern: str) -> str | None:
    """Why `pattern` is not a valid subscription regex, or None."""
    if _NOT_RE2.search(_strip_escapes(pattern)):
        return f"invalid regular expression {pattern!r}: lookaround is not supported (RE2)"
    if re.search(r"(?<!\\)(?:\\\\)*\\[1-9]", pattern):
        return f"invalid regular expression {pattern!r}: backreferences are not supported (RE2)"
    try:
        compile_regex(pattern)
    except re.error as e:
        return f"invalid regular expression {pattern!r}: {e}"
    return None


def _strip_escapes(pattern: str) -> str:
    # `\(?=` is a literal parenthesis, not lookahead
    return re.sub(r"\\.", "", pattern)


@functools.lru_cache(maxsize=1024)
def compile_regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _resolve(pattern: str, names: Iterable[str], visible: Callable[[str], bool]
             ) -> tuple[str, ...]:
    rx = compile_regex(pattern)
    return tuple(sorted(n for n in names if rx.fullmatch(n) and visible(n)))


def refresh(group: ConsumerGroup, in_use: Iterable[str], topic_names: Callable[[], TopicNames],
            visible: Callable[[str], bool], now: int
            ) -> tuple[dict[str, RegexValue], list[Record]]:
    """The group's resolved regexes after this heartbeat, and the records that get there:
    a regex new to the group or whose topics changed gets a record; a regex no member
    uses any more gets a tombstone. `in_use` are the members' regexes (validated)."""
    wanted = {r for r in in_use if r}
    resolved = {r: v for r, v in group.regexes.items() if r in wanted}
    records: list[Record] = [
        (_key(group.group_id, r), None) for r in sorted(group.regexes) if r not in wanted]
    if not wanted:
        return resolved, records
    snapshot = topic_names()
    for r in sorted(wanted):
        if r in group.regexes and group.regexes_checked.get(r) == snapshot.version:
            continue
        topics = _resolve(r, snapshot.names, visible)
        old = group.regexes.get(r)
        if old is not None and old.topics == topics:
            # nothing to write; remember the check (replaying a record does the same)
            group.regexes_checked[r] = snapshot.version
            continue
        value = RegexValue(topics, snapshot.version, now)
        resolved[r] = value
        records.append((_key(group.group_id, r), cr.encode_regex(value)))
    return resolved, records


def _key(gid: str, regex: str) -> bytes:
    return cr.encode_consumer_key(ConsumerGroupKey(cr.REGULAR_EXPRESSION, gid, regex))
