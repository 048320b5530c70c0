"""The gRPC front end: HTTP/2 served on the running event loop, beside HTTP.

The transport is this server's own (``connection.py`` over the compiled HTTP/2 state
machine in ``csrc/h2``), not gRPC core: a call crosses one protocol object and one
compiled parser, with no completion queue, poller thread or task of gRPC's per call. Both
front ends call the same ``InferenceService`` on the same loop: one request path. The
transport settings (keepalive, message sizes, TLS, response compression, connection age
and counts) are tritonserver's ``--grpc-*`` flags, resolved in ``GrpcOptions``.
"""

from __future__ import annotations

import asyncio
import errno
import logging

from pytriton_core.errors import InternalError, InvalidArgumentError, UnavailableError
from pytriton_core.frontends.busy_poll import BusyPoll
from pytriton_core.frontends.grpc.connection import Endpoint, GrpcConnection
from pytriton_core.frontends.grpc.health import health_methods
from pytriton_core.frontends.grpc.service import GrpcInferenceService
from pytriton_core.frontends.tls import CertificateReloader
from pytriton_core.options import GrpcOptions, TlsOptions
from pytriton_core.service import InferenceService

log = logging.getLogger(__name__)


def _tls_options(options: GrpcOptions) -> TlsOptions:
    return TlsOptions(
        use_ssl=options.use_ssl,
        use_ssl_mutual=options.use_ssl_mutual,
        server_cert=options.server_cert,
        server_key=options.server_key,
        root_cert=options.root_cert,
    )


class GrpcFrontend:
    def __init__(self, service: InferenceService, busy_poll: BusyPoll | None = None) -> None:
        self._service = service
        self._busy_poll = busy_poll  # the server's, for its loop (frontends/busy_poll.py)
        self._server: asyncio.AbstractServer | None = None
        self._endpoint: Endpoint | None = None
        # None without TLS; else reloads the certificate files (SIGHUP).
        self.certificates: CertificateReloader | None = None

    async def start(self, host: str, port: int) -> int:
        """Serve on ``host:port`` (0: any free port); returns the bound port."""
        options = self._service.options.grpc
        methods = dict(GrpcInferenceService(self._service).methods())
        methods.update(health_methods(self._service))
        streaming = frozenset(path.encode() for path, m in methods.items() if m.stream_body)
        endpoint = Endpoint(
            self._service,
            {path.encode(): m for path, m in methods.items()},
            streaming,
            busy_poll=self._busy_poll,
        )
        tls = _tls_options(options)
        if tls.enabled:
            if tls.server_key is None:  # the first file Triton's gRPC server reads
                raise InvalidArgumentError(
                    "--grpc-server-key is required when SSL is enabled for GRPC"
                )
            self.certificates = CertificateReloader(tls, "GRPC", "--grpc", alpn=["h2"])
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                lambda: GrpcConnection(endpoint),
                host,
                port,
                reuse_address=True,
                reuse_port=options.reuse_port,
                backlog=1024,
                ssl=self.certificates.context if self.certificates is not None else None,
            )
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:  # tritonserver's words
                raise UnavailableError(f"Socket '{host}:{port}' already in use") from None
            raise InternalError(
                f"failed to start the GRPC service at {host}:{port}: {exc}"
            ) from None
        self._endpoint = endpoint
        bound: int = self._server.sockets[0].getsockname()[1]
        security = " (SSL)" if self.certificates is not None else ""
        log.info("Started GRPCInferenceService at %s:%d%s", host, bound, security)
        return bound

    async def stop(self, grace_s: float) -> None:
        """Refuse new calls; calls in flight get ``grace_s`` to finish, then are ended."""
        if self._server is None or self._endpoint is None:
            return
        self._server.close()
        connections = self._endpoint.connections
        for connection in list(connections):
            connection.goaway()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while any(c.busy for c in connections) and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for connection in list(connections):
            connection.cancel_calls()
        await self._server.wait_closed()
        self._server = None
