"""The structural guard accepts every well-formed message kio can encode.

It runs before kio's decoder on every request, so a false rejection would break a
client: this checks every request and response class of every API and version with
Hypothesis-generated entities.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.index import api_key_map, schema_name_map
from kio.static.primitive import Records

from tidegate.protocol import kio_hypothesis
from tidegate.protocol.guard import GuardError, check
from tidegate.protocol.messages import encode, request_class, response_class

kio_hypothesis.register()  # `import tidegate` imported kio with Hypothesis hidden
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))

CLASSES = [
    (key, version, kind)
    for key, name in sorted(api_key_map.items())
    for version in sorted(schema_name_map[name])
    for kind in ("request", "response")
]


@pytest.mark.parametrize(("key", "version", "kind"), CLASSES)
def test_guard_accepts_encoded_messages(key: int, version: int, kind: str) -> None:
    cls = request_class(key, version) if kind == "request" else response_class(key, version)

    @settings(max_examples=4, suppress_health_check=list(HealthCheck), deadline=None, database=None)
    @given(st.from_type(cls))
    def run(entity: object) -> None:
        raw = encode(entity)  # type: ignore[arg-type]
        check(cls, raw)

    run()


def test_guard_rejects_huge_array_count() -> None:
    cls = request_class(3, 12)  # Metadata: compact array of topics first
    with pytest.raises(GuardError):
        check(cls, b"\xff\xff\xff\xff\x0f")
