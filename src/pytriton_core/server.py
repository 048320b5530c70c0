"""The server: wires the repository, the core service and the front ends; start and stop."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal

from pytriton_core import loop_polling
from pytriton_core.backends.custom_metrics import MetricRegistry
from pytriton_core.backends.registry import BackendRegistry
from pytriton_core.errors import InternalError
from pytriton_core.frontends.busy_poll import BusyPoll
from pytriton_core.frontends.grpc import GrpcFrontend
from pytriton_core.frontends.http import HttpFrontend
from pytriton_core.frontends.openai import openai_router
from pytriton_core.inference.response_cache import ResponseCache
from pytriton_core.logging_settings import LogControl
from pytriton_core.memory import SharedMemoryManager
from pytriton_core.memory.pinned import StagingPool
from pytriton_core.metrics import MetricsEndpoint, MetricsReporter
from pytriton_core.options import ModelControlMode, RateLimitMode, ServerOptions
from pytriton_core.repository.manager import ModelManager
from pytriton_core.restricted import open_repository_api_warning
from pytriton_core.runtime.services import ServerServices
from pytriton_core.scheduling.rate_limiter import RateLimiter
from pytriton_core.service import InferenceService
from pytriton_core.tracing import TraceManager
from pytriton_core.workers.board import WorkerState
from pytriton_core.workers.peers import PeerLink
from pytriton_core.workers.seat import WorkerSeat

log = logging.getLogger(__name__)

_EXIT_TIMEOUT = "Internal - Exit timeout expired. Exiting immediately."


def server_services(options: ServerOptions) -> ServerServices:
    """The response cache and the rate limiter the options ask for."""
    cache = options.cache
    limiter = options.rate_limiter
    response_cache = None
    if cache.name is not None:
        response_cache = ResponseCache.from_settings(cache.name, cache.settings)
        log.info("Response Cache is created with size %d bytes", response_cache.capacity_bytes)
    for flag, folder in (
        ("--backend-directory", options.backend_directory),
        ("--repoagent-directory", options.repoagent_directory),
    ):
        if folder is not None and not folder.is_dir():
            log.warning("%s=%s: not a folder, so no plug-ins are found there", flag, folder)
    if cache.directory is not None:
        log.info(
            "--cache-directory=%s: the local cache is built into this server; the folder "
            "is not searched",
            cache.directory,
        )
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

    def __init__(self, options: ServerOptions, seat: WorkerSeat | None = None) -> None:
        self.options = options
        # One worker of --workers N: its place on the board the workers share.
        self._seat = seat
        # The server log's settings (the logging extension); ``log_control.install()``
        # routes Python logging through them (the CLI does; an embedding application
        # keeps its own logging).
        self.log_control = LogControl(options.log)
        self._http: HttpFrontend | None = None
        self._grpc: GrpcFrontend | None = None
        self._openai: HttpFrontend | None = None  # the OpenAI-compatible API's listener
        self._service: InferenceService | None = None
        self._manager: ModelManager | None = None
        self.http_port: int | None = None
        self.grpc_port: int | None = None
        self.openai_port: int | None = None
        self.metrics_port: int | None = None
        self._poller: asyncio.Task[None] | None = None
        self._tracer: TraceManager | None = None
        self._reporter: MetricsReporter | None = None
        self._metrics_endpoint: MetricsEndpoint | None = None
        self._peers: PeerLink | None = None
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
        seat = self._seat
        statistics = None if seat is None else seat.statistics_factory()
        if seat is not None and statistics is not None:
            seat.set_state(WorkerState.STARTING)
            self._peers = seat.peer_link(statistics)
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
            **({} if statistics is None else {"statistics": statistics}),
            changes=self._peers,
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
            peers_ready=None if seat is None else seat.all_serving,
            peers=self._peers,
        )
        if self._peers is not None:
            await self._peers.start(self._service)
        warning = open_repository_api_warning(
            self.options.restricted,
            explicit_mode=self.options.model_control_mode is ModelControlMode.EXPLICIT,
            http=self.options.allow_http,
            grpc=self.options.allow_grpc,
        )
        if warning is not None:
            log.warning("%s", warning)
        failed = await manager.load_startup_models()
        if failed:
            # Triton's words; which models and why are in the log lines above.
            failure = InternalError("failed to load all models")
            if self.options.exit_on_error:
                await manager.unload_all()
                raise failure
            log.error("%s", failure.status_text)
        if self._peers is not None:
            # Take every change from now on; started in a dead worker's place, first serve
            # what the other workers serve, with the settings and regions they have.
            mode = self.options.model_control_mode
            await self._peers.join(
                self._service,
                explicit_models=mode is ModelControlMode.EXPLICIT,
                polled_models=mode is ModelControlMode.POLL,
            )
        if self.options.model_control_mode is ModelControlMode.POLL and self._peers is None:
            # Under --workers N the parent keeps the poll's clock (``workers/sequencer.py``).
            self._poller = asyncio.get_running_loop().create_task(
                manager.poll_forever(self.options.repository_poll_secs)
            )
        # One polling window for the loop, shared by its front ends (0: none).
        busy_poll = (
            BusyPoll(asyncio.get_running_loop(), self.options.busy_poll_us)
            if self.options.busy_poll_us > 0
            else None
        )
        if self.options.allow_http:
            self._http = HttpFrontend(self._service, busy_poll=busy_poll)
            self.http_port = await self._http.start(
                self.options.http_address, self.options.http_port
            )
        if self.options.allow_openai:
            router = openai_router(self._service)
            self._openai = HttpFrontend(self._service, router, name="OpenAIService")
            self.openai_port = await self._openai.start(
                self.options.openai_address or self.options.http_address, self.options.openai_port
            )
        if self.options.allow_grpc:
            self._grpc = GrpcFrontend(self._service, busy_poll)
            self.grpc_port = await self._grpc.start(
                self.options.grpc_address, self.options.grpc_port
            )
        custom_metrics = None if seat is None else seat.shared_custom_metrics(self.metric_registry)
        if self.options.allow_metrics:
            self._reporter = MetricsReporter(
                self.options.metrics,
                manager.loaded,
                self.metric_registry.snapshot if custom_metrics is None else custom_metrics.summed,
                pinned_pool=staging.stats
                if seat is None
                else seat.summed_pinned_pool(staging.stats),
                response_cache=self.services.response_cache,
            )
            await self._reporter.start()
            self._metrics_endpoint = MetricsEndpoint(self._reporter)
            self.metrics_port = await self._metrics_endpoint.start(
                self.options.metrics_address or self.options.http_address,
                self.options.metrics_port,
                reuse_port=seat is not None,
            )
        if busy_poll is not None:
            # Process mode's hand-offs to worker processes poll too; registered once started,
            # so that a start that fails leaves nothing for ``stop`` to take back.
            loop_polling.register(asyncio.get_running_loop(), busy_poll.answered)
        if self.options.gc_threshold > 0:
            _, older, oldest = gc.get_threshold()
            gc.set_threshold(self.options.gc_threshold, older, oldest)
        self._service.live = True
        if seat is not None:
            seat.set_state(WorkerState.SERVING)
            seat.watch_parent(loop, staging.stats, custom_metrics)

    def metrics_text(self) -> str:
        """The Prometheus page, as ``/metrics`` serves it ("" with metrics off)."""
        return self._reporter.render() if self._reporter is not None else ""

    async def stop(self) -> bool:
        """Stop accepting requests, finish those in flight, finalize every model.

        While the requests in flight finish (up to ``--exit-timeout-secs``) the front ends
        stay up: health answers 503 "Server exiting", new inference requests and new
        sequences are refused (UNAVAILABLE "Server is stopping, ..."), and the sequences in
        flight take their next requests until they end (or idle out).
        Then the front ends close, every model is unloaded (``finalize``) and held traces
        are written. Returns False when the exit timeout expired with requests still
        executing (they are abandoned, as Triton abandons them).
        """
        service, manager = self._service, self._manager
        if service is None or manager is None or service.exiting:
            return True
        service.exiting = True
        manager.stop_accepting()
        if self._seat is not None:
            self._seat.set_state(WorkerState.DRAINING)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.options.exit_timeout_secs
        if self._poller is not None:
            self._poller.cancel()
        log.info("Waiting for in-flight requests to complete.")
        next_report = loop.time()
        # Triton counts the seconds down from --exit-timeout-secs, one per report; reading
        # the clock instead says 19 first whenever the loop is a little late.
        countdown = int(self.options.exit_timeout_secs)
        while True:
            in_flight = manager.in_flight()
            if loop.time() >= next_report or not in_flight:
                log.info(
                    "Timeout %d: Found %d in-flight inference requests",
                    max(0, countdown),
                    in_flight,
                )
                countdown -= 1
                next_report += 1.0
            if not in_flight or loop.time() >= deadline:
                break
            await asyncio.sleep(0.01)
        clean = not manager.in_flight()
        if self._http is not None:
            await self._http.stop(max(0.0, deadline - loop.time()))
        if self._openai is not None:
            await self._openai.stop(max(0.0, deadline - loop.time()))
        if self._grpc is not None:
            await self._grpc.stop(max(0.0, deadline - loop.time()))
        if self._metrics_endpoint is not None:
            await self._metrics_endpoint.stop()
        if self._reporter is not None:
            await self._reporter.stop()
        log.info("All models are stopped, unloading models")
        await manager.unload_all(max(0.0, deadline - loop.time()))
        loop_polling.unregister(loop)
        if self._peers is not None:
            await self._peers.stop()
        if self._tracer is not None:
            self._tracer.close()
        return clean

    def reload_certificates(self) -> bool:
        """Read the TLS certificate files of both front ends again (SIGHUP): connections
        accepted from now on use them. False if a front end kept its old ones."""
        reloaded = True
        for frontend in (self._http, self._grpc):
            certificates = frontend.certificates if frontend is not None else None
            if certificates is not None:
                reloaded = certificates.reload() and reloaded
        return reloaded

    async def run_until_signalled(self) -> int:
        """Serve until SIGINT or SIGTERM, then stop; the process's exit status. SIGHUP
        reloads the TLS certificates."""
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, self.reload_certificates)
        await self.start()
        await stop.wait()
        log.info("signal received: stopping")
        if not await self.stop():
            log.error("failed to stop server: %s", _EXIT_TIMEOUT)
            return 1
        return 0
