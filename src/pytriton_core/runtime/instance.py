"""A model instance: one worker thread pulling batches from the model's scheduler."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from pytriton_core.backends.base import BackendInstance, BackendModel, InstanceSpec
from pytriton_core.errors import InternalError, ServerError
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ComputeTiming, MemoryUsage
from pytriton_core.runtime.warmup import WarmupSample, run_warmup
from pytriton_core.scheduling.base import Retained, Scheduler

log = logging.getLogger(__name__)

# The batch, then one response per request or the error that failed the whole execution,
# the timing, and the requests the scheduler kept (re-queued) or answers with an error.
BatchDone = Callable[
    [
        list[InferenceRequest],
        Sequence[InferenceResponse | None] | ServerError,
        ComputeTiming,
        Retained,
    ],
    None,
]


class ModelInstance:
    """Runs ``BackendInstance.execute`` in its own thread, one batch at a time.

    The event loop is woken once per finished batch (``on_batch_done`` is scheduled with
    ``call_soon_threadsafe``), never once per request.
    """

    def __init__(
        self,
        spec: InstanceSpec,
        backend_model: BackendModel,
        scheduler: Scheduler,
        on_batch_done: BatchDone,
        schedule_on_loop: Callable[..., object],
        warmup: Sequence[WarmupSample] = (),
        model_name: str = "",
        index: int = 0,
    ) -> None:
        """``index``: the instance's position among the model's (what the scheduler knows
        it by)."""
        self.spec = spec
        self._model_name = model_name
        self.index = index
        self._warmup = warmup
        self._backend_model = backend_model
        self._scheduler = scheduler
        self._on_batch_done = on_batch_done
        self._schedule_on_loop = schedule_on_loop
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self.memory_usage: tuple[MemoryUsage, ...] = ()  # set once the backend instance exists
        self._thread = threading.Thread(target=self._run, name=f"instance-{spec.name}", daemon=True)

    def start(self) -> None:
        """Start the thread and wait until the backend instance exists (or failed)."""
        self._thread.start()
        self._ready.wait()
        if self._startup_error is not None:
            raise self._startup_error

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            backend_instance = self._backend_model.create_instance(self.spec)
        except BaseException as exc:
            self._startup_error = exc
            self._ready.set()
            return
        try:
            self.memory_usage = tuple(backend_instance.memory_usage())
            # Not ready until warmed up; a failing warm-up fails the instance (and the load).
            run_warmup(backend_instance, self._warmup, self.spec.name)
        except BaseException as exc:
            self._startup_error = exc
            self._finalize(backend_instance)
            self._ready.set()
            return
        self._ready.set()
        try:
            self._serve(backend_instance)
        finally:
            self._finalize(backend_instance)

    def _finalize(self, backend_instance: BackendInstance) -> None:
        try:
            backend_instance.finalize()
        except Exception:
            log.exception("finalize failed for instance %s", self.spec.name)

    def _serve(self, backend_instance: BackendInstance) -> None:
        scheduler = self._scheduler
        while (batch := scheduler.next_batch(self.index)) is not None:
            timing = ComputeTiming(start_ns=time.monotonic_ns())
            if log.isEnabledFor(logging.DEBUG):  # --log-verbose=1, in Triton's words
                log.debug(
                    "model %s, instance %s, executing %d requests",
                    self._model_name,
                    self.spec.name,
                    len(batch),
                )
            responses: Sequence[InferenceResponse | None] | ServerError
            try:
                responses = backend_instance.execute(batch, timing)
                if len(responses) != len(batch):
                    raise InternalError(
                        f"backend returned {len(responses)} responses for {len(batch)} requests"
                    )
            except ServerError as exc:
                responses = exc
            except Exception as exc:
                log.exception("execute failed on instance %s", self.spec.name)
                responses = InternalError(f"{type(exc).__name__}: {exc}")
            timing.close()
            # Before the next batch: a sequence's state and re-queued requests are settled
            # in execution order.
            retained: Retained
            try:
                retained = scheduler.completed(self.index, batch, responses)
            except Exception:
                log.exception("the scheduler failed to complete a batch of %s", self.spec.name)
                retained = {}
            self._schedule_on_loop(self._on_batch_done, batch, responses, timing, retained)
            # Keep nothing of a finished batch while waiting for the next one: its inputs
            # can be large, or views that hold a client's shared-memory region mapped.
            del batch, responses, retained
