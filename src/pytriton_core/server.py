"""The server: wires the repository, the core service and the front ends; start and stop."""

from __future__ import annotations

import asyncio
import logging
import signal

from pytriton_core.backends.custom_metrics import MetricRegistry
from pytriton_core.backends.registry import BackendRegistry
from pytriton_core.errors import InternalError
from pytriton_core.frontends.grpc import GrpcFrontend
from pytriton_core.frontends.http import HttpFrontend
from pytriton_core.inference.response_cache import ResponseCache
from pytriton_core.logging_settings import LogControl
from pytriton_core.memory import SharedMemoryManager
from pytriton_core.memory.pinned import StagingPool
from pytriton_core.metrics import MetricsEndpoint, MetricsReporter
from pytriton_core.options import ModelControlMode, RateLimitMode, ServerOptions
from pytriton_core.repository.manager import ModelManager
from pytriton_core.runtime.services import ServerServices
from pytriton_core.scheduling.rate_limiter import RateLimiter
from pytriton_core.service import InferenceService
from pytriton_core.tracing import TraceManager

log = logging.getLogger(__name__)


def server_services(options: ServerOptions) -> ServerServices:
    """The response cache and the rate limiter the options ask for."""
    cache = options.cache
    limiter = options.rate_limiter
    response_cache = None
    if cache.name is not None:
        response_cache = ResponseCache.from_settings(cache.name, cache.settings)
        log.info("Response Cache is created with size %d bytes", response_cache.capacity_bytes)
    return ServerServices(
        response_cache=response_cache,
        rate_limiter=RateLimiter(limiter.resources)
        if limiter.mode is RateLimitMode.EXECUTION_COUNT
        else None,
    )


class ServerRuntime:
    """The server on the current event loop: ``await start()``, serve, ``await stop()``.

    The CLI runs it on the main thread; ``pytriton_core.Server`` runs it on a thread of
    its own for in-process use.
    """

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        # The server log's settings (the logging extension); ``log_control.install()``
        # routes Python logging through them (the CLI does; an embedding application
        # keeps its own logging).
        self.log_control = LogControl(options.log)
        self._http: HttpFrontend | None = None
        self._grpc: GrpcFrontend | None = None
        self._service: InferenceService | None = None
        self._manager: ModelManager | None = None
        self.http_port: int | None = None
        self.grpc_port: int | None = None
        self.metrics_port: int | None = None
        self._poller: asyncio.Task[None] | None = None
        self._tracer: TraceManager | None = None
        self._reporter: MetricsReporter | None = None
        self._metrics_endpoint: MetricsEndpoint | None = None
        # Custom metrics that models create with pb_utils.MetricFamily: this server's own.
        self.metric_registry = MetricRegistry()
        self.services = ServerServices()

    @property
    def service(self) -> InferenceService:
        if self._service is None:
            raise RuntimeError("server not started")
        return self._service

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tracer = TraceManager(self.options.trace)  # refuses an unusable trace mode
        staging = StagingPool(self.options.memory.pinned_memory_pool_byte_size)
        self.services = server_services(self.options)
        manager = self._manager = ModelManager(
            self.options,
            BackendRegistry(self.options.backend_directory),
            loop,
            host_staging=staging,
            custom_metrics=self.metric_registry,
            services=self.services,
        )
        shared_memory = SharedMemoryManager(
            allow_client=self.options.memory.allow_client_shm, staging=staging
        )
        self._service = InferenceService(
            self.options,
            manager,
            shared_memory,
            tracer=self._tracer,
            log_control=self.log_control,
        )
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
            self._reporter = MetricsReporter(
                self.options.metrics,
                manager.loaded,
                self.metric_registry,
                pinned_pool=staging.stats,
                response_cache=self.services.response_cache,
            )
            await self._reporter.start()
            self._metrics_endpoint = MetricsEndpoint(self._reporter)
            self.metrics_port = await self._metrics_endpoint.start(
                self.options.metrics_address or self.options.http_address,
                self.options.metrics_port,
            )
        self._service.live = True

    def metrics_text(self) -> str:
        """The Prometheus page, as ``/metrics`` serves it ("" with metrics off)."""
        return self._reporter.render() if self._reporter is not None else ""

    async def stop(self) -> None:
        """Stop accepting requests, finish those in flight, finalize every model.

        While the requests in flight finish (up to ``--exit-timeout-secs``) the front ends
        stay up: health answers 503 "Server exiting" and new inference requests are refused.
        Then the front ends close, every model is unloaded (``finalize``) and held traces
        are written.
        """
        service, manager = self._service, self._manager
        if service is None or manager is None or service.exiting:
            return
        service.exiting = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.options.exit_timeout_secs
        if self._poller is not None:
            self._poller.cancel()
        if manager.in_flight():
            log.info("waiting for %d in-flight inference requests", manager.in_flight())
        while manager.in_flight() and loop.time() < deadline:
            await asyncio.sleep(0.01)
        if manager.in_flight():
            log.warning(
                "exit timeout expired with %d inference requests in flight", manager.in_flight()
            )
        remaining = max(0.0, deadline - loop.time())
        if self._http is not None:
            await self._http.stop(remaining)
        if self._grpc is not None:
            await self._grpc.stop(max(0.0, deadline - loop.time()))
        if self._metrics_endpoint is not None:
            await self._metrics_endpoint.stop()
        if self._reporter is not None:
            await self._reporter.stop()
        await manager.unload_all()
        if self._tracer is not None:
            self._tracer.close()

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
