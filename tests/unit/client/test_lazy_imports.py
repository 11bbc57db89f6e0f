"""The client's start stays cheap: importing it (as every Spark Python worker and every
`tidegate` command does) must not load what only some clients use. The SASL library
and client/security.py load only with ``security.protocol`` other than PLAINTEXT, the
admin modules only when an admin client is made, the assignors only when a consumer
config is. Each check runs in a fresh interpreter, because this one has it all loaded."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

ADMIN = ("tidegate.client.admin", "tidegate.client.acl_admin", "tidegate.client.quota_admin",
         "tidegate.client.scram_admin", "tidegate.client.txn_admin",
         "tidegate.client.partition_admin")
SECURITY = ("scramp", "tidegate.client.security", "tidegate.common.security_config")


def _loaded(code: str) -> set[str]:
    probe = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_importing_the_package_loads_none_of_its_modules() -> None:
    loaded = _loaded("import tidegate.client")
    assert not {m for m in loaded if m.startswith("tidegate.client.")}, loaded


@pytest.mark.parametrize("code", [
    "from tidegate.client import Producer, Consumer, Admin, AsyncProducer, AsyncConsumer",
    # a PLAINTEXT client made and closed: no SASL, no TLS settings, no admin
    "from tidegate.client import Producer\n"
    "Producer({'bootstrap.servers': '127.0.0.1:9'}).close(0)",
])
def test_producer_and_consumer_leave_admin_and_security_unloaded(code: str) -> None:
    loaded = _loaded(code)
    assert "tidegate.client.sync" in loaded  # the probe did import the client
    assert not loaded & set(ADMIN + SECURITY), sorted(loaded & set(ADMIN + SECURITY))


def test_producer_and_admin_configs_leave_the_assignors_unloaded() -> None:
    loaded = _loaded("from tidegate.client import AdminConfig, ProducerConfig\n"
                     "AdminConfig(); ProducerConfig()")
    assert not {m for m in loaded if m.startswith("tidegate.assignors")}


def test_the_lazy_names_are_the_public_api() -> None:
    import tidegate.client as client

    for name in client.__all__:
        assert getattr(client, name).__name__ == name
    assert set(client.__all__) <= set(dir(client))
    with pytest.raises(AttributeError):
        client.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018


def test_a_secured_client_still_loads_its_security_when_made() -> None:
    loaded = _loaded("from tidegate.client import Producer\n"
                     "Producer({'bootstrap.servers': '127.0.0.1:9', "
                     "'security.protocol': 'SASL_PLAINTEXT', 'sasl.mechanism': 'PLAIN', "
                     "'sasl.username': 'u', 'sasl.password': 'p'}).close(0)")
    assert "tidegate.client.security" in loaded
