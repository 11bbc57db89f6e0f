"""Typed configuration keys: Kafka's config types, validators and `ConfigKey`.

A `ConfigKey` parses a string value to its type and validates it, raising
`InvalidConfigError` with Kafka's wording: the key's name and what is allowed. Used by
`storage.config` for topic-level keys; the validators' `describe()` is Kafka's "Valid
Values" text for DescribeConfigs documentation.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from tidegate.common.errors import InvalidConfigError

__all__ = [
    "INT_MAX",
    "LONG_MAX",
    "Anything",
    "ConfigKey",
    "ConfigType",
    "ConfigValue",
    "OneOf",
    "Range",
    "RangeOr",
    "Validator",
]

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1

ConfigValue = bool | int | float | str | tuple[str, ...]


class ConfigType(enum.IntEnum):
    """DescribeConfigs `config_type` codes (KIP-569)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class Validator(Protocol):
    def problem(self, value: ConfigValue) -> str | None:
        """Why `value` is not allowed, or None if it is."""
        ...

    def describe(self) -> str:
        """Kafka's "Valid Values" text."""
        ...


@dataclass(frozen=True)
class Range:
    low: float | None = None
    high: float | None = None

    def problem(self, value: ConfigValue) -> str | None:
        assert isinstance(value, int | float)
        if self.low is not None and value < self.low:
            return f"Value must be at least {_num(self.low)}"
        if self.high is not None and value > self.high:
            return f"Value must be no more than {_num(self.high)}"
        return None

    def describe(self) -> str:
        low = "..." if self.low is None else _num(self.low)
        return f"[{low},...]" if self.high is None else f"[{low},...,{_num(self.high)}]"


@dataclass(frozen=True)
class OneOf:
    values: tuple[str, ...]

    def problem(self, value: ConfigValue) -> str | None:
        if isinstance(value, tuple):
            # An empty list is valid, as in Kafka's ValidList: an IncrementalAlterConfigs
            # SUBTRACT may remove every item (an empty cleanup.policy neither deletes nor
            # compacts).
            bad = [v for v in value if v not in self.values]
            return f"allowed values are: {', '.join(self.values)}" if bad else None
        if value in self.values:
            return None
        return f"String must be one of: {', '.join(self.values)}"

    def describe(self) -> str:
        return "[" + ", ".join(self.values) + "]"


@dataclass(frozen=True)
class RangeOr:
    """A number in [low, high] or one special value (Kafka's `between(..) or -1`)."""

    low: int
    high: int
    special: int

    def problem(self, value: ConfigValue) -> str | None:
        assert isinstance(value, int)
        if value == self.special or self.low <= value <= self.high:
            return None
        return f"Value must be {self.special} or in [{self.low},...,{self.high}]"

    def describe(self) -> str:
        return f"[{self.low},...,{self.high}] or {self.special}"


@dataclass(frozen=True)
class Anything:
    def problem(self, value: ConfigValue) -> str | None:
        return None

    def describe(self) -> str:
        return ""


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: ConfigType
    default: ConfigValue
    doc: str
    validator: Validator

    @property
    def attr(self) -> str:
        """The `LogConfig` field holding this key."""
        return self.name.replace(".", "_")

    @property
    def valid_values(self) -> str:
        return self.validator.describe()

    def parse(self, raw: str, *, source: str | None = None) -> ConfigValue:
        """Parse and validate a string value; InvalidConfigError names `source` (the
        key as the user wrote it, e.g. a broker synonym) or this key."""
        text = raw.strip()
        value: ConfigValue
        try:
            if self.type == ConfigType.BOOLEAN:
                if text.lower() not in ("true", "false"):
                    raise ValueError
                value = text.lower() == "true"
            elif self.type in (ConfigType.INT, ConfigType.LONG):
                value = int(text)
                limit = INT_MAX if self.type == ConfigType.INT else LONG_MAX
                if not -limit - 1 <= value <= limit:
                    raise ValueError
            elif self.type == ConfigType.DOUBLE:
                value = float(text)
            elif self.type == ConfigType.LIST:
                value = tuple(item.strip() for item in text.split(",") if item.strip())
            else:
                value = text
        except ValueError:
            raise InvalidConfigError(
                f"Invalid value {raw} for configuration {source or self.name}: "
                f"Not a number of type {self.type.name}"
                if self.type != ConfigType.BOOLEAN
                else f"Invalid value {raw} for configuration {source or self.name}: "
                "Expected value to be either true or false"
            ) from None
        self.check(value, source=source)
        return value

    def check(self, value: ConfigValue, *, source: str | None = None) -> None:
        problem = self.validator.problem(value)
        if problem is not None:
            raise InvalidConfigError(
                f"Invalid value {self.format(value)} for configuration "
                f"{source or self.name}: {problem}"
            )

    def format(self, value: ConfigValue) -> str:
        """The value as Kafka shows it in DescribeConfigs."""
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, tuple):
            return ",".join(value)
        return str(value)
