"""What a broker takes from a /config/topics/<t> znode written by any tool
(server/cluster/topic_configs.py): known keys with valid values; the rest is left out
and reported once."""

from __future__ import annotations

from collections.abc import Hashable

from tidegate.server.cluster.topic_configs import usable_topic_config


def test_unknown_keys_and_bad_values_are_left_out_once() -> None:
    said: list[tuple[Hashable, str]] = []
    seen: set[Hashable] = set()

    def say_once(key: Hashable, msg: str) -> None:
        if key not in seen:
            seen.add(key)
            said.append((key, msg))

    raw = {
        "retention.ms": "123456",
        "cleanup.policy": "compact,delete",
        "min.insync.replicas": "three",  # not a number
        "x.custom.setting": "1",  # written by some other tool
    }
    for _ in range(2):
        assert usable_topic_config("t", raw, say_once) == {
            "retention.ms": "123456", "cleanup.policy": "compact,delete"}
    assert len(said) == 2, "each ignored key reported once"
    assert any("x.custom.setting" in m for _, m in said)
    assert any("min.insync.replicas" in m and "three" in m for _, m in said)
