"""SaslHandshake, SaslAuthenticate, DescribeUserScramCredentials, AlterUserScramCredentials.

The first two drive the connection's `SaslServer` (protocol/sasl.py) through its
`Session` (server/security.py, reached as `ctx.session`). An OAUTHBEARER token refused
is first answered with Kafka's JSON challenge (logged and delayed then), and the client's
`\x01` that follows gets SASL_AUTHENTICATION_FAILED. A failure is answered with
Kafka's error (UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE,
SASL_AUTHENTICATION_FAILED), logged once, and the connection is closed once the answer
is written; a failed SaslAuthenticate is answered only after the source address's
growing delay (GuessDelays). On a listener without SASL both are ILLEGAL_SASL_STATE, as
on Kafka.

The SCRAM admin APIs read and change the ScramStore (server/scram_store.py). Kafka's
rules and codes: a user named twice in one request is DUPLICATE_RESOURCE, an unknown
mechanism UNSUPPORTED_SASL_MECHANISM, iterations outside 4096..16384 or an empty user
UNACCEPTABLE_CREDENTIAL, deleting what does not exist RESOURCE_NOT_FOUND; Describe of a
user without credentials is RESOURCE_NOT_FOUND.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from tidegate.common.errors import ErrorCode
from tidegate.common.scram import BY_TYPE, MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential
from tidegate.protocol.messages import build, view
from tidegate.protocol.sasl import OAUTHBEARER, SaslState
from tidegate.server.authz import AclOperation as Op
from tidegate.server.authz import check_cluster
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext

log = logging.getLogger(__name__)


async def handle_sasl_handshake(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    session = ctx.session
    mechanism = str(view(req, "mechanism") or "")
    if session is None or session.sasl is None:
        if session is not None:
            session.close_after_answer = True
        log.warning("closing connection from %s: SaslHandshake on a listener without SASL",
                    ctx.peer)
        return build(ctx.response_class, {"error_code": ErrorCode.illegal_sasl_state,
                                          "mechanisms": []})
    code = session.sasl.handshake(mechanism)
    if code != ErrorCode.none:
        session.close_after_answer = True
        log.warning("closing connection from %s (listener %s): %s", ctx.peer,
                    session.listener, session.sasl.reason)
    if ctx.api_version == 0 and code == ErrorCode.none:
        session.raw_tokens = True  # v0: the tokens follow as bare frames (KIP-43)
    return build(ctx.response_class, {"error_code": code,
                                      "mechanisms": list(session.sasl.mechanisms)})


async def handle_sasl_authenticate(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    token = bytes(view(req, "auth_bytes") or b"")
    body, _ = await authenticate(broker, ctx.session, ctx.peer, token)
    return build(ctx.response_class, body)


async def authenticate(
    broker: Broker, session: Any, peer: str, token: bytes
) -> tuple[dict[str, Any], bool]:
    """Run one SASL token; (response fields, ok). Shared with the v0 bare-token path."""
    if session is None or session.sasl is None:
        if session is not None:
            session.close_after_answer = True
        log.warning("closing connection from %s: SaslAuthenticate on a listener without SASL",
                    peer)
        return {"error_code": ErrorCode.illegal_sasl_state,
                "error_message": "SASL is not enabled on this listener",
                "auth_bytes": b"", "session_lifetime": 0}, False
    sasl = session.sasl
    if sasl.state is SaslState.AUTHENTICATE and sasl.mechanism == OAUTHBEARER:
        await session.before_oauth(token)  # the JWKS fetched or refreshed if need be
    after_challenge = sasl.state is SaslState.OAUTH_ERROR
    result = sasl.authenticate(token, broker.clock.now_ms())
    host = peer.rpartition(":")[0]
    if result.error != ErrorCode.none and after_challenge:
        # OAUTHBEARER's final refusal: logged and delayed with the challenge already.
        session.close_after_answer = True
    elif result.error != ErrorCode.none or sasl.state is SaslState.OAUTH_ERROR:
        session.close_after_answer = result.error != ErrorCode.none
        delay = broker.guess_delays.failed(host)
        log.warning("authentication failed for %s on listener %s: %s (answering in %.1f s)",
                    peer, session.listener, sasl.reason, delay)
        await asyncio.sleep(delay)
    elif session.sasl.principal is not None:
        if session.principal != session.sasl.principal:
            log.info("%s authenticated as %s on listener %s (%s)", peer,
                     session.sasl.principal, session.listener, session.sasl.mechanism)
        session.authenticated()
        broker.guess_delays.succeeded(host)
    return {"error_code": result.error, "error_message": result.message,
            "auth_bytes": result.token,
            "session_lifetime": result.session_lifetime_ms}, result.error == ErrorCode.none


async def handle_describe_user_scram_credentials(
    broker: Broker, ctx: RequestContext, req: Any
) -> Any:
    store = broker.scram_users
    if not check_cluster(broker, ctx, Op.DESCRIBE):  # Kafka's ACL: DESCRIBE on the cluster
        return build(ctx.response_class, {
            "throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
            "error_message": "Cluster authorization failed", "results": []})
    wanted = view(req, "users")
    results: list[dict[str, Any]] = []
    if wanted is None or len(wanted) == 0:
        names = sorted(store.users)
        asked: list[str] = names
    else:
        asked = [str(view(u, "name")) for u in wanted]
    dupes = {n for n in asked if asked.count(n) > 1}
    for name in dict.fromkeys(asked):
        if name in dupes:
            results.append({"user": name, "error_code": ErrorCode.duplicate_resource,
                            "error_message": f"Cannot describe SCRAM credentials for the "
                                             f"same user twice in a single request: {name}",
                            "credential_infos": []})
            continue
        creds = store.users.get(name)
        if not creds:
            results.append({"user": name, "error_code": ErrorCode.resource_not_found,
                            "error_message": f"Attempt to describe a user credential that "
                                             f"does not exist: {name}",
                            "credential_infos": []})
            continue
        infos = [{"mechanism": num, "iterations": creds[mech].iterations}
                 for num, mech in sorted(BY_TYPE.items()) if mech in creds]
        results.append({"user": name, "error_code": 0, "error_message": None,
                        "credential_infos": infos})
    return build(ctx.response_class, {"throttle_time": 0, "error_code": 0,
                                      "error_message": None, "results": results})


async def handle_alter_user_scram_credentials(
    broker: Broker, ctx: RequestContext, req: Any
) -> Any:
    store = broker.scram_users
    deletions = [(str(view(d, "name")), int(view(d, "mechanism"))) for d in view(req, "deletions")]
    upsertions = list(view(req, "upsertions"))
    names = [n for n, _ in deletions] + [str(view(u, "name")) for u in upsertions]
    # Kafka: a user altered twice (with the same mechanism) in one request is refused.
    seen: dict[tuple[str, int], int] = {}
    for key in deletions + [(str(view(u, "name")), int(view(u, "mechanism")))
                            for u in upsertions]:
        seen[key] = seen.get(key, 0) + 1
    errors: dict[str, tuple[ErrorCode, str]] = {}
    denied = not check_cluster(broker, ctx, Op.ALTER)  # Kafka's ACL: ALTER on the cluster
    for (name, mech), count in seen.items():
        if denied:
            errors[name] = (ErrorCode.cluster_authorization_failed,
                            "Cluster authorization failed")
        elif count > 1:
            errors[name] = (ErrorCode.duplicate_resource,
                            "A user credential cannot be altered twice in the same request")
        elif not name:
            errors[name] = (ErrorCode.unacceptable_credential, "Username must not be empty")
        elif mech not in BY_TYPE:
            errors[name] = (ErrorCode.unsupported_sasl_mechanism,
                            f"Unknown SCRAM mechanism {mech}")
    to_delete: list[tuple[str, str]] = []
    for name, mech in deletions:
        if name in errors:
            continue
        if store.lookup(BY_TYPE[mech], name) is None:
            errors[name] = (ErrorCode.resource_not_found,
                            "Attempt to delete a user credential that does not exist")
        else:
            to_delete.append((name, BY_TYPE[mech]))
    to_upsert: list[tuple[str, str, ScramCredential]] = []
    for u in upsertions:
        name, mech = str(view(u, "name")), int(view(u, "mechanism"))
        if name in errors:
            continue
        iterations = int(view(u, "iterations"))
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            errors[name] = (ErrorCode.unacceptable_credential,
                            f"Iterations must be between {MIN_ITERATIONS} and "
                            f"{MAX_ITERATIONS}, was {iterations}")
            continue
        salt, salted = bytes(view(u, "salt")), bytes(view(u, "salted_password"))
        if not salt or not salted:
            errors[name] = (ErrorCode.unacceptable_credential, "Salt and password are required")
            continue
        to_upsert.append((name, BY_TYPE[mech],
                          ScramCredential.from_salted(BY_TYPE[mech], salt, salted, iterations)))
    # A user with any error has none of its changes applied (Kafka's per-user result).
    to_delete = [d for d in to_delete if d[0] not in errors]
    to_upsert = [u for u in to_upsert if u[0] not in errors]
    if to_delete or to_upsert:
        await store.apply(to_upsert, to_delete)
        log.info("SCRAM credentials changed by %s: upserted %s, deleted %s", ctx.principal,
                 sorted({u[0] for u in to_upsert}), sorted({d[0] for d in to_delete}))
    results = []
    for name in dict.fromkeys(names):
        code, message = errors.get(name, (ErrorCode.none, ""))
        results.append({"user": name, "error_code": code, "error_message": message or None})
    return build(ctx.response_class, {"throttle_time": 0, "results": results})
