"""ACLs for certificate principals: an SSL listener with `ssl.client.auth=required` and
`ssl.principal.mapping.rules`, the authorizer on.

Two client certificates signed by the broker's CA, CN=alice,OU=eng and CN=bob,OU=ops,
map to User:alice@eng and User:bob@ops through the rule. alice@eng is granted WRITE on
one topic and produces to it; bob@ops, with no ACL, is refused with
TOPIC_AUTHORIZATION_FAILED, and so is alice on a topic she was not granted; a client
with no certificate does not get past the TLS handshake. The PLAINTEXT listener beside
it is the administrator's (User:ANONYMOUS is the super user here), the way a test sets
ACLs up, not a deployment.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from tests.integration.conftest import BrokerProcess, free_port
from tests.integration.security_util import Pki, _cert, make_pki

pytestmark = pytest.mark.interop


class CertBroker:
    def __init__(self, b: BrokerProcess, ssl_port: int, pki: Pki) -> None:
        self.b, self.ssl_port, self.pki = b, ssl_port, pki
        self.admin = AdminClient({"bootstrap.servers": b.bootstrap})

    def conf(self, cert: str | None) -> dict[str, Any]:
        c: dict[str, Any] = {"bootstrap.servers": f"127.0.0.1:{self.ssl_port}",
                             "security.protocol": "SSL",
                             "ssl.ca.location": self.pki.path("ca.crt")}
        if cert:
            c |= {"ssl.certificate.location": self.pki.path(f"{cert}.crt"),
                  "ssl.key.location": self.pki.path(f"{cert}.key")}
        return c


@pytest.fixture(scope="module")
def cb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CertBroker]:
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    _cert(Path(pki.dir), "bob", "/O=Acme/OU=ops/CN=bob", "ca")
    ssl_port = free_port()
    b = BrokerProcess(tmp_path_factory.mktemp("certacl") / "data", overrides={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": pki.path("server.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": pki.path("ca.crt"),
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.ssl.ssl.principal.mapping.rules":
            "RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L,DEFAULT",
    })
    b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port},SSL://127.0.0.1:{ssl_port}"
    b.start()
    try:
        yield CertBroker(b, ssl_port, pki)
    finally:
        b.stop()


def _produce(conf: dict[str, Any], topic: str) -> KafkaError | None:
    p = Producer({**conf, "message.timeout.ms": 5000})
    errs: list[KafkaError | None] = []
    p.produce(topic, b"v", on_delivery=lambda e, _m: errs.append(e))
    p.flush(10)
    assert errs, "no delivery report"
    return errs[0]


def test_certificate_principal_acls(cb: CertBroker) -> None:
    granted, other = (f"cert-{uuid.uuid4().hex[:6]}" for _ in range(2))
    for fut in cb.admin.create_topics([NewTopic(granted, 1), NewTopic(other, 1)]).values():
        fut.result(10)
    acl = AclBinding(ResourceType.TOPIC, granted, ResourcePatternType.LITERAL,
                     "User:alice@eng", "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    for fut in cb.admin.create_acls([acl]).values():
        fut.result(10)

    assert _produce(cb.conf("client"), granted) is None  # CN=alice,OU=eng -> alice@eng
    err = _produce(cb.conf("bob"), granted)  # CN=bob,OU=ops -> bob@ops, no ACL
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    err = _produce(cb.conf("client"), other)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err


def test_certificate_required(cb: CertBroker) -> None:
    a = AdminClient(cb.conf(None))
    with pytest.raises(KafkaException):
        a.list_topics(timeout=2)
