"""A loaded ensemble: its requests run as steps through the composing models.

``EnsembleModel`` is a ``Model`` without instances of its own. Each request gets an
``EnsembleRun`` (``scheduling/ensemble.py``) that decides which step runs when; every step
request goes to the composing model version through ``Model.submit``, so that model's
validation, scheduler (its dynamic batcher included), instances and statistics apply.
The composing models are looked up per request with the ``resolve`` function the
repository hands in, so a reloaded composing model serves the next request. With
``response_cache`` (and a server cache) a request is first looked up in the cache, as
Triton's ensemble scheduler does: a hit runs no step; a miss's successful final response
is stored.

Everything here runs on the server's event loop.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from google.protobuf.message import Message

from pytriton_core.backends.base import BackendInstance, BackendModel, InstanceSpec
from pytriton_core.config.spec import ModelSpec
from pytriton_core.errors import CancelledError, InternalError, ServerError
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ComputeTiming, FailureReason, ModelStatistics
from pytriton_core.runtime.model import CANCELLED_MESSAGE, Model, ModelState
from pytriton_core.runtime.services import ServerServices
from pytriton_core.scheduling.ensemble import EnsemblePlan, EnsembleRun, StepCall

# Finds the model version a step runs on (the repository's lookup, with its messages).
ResolveModel = Callable[[str, int], Model]


class _NoInstances(BackendModel):
    """An ensemble has no backend: nothing to create, nothing to finalize."""

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        raise InternalError("an ensemble has no instances")


class EnsembleModel(Model):
    """One version of an ensemble (see the module docstring)."""

    def __init__(
        self,
        spec: ModelSpec,
        config: Message,
        model_dir: Path,
        loop: asyncio.AbstractEventLoop,
        resolve: ResolveModel,
        stats: ModelStatistics | None = None,
        services: ServerServices | None = None,
    ) -> None:
        super().__init__(spec, config, model_dir, _NoInstances(), loop, stats, services)
        self._plan = EnsemblePlan(spec)
        self._resolve = resolve
        scheduling = spec.ensemble_scheduling
        assert scheduling is not None  # EnsemblePlan refuses a spec without one
        # max_inflight_requests: at most this many requests of each step in flight, over
        # all requests of the ensemble (0: no limit); the others wait their turn.
        self._step_limit = scheduling.max_inflight_requests
        steps = len(self._plan.steps)
        self._step_in_flight = [0] * steps
        self._step_waiting: list[deque[tuple[StepCall, EnsembleRun, Model]]] = [
            deque() for _ in range(steps)
        ]

    def start(self, instance_specs: Sequence[InstanceSpec] = ()) -> None:
        self.state = ModelState.READY

    def pending_request_count(self) -> int:
        """Step requests waiting for a ``max_inflight_requests`` slot."""
        return sum(len(waiting) for waiting in self._step_waiting)

    def submit(self, request: InferenceRequest) -> None:
        self._admit(request)
        if self._cache is not None and self._answer_from_cache(request):
            return  # a hit: no step runs
        compute_start_ns = time.monotonic_ns()
        self._in_flight += 1
        targets: list[Model] = []
        try:
            resolved: dict[tuple[str, int], Model] = {}
            for step in self._plan.steps:
                key = (step.model_name, step.model_version)
                if key not in resolved:
                    resolved[key] = self._resolve(*key)
                targets.append(resolved[key])
        except ServerError as exc:
            error = ServerError.from_code(exc.code, f"in ensemble '{self.name}', {exc.message}")
            self._forget_miss(request)
            self._complete(request, None, compute_start_ns)
            request.deliver(InferenceResponse.failed(error), True)
            return

        run: EnsembleRun

        def submit_step(call: StepCall) -> None:
            self._submit_step(call, run, targets[call.step.index])

        def deliver(response: InferenceResponse | None, final: bool) -> None:
            if final and self._cache is not None:
                if response is None:
                    self._forget_miss(request)
                else:  # stored as computed: classification applies per request
                    self._store_in_cache(request, response)
            if response is not None and response.error is None:
                response = self._apply_classification(request, response)
            if final:
                if run.computed:
                    self._complete(request, run, compute_start_ns)
                else:  # counted once the steps still executing have their compute times
                    run.on_computed = functools.partial(
                        self._complete, request, run, compute_start_ns
                    )
            request.deliver(response, final)

        run = EnsembleRun(self._plan, request, [t.spec for t in targets], submit_step, deliver)
        request.on_cancel(run.cancel_steps)
        run.start()

    # ------------------------------------------------------------------ steps

    def _submit_step(self, call: StepCall, run: EnsembleRun, target: Model) -> None:
        index = call.step.index
        if self._step_limit and self._step_in_flight[index] >= self._step_limit:
            self._step_waiting[index].append((call, run, target))
            return
        self._dispatch(call, run, target, raising=True)

    def _dispatch(self, call: StepCall, run: EnsembleRun, target: Model, raising: bool) -> None:
        """Submit a step request to its model; a refusal raises, or fails the step when
        the step had waited for its turn (``raising=False``)."""
        # Cancellation is checked between steps: a cancelled request starts no more steps;
        # nor does one that failed while this step waited for its turn.
        refusal: ServerError | None = run.error
        if run.request.cancelled or call.request.cancelled:
            refusal = CancelledError(CANCELLED_MESSAGE)
        if refusal is not None:
            if raising:
                raise refusal
            run.step_failed(call, refusal)
            return
        index = call.step.index
        respond = call.request.on_response
        assert respond is not None

        def released(response: InferenceResponse | None, final: bool) -> None:
            if final:
                self._release_step(index)
            respond(response, final)

        call.request.on_response = released
        self._step_in_flight[index] += 1
        if run.request.trace is not None:  # each step traced as a child, in issue order
            call.request.trace = run.request.trace.child(call.step.model_name)
        try:
            target.submit(call.request)
        except ServerError as exc:
            self._step_in_flight[index] -= 1
            if call.request.trace is not None:
                call.request.trace.finish()  # refused: what it has is written
            if raising:
                raise
            run.step_failed(call, exc)

    def _release_step(self, index: int) -> None:
        self._step_in_flight[index] -= 1
        waiting = self._step_waiting[index]
        while waiting and self._step_in_flight[index] < self._step_limit:
            call, run, target = waiting.popleft()
            self._dispatch(call, run, target, raising=False)

    # ------------------------------------------------------------- statistics

    def _complete(
        self, request: InferenceRequest, run: EnsembleRun | None, compute_start_ns: int
    ) -> None:
        """The request is answered: count it as Triton counts an ensemble request."""
        end_ns = time.monotonic_ns()
        stats = self.stats
        if run is None or run.error is not None:
            # A failure anywhere in the ensemble counts once here, with reason OTHER.
            stats.record_request_failure(request.arrival_ns, end_ns, FailureReason.OTHER)
        else:
            input_end = compute_start_ns + run.compute_input_ns
            infer_end = input_end + run.compute_infer_ns
            timing = ComputeTiming(
                compute_start_ns, input_end, infer_end, infer_end + run.compute_output_ns
            )
            stats.record_execution(request.batch_size, timing)
            # A request's duration is its queue and compute durations together, as Triton's.
            start_ns = request.queue_start_ns
            stats.record_request_success(start_ns, start_ns, timing, end_ns)
        self._in_flight -= 1
        self._signal_if_drained()
