"""IncrementalAlterConfigs' operations on a resource's set of overrides (sans-IO).

SET gives a key a value, DELETE removes the override (None), APPEND and SUBTRACT add or
remove items of a list config (comma-separated), starting from the key's current value
or, when it has none, from the base the caller gives (its default), which raises for a
key that is not a list. Used by server/handlers/configs.py for topics, brokers and
groups.
"""

from __future__ import annotations

from collections.abc import Callable

from tidegate.common.errors import InvalidConfigError, InvalidRequestError

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def apply_ops(
    current: dict[str, str | None],
    ops: list[tuple[str, int, str | None]],
    list_base: Callable[[str], str],
) -> dict[str, str | None]:
    """Apply incremental operations to a copy of `current`; None means delete.

    `list_base(name)` is the value an APPEND/SUBTRACT starts from when `current` lacks
    the key, and raises InvalidConfigError if `name` is not a list config. A SUBTRACT
    may leave a list empty (Kafka's list validator allows it).
    """
    result = dict(current)
    for name, op, value in ops:
        if op == SET:
            result[name] = value
        elif op == DELETE:
            result[name] = None
        elif op in (APPEND, SUBTRACT):
            base = list_base(name)
            if result.get(name) is not None:
                base = result[name] or ""
            items = [x.strip() for x in base.split(",") if x.strip()]
            new = [x.strip() for x in (value or "").split(",") if x.strip()]
            if op == APPEND:
                items += [x for x in new if x not in items]
            else:
                items = [x for x in items if x not in new]
            result[name] = ",".join(items)
        else:
            raise InvalidRequestError(f"unknown config operation {op}")
    return result


def not_a_list(name: str) -> InvalidConfigError:
    return InvalidConfigError(f"{name} is not a list config; APPEND/SUBTRACT apply only to lists")


def not_a_list_base(name: str) -> str:
    raise not_a_list(name)
