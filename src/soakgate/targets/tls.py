"""TLS for https targets: a CA bundle, a client certificate, or (loudly) no verification.

One `TlsOptions` travels with each `TargetSpec`; every connection to that target (generation
requests through `targets.pool`, model discovery, `/metrics` scrapes, an HTTP reference) uses
its context. Without options the context is the standard library's default (the system's
trust store; `SSL_CERT_FILE` and `SSL_CERT_DIR` are honoured by OpenSSL as usual).
"""

from __future__ import annotations

import functools
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from soakgate.errors import UsageError
from soakgate.targets.proxy import aiohttp_proxy


@dataclass(frozen=True, slots=True)
class TlsOptions:
    """How soakgate checks an https target and proves itself to it."""

    ca_bundle: str | None = None
    """PEM file (or folder of hashed certificates) of the authorities to trust instead of the
    system's."""
    client_cert: str | None = None
    """PEM certificate chain sent to a server that asks for one (mutual TLS)."""
    client_key: str | None = None
    """Its private key, when not in the certificate's file."""
    insecure: bool = False
    """Verify neither the certificate nor the host name (a test rig's self-signed server)."""

    @property
    def given(self) -> bool:
        return bool(self.ca_bundle or self.client_cert or self.insecure)

    def context(self) -> ssl.SSLContext:
        """The client context (one per distinct options, built once); a file that cannot be
        read or used is a UsageError naming it."""
        return _context(self)

    def for_url(self, url: str) -> ssl.SSLContext | None:
        """The context for `url`: None for plain http."""
        return self.context() if urlsplit(url).scheme == "https" else None

    def aiohttp(self, url: str) -> dict[str, Any]:
        """Keyword arguments for an aiohttp request to `url`: this TLS context for https, and
        the forward proxy the environment names for it (`targets.proxy`, read the same way as
        for the generation connections)."""
        context = self.for_url(url)
        return {**({} if context is None else {"ssl": context}), **aiohttp_proxy(url)}

    def stored(self) -> dict[str, Any]:
        """What a run records of these options (paths, never key material)."""
        return {
            "ca_bundle": self.ca_bundle, "client_cert": self.client_cert,
            "client_key": self.client_key, "verify": not self.insecure,
        }  # fmt: skip


@functools.lru_cache(maxsize=8)
def _context(options: TlsOptions) -> ssl.SSLContext:
    ca = options.ca_bundle
    try:
        if ca is not None and Path(ca).is_dir():
            context = ssl.create_default_context(capath=ca)
        else:
            context = ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"--ca-bundle {ca}: cannot use it: {_why(exc)}") from None
    if options.client_key and not options.client_cert:
        raise UsageError("--client-key needs --client-cert")
    if options.client_cert:
        try:
            context.load_cert_chain(options.client_cert, options.client_key)
        except (OSError, ssl.SSLError) as exc:
            key = f" (key {options.client_key})" if options.client_key else ""
            raise UsageError(
                f"--client-cert {options.client_cert}{key}: cannot use it: {_why(exc)}"
            ) from None
    if options.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror and not isinstance(exc, ssl.SSLError):
        return exc.strerror
    return str(getattr(exc, "reason", None) or exc)


SYSTEM = TlsOptions()
"""No options: the system's trust store, full verification."""
