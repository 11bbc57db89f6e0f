"""TLS server contexts from Kafka's PEM settings, rebuilt when the files change.

A listener's `ssl.*` settings (common/security_config.py resolved the
`listener.name.<l>.` prefixes) become one `ssl.SSLContext`:

- the key store: `ssl.keystore.location` (one PEM file with the private key and the
  certificate chain) or `ssl.keystore.certificate.chain` + `ssl.keystore.key` (PEM
  text inline, as Kafka accepts it); `ssl.key.password` decrypts an encrypted key;
- the trust store: `ssl.truststore.location` or `ssl.truststore.certificates` (PEM),
  the CAs client certificates must chain to;
- `ssl.client.auth`: required -> CERT_REQUIRED, requested -> CERT_OPTIONAL, none;
- `ssl.enabled.protocols` (TLSv1.2, TLSv1.3) bound the versions, `ssl.cipher.suites`
  (OpenSSL or IANA names) the TLS 1.2 ciphers.

Kafka needs an AlterConfigs to load a renewed certificate; here `current()` notices
that a file's modification time or size changed and builds a new context, and the
listening socket's SNI callback hands it to each new handshake (`server_context()`),
so every new connection gets the new certificate and open ones keep theirs. A renewal caught
half-written fails to load: the old context stays, the error is logged once, and the
next connection tries again.
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

_VERSIONS = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}


def build_context(settings: dict[str, str]) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    password = settings.get("ssl.key.password") or None
    location = settings.get("ssl.keystore.location")
    if location:
        ctx.load_cert_chain(location, password=password)
    else:
        _load_inline_chain(
            ctx,
            settings.get("ssl.keystore.certificate.chain", ""),
            settings.get("ssl.keystore.key", ""),
            password,
        )
    trust = settings.get("ssl.truststore.location")
    inline = settings.get("ssl.truststore.certificates")
    if trust:
        ctx.load_verify_locations(cafile=trust)
    elif inline:
        ctx.load_verify_locations(cadata=inline)
    auth = settings.get("ssl.client.auth", "none")
    ctx.verify_mode = {
        "required": ssl.CERT_REQUIRED,
        "requested": ssl.CERT_OPTIONAL,
    }.get(auth, ssl.CERT_NONE)
    versions = [
        _VERSIONS[v.strip()]
        for v in (settings.get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3").split(",")
        if v.strip() in _VERSIONS
    ]
    if not versions:
        raise ssl.SSLError("ssl.enabled.protocols names no supported version (TLSv1.2, TLSv1.3)")
    ctx.minimum_version, ctx.maximum_version = min(versions), max(versions)
    ciphers = settings.get("ssl.cipher.suites")
    if ciphers:
        ctx.set_ciphers(":".join(c.strip() for c in ciphers.split(",") if c.strip()))
    return ctx


def _load_inline_chain(
    ctx: ssl.SSLContext, chain: str, key: str, password: str | None
) -> None:
    # load_cert_chain reads files only: hand it a private temporary file (mode 0600).
    with tempfile.NamedTemporaryFile("w", suffix=".pem", delete=False) as f:
        f.write(key.strip() + "\n" + chain.strip() + "\n")
        name = f.name
    try:
        ctx.load_cert_chain(name, password=password)
    finally:
        os.unlink(name)


class ReloadingContext:
    """One listener's TLS context, rebuilt when a key or trust file changes."""

    def __init__(self, listener: str, settings: dict[str, str]) -> None:
        self.listener = listener
        self.settings = settings
        self.files = [
            Path(p)
            for p in (settings.get("ssl.keystore.location"),
                      settings.get("ssl.truststore.location"))
            if p
        ]
        self._stamp = self._stamps()
        self._ctx = build_context(settings)  # errors here stop the broker at start
        self._failed_stamp: tuple[tuple[float, int], ...] | None = None

    def _stamps(self) -> tuple[tuple[float, int], ...]:
        out = []
        for p in self.files:
            try:
                st = p.stat()
                out.append((st.st_mtime, st.st_size))
            except OSError:
                out.append((0.0, -1))
        return tuple(out)

    def server_context(self) -> ssl.SSLContext:
        """The context the listening socket is created with. Its SNI callback (run on
        every ClientHello, with or without a server name) swaps in `current()`, so a
        renewed certificate is served without rebinding the port."""
        base = self._ctx

        def swap(sslobj: ssl.SSLObject, _name: str | None, ctx: ssl.SSLContext) -> None:
            now = self.current()
            if now is not ctx:
                sslobj.context = now

        base.sni_callback = swap
        return base

    def current(self) -> ssl.SSLContext:
        stamp = self._stamps()
        if stamp != self._stamp and stamp != self._failed_stamp:
            try:
                ctx = build_context(self.settings)
                ctx.sni_callback = self._ctx.sni_callback  # the swap stays in place
                self._ctx = ctx
                self._stamp = stamp
                log.info("listener %s: reloaded its TLS certificates", self.listener)
            except (ssl.SSLError, OSError, ValueError) as e:
                self._failed_stamp = stamp  # log once per change, keep the old context
                log.error("listener %s: cannot reload TLS certificates (%s); keeping the "
                          "previous ones", self.listener, e)
        return self._ctx
