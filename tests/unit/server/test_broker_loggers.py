"""BROKER_LOGGER resources: Python's loggers described and changed in log4j's words."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tidegate.common.errors import InvalidConfigError, InvalidRequestError
from tidegate.server.broker_loggers import alter_loggers, describe_loggers

NAME = "tidegate.test.broker_loggers"


@pytest.fixture
def lg() -> Iterator[logging.Logger]:
    logger = logging.getLogger(NAME)
    root_level = logging.getLogger().level
    yield logger
    logger.setLevel(logging.NOTSET)
    logging.getLogger().setLevel(root_level)


def levels() -> dict[str, str]:
    return {c["name"]: c["value"] for c in describe_loggers()}


def test_describe_lists_root_and_each_logger_with_its_effective_level(
        lg: logging.Logger) -> None:
    logging.getLogger().setLevel(logging.WARNING)
    got = levels()
    assert got["root"] == "WARN" and got[NAME] == "WARN"  # inherited
    entry = next(c for c in describe_loggers() if c["name"] == NAME)
    assert entry["config_source"] == 6 and entry["synonyms"] == [] and not entry["read_only"]


def test_set_then_delete_follows_the_parent_again(lg: logging.Logger) -> None:
    logging.getLogger().setLevel(logging.INFO)
    alter_loggers([(NAME, 0, "DEBUG")], validate_only=False)
    assert lg.level == logging.DEBUG and levels()[NAME] == "DEBUG"
    alter_loggers([(NAME, 0, "TRACE")], validate_only=True)  # validated, not applied
    assert levels()[NAME] == "DEBUG"
    alter_loggers([(NAME, 1, None)], validate_only=False)
    assert lg.level == logging.NOTSET and levels()[NAME] == "INFO"
    alter_loggers([("root", 0, "OFF")], validate_only=False)
    assert levels()["root"] == "OFF" and levels()[NAME] == "OFF"


@pytest.mark.parametrize(("op", "error"), [
    (("no.such.logger.xyz", 0, "INFO"), InvalidConfigError),
    ((NAME, 0, "LOUD"), InvalidConfigError),
    ((NAME, 0, "debug"), InvalidConfigError),  # log4j's names, as Kafka checks them
    ((NAME, 0, None), InvalidConfigError),
    (("root", 1, None), InvalidRequestError),
    ((NAME, 2, "INFO"), InvalidRequestError),
    ((NAME, 3, "INFO"), InvalidRequestError),
])
def test_bad_changes_are_refused_and_nothing_applied(
        lg: logging.Logger, op: tuple[str, int, str | None], error: type[Exception]) -> None:
    with pytest.raises(error):
        alter_loggers([(NAME, 0, "ERROR"), op], validate_only=False)
    assert lg.level == logging.NOTSET
