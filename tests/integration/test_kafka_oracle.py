"""Apache Kafka 4.x as the oracle: the same raw requests to Kafka and to Tidegate.

One Kafka KRaft broker (`kafka_oracle/kafka_process.py`, jars from `make deps-kafka`) and
one Tidegate broker per module; every case of `kafka_oracle/cases.py` is sent to both
and their responses compared field by field after masking what legitimately differs
(ids, hosts, ports, throttle, timestamps, error texts). A difference fails the test
unless `differential.KNOWN` lists it (each is explained in docs/compatibility.md).
`make test` runs the cases marked `sample` (Kafka starts in about 4 s); `make soak` all
of them. Skipped when there is no `java` or the jars are missing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.conftest import BrokerProcess
from tests.integration.kafka_oracle import kafka_process
from tests.integration.kafka_oracle.cases import CASES
from tests.integration.kafka_oracle.differential import (
    KNOWN,
    Broker,
    Case,
    compare_case,
    unexplained,
    warm_up,
)

pytestmark = pytest.mark.skipif(kafka_process.available() is not None,
                                reason=str(kafka_process.available()))

SOAK = pytest.mark.skipif(not os.environ.get("TIDEGATE_SOAK"),
                          reason="soak run: `make soak` (TIDEGATE_SOAK=1)")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Broker, Broker]]:
    root: Path = tmp_path_factory.mktemp("oracle")
    kafka = kafka_process.KafkaProcess(root / "kafka")
    tidegate = BrokerProcess(root / "tidegate")
    try:
        kafka.start()
        tidegate.start()
        print(f"Apache Kafka {kafka_process.kafka_version()} served after "
              f"{kafka.start_seconds:.1f} s")
        pair = (Broker.connect(kafka.bootstrap), Broker.connect(tidegate.bootstrap))
        for b in pair:
            warm_up(b)
        _DIFFS.clear()
        yield pair
        for b in pair:
            b.client.close()
    finally:
        tidegate.stop()
        kafka.stop()


# each case runs once per module (a second run would meet its own topics): its
# differences are kept for test_known_differences_still_differ
_DIFFS: dict[str, list[str]] = {}


def _differences(pair: tuple[Broker, Broker], case: Case) -> list[str]:
    if case.name not in _DIFFS:
        _DIFFS[case.name] = compare_case(*pair, case)
    return _DIFFS[case.name]


def _check(pair: tuple[Broker, Broker], case: Case) -> None:
    diffs = _differences(pair, case)
    left = unexplained(diffs)
    assert not left, "responses differ from Apache Kafka's:\n" + "\n".join(left)


@pytest.mark.parametrize("case", [c for c in CASES if c.sample], ids=lambda c: c.name)
def test_sample_matches_kafka(pair: tuple[Broker, Broker], case: Case) -> None:
    _check(pair, case)


@pytest.mark.slow
@SOAK
@pytest.mark.parametrize("case", [c for c in CASES if not c.sample], ids=lambda c: c.name)
def test_case_matches_kafka(pair: tuple[Broker, Broker], case: Case) -> None:
    _check(pair, case)


def test_known_differences_still_differ(pair: tuple[Broker, Broker]) -> None:
    """A listed difference that went away must leave the list (and the docs): each
    KNOWN entry names a case and step that still differ."""
    by_name = {c.name: c for c in CASES}
    stale = []
    for key in KNOWN:
        case = by_name[key.split(" step ")[0]]
        if not case.sample and not os.environ.get("TIDEGATE_SOAK"):
            continue  # its case runs only under `make soak`
        if not any(d.startswith(key + " ") for d in _differences(pair, case)):
            stale.append(key)
    assert not stale, f"these no longer differ from Kafka: {stale}"
    page = (Path(__file__).resolve().parents[2] / "docs" / "compatibility.md").read_text()
    undocumented = [k for k in KNOWN if f"`{k.split(' step ')[0]}`" not in page]
    assert not undocumented, f"docs/compatibility.md does not explain {undocumented}"
