"""A pytest plugin for confluent-kafka-python's integration suite against Tidegate.

The suite's `kafka_cluster` fixture already takes an existing cluster from the BROKERS
environment variable (its "bring your own" ByoFixture), but its `sasl_cluster` fixture
always launches a trivup cluster (Kafka with SASL PLAIN, user `sasl_user`, password
`sasl_user`, an authorizer). This plugin, loaded with `-p ck_python_byo` by
tests/compat/confluent_kafka_python.py, points that fixture at the Tidegate listener
named by CK_SASL_BROKERS instead, with the same credentials, without editing the suite:
the suite's conftest looks `create_sasl_cluster` up when the fixture runs, so replacing
that module attribute once collection is over is enough.
"""

from __future__ import annotations

import os
import sys
from typing import Any

SASL_USER = "sasl_user"


def sasl_client_conf(bootstrap: str) -> dict[str, str]:
    """The client settings the suite's trivup SASL cluster would hand its clients."""
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": SASL_USER,
            "sasl.password": SASL_USER}


def pytest_collection_finish(session: Any) -> None:
    bootstrap = os.environ.get("CK_SASL_BROKERS", "")
    conftest = sys.modules.get("tests.integration.conftest")
    if not bootstrap or conftest is None:
        return

    def create_sasl_cluster(conf: dict[str, Any] | None = None) -> Any:
        return conftest.create_byo_cluster(sasl_client_conf(bootstrap))

    setattr(conftest, "create_sasl_cluster", create_sasl_cluster)  # noqa: B010
