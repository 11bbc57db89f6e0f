"""Principals: who a connection is, as Kafka names it (`User:<name>`).

A PLAINTEXT connection (or TLS without a client certificate) is `User:ANONYMOUS`; a
SASL connection is `User:<the authenticated user>`; a TLS connection with a client
certificate is `User:<the certificate's subject, mapped>`. The subject is written as
Java's `X500Principal.getName()` writes it (RFC 2253: the last RDN first, `CN=alice,
OU=eng,O=Acme`), so Kafka's `ssl.principal.mapping.rules` apply unchanged:

    RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L, RULE:^CN=(.*?),.*$/$1/, DEFAULT

Rules are tried in order; the first whose pattern matches the whole subject gives the
name (`$n` group references; a trailing `L`/`U` lower- or upper-cases it); `DEFAULT`
gives the subject itself. No rule matching is an error, as in Kafka.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tidegate.common.errors import InvalidConfigError

ANONYMOUS = "User:ANONYMOUS"

# Python's peercert uses OpenSSL's long names; Java prints these short ones.
_SHORT = {
    "commonName": "CN",
    "organizationalUnitName": "OU",
    "organizationName": "O",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "countryName": "C",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
    "emailAddress": "EMAILADDRESS",
}


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def subject_dn(subject: Sequence[Sequence[tuple[str, str]]]) -> str:
    """A peercert `subject` (RDNs in certificate order) as an RFC 2253 string."""
    rdns = []
    for rdn in reversed(list(subject)):
        rdns.append("+".join(f"{_SHORT.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


@dataclass(frozen=True)
class MappingRule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        out = self.pattern.sub(self.replacement, dn)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


def _java_replacement(text: str) -> str:
    """Java's `$1` group references (and `\\$`) in Python's `\\g<1>` form."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append(re.escape(text[i + 1]) if text[i + 1] != "/" else "/")
            i += 2
        elif c == "$" and i + 1 < len(text) and text[i + 1].isdigit():
            j = i + 1
            while j < len(text) and text[j].isdigit():
                j += 1
            out.append(f"\\g<{text[i + 1:j]}>")
            i = j
        else:
            out.append("\\\\" if c == "\\" else c)
            i += 1
    return "".join(out)


def _until_slash(text: str, pos: int) -> tuple[str, int]:
    """Text up to the next unescaped '/', and the position after that '/'."""
    i = pos
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            i += 2
            continue
        if text[i] == "/":
            return text[pos:i], i + 1
        i += 1
    raise InvalidConfigError(f"ssl.principal.mapping.rules: unterminated rule {text[pos:]!r}")


def parse_mapping_rules(text: str) -> list[MappingRule]:
    """Kafka's `ssl.principal.mapping.rules` (see the module docstring)."""
    rules: list[MappingRule] = []
    pos, text = 0, text.strip() or "DEFAULT"
    while pos < len(text):
        while pos < len(text) and text[pos] in " \t\n,":
            pos += 1
        if pos >= len(text):
            break
        if text.startswith("DEFAULT", pos):
            rules.append(MappingRule(None))
            pos += len("DEFAULT")
            continue
        if not text.startswith("RULE:", pos):
            raise InvalidConfigError(
                f"ssl.principal.mapping.rules: invalid rule at {text[pos:]!r} "
                "(expected RULE:pattern/replacement/[LU] or DEFAULT)"
            )
        pattern, pos = _until_slash(text, pos + len("RULE:"))
        replacement, pos = _until_slash(text, pos)
        case = ""
        if pos < len(text) and text[pos] in "LU":
            case, pos = text[pos], pos + 1
        try:
            compiled = re.compile(pattern.replace("\\/", "/"))
        except re.error as e:
            raise InvalidConfigError(
                f"ssl.principal.mapping.rules: bad pattern {pattern!r}: {e}"
            ) from e
        rules.append(MappingRule(compiled, _java_replacement(replacement), case))
        if pos < len(text) and text[pos] not in " \t\n,":
            raise InvalidConfigError(
                f"ssl.principal.mapping.rules: unexpected {text[pos:]!r} after a rule"
            )
    return rules


def map_subject(rules: Sequence[MappingRule], dn: str) -> str:
    """The user name a certificate subject maps to; ValueError if no rule applies."""
    for rule in rules:
        name = rule.apply(dn)
        if name is not None:
            return name
    raise ValueError(f"no ssl.principal.mapping.rules rule applies to {dn!r}")
