"""Sans-IO subscription state: which topics the consumer wants from its group.

A subscription is a set of topic names and/or regular expressions: a `re.Pattern`
must match the whole topic name (as Java's ``subscribe(Pattern)``); a string starting
with ``^`` is a regex searched in the name (as librdkafka spells them). Patterns are resolved
against the cluster's topic list (`resolve`); internal topics (``__consumer_offsets``,
``__transaction_state``) match only if ``exclude.internal.topics=false``. A consumer
either subscribes (group-managed partitions) or assigns partitions by hand, never both
at once, as in Kafka.

`topics` is the resolved set the consumer joins the group with; `changed` tells the
group coordinator whether it differs from the set of the last join, in which case the
consumer rejoins.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tidegate.common.topics import INTERNAL_TOPICS

__all__ = ["INTERNAL_TOPICS", "SubscriptionState"]



class SubscriptionState:
    """See the module docstring."""

    def __init__(self, exclude_internal_topics: bool = True) -> None:
        self.exclude_internal_topics = exclude_internal_topics
        self.literal: frozenset[str] = frozenset()
        self.patterns: tuple[tuple[re.Pattern[str], bool], ...] = ()  # (regex, whole name)
        self.topics: frozenset[str] = frozenset()
        self.joined: frozenset[str] | None = None  # the topics of the last join

    @property
    def active(self) -> bool:
        """Whether the consumer subscribes (rather than assigns or does nothing)."""
        return bool(self.literal or self.patterns)

    @property
    def has_patterns(self) -> bool:
        return bool(self.patterns)

    def subscribe(self, topics: Iterable[str | re.Pattern[str]] | str | re.Pattern[str]
                  ) -> None:
        """Replace the subscription. Raises ValueError for an empty one or a bad regex."""
        items: list[str | re.Pattern[str]]
        items = [topics] if isinstance(topics, str | re.Pattern) else list(topics)
        literal: set[str] = set()
        patterns: list[tuple[re.Pattern[str], bool]] = []
        for item in items:
            if isinstance(item, re.Pattern):
                patterns.append((item, True))
            elif isinstance(item, str) and item.startswith("^"):
                try:
                    patterns.append((re.compile(item), False))
                except re.error as e:
                    raise ValueError(f"bad topic pattern {item!r}: {e}") from None
            elif isinstance(item, str) and item:
                literal.add(item)
            else:
                raise ValueError(f"not a topic name or pattern: {item!r}")
        if not literal and not patterns:
            raise ValueError("subscribe() needs at least one topic or pattern; "
                             "use unsubscribe() to stop consuming")
        self.literal = frozenset(literal)
        self.patterns = tuple(patterns)
        self.topics = self.literal

    def unsubscribe(self) -> None:
        self.literal = frozenset()
        self.patterns = ()
        self.topics = frozenset()
        self.joined = None

    def matches(self, topic: str) -> bool:
        if topic in self.literal:
            return True
        if self.exclude_internal_topics and topic in INTERNAL_TOPICS:
            return False
        return any(p.fullmatch(topic) if whole else p.search(topic)
                   for p, whole in self.patterns)

    def excludes(self, topic: str) -> bool:
        """Whether `topic` stays out of the consumer's partitions though a group may
        assign it: an internal topic only a pattern brought, with
        ``exclude.internal.topics`` (a broker resolving a KIP-848 regex matches
        internal topics too, as Kafka)."""
        return (self.exclude_internal_topics and topic in INTERNAL_TOPICS
                and topic not in self.literal)

    def resolve(self, cluster_topics: Iterable[str]) -> bool:
        """Recompute `topics` from the cluster's topic names (patterns only);
        return whether it changed."""
        before = self.topics
        self.topics = self.literal | {t for t in cluster_topics if self.matches(t)}
        return self.topics != before

    def changed(self) -> bool:
        """Whether the topics differ from those of the last join."""
        return self.joined is not None and self.joined != self.topics
