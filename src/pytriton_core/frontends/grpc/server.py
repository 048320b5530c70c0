"""The gRPC front end: a ``grpc.aio`` server on the running event loop, beside HTTP.

Both front ends call the same ``InferenceService`` on the same loop: one request path. The
transport settings (keepalive, message sizes, TLS, response compression) are tritonserver's
``--grpc-*`` flags, resolved in ``GrpcOptions``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import grpc

from pytriton_core.errors import InternalError, InvalidArgumentError
from pytriton_core.frontends.grpc.health import health_handler
from pytriton_core.frontends.grpc.service import GrpcInferenceService
from pytriton_core.options import GrpcOptions
from pytriton_core.service import InferenceService

log = logging.getLogger(__name__)


def channel_options(options: GrpcOptions) -> list[tuple[str, int]]:
    """The gRPC core channel arguments for the server's transport."""
    arguments = [
        ("grpc.max_send_message_length", options.max_send_message_size),
        ("grpc.max_receive_message_length", options.max_receive_message_size),
        ("grpc.max_concurrent_streams", options.max_concurrent_streams),
        ("grpc.max_allowed_incoming_connections", options.max_connections),
        ("grpc.keepalive_time_ms", options.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", options.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", int(options.keepalive_permit_without_calls)),
        ("grpc.http2.max_pings_without_data", options.http2_max_pings_without_data),
        (
            "grpc.http2.min_recv_ping_interval_without_data_ms",
            options.http2_min_recv_ping_interval_without_data_ms,
        ),
        ("grpc.http2.max_ping_strikes", options.http2_max_ping_strikes),
        ("grpc.so_reuseport", int(options.reuse_port)),
        ("grpc.default_compression_level", options.response_compression_level.value),
    ]
    if options.max_connection_age_ms is not None:
        arguments.append(("grpc.max_connection_age_ms", options.max_connection_age_ms))
    if options.max_connection_age_grace_ms is not None:
        arguments.append(("grpc.max_connection_age_grace_ms", options.max_connection_age_grace_ms))
    return arguments


def _read_pem(path: Path | None, flag: str) -> bytes:
    if path is None:
        raise InvalidArgumentError(f"{flag} is required when SSL is enabled for GRPC")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InvalidArgumentError(f"unable to read {flag} '{path}': {exc.strerror}") from None


class GrpcCertificates:
    """TLS credentials whose files ``reload()`` reads again (SIGHUP).

    gRPC core asks ``fetch`` for the configuration as each connection is accepted; after a
    reload it hands the new one over once, and open connections keep theirs. With
    ``use_ssl_mutual`` clients must present a certificate.
    """

    def __init__(self, options: GrpcOptions) -> None:
        self._options = options
        self._configuration = self._read()
        self._fresh = False

    def _read(self) -> Any:
        options = self._options
        key = _read_pem(options.server_key, "--grpc-server-key")
        cert = _read_pem(options.server_cert, "--grpc-server-cert")
        root = None
        if options.use_ssl_mutual or options.root_cert is not None:
            root = _read_pem(options.root_cert, "--grpc-root-cert")
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=root)

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(
            self._configuration,
            self._fetch,
            require_client_authentication=self._options.use_ssl_mutual,
        )

    def _fetch(self) -> Any:  # on a gRPC core thread: a plain swap of one reference
        if not self._fresh:
            return None  # None: keep the configuration in use
        self._fresh = False
        return self._configuration

    def reload(self) -> bool:
        """Read the files again for the connections to come; False (logged) if they cannot
        be read, and the certificates in use stay."""
        try:
            self._configuration = self._read()
        except InvalidArgumentError as exc:
            log.error("GRPC certificates not reloaded, the previous ones stay: %s", exc.message)
            return False
        self._fresh = True
        log.info("GRPC certificates reloaded from %s", self._options.server_cert)
        return True


class GrpcFrontend:
    def __init__(self, service: InferenceService) -> None:
        self._service = service
        self._server: grpc.aio.Server | None = None
        # None without TLS; else reloads the certificate files (SIGHUP).
        self.certificates: GrpcCertificates | None = None

    async def start(self, host: str, port: int) -> int:
        """Serve on ``host:port`` (0: any free port); returns the bound port."""
        options = self._service.options.grpc
        server = grpc.aio.server(options=channel_options(options))
        server.add_generic_rpc_handlers(
            (GrpcInferenceService(self._service).generic_handler(), health_handler(self._service))
        )
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        use_ssl = options.use_ssl or options.use_ssl_mutual
        bound: int
        try:
            if use_ssl:
                self.certificates = GrpcCertificates(options)
                bound = server.add_secure_port(address, self.certificates.credentials())
            else:
                bound = server.add_insecure_port(address)
        except RuntimeError as exc:
            raise InternalError(f"failed to start the GRPC service at {address}: {exc}") from None
        if not bound:
            raise InternalError(f"failed to start the GRPC service at {address}")
        await server.start()
        self._server = server
        security = " (SSL)" if use_ssl else ""
        log.info("Started GRPCInferenceService at %s:%d%s", host, bound, security)
        return bound

    async def stop(self, grace_s: float) -> None:
        """Refuse new calls; calls in flight get ``grace_s`` to finish, then are cancelled."""
        if self._server is not None:
            await self._server.stop(grace_s)
            self._server = None
