"""Check-back transactions (RocketMQ's transactional message, seed 001) on KIP-939.

`CheckbackProducer.run(records, local_action)`:

1. begins a transaction, sends `records` and prepares it (`prepare_transaction()`: the
   records are written but invisible to read_committed consumers — RocketMQ's "half
   message");
2. runs `local_action(prepared)`, the user's local transaction (a database commit, for
   example), which should record `prepared` (`key()`) in the same local transaction;
3. commits the Kafka transaction if the action returned, aborts it if it raised.

If the process dies between 1 and 3, the transaction stays prepared: under two-phase
commit the coordinator never times it out. The next `start()` (init_transactions with
``keep_prepared_txn``) finds it and asks the user's resolver, ``check(prepared) ->
Resolution``: COMMIT if the local transaction committed (its record is there), ABORT
if not, UNKNOWN if it cannot tell yet (the database is down): then it asks again every
`check_interval_s` until it gets an answer (or `max_wait_s` passes: TimeoutError, the
transaction still prepared). The Kafka records and the local effect therefore end up
both present or both absent.

Each transaction is named by (transactional id, producer id, epoch): under
transaction version 2 every EndTxn bumps the epoch; under version 1 the helper bumps
it after each transaction, so a resolver never mistakes an old record for a new one.

The transactional id must belong to this one process (one writer per id, as for any
transactional producer); the broker needs ``transaction.two.phase.commit.enable=true``
(Tidegate's default; Kafka's is false). A broker with it false refuses `start()` with a
`FatalProducerError` whose message names that setting.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from tidegate.client.producer.blocking import Producer
from tidegate.client.producer.transactions import PreparedTxnState

__all__ = ["CheckRecord", "CheckbackProducer", "Resolution", "Resolver"]

log = logging.getLogger("tidegate.client.checkback")
T = TypeVar("T")


class Resolution(enum.Enum):
    COMMIT = "commit"
    ABORT = "abort"
    UNKNOWN = "unknown"


Resolver = Callable[[PreparedTxnState], Resolution]
# (topic, value, key); key may be None
CheckRecord = tuple[str, bytes | str | None, bytes | str | None]


def key(prepared: PreparedTxnState) -> str:
    """A stable text naming one prepared transaction, to store with the local effect."""
    return f"{prepared.transactional_id}:{prepared.producer_id}:{prepared.epoch}"


class CheckbackProducer:
    """See the module docstring. ``with CheckbackProducer(config, check) as cp:`` calls
    `start()` and `close()`."""

    key = staticmethod(key)

    def __init__(self, config: Mapping[str, object], check: Resolver, *,
                 check_interval_s: float = 5.0, max_wait_s: float | None = None) -> None:
        cfg = dict(config)
        if not cfg.get("transactional.id"):
            raise ValueError("CheckbackProducer needs a transactional.id")
        cfg["transaction.two.phase.commit.enable"] = True
        self.producer = Producer(cfg)
        self.check = check
        self.check_interval_s = check_interval_s
        self.max_wait_s = max_wait_s
        self.started = False

    def __enter__(self) -> CheckbackProducer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> Resolution | None:
        """Take over the transactional id; resolve a prepared transaction an earlier
        process left (asking `check`, again every `check_interval_s` while UNKNOWN).
        Returns the resolution applied, or None if nothing was prepared."""
        found = self.producer.init_transactions(keep_prepared_txn=True)
        self.started = True
        if found is None:
            return None
        deadline = None if self.max_wait_s is None else time.monotonic() + self.max_wait_s
        while True:
            verdict = self.check(found)
            log.info("prepared transaction %s: check says %s", key(found), verdict.value)
            if verdict is not Resolution.UNKNOWN:
                self.producer.complete_transaction(found, commit=verdict is Resolution.COMMIT)
                self._next_epoch()
                return verdict
            if deadline is not None and time.monotonic() + self.check_interval_s > deadline:
                raise TimeoutError(f"the prepared transaction {key(found)} is still "
                                   f"unresolved after {self.max_wait_s} s")
            time.sleep(self.check_interval_s)

    def run(self, records: Iterable[CheckRecord] | Sequence[CheckRecord],
            local_action: Callable[[PreparedTxnState], T]) -> T:
        """Send `records` as a prepared transaction, run `local_action`, then commit
        (or abort, re-raising, if the action raised). Returns the action's result."""
        if not self.started:
            self.start()
        p = self.producer
        p.begin_transaction()
        try:
            for topic, value, k in records:
                p.send(topic, value, k)
            prepared = p.prepare_transaction()
        except BaseException:
            p.abort_transaction()
            raise
        try:
            result = local_action(prepared)
        except BaseException:
            p.complete_transaction(prepared, commit=False)
            self._next_epoch()
            raise
        p.complete_transaction(prepared, commit=True)
        self._next_epoch()
        return result

    def _next_epoch(self) -> None:
        txn = self.producer._async._txn
        if txn is not None and txn.state.version < 2:
            self.producer._loop.run(txn.bump_epoch())

    def close(self) -> None:
        self.producer.close()
