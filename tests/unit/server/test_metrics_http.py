"""`http.listeners` parsing: what the broker binds, and what it refuses at start."""

from __future__ import annotations

import pytest

from tidegate.common.errors import InvalidConfigError
from tidegate.server.metrics.http import parse_http_listeners


def test_addresses() -> None:
    assert parse_http_listeners("http://127.0.0.1:9644") == [("127.0.0.1", 9644)]
    assert parse_http_listeners("http://:9644, http://[::1]:0") == [("", 9644), ("::1", 0)]
    assert parse_http_listeners("") == []


@pytest.mark.parametrize("bad", ["https://127.0.0.1:9644", "127.0.0.1:9644", "http://x",
                                 "http://h:99999", "http://h:1/metrics"])
def test_bad_addresses_are_config_errors(bad: str) -> None:
    with pytest.raises(InvalidConfigError):
        parse_http_listeners(bad)
