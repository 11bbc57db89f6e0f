"""The fetcher's side of fetch sessions (KIP-227): what the next Fetch must list.

Kafka's `FetchSessionHandler`, sans-IO. A fetcher says which partitions it wants and
with what fetch state (position, epochs, limits) before each request; `next_request`
answers with the session id and epoch to send, the partitions to list and the ones to
forget:

- no session yet (or after an error): a full fetch at epoch 0 listing everything, which
  asks the broker for a session (and closes the previous one, if any);
- in a session: an incremental fetch at the session's next epoch listing only the
  partitions that are new or whose fetch state changed since the broker last accepted
  it, and forgetting the ones no longer wanted.

`on_response` takes the answer's top-level error and session id: a broker that opened a
session gives its id (0: none was created, so the next fetch is full again);
FETCH_SESSION_ID_NOT_FOUND or INVALID_FETCH_SESSION_EPOCH (a restarted leader, an
evicted session) start over with a full fetch. `on_failure` (no answer: a lost
connection) does too, closing the old session on the broker if it is still there.

The answer to an incremental fetch carries only the partitions with something new; a
partition missing from it simply had nothing to say.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Generic, TypeVar

__all__ = ["FetchSessionHandler", "NextFetch"]

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
INITIAL_EPOCH = 0
_MAX_EPOCH = 2**31 - 1
K = TypeVar("K", bound=Hashable)


class NextFetch(Generic[K]):
    """What one Fetch request carries (see the module docstring)."""

    __slots__ = ("epoch", "forgotten", "full", "send", "session_id")

    def __init__(self, session_id: int, epoch: int, send: list[K], forgotten: list[K],
                 full: bool) -> None:
        self.session_id = session_id
        self.epoch = epoch
        self.send = send  # partition keys to list, with their current fetch state
        self.forgotten = forgotten  # partition keys to drop from the session
        self.full = full


class FetchSessionHandler(Generic[K]):
    """One per fetcher connection (module docstring). Keys are any hashable partition
    names; states are compared with `==` (a tuple of the fields the request carries)."""

    def __init__(self) -> None:
        self.session_id = 0
        self.epoch = INITIAL_EPOCH  # the epoch of the next request
        self._accepted: dict[K, object] = {}  # what the session holds
        self._pending: dict[K, object] | None = None  # sent, not yet answered

    def next_request(self, wanted: Mapping[K, object]) -> NextFetch[K]:
        self._pending = dict(wanted)
        if self.epoch == INITIAL_EPOCH:
            return NextFetch(self.session_id, INITIAL_EPOCH, list(wanted), [], full=True)
        send = [k for k, v in wanted.items() if self._accepted.get(k, _MISSING) != v]
        forgotten = [k for k in self._accepted if k not in wanted]
        return NextFetch(self.session_id, self.epoch, send, forgotten, full=False)

    def on_response(self, error_code: int, session_id: int) -> None:
        pending, self._pending = self._pending, None
        if error_code in (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH):
            self._reset(session_id=0)  # the session is gone: open a new one
            return
        if error_code != 0 or pending is None:
            self._reset(self.session_id)  # state unknown: close it and open a new one
            return
        if self.epoch == INITIAL_EPOCH:
            if session_id == 0:
                self._reset(session_id=0)  # no session was created: full fetches
                return
            self.session_id = session_id
            self.epoch = 1
        else:
            self.epoch = self.epoch + 1 if self.epoch < _MAX_EPOCH else 1
        self._accepted = pending

    def on_failure(self) -> None:
        """No answer came (the connection failed): start over, closing the old session."""
        self._pending = None
        self._reset(self.session_id)

    def _reset(self, session_id: int) -> None:
        self.session_id = session_id
        self.epoch = INITIAL_EPOCH
        self._accepted = {}


_MISSING = object()
