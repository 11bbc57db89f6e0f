"""`tidegate top`'s screen: rates from two snapshots, and names that cannot move the cursor."""

from __future__ import annotations

from tidegate.client.types import TopicPartition, TransactionDescription
from tidegate.console.data import GroupSummary, PartitionOffsets
from tidegate.console.top import Snapshot, render
from tidegate.console.txns import OpenTxn, PinnedPartition, TxnView

EMPTY = TxnView([], [])


def test_rates_come_from_two_snapshots() -> None:
    before = Snapshot(100.0, {"orders": 1000}, [GroupSummary("g", "Stable", "consumer", 1, 50,
                                                             900)], EMPTY)
    after = Snapshot(102.0, {"orders": 1300}, [GroupSummary("g", "Stable", "consumer", 1, 20,
                                                            1280)], EMPTY)
    first = "\n".join(render(before, None, "b:9092"))
    assert "orders  1000         -" in first
    screen = "\n".join(render(after, before, "b:9092"))
    assert "orders  1300         150.0" in screen
    assert "g      Stable  1        20   190.0" in screen
    assert "no open transactions" in screen


def test_transactions_and_pinned_partitions() -> None:
    d = TransactionDescription("tx", 1, "Ongoing", 7, 0, 60_000, 95_000,
                               (TopicPartition("orders", 0),))
    view = TxnView([OpenTxn(d)], [PinnedPartition(TopicPartition("orders", 0),
                                                  PartitionOffsets(0, 20, 14), 7, 0, 0,
                                                  99_000, "tx", "")])
    screen = "\n".join(render(Snapshot(100.0, {}, [], view), None, "b"))
    assert "tx                Ongoing  7            5.0    orders-0" in screen
    assert "orders-0          14   20  7            tx" in screen


def test_control_characters_from_the_cluster_are_dropped_and_lines_cut() -> None:
    evil = GroupSummary("g\x1b[2J\x1b[31mred", "Empty", "consumer", 0, 0, 0)
    lines = render(Snapshot(1.0, {"t" * 300: 1}, [evil], EMPTY), None, "b", width=80)
    assert not any("\x1b" in line for line in lines)
    assert all(len(line) <= 80 for line in lines)
