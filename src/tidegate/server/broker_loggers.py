"""BROKER_LOGGER config resources (type 8): this process's loggers and their levels.

Kafka's `kafka-configs --entity-type broker-loggers --entity-name <id>` describes and
changes a broker's log4j levels at runtime (DescribeConfigs, IncrementalAlterConfigs);
here the loggers are Python's. Each logger is one config: its name (`root` for the
root logger), its effective level in log4j's words (TRACE, DEBUG, INFO, WARN, ERROR,
FATAL, OFF), source DYNAMIC_BROKER_LOGGER_CONFIG, no synonyms. SET gives a logger a
level; DELETE makes it follow its parent again (the root logger cannot be deleted);
APPEND and SUBTRACT are refused, and a change for a logger that does not exist or to an
unknown level is INVALID_CONFIG, as Kafka's. Changes last until the broker restarts.
"""

from __future__ import annotations

import logging
from typing import Any

from tidegate.common.errors import InvalidConfigError, InvalidRequestError
from tidegate.server.config_ops import DELETE, SET

ROOT = "root"
_DYNAMIC_BROKER_LOGGER_CONFIG, _STRING = 6, 2  # DescribeConfigs source, config type
# log4j level -> Python level (TRACE: below DEBUG; OFF: above every level used)
LEVELS = {"TRACE": 5, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
          "ERROR": logging.ERROR, "FATAL": logging.CRITICAL, "OFF": logging.CRITICAL + 10}


def _level_name(level: int) -> str:
    """The log4j name of a Python level: the highest log4j level at or below it."""
    return max(((v, k) for k, v in LEVELS.items() if v <= level), default=(0, "TRACE"))[1]


def _loggers() -> dict[str, logging.Logger]:
    found = {name: lg for name, lg in logging.Logger.manager.loggerDict.items()
             if isinstance(lg, logging.Logger)}
    return {ROOT: logging.getLogger(), **found}


def describe_loggers() -> list[dict[str, Any]]:
    """DescribeConfigs entries: every logger and its effective level, by name."""
    return [{"name": name, "value": _level_name(lg.getEffectiveLevel()), "read_only": False,
             "config_source": _DYNAMIC_BROKER_LOGGER_CONFIG, "is_sensitive": False,
             "synonyms": [], "config_type": _STRING, "documentation": None}
            for name, lg in sorted(_loggers().items())]


def alter_loggers(ops: list[tuple[str, int, str | None]], validate_only: bool) -> None:
    """Apply (name, operation, level) changes, all validated before any is applied."""
    loggers = _loggers()
    changes: list[tuple[logging.Logger, int]] = []
    for name, op, value in ops:
        if op not in (SET, DELETE):
            raise InvalidRequestError(f"{'APPEND' if op == 2 else 'SUBTRACT'} operation is "
                                      "not allowed for the BROKER_LOGGER resource")
        lg = loggers.get(name)
        if lg is None:
            raise InvalidConfigError(f"Logger {name} does not exist!")
        if op == DELETE:
            if name == ROOT:
                raise InvalidRequestError(f"Removing the log level of the {ROOT} logger "
                                          "is not allowed")
            changes.append((lg, logging.NOTSET))
        elif value is None or value not in LEVELS:
            raise InvalidConfigError(f"Cannot set the log level of {name} to {value} as it "
                                     f"is not a supported log level. Valid log levels are "
                                     f"{', '.join(LEVELS)}")
        else:
            changes.append((lg, LEVELS[value]))
    if not validate_only:
        for lg, level in changes:
            lg.setLevel(level)
