"""The server: wires the repository, the core service and the front ends; start and stop."""

from __future__ import annotations

import asyncio
import logging
import signal

from pytriton_core.backends.registry import BackendRegistry
from pytriton_core.core.service import InferenceService
from pytriton_core.errors import InternalError
from pytriton_core.frontends.grpc import GrpcFrontend
from pytriton_core.frontends.http import HttpFrontend
from pytriton_core.options import ModelControlMode, ServerOptions
from pytriton_core.repository.manager import ModelManager

log = logging.getLogger(__name__)


class ServerRuntime:
    """The server on the current event loop: ``await start()``, serve, ``await stop()``.

    The CLI runs it on the main thread; ``pytriton_core.Server`` runs it on a thread of
    its own for in-process use.
    """

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self._http: HttpFrontend | None = None
        self._grpc: GrpcFrontend | None = None
        self._service: InferenceService | None = None
        self.http_port: int | None = None
        self.grpc_port: int | None = None
        self._poller: asyncio.Task[None] | None = None

    @property
    def service(self) -> InferenceService:
        if self._service is None:
            raise RuntimeError("server not started")
        return self._service

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        manager = ModelManager(self.options, BackendRegistry(), loop)
        self._service = InferenceService(self.options, manager)
        failed = await manager.load_startup_models()
        if failed and self.options.exit_on_error:
            await manager.unload_all()
            raise InternalError(f"failed to load all models: {', '.join(sorted(failed))}")
        if self.options.model_control_mode is ModelControlMode.POLL:
            self._poller = asyncio.get_running_loop().create_task(
                manager.poll_forever(self.options.repository_poll_secs)
            )
        if self.options.allow_http:
            self._http = HttpFrontend(self._service)
            self.http_port = await self._http.start(
                self.options.http_address, self.options.http_port
            )
        if self.options.allow_grpc:
            self._grpc = GrpcFrontend(self._service)
            self.grpc_port = await self._grpc.start(
                self.options.grpc_address, self.options.grpc_port
            )
        if self.options.allow_metrics:
            log.warning("the metrics endpoint is not available in this version")
        self._service.live = True

    async def stop(self) -> None:
        """Stop accepting requests, finish those in flight, finalize every model."""
        if self._service is None:
            return
        self._service.exiting = True
        if self._poller is not None:
            self._poller.cancel()
        if self._http is not None:
            await self._http.stop()
        if self._grpc is not None:
            await self._grpc.stop(self.options.exit_timeout_secs)
        await self._service.manager.unload_all()

    async def run_until_signalled(self) -> None:
        """Serve until SIGINT or SIGTERM, then stop gracefully."""
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await self.start()
        await stop.wait()
        log.info("signal received: stopping")
        await self.stop()
