"""Server-side assignors of the KIP-848 consumer protocol: `uniform` and `range`.

The group coordinator, not a group leader, computes the target assignment when the
group epoch moves (`group.consumer.assignors`; the first is the default, a member may
ask for another by name with `group.remote.assignor`). Each assignor is a pure function

    assign(subscriptions, partitions, current) -> {member: {topic: partitions}}

of every member's subscribed topic names, the partition count of each subscribed topic
that exists, and the current target assignment (for stickiness). Invariants (tested
with Hypothesis): a partition goes to exactly one subscribed member when any member
subscribes to its topic, to none otherwise; every member appears in the result.

- `uniform` (Kafka's default): balanced and sticky. A member keeps the partitions it
  has as long as it stays subscribed and under its fair share; the rest go, one by
  one, to the least-loaded subscribed member. For a homogeneous group the counts
  differ by at most one.
- `range`: per topic, the sorted subscribed members get contiguous ranges, the first
  `partitions % members` one partition more (co-partitioning: partition i of every
  topic with the same subscribers lands on the same member). Not sticky.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

__all__ = ["ASSIGNORS", "ServerAssignFn", "range_assign", "uniform_assign"]

TopicAssignment = dict[str, frozenset[int]]
ServerAssignFn = Callable[
    [Mapping[str, frozenset[str]], Mapping[str, int], Mapping[str, Mapping[str, frozenset[int]]]],
    dict[str, TopicAssignment],
]


def _finish(members: Mapping[str, frozenset[str]],
            out: Mapping[str, dict[str, set[int]]]) -> dict[str, TopicAssignment]:
    return {m: {t: frozenset(ps) for t, ps in out.get(m, {}).items() if ps} for m in members}


def uniform_assign(subscriptions: Mapping[str, frozenset[str]], partitions: Mapping[str, int],
                   current: Mapping[str, Mapping[str, frozenset[int]]]
                   ) -> dict[str, TopicAssignment]:
    members = sorted(subscriptions)
    out: dict[str, dict[str, set[int]]] = {m: {} for m in members}
    load = dict.fromkeys(members, 0)
    todo: list[tuple[str, int]] = []
    subscribers: dict[str, list[str]] = {}
    for topic in sorted(partitions):
        subs = [m for m in members if topic in subscriptions[m]]
        if subs:
            subscribers[topic] = subs
            todo += [(topic, p) for p in range(partitions[topic])]
    total = len(todo)
    # a member's fair share: what it could hold if every partition it can take were
    # spread evenly over all members subscribed to anything (exact when homogeneous)
    active = [m for m in members if any(t in subscribers for t in subscriptions[m])]
    quota = -(-total // len(active)) if active else 0
    remaining: list[tuple[str, int]] = []
    owner: dict[tuple[str, int], str] = {}
    for m in members:
        for topic, ps in sorted(current.get(m, {}).items()):
            if topic not in subscribers or topic not in subscriptions[m]:
                continue
            for p in sorted(ps):
                if p < partitions[topic] and (topic, p) not in owner and load[m] < quota:
                    owner[(topic, p)] = m
                    out[m].setdefault(topic, set()).add(p)
                    load[m] += 1
    remaining = [tp for tp in todo if tp not in owner]
    for topic, p in remaining:
        m = min(subscribers[topic], key=lambda x: (load[x], x))
        out[m].setdefault(topic, set()).add(p)
        load[m] += 1
    # homogeneous groups: a member may hold `quota` while another holds quota - 2
    # after stickiness; move single partitions from the fullest to the emptiest
    for _ in range(total):
        hi = max(active, key=lambda x: (load[x], x)) if active else None
        lo = min(active, key=lambda x: (load[x], x)) if active else None
        if hi is None or lo is None or load[hi] - load[lo] <= 1:
            break
        movable = [(t, p) for t, ps in sorted(out[hi].items()) if t in subscriptions[lo]
                   for p in sorted(ps)]
        if not movable:
            break
        t, p = movable[-1]
        out[hi][t].discard(p)
        out[lo].setdefault(t, set()).add(p)
        load[hi] -= 1
        load[lo] += 1
    return _finish(subscriptions, out)


def range_assign(subscriptions: Mapping[str, frozenset[str]], partitions: Mapping[str, int],
                 current: Mapping[str, Mapping[str, frozenset[int]]]
                 ) -> dict[str, TopicAssignment]:
    del current  # not sticky
    out: dict[str, dict[str, set[int]]] = {m: {} for m in subscriptions}
    for topic in sorted(partitions):
        subs = sorted(m for m, ts in subscriptions.items() if topic in ts)
        if not subs:
            continue
        n = partitions[topic]
        per, extra = divmod(n, len(subs))
        start = 0
        for i, m in enumerate(subs):
            count = per + (1 if i < extra else 0)
            if count:
                out[m][topic] = set(range(start, start + count))
            start += count
    return _finish(subscriptions, out)


ASSIGNORS: dict[str, ServerAssignFn] = {"uniform": uniform_assign, "range": range_assign}
