"""`tidegate quotas`' argument handling (cli/quotas.py): entities, --add-config parsing."""

from __future__ import annotations

import pytest

from tidegate.cli.main import build_parser
from tidegate.cli.quotas import describe_entity, entity_of, parse_add


def parse(*argv: str) -> dict[str, str | None]:
    return entity_of(build_parser().parse_args(["quotas", *argv]))


def test_entities_as_kafka_configs_names_them() -> None:
    assert parse("describe") == {}
    assert parse("set", "--user", "alice") == {"user": "alice"}
    assert parse("set", "--user-defaults", "--client-id", "app") == {"user": None,
                                                                      "client-id": "app"}
    assert parse("set", "--client-defaults") == {"client-id": None}
    with pytest.raises(SystemExit):  # one of --user / --user-defaults
        parse("set", "--user", "a", "--user-defaults")


def test_add_config() -> None:
    assert parse_add("producer_byte_rate=1048576, request_percentage=12.5") == {
        "producer_byte_rate": 1048576.0, "request_percentage": 12.5}
    assert parse_add("") == {}
    for bad in ("producer_byte_rate", "producer_byte_rate=fast"):
        with pytest.raises(ValueError):
            parse_add(bad)


def test_entity_paths() -> None:
    assert describe_entity((("client-id", None), ("user", "alice"))) == (
        "users/alice/clients/<default>")
    assert describe_entity((("client-id", "app"),)) == "clients/app"
