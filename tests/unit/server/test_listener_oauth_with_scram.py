"""A SASL listener offering SCRAM and unsecured OAUTHBEARER validates tokens.

The unsecured validator was set in an `elif` of the SCRAM check, so on a listener that
also offered SCRAM every OAUTHBEARER login was refused ("OAUTHBEARER has no token
validator on this listener"). Found by librdkafka's 0142 on a SASL_PLAINTEXT listener
with PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER, as trivup sets one up."""

from __future__ import annotations

import pytest

from tidegate.common.security_config import listener_security
from tidegate.protocol.oauthbearer import UnsecuredValidator
from tidegate.server.security import ListenerSecurityRuntime

UNSECURED = ("org.apache.kafka.common.security.oauthbearer.internals.unsecured."
             "OAuthBearerUnsecuredValidatorCallbackHandler")


@pytest.mark.parametrize("mechanisms", [
    "OAUTHBEARER",
    "SCRAM-SHA-256,OAUTHBEARER",
    "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
])
def test_unsecured_oauthbearer_beside_other_mechanisms(mechanisms: str) -> None:
    props = {
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": mechanisms,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_u="p";',
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": UNSECURED,
    }
    sec = listener_security(props, "SASL_PLAINTEXT", "SASL_PLAINTEXT")
    rt = ListenerSecurityRuntime(sec, None)
    assert isinstance(rt.oauth, UnsecuredValidator)
    session = rt.session()
    assert session.sasl is not None and session.sasl.oauth is rt.oauth


def test_no_oauthbearer_no_validator() -> None:
    props = {"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-512"}
    rt = ListenerSecurityRuntime(listener_security(props, "SASL_PLAINTEXT", "SASL_PLAINTEXT"),
                                 None)
    assert rt.oauth is None
