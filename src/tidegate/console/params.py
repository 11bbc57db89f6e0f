"""Validating the console's request parameters: bad input is a 400 with a message.

Every number a page takes from a query string or a form goes through `int_param`, with
the range the console accepts: offsets are int64 and not negative, counts and byte
limits are capped so that one request cannot make the console fetch or decode much
(see `LIMITS`). Names (topics, groups, transactional ids) go through `name_param`:
non-empty, bounded length, no control characters. `ParamError` carries the message
the 400 page shows.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["LIMITS", "ParamError", "choice_param", "int_param", "name_param"]

INT64_MAX = (1 << 63) - 1
INT32_MAX = (1 << 31) - 1

# The message browser's caps: rows per page, bytes fetched per request, and the
# decompressed size of one batch (a compression bomb stops there).
LIMITS = {
    "limit": 500,
    "max_bytes": 4 << 20,
    "max_batch_bytes": 16 << 20,
    "show_bytes": 8 << 10,
}


class ParamError(ValueError):
    """A request parameter the console refuses; the message is shown to the user."""


def int_param(params: Mapping[str, str], name: str, default: int | None = None, *,
              lo: int = 0, hi: int = INT64_MAX) -> int:
    """The integer `name` in [lo, hi]; `default` when absent or empty (ParamError if
    there is no default)."""
    raw = params.get(name, "")
    raw = raw.strip() if isinstance(raw, str) else ""
    if not raw:
        if default is None:
            raise ParamError(f"{name} is required")
        return default
    if len(raw) > 25 or not (raw.isascii() and raw.lstrip("-").isdigit()):
        raise ParamError(f"{name} must be a whole number, not {raw[:40]!r}")
    value = int(raw)
    if value < lo:
        raise ParamError(f"{name} must be at least {lo}, not {value}")
    if value > hi:
        raise ParamError(f"{name} must be at most {hi}, not {value}")
    return value


def name_param(params: Mapping[str, str], name: str, *, max_len: int = 249) -> str:
    """A non-empty name (topic, group, transactional id) without control characters."""
    raw = params.get(name, "")
    value = raw.strip() if isinstance(raw, str) else ""
    if not value:
        raise ParamError(f"{name} is required")
    if len(value) > max_len:
        raise ParamError(f"{name} is longer than {max_len} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ParamError(f"{name} contains control characters")
    return value


def choice_param(params: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    """One of `choices`; the first when absent."""
    raw = params.get(name, "")
    value = raw.strip() if isinstance(raw, str) else ""
    if not value:
        return choices[0]
    if value not in choices:
        raise ParamError(f"{name} must be one of {', '.join(choices)}, not {value[:40]!r}")
    return value
