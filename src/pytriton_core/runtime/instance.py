"""A model instance: one worker thread pulling batches from the model's scheduler.

A lone request may instead run on the event loop itself (``execute_inline``), which saves
the two thread wake-ups it would cost (the rule and its figures: docs/architecture.md,
"Where executions run"). The model asks for that only when its backend holds the GIL while
it executes (``BackendModel.loop_execution``), nothing else is queued or executing, and
the instance's last ``INLINE_AFTER`` executions each took under ``INLINE_BUDGET_NS``
(with the dynamic batcher, the batch the requests of one loop turn form runs inline at the
end of the turn, on the same conditions);
one execution over the budget sends the next ones back to the thread until that many
short ones have run there again (a lone one after twice that many short ones is taken for
a preemption of the thread, and forgiven once).

A backend whose work runs in another process (``BackendModel.loop_dispatch``: process-mode
Python models) has its batches started and finished on the loop instead
(``begin_claimed``): the thread then only creates, warms up and finalizes the instance.
The loop hands over several executions at once (a bundle, up to the backend's
``loop_bundle``, only while the instance's executions are short: ``bundle_limit``), and up
to the backend's ``loop_depth`` bundles may be in flight (``claim_next``): the backend
executes them one at a time, in order; one waiting behind another counts that wait as
queue time (``_next_executing``), so the statistics read as if it had waited here.

A request may also run on the thread of a model that called it (BLS, ``execute_direct``
in runtime/model.py). Whoever executes first ``claim``s the instance (its execution lock,
taken without waiting by the loop and by callers): the worker thread takes it around every
batch, so the backend instance never runs two batches at once and is finalized only after
the last one, wherever it ran.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence

from pytriton_core import clock
from pytriton_core.backends.base import (
    BackendInstance,
    BackendModel,
    DeferredResponses,
    InstanceSpec,
    LoopExecution,
)
from pytriton_core.errors import InternalError, ServerError
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ComputeTiming, MemoryUsage
from pytriton_core.runtime.deferral import LoopDeferral, run_all
from pytriton_core.runtime.warmup import WarmupSample, run_warmup
from pytriton_core.scheduling.base import Retained, Scheduler
from pytriton_core.scheduling.rate_limiter import InstanceSlot

log = logging.getLogger(__name__)
_DEBUG = logging.DEBUG  # (module globals are read without an attribute lookup)

INLINE_BUDGET_NS = 1_000_000  # an execution this short may run on the event loop ...
INLINE_AFTER = 8  # ... once this many in a row were

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
# What an execution gives ``BatchDone`` after its batch.
BatchOutcome = tuple[Sequence[InferenceResponse | None] | ServerError, ComputeTiming, Retained]


class ModelInstance:
    """Runs ``BackendInstance.execute`` in its own thread, one batch at a time.

    The event loop is woken once per finished batch (``on_batch_done`` is scheduled with
    ``call_soon_threadsafe``), never once per request. An extension type (instance.pxd):
    the model's claims and inline executions are C calls.
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
        *,
        rate_limit: InstanceSlot | None = None,
        deferral: LoopDeferral | None = None,
    ) -> None:
        """``index``: the instance's position among the model's (what the scheduler knows
        it by). ``rate_limit``: the instance's place in the server's rate limiter, which it
        acquires before each execution (None: rate limiting is off). ``deferral``: the
        server's, which keeps the loop work of BLS calls a batch executed on this thread
        until the batch's outcome goes to the loop (runtime/deferral.py)."""
        self._deferral = deferral or LoopDeferral()
        self.spec = spec
        self._model_name = model_name
        self.index = index
        self._rate_limit = rate_limit
        self._warmup = warmup
        self._backend_model = backend_model
        self._scheduler = scheduler
        self._on_batch_done = on_batch_done
        self._schedule_on_loop = schedule_on_loop
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self.memory_usage: tuple[MemoryUsage, ...] = ()  # set once the backend instance exists
        self._backend_instance: BackendInstance | None = None  # once warmed up
        self._short_streak = 0  # executions in a row under INLINE_BUDGET_NS
        # Held while a batch executes, on whichever thread (see the module docstring).
        self._executing = threading.Lock()
        # (start ns, requests) of the batch executing now, for reporting a hung instance;
        # written by the executing thread, read by the loop (one reference: atomic).
        self._running_batch: tuple[int, int] | None = None
        # The executions started from the loop and not finished, oldest first: (how many
        # requests, timing, the executions of its bundle still unfinished: one list shared
        # by the bundle's entries). The execution lock is held, for all of them, while
        # there are any.
        self._begun: deque[tuple[int, ComputeTiming, list[int]]] = deque()
        self._bundles_in_flight = 0  # bundles (``begin`` calls) with an execution in _begun
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
            with self._executing:  # an execution elsewhere (a BLS caller's) ends first
                self._finalize(backend_instance)

    def _finalize(self, backend_instance: BackendInstance) -> None:
        try:
            backend_instance.finalize()
        except Exception:
            log.exception("finalize failed for instance %s", self.spec.name)

    @property
    def running_batch(self) -> tuple[int, int] | None:
        """When the batch executing now started (monotonic ns) and how many requests it
        holds; None while the instance is idle."""
        return self._running_batch

    @property
    def inline_ready(self) -> bool:
        """Whether a lone request may run on the loop, its recent executions being short
        (see the module's rule); it still needs a ``claim``."""
        return self._short_streak >= INLINE_AFTER

    def claim(self) -> bool:
        """Take the instance for one execution on the calling thread, if it has started,
        is not rate limited and is idle now (False: leave the request to the queue)."""
        return (
            self._backend_instance is not None
            and self._rate_limit is None  # a rate-limited execution waits for its slot
            and self._executing.acquire(False)  # (positional: half the cost of blocking=)
        )

    def claim_for_loop(self) -> bool:
        """``inline_ready`` and ``claim`` in one call (the loop asks once per request)."""
        return self._short_streak >= INLINE_AFTER and self.claim()

    def claim_next(self) -> bool:
        """On the loop: take the instance for one more bundle started from the loop while
        earlier ones are in flight, up to the backend's ``loop_depth`` (False: none in
        flight, ask ``claim``; or no room)."""
        return 0 < self._bundles_in_flight < self._backend_model.loop_depth

    @property
    def bundle_limit(self) -> int:
        """How many executions the loop may hand over in one bundle now: the backend's
        ``loop_bundle`` while the instance's last executions were short (the inline rule's
        streak), else one (the first one's answer would wait for the others)."""
        if self._short_streak >= INLINE_AFTER:
            return self._backend_model.loop_bundle
        return 1

    def release(self) -> None:
        """Give back a claim (or a ``claim_next``) that executes nothing after all."""
        if not self._begun:
            self._executing.release()

    def execute_inline(self, batch: list[InferenceRequest]) -> None:
        """Execute ``batch`` on the calling thread (the event loop) and hand its outcome
        to ``on_batch_done`` directly; the instance must be claimed (released here)."""
        # ``execute_claimed``, spelled out: this runs once per request on the loop.
        assert self._backend_instance is not None
        try:
            responses, timing, retained = self._execute(self._backend_instance, batch)
        finally:
            self._executing.release()
        self._on_batch_done(batch, responses, timing, retained)

    def execute_claimed(self, batch: list[InferenceRequest]) -> BatchOutcome:
        """Execute ``batch`` on the calling thread and return its outcome; the instance
        must be claimed (released here)."""
        assert self._backend_instance is not None
        try:
            return self._execute(self._backend_instance, batch)
        finally:
            self._executing.release()

    def _serve(self, backend_instance: BackendInstance) -> None:
        self._backend_instance = backend_instance
        scheduler = self._scheduler
        rate_limit = self._rate_limit
        deferral = self._deferral
        # Responses a backend defers are built on the loop, unless the scheduler reads them.
        defer = not scheduler.reads_responses
        while (batch := scheduler.next_batch(self.index)) is not None:
            if rate_limit is not None:
                rate_limit.acquire()  # the wait counts as queueing, as in Triton
            deferred = deferral.start()
            try:
                with self._executing:  # (waits while a claimed execution elsewhere finishes)
                    outcome = self._execute(backend_instance, batch, defer)
            finally:
                deferral.stop()
            if deferred or type(outcome[0]) is DeferredResponses:
                # BLS work counted before this batch's responses leave; deferred responses
                # built on the loop (backends/base.py, ``DeferredResponses``).
                self._schedule_on_loop(self._finish_on_loop, deferred, batch, outcome)
            else:
                self._schedule_on_loop(self._on_batch_done, batch, *outcome)
            # Keep nothing of a finished batch while waiting for the next one: its inputs
            # and outputs can be large, or views that hold a client's shared-memory region
            # mapped (the leak check, tests/integration/leaks.py, found the outcome kept).
            del batch, outcome, deferred

    def _finish_on_loop(
        self,
        deferred: list[Callable[[], object]],
        batch: list[InferenceRequest],
        outcome: BatchOutcome,
    ) -> None:
        run_all(deferred)
        responses, timing, retained = outcome
        if type(responses) is DeferredResponses:
            responses = _finished_responses(responses, self.spec.name)
        self._on_batch_done(batch, responses, timing, retained)

    def begin_claimed(self, batches: list[list[InferenceRequest]], alone: bool = False) -> None:
        """Start ``batches`` from the event loop (a ``loop_dispatch`` backend), handed over
        together, without waiting: each one's outcome goes to ``on_batch_done`` on the loop
        once the backend reports it. The instance must be claimed; the claim is released
        when the last batch in flight finishes. ``alone``: they are all the model has in
        flight (``BackendInstance.begin``)."""
        backend_instance = self._backend_instance
        assert backend_instance is not None
        begun = self._begun
        unfinished = [len(batches)]  # this bundle's executions not finished yet
        executions: list[LoopExecution] = []
        for batch in batches:
            timing = self._started(batch)
            begun.append((len(batch), timing, unfinished))
            executions.append((batch, timing, functools.partial(self._finished, batch, timing)))
        self._bundles_in_flight += 1
        # The oldest execution in flight is the one executing (``_started`` named the last).
        self._running_batch = (begun[0][1].start_ns, begun[0][0])
        try:
            backend_instance.begin(executions, alone)
        except Exception as exc:
            error = _failure(exc, self.spec.name)
            for _batch, _timing, finished in executions:
                finished(error)

    def _finished(
        self,
        batch: list[InferenceRequest],
        timing: ComputeTiming,
        responses: Sequence[InferenceResponse | None] | ServerError,
    ) -> None:
        begun = self._begun
        oldest = begun[0][1] is timing
        for index, (_, started, unfinished) in enumerate(begun):
            if started is timing:
                del begun[index]
                unfinished[0] -= 1
                if not unfinished[0]:
                    self._bundles_in_flight -= 1
                break
        try:
            outcome = self._settled(batch, timing, _checked(responses, batch))
        finally:
            if not begun:
                self._executing.release()
            elif oldest:
                self._next_executing(timing)
            if begun:
                self._running_batch = (begun[0][1].start_ns, begun[0][0])
        self._on_batch_done(batch, *outcome)

    def _next_executing(self, previous: ComputeTiming) -> None:
        """The oldest batch in flight has finished: the next one, which waited behind it
        in the backend, executes from when it finished. That wait counts as queue time:
        its compute spans move later by it (compute input keeps its length)."""
        timing = self._begun[0][1]
        if not timing.input_end_ns:  # its start failed: nothing waited
            return
        wait = previous.infer_end_ns - timing.input_end_ns
        if wait > 0:
            timing.start_ns += wait
            timing.input_end_ns += wait

    def _started(self, batch: list[InferenceRequest]) -> ComputeTiming:
        timing = ComputeTiming(clock.now_ns())  # (positional: keywords take a slower call)
        self._running_batch = (timing.start_ns, len(batch))
        if log.isEnabledFor(_DEBUG):  # --log-verbose=1, in Triton's words
            log.debug(
                "model %s, instance %s, executing %d requests",
                self._model_name,
                self.spec.name,
                len(batch),
            )
        for request in batch:
            request.executing = True
        return timing

    def _execute(
        self, backend_instance: BackendInstance, batch: list[InferenceRequest], defer: bool = False
    ) -> BatchOutcome:
        """Run one batch; its outcome is what ``on_batch_done`` takes after the batch.
        ``defer``: responses the backend defers stay a ``DeferredResponses`` (for the
        loop to finish, ``_finish_on_loop``); else they are built here."""
        timing = self._started(batch)
        responses: Sequence[InferenceResponse | None] | ServerError
        try:
            responses = backend_instance.execute(batch, timing)
            if type(responses) is DeferredResponses:
                if not defer:
                    responses = responses.finish()
            elif len(responses) != len(batch):  # (``_checked``: a backend returns a list)
                responses = _miscounted(responses, batch)
        except Exception as exc:
            responses = _failure(exc, self.spec.name)
        return self._settled(batch, timing, responses)

    def _settled(
        self,
        batch: list[InferenceRequest],
        timing: ComputeTiming,
        responses: Sequence[InferenceResponse | None] | ServerError,
    ) -> BatchOutcome:
        """After an execution: timing, the short-execution streak, the scheduler's word."""
        timing.close()
        self._running_batch = None
        short = timing.end_ns - timing.start_ns < INLINE_BUDGET_NS
        if short:
            self._short_streak += 1
        elif self._short_streak >= 2 * INLINE_AFTER:
            # One long execution after a long run of short ones: the clock is the wall's, and
            # most likely the thread was preempted meanwhile (under load on a small machine
            # it is, now and then). It is forgiven: the executions stay where they run, but
            # another long one within ``INLINE_AFTER`` sends them to the thread.
            self._short_streak = INLINE_AFTER
        else:
            self._short_streak = 0
        # Before the next batch: a sequence's state and re-queued requests are settled
        # in execution order.
        retained: Retained
        try:
            retained = self._scheduler.completed(self.index, batch, responses)
        except Exception:
            log.exception("the scheduler failed to complete a batch of %s", self.spec.name)
            retained = {}
        if self._rate_limit is not None:  # after completed: requests it re-queued are work too
            self._rate_limit.release(more_work=self._scheduler.pending_count() > 0)
        return responses, timing, retained


def _finished_responses(
    deferred: DeferredResponses, instance: str
) -> Sequence[InferenceResponse | None] | ServerError:
    """A deferred batch's responses, or the error that fails the batch (on the loop)."""
    try:
        return deferred.finish()
    except Exception as exc:
        return _failure(exc, instance)


def _failure(exc: Exception, instance: str) -> ServerError:
    """The error that fails a batch whose execution raised ``exc`` (called in its
    ``except`` block: anything but a ServerError is logged with its traceback)."""
    if isinstance(exc, ServerError):
        return exc
    log.exception("execute failed on instance %s", instance)
    return InternalError(f"{type(exc).__name__}: {exc}")


def _checked(
    responses: Sequence[InferenceResponse | None] | ServerError, batch: list[InferenceRequest]
) -> Sequence[InferenceResponse | None] | ServerError:
    if not isinstance(responses, ServerError) and len(responses) != len(batch):
        return _miscounted(responses, batch)
    return responses


def _miscounted(
    responses: Sequence[InferenceResponse | None], batch: list[InferenceRequest]
) -> ServerError:
    return InternalError(f"backend returned {len(responses)} responses for {len(batch)} requests")
