"""TLS on the HTTP and gRPC front ends (``--http-use-ssl*``, ``--grpc-use-ssl*``).

One ``ssl.SSLContext`` serves every connection of a listener. Reloading loads the
certificate files into that same context: OpenSSL copies the certificate into each
connection when it is accepted, so connections that are open keep theirs and every new
one gets the new files. A reload that fails (a missing or mismatched file) keeps the
certificates in use.
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

from pytriton_core.errors import InvalidArgumentError
from pytriton_core.options import TlsOptions

log = logging.getLogger(__name__)


class CertificateReloader:
    """A listener's TLS context, and ``reload()`` for SIGHUP.

    ``protocol`` names the front end in messages ("HTTP", "GRPC") and ``flags`` its flags'
    prefix ("--http", "--grpc"); ``alpn``, the protocols offered in the handshake (gRPC
    clients require "h2")."""

    def __init__(
        self,
        options: TlsOptions,
        protocol: str = "HTTP",
        flags: str = "--http",
        alpn: list[str] | None = None,
    ) -> None:
        self._options = options
        self._protocol = protocol
        self._flags = flags
        self._cert = self._required(options.server_cert, "server-cert")
        self._key = self._required(options.server_key, "server-key")
        if options.use_ssl_mutual:
            self._required(options.root_cert, "root-cert")
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.verify_mode = ssl.CERT_REQUIRED if options.use_ssl_mutual else ssl.CERT_NONE
        if alpn:
            self.context.set_alpn_protocols(alpn)
        self._load(self.context)

    def _required(self, path: Path | None, flag: str) -> Path:
        if path is None:
            raise InvalidArgumentError(
                f"{self._flags}-{flag} is required when SSL is enabled for {self._protocol}"
            )
        return path

    def _load(self, context: ssl.SSLContext) -> None:
        try:
            context.load_cert_chain(self._cert, self._key)
            if self._options.root_cert is not None:
                context.load_verify_locations(cafile=self._options.root_cert)
        except (OSError, ssl.SSLError) as exc:
            flags = self._flags
            raise InvalidArgumentError(
                f"unable to load the {self._protocol} TLS files ({flags}-server-cert "
                f"'{self._cert}', {flags}-server-key '{self._key}'"
                + (
                    f", {flags}-root-cert '{self._options.root_cert}'"
                    if self._options.root_cert is not None
                    else ""
                )
                + f"): {exc}"
            ) from None

    def reload(self) -> bool:
        """Read the files again for the connections to come; False (logged) if they do not
        load, and the certificates in use stay."""
        trial = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            self._load(trial)  # the files must load whole before the live context changes
            self._load(self.context)
        except InvalidArgumentError as exc:
            log.error(
                "%s certificates not reloaded, the previous ones stay: %s",
                self._protocol,
                exc.message,
            )
            return False
        log.info("%s certificates reloaded from %s", self._protocol, self._cert)
        return True
