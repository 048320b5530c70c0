"""The metrics listener (``--metrics-port``, default 8002): ``GET /metrics`` answers the
Prometheus page; any other path answers 200 with an empty body and other methods 405, as
Triton's metrics server does. It reuses the HTTP front end's protocol on its own socket,
so scrapes never share a connection with inference traffic."""

from __future__ import annotations

import asyncio
import logging

from pytriton_core.frontends.http.messages import HttpResponse
from pytriton_core.frontends.http.router import Request, RouteMatch, Router
from pytriton_core.frontends.http.server import HttpProtocol, as_protocol
from pytriton_core.metrics.exposition import CONTENT_TYPE
from pytriton_core.metrics.reporter import MetricsReporter

log = logging.getLogger(__name__)

_MAX_BODY = 64 * 1024  # scrapes have no body


class MetricsEndpoint:
    def __init__(self, reporter: MetricsReporter) -> None:
        self._reporter = reporter
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[HttpProtocol] = set()
        self._router = Router()

        async def metrics(request: Request, match: RouteMatch) -> HttpResponse:
            return HttpResponse(200, (self._reporter.render().encode(),), CONTENT_TYPE)

        async def empty(request: Request, match: RouteMatch) -> HttpResponse:
            return HttpResponse(200, (), CONTENT_TYPE)

        # Triton's metrics port has no restricted category.
        self._router.add(r"/metrics/?", None, GET=metrics)
        self._router.add(r".*", None, GET=empty)

    async def start(self, host: str, port: int, reuse_port: bool = False) -> int:
        """Listen; ``reuse_port``: the workers of ``--workers N`` share the port (each
        serves the page summed over all of them)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: as_protocol(HttpProtocol(self._router, _MAX_BODY, self._connections)),
            host,
            port,
            reuse_address=True,
            reuse_port=reuse_port,
        )
        bound: int = self._server.sockets[0].getsockname()[1]
        log.info("Started Metrics Service at %s:%d", host, bound)
        return bound

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for connection in list(self._connections):
            connection.close_when_idle()
        self._server = None
