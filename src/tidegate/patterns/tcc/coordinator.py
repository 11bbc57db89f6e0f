"""`TccCoordinator`: Try-Confirm-Cancel (seed 001) with the phases in a compacted topic.

A global transaction ``xid`` has branches, each a participant reached over HTTP
(`HttpBranch`: ``POST <url>/try|confirm|cancel`` with JSON ``{"xid", "branch",
"payload"}``; 200 accepts, anything else refuses or failed). `execute`:

1. writes phase ``TRYING`` (with the branches and the payload) to the state topic —
   before any participant hears of the transaction, so a recovery knows whom to ask;
2. calls every branch's Try (in parallel; no answer within ``request_timeout_s`` is a
   refusal);
3. writes the decision: ``CONFIRMING`` if every Try accepted, else ``CANCELLING``;
4. calls Confirm (or Cancel) on every branch until each accepts, retrying with a
   growing backoff — forever: a participant that keeps refusing gets an ``ALERT`` in
   the log every ``alert_every`` attempts, and the transaction stays in its phase;
5. writes ``CONFIRMED`` / ``CANCELLED``.

Each write is a small Kafka transaction of a transactional producer whose
``transactional.id`` the coordinator's replacement shares: a new coordinator fences
the old one before reading the states (read_committed), so a zombie cannot write a
decision the new one has not seen. Several application instances each run their own
coordinator with its own ``transactional_id`` (one state topic may serve them all):
each record names its owner, and a coordinator recovers only its own.

`recover` (run by `start`) finishes what a crashed coordinator left: ``TRYING``
becomes ``CANCELLING`` (the outcome of its Trys is unknown), ``CONFIRMING`` /
``CANCELLING`` are driven to the end. A decision once written never changes, so no
branch is ever confirmed after a Cancel was decided.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from tidegate.client import Consumer, Producer, TopicPartition
from tidegate.patterns._config import consumer_settings, producer_settings

__all__ = ["CANCELLED", "CANCELLING", "CONFIRMED", "CONFIRMING", "TRYING", "Branch",
           "GlobalTxn", "HttpBranch", "TccCoordinator", "http_call", "read_txns"]

log = logging.getLogger("tidegate.patterns.tcc")

TRYING, CONFIRMING, CANCELLING, CONFIRMED, CANCELLED = (
    "TRYING", "CONFIRMING", "CANCELLING", "CONFIRMED", "CANCELLED")
FINAL = (CONFIRMED, CANCELLED)


@dataclass(frozen=True)
class Branch:
    name: str
    url: str


HttpBranch = Branch  # the only transport so far: the name says what it speaks


@dataclass(frozen=True)
class GlobalTxn:
    """One global transaction's record in the state topic."""

    xid: str
    phase: str
    branches: tuple[Branch, ...]
    payload: str
    at_ms: int = 0
    history: tuple[str, ...] = field(default=())
    # the transactional id of the coordinator that runs it: only that coordinator (or
    # its replacement, which fences it first) may recover it
    owner: str = ""

    def to_json(self) -> bytes:
        d = asdict(self)
        d["branches"] = [asdict(b) for b in self.branches]
        d["history"] = list(self.history)
        return json.dumps(d).encode()

    @staticmethod
    def from_json(data: bytes) -> GlobalTxn:
        d = json.loads(data)
        return GlobalTxn(d["xid"], d["phase"], tuple(Branch(**b) for b in d["branches"]),
                         d["payload"], d.get("at_ms", 0), tuple(d.get("history", ())),
                         d.get("owner", ""))


Call = Callable[[Branch, str, str, str, float], tuple[bool, str]]


