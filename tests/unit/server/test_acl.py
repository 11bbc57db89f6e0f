"""The ACL decision rules (Kafka's AclAuthorizer), filter matching, and the JSON layouts
(common/acl.py), plus the file store's durability (server/acl_store.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegate.common.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourcePattern,
    ResourceType,
    parse_super_users,
    validate_binding,
    validate_filter,
)
from tidegate.common.acl_json import (
    bindings_from_json,
    bindings_to_json,
    decode_zk_acls,
    encode_zk_acls,
)
from tidegate.server.acl_store import FileAclStore

Op, T, P, A = AclOperation, ResourceType, PatternType, AclPermissionType
ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def acl(rtype: ResourceType, name: str, principal: str, op: AclOperation,
        perm: AclPermissionType = A.ALLOW, pattern: PatternType = P.LITERAL,
        host: str = "*") -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, pattern),
                      AccessControlEntry(principal, host, op, perm))


# (acls, principal, host, op, resource type, name, expected)
RULES = [
    # nothing applies: denied (allow.everyone.if.no.acl.found=false)
    ([], ALICE, HOST, Op.READ, T.TOPIC, "t", False),
    # a literal grant, and only for its principal, resource, type and op
    ([acl(T.TOPIC, "t", ALICE, Op.READ)], ALICE, HOST, Op.READ, T.TOPIC, "t", True),
    ([acl(T.TOPIC, "t", ALICE, Op.READ)], BOB, HOST, Op.READ, T.TOPIC, "t", False),
    ([acl(T.TOPIC, "t", ALICE, Op.READ)], ALICE, HOST, Op.WRITE, T.TOPIC, "t", False),
    ([acl(T.TOPIC, "t", ALICE, Op.READ)], ALICE, HOST, Op.READ, T.TOPIC, "t2", False),
    ([acl(T.TOPIC, "t", ALICE, Op.READ)], ALICE, HOST, Op.READ, T.GROUP, "t", False),
    # wildcard resource, principal and host
    ([acl(T.TOPIC, "*", ALICE, Op.READ)], ALICE, HOST, Op.READ, T.TOPIC, "any", True),
    ([acl(T.TOPIC, "t", "User:*", Op.READ)], BOB, HOST, Op.READ, T.TOPIC, "t", True),
    ([acl(T.TOPIC, "t", ALICE, Op.READ, host=HOST)], ALICE, HOST, Op.READ, T.TOPIC, "t", True),
    ([acl(T.TOPIC, "t", ALICE, Op.READ, host=HOST)], ALICE, "10.0.0.2", Op.READ, T.TOPIC, "t",
     False),
    # prefixed patterns
    ([acl(T.TOPIC, "pay-", ALICE, Op.WRITE, pattern=P.PREFIXED)], ALICE, HOST, Op.WRITE, T.TOPIC,
     "pay-eu", True),
    ([acl(T.TOPIC, "pay-", ALICE, Op.WRITE, pattern=P.PREFIXED)], ALICE, HOST, Op.WRITE, T.TOPIC,
     "pa", False),
    ([acl(T.TOPIC, "pay-", ALICE, Op.WRITE)], ALICE, HOST, Op.WRITE, T.TOPIC, "pay-eu", False),
    # DENY wins over ALLOW, from any pattern, and for User:*
    ([acl(T.TOPIC, "t", ALICE, Op.READ), acl(T.TOPIC, "t", ALICE, Op.READ, A.DENY)],
     ALICE, HOST, Op.READ, T.TOPIC, "t", False),
    ([acl(T.TOPIC, "*", ALICE, Op.ALL), acl(T.TOPIC, "se", "User:*", Op.READ, A.DENY, P.PREFIXED)],
     ALICE, HOST, Op.READ, T.TOPIC, "secret", False),
    ([acl(T.TOPIC, "t", ALICE, Op.READ), acl(T.TOPIC, "t", ALICE, Op.ALL, A.DENY)],
     ALICE, HOST, Op.READ, T.TOPIC, "t", False),
    ([acl(T.TOPIC, "t", ALICE, Op.READ), acl(T.TOPIC, "t", ALICE, Op.READ, A.DENY, host=HOST)],
     ALICE, "10.9.9.9", Op.READ, T.TOPIC, "t", True),
    # implied operations: DESCRIBE from READ/WRITE/DELETE/ALTER, DESCRIBE_CONFIGS from
    # ALTER_CONFIGS, everything from ALL; never WRITE from READ
    *[([acl(T.TOPIC, "t", ALICE, op)], ALICE, HOST, Op.DESCRIBE, T.TOPIC, "t", True)
      for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALL)],
    ([acl(T.TOPIC, "t", ALICE, Op.CREATE)], ALICE, HOST, Op.DESCRIBE, T.TOPIC, "t", False),
    ([acl(T.TOPIC, "t", ALICE, Op.ALTER_CONFIGS)], ALICE, HOST, Op.DESCRIBE_CONFIGS, T.TOPIC, "t",
     True),
    ([acl(T.TOPIC, "t", ALICE, Op.READ)], ALICE, HOST, Op.WRITE, T.TOPIC, "t", False),
    ([acl(T.CLUSTER, CLUSTER_NAME, ALICE, Op.ALL)], ALICE, HOST, Op.IDEMPOTENT_WRITE, T.CLUSTER,
     CLUSTER_NAME, True),
    # a DENY of READ does not deny the DESCRIBE that WRITE implies
    ([acl(T.TOPIC, "t", ALICE, Op.WRITE), acl(T.TOPIC, "t", ALICE, Op.READ, A.DENY)],
     ALICE, HOST, Op.DESCRIBE, T.TOPIC, "t", True),
    # transactional ids and groups are their own resources
    ([acl(T.TRANSACTIONAL_ID, "tx", ALICE, Op.WRITE)], ALICE, HOST, Op.WRITE, T.TRANSACTIONAL_ID,
     "tx", True),
    ([acl(T.TOPIC, "tx", ALICE, Op.WRITE)], ALICE, HOST, Op.WRITE, T.TRANSACTIONAL_ID, "tx", False),
]


@pytest.mark.parametrize(("acls", "principal", "host", "op", "rtype", "name", "expected"), RULES)
def test_decision_rules(acls: list[AclBinding], principal: str, host: str, op: AclOperation,
                        rtype: ResourceType, name: str, expected: bool) -> None:
    a = Authorizer()
    a.add(acls)
    assert a.authorize(principal, host, op, rtype, name) is expected


def test_super_users_and_allow_if_no_acl() -> None:
    a = Authorizer(parse_super_users(" User:admin ; User:broker;"), allow_if_no_acl=True)
    assert a.super_users == {"User:admin", "User:broker"}
    a.add([acl(T.TOPIC, "t", ALICE, Op.READ, A.DENY)])
    assert a.authorize("User:admin", HOST, Op.WRITE, T.TOPIC, "t")  # super users skip DENY
    assert not a.authorize(ALICE, HOST, Op.READ, T.TOPIC, "t")
    # "no ACL found" means none on the resource at all, whoever it is for
    assert not a.authorize(BOB, HOST, Op.READ, T.TOPIC, "t")
    assert a.authorize(BOB, HOST, Op.READ, T.TOPIC, "other")


def test_authorize_any_for_idempotent_fallback() -> None:
    a = Authorizer()
    assert not a.authorize_any(ALICE, HOST, Op.WRITE, T.TOPIC)
    a.add([acl(T.TOPIC, "t", ALICE, Op.WRITE)])
    assert a.authorize_any(ALICE, HOST, Op.WRITE, T.TOPIC)
    assert not a.authorize_any(BOB, HOST, Op.WRITE, T.TOPIC)
    a.add([acl(T.TOPIC, "t", ALICE, Op.WRITE, A.DENY)])
    assert not a.authorize_any(ALICE, HOST, Op.WRITE, T.TOPIC)
    a.add([acl(T.TOPIC, "p", ALICE, Op.WRITE, pattern=P.PREFIXED)])
    assert a.authorize_any(ALICE, HOST, Op.WRITE, T.TOPIC)
    a.add([acl(T.TOPIC, "*", ALICE, Op.WRITE, A.DENY)])
    assert not a.authorize_any(ALICE, HOST, Op.WRITE, T.TOPIC)


def test_remove_and_authorized_operations() -> None:
    a = Authorizer()
    b = acl(T.GROUP, "g", ALICE, Op.READ, pattern=P.PREFIXED)
    a.add([b])
    bits = a.authorized_operations(ALICE, HOST, T.GROUP, "g1", (Op.READ, Op.DESCRIBE, Op.DELETE))
    assert bits == (1 << 3) | (1 << 8)
    a.remove([b])
    assert a.bindings() == []
    assert not a.authorize(ALICE, HOST, Op.READ, T.GROUP, "g1")


def test_filter_matching() -> None:
    lit = acl(T.TOPIC, "orders", ALICE, Op.READ)
    star = acl(T.TOPIC, "*", BOB, Op.WRITE, A.DENY)
    pre = acl(T.TOPIC, "ord", ALICE, Op.WRITE, pattern=P.PREFIXED)
    grp = acl(T.GROUP, "orders", ALICE, Op.READ)
    everything = [lit, star, pre, grp]

    def hits(f: AclBindingFilter) -> set[AclBinding]:
        return {b for b in everything if f.matches(b)}

    assert hits(AclBindingFilter()) == set(everything)
    assert hits(AclBindingFilter(T.TOPIC)) == {lit, star, pre}
    assert hits(AclBindingFilter(T.ANY, "orders")) == {lit, grp}  # ANY: exact name
    assert hits(AclBindingFilter(T.TOPIC, "orders", P.MATCH)) == {lit, star, pre}
    assert hits(AclBindingFilter(T.TOPIC, "ord", P.PREFIXED)) == {pre}
    assert hits(AclBindingFilter(T.TOPIC, "ord", P.LITERAL)) == set()
    assert hits(AclBindingFilter(principal=BOB)) == {star}
    assert hits(AclBindingFilter(operation=Op.READ)) == {lit, grp}
    assert hits(AclBindingFilter(permission=A.DENY)) == {star}
    assert hits(AclBindingFilter(host="10.0.0.1")) == set()


def test_validation() -> None:
    good = acl(T.TOPIC, "t", ALICE, Op.READ)
    assert validate_binding(good) is None
    bad = [
        acl(T.TOPIC, "t", "", Op.READ),  # empty principal
        acl(T.TOPIC, "t", "alice", Op.READ),  # no principal type
        acl(T.TOPIC, "t", ALICE, Op.UNKNOWN),
        acl(T.TOPIC, "t", ALICE, Op.ANY),
        acl(T.TOPIC, "t", ALICE, Op.READ, A.ANY),
        acl(T.TOPIC, "t", ALICE, Op.READ, pattern=P.MATCH),
        acl(T.ANY, "t", ALICE, Op.READ),
        acl(T.TOPIC, "", ALICE, Op.READ),
        acl(T.CLUSTER, "my-cluster", ALICE, Op.ALTER),
    ]
    for b in bad:
        assert validate_binding(b) is not None, b
    assert validate_filter(AclBindingFilter()) is None
    assert validate_filter(AclBindingFilter(operation=Op.UNKNOWN)) is not None


def test_zk_json_is_kafkas() -> None:
    entries = {AccessControlEntry(ALICE, "*", Op.READ, A.ALLOW),
               AccessControlEntry(BOB, "10.0.0.1", Op.IDEMPOTENT_WRITE, A.DENY)}
    data = encode_zk_acls(entries)
    assert data == (b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
                    b'"operation":"Read","host":"*"},{"principal":"User:bob","permissionType":'
                    b'"Deny","operation":"IdempotentWrite","host":"10.0.0.1"}]}')
    assert decode_zk_acls(data) == entries
    with pytest.raises(ValueError):
        decode_zk_acls(b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Allow",'
                       b'"operation":"Fly","host":"*"}]}')


_names = st.text(alphabet="abc-*", min_size=1, max_size=4)
_bindings = st.builds(
    acl, st.sampled_from([T.TOPIC, T.GROUP, T.TRANSACTIONAL_ID]), _names,
    st.sampled_from([ALICE, BOB, "User:*"]),
    st.sampled_from([o for o in Op if o not in (Op.UNKNOWN, Op.ANY)]),
    st.sampled_from([A.ALLOW, A.DENY]), st.sampled_from([P.LITERAL, P.PREFIXED]),
    st.sampled_from(["*", HOST]))


@given(st.lists(_bindings, max_size=12))
def test_file_json_round_trip(bindings: list[AclBinding]) -> None:
    assert set(bindings_from_json(bindings_to_json(bindings))) == set(bindings)


@given(st.lists(_bindings, max_size=10), st.sampled_from([ALICE, BOB]), _names,
       st.sampled_from([Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS]))
def test_index_agrees_with_a_plain_scan(bindings: list[AclBinding], principal: str,
                                         name: str, op: AclOperation) -> None:
    """The indexed decision equals Kafka's rule written as a scan over every binding."""
    a = Authorizer()
    a.add(bindings)
    applicable = [b for b in set(bindings) if b.pattern.type == T.TOPIC and (
        (b.pattern.pattern == P.LITERAL and b.pattern.name in (name, "*"))
        or (b.pattern.pattern == P.PREFIXED and name.startswith(b.pattern.name)))]
    mine = [b.entry for b in applicable if b.entry.principal in (principal, "User:*")
            and b.entry.host in (HOST, "*")]
    implied = {Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
               Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS}}.get(op, set()) | {op, Op.ALL}
    expected = bool(applicable) and not any(
        e.permission == A.DENY and e.operation in (op, Op.ALL) for e in mine) and any(
        e.permission == A.ALLOW and e.operation in implied for e in mine)
    assert a.authorize(principal, HOST, op, T.TOPIC, name) is expected


def test_file_store_is_durable(tmp_path: Path) -> None:
    a = Authorizer()
    store = FileAclStore(tmp_path, a)
    b1, b2 = acl(T.TOPIC, "t", ALICE, Op.READ), acl(T.GROUP, "g", BOB, Op.ALL, pattern=P.PREFIXED)
    asyncio.run(store.create([b1, b2]))
    assert a.authorize(ALICE, HOST, Op.READ, T.TOPIC, "t")
    again = Authorizer()
    FileAclStore(tmp_path, again)
    assert set(again.bindings()) == {b1, b2}
    asyncio.run(store.delete([b1]))
    third = Authorizer()
    FileAclStore(tmp_path, third)
    assert set(third.bindings()) == {b2}
    (tmp_path / "__acls.json").write_text("{not json")
    with pytest.raises(Exception, match="cannot read ACLs"):
        FileAclStore(tmp_path, Authorizer())
