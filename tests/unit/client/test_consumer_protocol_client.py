"""The Tidegate client's `group.protocol=consumer` pieces that need no broker: its
settings (Kafka's rules) and the regex sent to the broker, which must select exactly
the topics the client's own pattern rules select (a Hypothesis property)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegate.client.config import ConsumerConfig
from tidegate.client.consumer.consumer_protocol import subscription_regex
from tidegate.client.consumer.subscription import SubscriptionState
from tidegate.client.errors import ConfigError
from tidegate.coordinator.group.consumer_regex import regex_error


def test_settings() -> None:
    cfg = ConsumerConfig.from_dict({"group.id": "g", "group.protocol": "consumer",
                                    "group.remote.assignor": "range"})
    assert (cfg.group_protocol, cfg.group_remote_assignor) == ("consumer", "range")
    assert ConsumerConfig.from_dict({"group.id": "g"}).group_protocol == "classic"
    with pytest.raises(ConfigError, match=r"group\.protocol"):
        ConsumerConfig.from_dict({"group.id": "g", "group.protocol": "kip848"})
    for key, value in (("session.timeout.ms", 10000), ("heartbeat.interval.ms", 1000),
                       ("partition.assignment.strategy", "range")):
        with pytest.raises(ConfigError, match=re.escape(key)):
            ConsumerConfig.from_dict({"group.id": "g", "group.protocol": "consumer",
                                      key: value})


def test_subscription_regex_forms() -> None:
    s = SubscriptionState()
    s.subscribe(["plain"])
    assert subscription_regex(s) is None
    s.subscribe([re.compile("in-.*"), "other"])
    assert subscription_regex(s) == "in-.*"
    s.subscribe(["^in-", re.compile("x|y")])
    assert subscription_regex(s) == "(?:.*(?:^in-).*)|(?:x|y)"


NAMES = st.text(alphabet="abx-._", min_size=1, max_size=8)


@given(st.lists(NAMES, min_size=1, max_size=12),
       st.sampled_from(["^ab", "^a.*x", "^x-", "^b"]),
       st.sampled_from(["a.*", "x|ab", "[ab]+"]))
def test_the_broker_selects_what_the_client_would(names: list[str], search: str,
                                                  whole: str) -> None:
    s = SubscriptionState()
    s.subscribe([search, re.compile(whole)])
    rx = subscription_regex(s)
    assert rx is not None and regex_error(rx) is None  # RE2-compatible
    for n in names:
        assert bool(re.fullmatch(rx, n)) == s.matches(n), n


@pytest.mark.parametrize("exclude", [True, False])
def test_internal_topics_the_broker_assigns_follow_exclude_internal_topics(
        exclude: bool) -> None:
    """A broker resolving the regex matches internal topics too (as Kafka); the member
    keeps them out of its partitions under exclude.internal.topics (the default) unless
    it names them, so it consumes what its own pattern rules select."""
    s = SubscriptionState(exclude_internal_topics=exclude)
    s.subscribe([re.compile("__.*|in-.*")])
    rx = subscription_regex(s)
    assert rx is not None
    broker = {n for n in ("__consumer_offsets", "__transaction_state", "in-a", "b")
              if re.fullmatch(rx, n)}
    assert broker == {"__consumer_offsets", "__transaction_state", "in-a"}
    kept = {n for n in broker if not s.excludes(n)}
    assert kept == {n for n in broker if s.matches(n)}
    assert kept == ({"in-a"} if exclude else broker)
    s.subscribe([re.compile("in-.*"), "__consumer_offsets"])  # named: always kept
    assert not s.excludes("__consumer_offsets") and s.excludes("__transaction_state") is exclude
