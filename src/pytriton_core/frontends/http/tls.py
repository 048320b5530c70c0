"""TLS on the HTTP front end (``--http-use-ssl``, ``--http-use-ssl-mutual``).

One ``ssl.SSLContext`` serves every connection. Reloading loads the certificate files into
that same context: OpenSSL copies the certificate into each connection when it is
accepted, so connections that are open keep theirs and every new one gets the new files.
A reload that fails (a missing or mismatched file) keeps the certificates in use.
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

from pytriton_core.errors import InvalidArgumentError
from pytriton_core.options import TlsOptions

log = logging.getLogger(__name__)


def _required(path: Path | None, flag: str) -> Path:
    if path is None:
        raise InvalidArgumentError(f"{flag} is required when SSL is enabled for HTTP")
    return path


class CertificateReloader:
    """The listener's TLS context, and ``reload()`` for SIGHUP."""

    def __init__(self, options: TlsOptions) -> None:
        self._options = options
        self._cert = _required(options.server_cert, "--http-server-cert")
        self._key = _required(options.server_key, "--http-server-key")
        if options.use_ssl_mutual:
            _required(options.root_cert, "--http-root-cert")
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.verify_mode = ssl.CERT_REQUIRED if options.use_ssl_mutual else ssl.CERT_NONE
        self._load(self.context)

    def _load(self, context: ssl.SSLContext) -> None:
        try:
            context.load_cert_chain(self._cert, self._key)
            if self._options.root_cert is not None:
                context.load_verify_locations(cafile=self._options.root_cert)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidArgumentError(
                f"unable to load the HTTP TLS files (--http-server-cert '{self._cert}', "
                f"--http-server-key '{self._key}'"
                + (
                    f", --http-root-cert '{self._options.root_cert}'"
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
            log.error("HTTP certificates not reloaded, the previous ones stay: %s", exc.message)
            return False
        log.info("HTTP certificates reloaded from %s", self._cert)
        return True
