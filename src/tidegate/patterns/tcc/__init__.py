"""TCC, Try-Confirm-Cancel (seed 001).

- coordinator.py: `TccCoordinator` records each global transaction's phase in a
  compacted topic before calling the participants' Try, then Confirm or Cancel,
  retrying them until accepted; after a crash `recover` finishes what was left.
- participant.py: `TccParticipant` (idempotent Try/Confirm/Cancel over a ledger table,
  the empty-rollback and hanging cases) and `tcc_app`, its HTTP face.
"""

from tidegate.patterns.tcc.coordinator import (
    CANCELLED,
    CANCELLING,
    CONFIRMED,
    CONFIRMING,
    TRYING,
    Branch,
    GlobalTxn,
    HttpBranch,
    TccCoordinator,
    http_call,
    read_txns,
)
from tidegate.patterns.tcc.participant import (
    TccParticipant,
    TryRefused,
    tcc_app,
    tcc_ledger_schema,
)

__all__ = ["CANCELLED", "CANCELLING", "CONFIRMED", "CONFIRMING", "TRYING", "Branch",
           "GlobalTxn", "HttpBranch", "TccCoordinator", "TccParticipant", "TryRefused",
           "http_call", "read_txns", "tcc_app", "tcc_ledger_schema"]