def http_call(branch: Branch, action: str, xid: str, payload: str, timeout_s: float
              ) -> tuple[bool, str]:
    """POST one action; (accepted, why not). Never raises."""
    body = json.dumps({"xid": xid, "branch": branch.name, "payload": payload}).encode()
    req = urllib.request.Request(f"{branch.url.rstrip('/')}/{action}", data=body,
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            resp.read()
            return resp.status == 200, f"HTTP {resp.status}"
    except urllib.error.HTTPError as e:
        return False, f"HTTP {e.code}: {e.read()[:200].decode('utf-8', 'replace')}"
    except Exception as e:
        return False, f"{type(e).__name__}: {e}"


def read_txns(config: Mapping[str, object], topic: str = "tcc.state",
              timeout_s: float = 60.0) -> dict[str, GlobalTxn]:
    """Every global transaction's latest committed record."""
    c = Consumer({**consumer_settings(config), "group.id": f"tidegate-tcc-{uuid.uuid4()}",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        tps = [TopicPartition(topic, p) for p in c.partitions_for_topic(topic)]
        ends = c.end_offsets(tps)
        c.assign(tps)
        c.seek_to_beginning(*tps)
        out: dict[str, GlobalTxn] = {}
        deadline = time.monotonic() + timeout_s
        while any(c.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topic} to its end")
            for r in c.poll(200):
                if r.key is not None and r.value is not None:
                    out[r.key.decode()] = GlobalTxn.from_json(r.value)
        return out
    finally:
        c.close()


class TccCoordinator:
    def __init__(self, config: Mapping[str, object], *, state_topic: str = "tcc.state",
                 transactional_id: str | None = None, request_timeout_s: float = 5.0,
                 backoff_s: Sequence[float] = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0),
                 alert_every: int = 5, call: Call = http_call, max_workers: int = 8) -> None:
        self.config = dict(config)
        self.state_topic = state_topic
        self.transactional_id = transactional_id or f"tidegate-tcc-{state_topic}"
        self.request_timeout_s = request_timeout_s
        self.backoff_s = tuple(backoff_s)
        self.alert_every = alert_every
        self.call = call
        self.producer: Producer | None = None
        self._lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers,
                                                           thread_name_prefix="tcc")

    # -- state ------------------------------------------------------------------------------

    def _write(self, txn: GlobalTxn, note: str) -> GlobalTxn:
        """Durably record `txn` (one small transaction; raises if fenced)."""
        txn = GlobalTxn(txn.xid, txn.phase, txn.branches, txn.payload,
                        int(time.time() * 1000), (*txn.history, note), self.transactional_id)
        with self._lock:
            p = self.producer
            if p is None:
                raise RuntimeError("start() the coordinator first")
            p.begin_transaction()
            try:
                p.send(self.state_topic, txn.to_json(), txn.xid)
                p.commit_transaction()
            except BaseException:
                try:
                    p.abort_transaction()
                except Exception as e:
                    log.debug("abort: %s", e)
                raise
        return txn

    def start(self, *, recover: bool = True) -> dict[str, str]:
        """Fence any earlier coordinator with this transactional id, then (unless told
        not to) finish every transaction it left (see `recover`)."""
        self.producer = Producer({**producer_settings(self.config),
                                  "transactional.id": self.transactional_id})
        self.producer.init_transactions()
        return self.recover() if recover else {}

    def recover(self, stop: threading.Event | None = None) -> dict[str, str]:
        """Drive every unfinished transaction of this coordinator (its transactional
        id) in the state topic to its end; returns xid -> final phase for those it
        finished. Coordinators with other transactional ids may be alive and running
        theirs: they are left alone."""
        pending = [t for t in read_txns(self.config, self.state_topic).values()
                   if t.phase not in FINAL and t.owner == self.transactional_id]
        if pending:
            log.info("recovering %d unfinished global transactions", len(pending))
        # A thread each (not the pool, which the Trys use): one transaction stuck on a
        # refusing participant must not hold up the others.
        out: dict[str, str] = {}

        def finish(t: GlobalTxn) -> None:
            out[t.xid] = self._finish_recovered(t, stop)

        threads = [threading.Thread(target=finish, args=(t,), daemon=True) for t in pending]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        return out

    def _finish_recovered(self, txn: GlobalTxn, stop: threading.Event | None) -> str:
        if txn.phase == TRYING:
            txn = self._write(GlobalTxn(txn.xid, CANCELLING, txn.branches, txn.payload,
                                        0, txn.history), "recovered in TRYING: cancel")
        return self._phase_two(txn, stop)

    # -- one global transaction ------------------------------------------------------------

    def execute(self, xid: str, branches: Sequence[Branch], payload: str = "",
                stop: threading.Event | None = None) -> str:
        """Run one global transaction; returns CONFIRMED or CANCELLED (or the phase it
        was left in if `stop` was set while retrying)."""
        if not branches:
            raise ValueError("a global transaction needs at least one branch")
        txn = self._write(GlobalTxn(xid, TRYING, tuple(branches), payload), "begin")
        tries = {b: self._pool.submit(self.call, b, "try", xid, payload,
                                      self.request_timeout_s) for b in branches}
        refused = [f"{b.name}: {f.result()[1]}" for b, f in tries.items()
                   if not f.result()[0]]
        phase = CANCELLING if refused else CONFIRMING
        txn = self._write(GlobalTxn(xid, phase, txn.branches, payload, 0, txn.history),
                          "try refused (" + "; ".join(refused) + ")" if refused
                          else "every try accepted")
        return self._phase_two(txn, stop)

    def _phase_two(self, txn: GlobalTxn, stop: threading.Event | None) -> str:
        action = "confirm" if txn.phase == CONFIRMING else "cancel"
        # One branch after the other, in the caller's thread: each call retries until
        # accepted, and the pool's threads stay free for Trys.
        for b in txn.branches:
            if not self._until_accepted(b, action, txn, stop):
                return txn.phase  # stopped while retrying: a recovery finishes it
        final = CONFIRMED if txn.phase == CONFIRMING else CANCELLED
        self._write(GlobalTxn(txn.xid, final, txn.branches, txn.payload, 0, txn.history),
                    "every branch " + ("confirmed" if final == CONFIRMED else "cancelled"))
        return final

    def _until_accepted(self, b: Branch, action: str, txn: GlobalTxn,
                        stop: threading.Event | None) -> bool:
        attempt = 0
        while True:
            attempt += 1
            ok, why = self.call(b, action, txn.xid, txn.payload, self.request_timeout_s)
            if ok:
                return True
            if attempt % self.alert_every == 0:
                log.error("ALERT global transaction %s: %s of branch %s refused %d times "
                          "(last: %s); still retrying", txn.xid, action, b.name, attempt, why)
            wait = self.backoff_s[min(attempt, len(self.backoff_s)) - 1]
            if stop is not None:
                if stop.wait(wait):
                    return False
            else:
                time.sleep(wait)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        p, self.producer = self.producer, None
        if p is not None:
            p.close()

    def __enter__(self) -> TccCoordinator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
