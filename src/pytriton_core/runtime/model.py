"""A loaded model version: its spec, scheduler, instances and statistics.

Requests enter through ``submit`` (on the event loop): they are validated, queued, taken
by an instance's worker thread, and their responses come back to the loop in
``_batch_done``, which also keeps the statistics.

A blocking BLS call from a default-mode model may instead run at once on the caller's
thread (``execute_direct``) when this model's default scheduler has nothing queued and an
instance is idle: no hand-off to the loop or to the instance's thread and back. Its response
goes to the caller from there; its statistics are counted on the loop just before the
outcome of the caller's batch (runtime/deferral.py), so they are in place before the
caller's response is delivered.

A model that calls the server (BLS) runs a lone request on the loop too, inside an
``InlineExecution`` (inference/inline.py): its calls to models that can answer at once
execute right there (``execute_direct`` on the loop), and a call that has to wait suspends
the execution, giving the loop back, until its answer arrives.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from google.protobuf.message import Message

from pytriton_core import clock
from pytriton_core.backends.base import BackendModel, InstanceSpec
from pytriton_core.config.spec import ModelSpec
from pytriton_core.errors import (
    CancelledError,
    ErrorCode,
    InvalidArgumentError,
    ServerError,
    UnavailableError,
)
from pytriton_core.inference.inline import InlineExecution, may_start
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.response_cache import InsertOutcome, cache_key
from pytriton_core.inference.statistics import (
    ComputeTiming,
    FailureReason,
    ModelStatistics,
    merge_memory_usage,
)
from pytriton_core.paths import confined_path
from pytriton_core.runtime import classification
from pytriton_core.runtime.instance import ModelInstance
from pytriton_core.runtime.response_stats import ResponseCounter
from pytriton_core.runtime.services import ServerServices
from pytriton_core.runtime.validation import RequestRules
from pytriton_core.runtime.warmup import warmup_samples
from pytriton_core.scheduling import Requeued, Retained, create_scheduler
from pytriton_core.scheduling.rate_limiter import InstanceSlot
from pytriton_core.scheduling.response_order import ResponseOrder

log = logging.getLogger(__name__)

# Triton answers a request cancelled in the queue with CANCELLED and no message; a message
# here keeps it an error where an empty one would read as success (a stream's
# ``error_message``).
CANCELLED_MESSAGE = "Request was cancelled"


class ModelState(enum.Enum):
    UNKNOWN = "UNKNOWN"
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"


_READY = ModelState.READY


class Model:
    """One version of a model, loaded: what the front ends see and submit requests to.

    Built with its backend model on the loader's worker thread; ``start`` creates the
    instances, after which requests go to ``submit`` on the event loop ``loop``.

    An extension type (model.pxd): what every request crosses here runs as C calls over
    typed fields; ``EnsembleModel`` is a Python subclass.
    """

    def __init__(
        self,
        spec: ModelSpec,
        config: Message,
        model_dir: Path,
        backend_model: BackendModel,
        loop: asyncio.AbstractEventLoop,
        stats: ModelStatistics | None = None,
        services: ServerServices | None = None,
    ) -> None:
        """``services``: what the server shares among its models (the response cache, the
        rate limiter); none by default."""
        self.spec = spec
        self._decoupled = spec.decoupled  # (read for every request)
        self._rules = RequestRules(spec)  # what every request is checked against
        self.name = spec.name
        self.version = spec.version
        self.version_text = str(spec.version)  # as every response names it
        # The validated config, for the two places that render Triton's JSON of it (the
        # /config endpoints); everything else reads ``spec``.
        self.config = config
        self.model_dir = model_dir
        self.loaded_at = time.time()  # wall clock (the OpenAI model list's "created")
        self._state = ModelState.LOADING
        self.stats = stats if stats is not None else ModelStatistics()
        self._loop = loop
        self._backend_model = backend_model
        # Whether the backend may say it cannot run requests now (``healthy``: it overrides
        # the base's, as process mode does); else READY needs no question for each request.
        self._asks_health = type(backend_model).healthy is not BackendModel.healthy
        self._scheduler = create_scheduler(spec, self._reject_threadsafe, model_dir)
        self._instances: list[ModelInstance] = []
        # instance index -> start of the execution last reported busy (hung or slow)
        self._reported_executions: dict[int, int] = {}
        # A lone request may execute on the loop (runtime/instance.py): this backend holds
        # the GIL anyway, and the scheduler would hand a lone request over at once. (A
        # backend whose executions call the server runs them in an ``InlineExecution``.)
        self._inline = (
            backend_model.loop_execution or backend_model.loop_calls
        ) and self._scheduler.dispatches_lone_at_once
        # The dynamic batcher gets a turn's requests without waking an instance, and they
        # are handed over together at the end of the turn (``_end_of_turn``), where they
        # form one batch, executed inline when it may be.
        self._per_turn = self._scheduler.hands_over_per_turn
        self._turn_end_scheduled = False
        self._in_flight = 0
        self._drained: asyncio.Event | None = None
        preserve = spec.dynamic_batching is not None and spec.dynamic_batching.preserve_ordering
        # Requests in arrival order, when responses must leave in that order: the final
        # responses execute returns, or, for a decoupled model, every response it sends
        # (held back by the requests' delivery gate until the earlier requests' finals).
        self._release_order: deque[InferenceRequest] | None = (
            deque() if preserve and not spec.decoupled else None
        )
        self._sent_order = ResponseOrder() if preserve and spec.decoupled else None
        self._ordered = preserve  # one test on the request path when neither applies
        self._held: dict[int, InferenceResponse] = {}
        self._labels = {
            output.name: classification.read_labels(
                confined_path(
                    model_dir,
                    output.label_filename,
                    what=f"label_filename '{output.label_filename}'",
                )
            )
            for output in spec.outputs.values()
            if output.label_filename
        }
        services = services or ServerServices()
        # Both the server's cache and the model's response_cache are needed, as in Triton.
        self._cache = services.response_cache if spec.response_cache else None
        self.cache_enabled = self._cache is not None
        # The cache key and lookup time of each request that missed, until it is answered.
        self._misses: dict[int, tuple[bytes, int]] = {}
        self._rate_limiter = services.rate_limiter
        # The loop hands requests to idle instances itself and each execution starts and
        # finishes on the loop (a process-mode Python model): no instance thread, and no
        # thread wake-up, on a request's path. (A rate-limited execution waits for its slot
        # on the instance's thread.) Only the default scheduler holds requests for the loop:
        # the dynamic batcher forms its batches for the instance's thread, where sending a
        # second batch before the first has finished would only make batches smaller.
        self._loop_dispatch = (
            backend_model.loop_dispatch
            and self._scheduler.holds_for_loop
            and self._rate_limiter is None
        )
        self._dispatching = False
        self._dispatch_scheduled = False  # ``_dispatch_at_turn_end`` is coming
        self._rate_limit_slots: list[InstanceSlot] = []
        self._deferral = services.deferral
        # How ``execute_direct`` sends its statistics to the loop (made once: per call).
        self._defer_counts = functools.partial(
            services.deferral.defer, self._loop.call_soon_threadsafe
        )
        # A BLS call may execute on its caller's thread (``execute_direct``) where the
        # default scheduler would hand a lone request to the next idle instance and
        # nothing about the response is kept or ordered here.
        self._direct = (
            self._scheduler.direct_execution
            and not spec.decoupled
            and self._cache is None
            and self._release_order is None
        )

    def start(self, instance_specs: Sequence[InstanceSpec]) -> None:
        """Create the instances (blocking: call from a worker thread, not the loop)."""
        scheduler = self._scheduler
        warmup = warmup_samples(self.spec, self.model_dir)
        scheduler.start(len(instance_specs))
        try:
            for index, instance_spec in enumerate(instance_specs):
                instance = ModelInstance(
                    instance_spec,
                    self._backend_model,
                    scheduler,
                    self._batch_done,
                    self._loop.call_soon_threadsafe,
                    warmup,
                    model_name=self.name,
                    index=index,
                    rate_limit=self._register_rate_limit(instance_spec),
                    deferral=self._deferral,
                )
                instance.start()
                self._instances.append(instance)
        except BaseException:
            # One instance failed: release those already running before the load fails.
            scheduler.stop(len(instance_specs))
            self._join_and_finalize()
            raise
        self.stats.memory_usage = merge_memory_usage(
            usage for instance in self._instances for usage in instance.memory_usage
        )
        self.state = ModelState.READY

    @property
    def state(self) -> ModelState:
        """READY only while the backend can run requests (see ``BackendModel.healthy``)."""
        return self._current_state()

    @state.setter
    def state(self, value: ModelState) -> None:
        self._state = value

    def serving(self) -> bool:
        """Whether ``state`` is READY (a C call for the infer path's model lookup)."""
        return self._current_state() is _READY

    def _current_state(self) -> ModelState:
        # (a C call for ``submit``, which reads the state of every request)
        if self._state is _READY and self._asks_health and not self._backend_model.healthy():
            return ModelState.UNAVAILABLE
        return self._state

    def _register_rate_limit(self, instance_spec: InstanceSpec) -> InstanceSlot | None:
        limiter = self._rate_limiter
        if limiter is None:
            return None
        group = instance_spec.group
        slot = limiter.register(
            self.name,
            instance_spec.name,
            instance_spec.device_id,
            group.rate_limiter_resources if group is not None else (),
            group.rate_limiter_priority if group is not None else 0,
        )
        self._rate_limit_slots.append(slot)
        return slot

    def submit(self, request: InferenceRequest) -> None:
        """Validate and queue a request; its responses arrive through ``request.deliver``."""
        self._admit(request)
        if self._decoupled:
            request.observer = ResponseCounter(self.stats, request.arrival_ns)
        # A stopped scheduler refuses even what the cache holds (Triton's dynamic batcher
        # checks its stop before the cache lookup).
        accepting = self._scheduler.accepting
        if self._cache is not None and accepting and self._answer_from_cache(request):
            return
        if (
            self._inline
            and not self._per_turn
            and accepting  # a stopped scheduler's refusal comes from its enqueue
            and not self._in_flight
        ):
            instance = self._instances[0]
            if self._backend_model.loop_execution:  # a Python model may turn it off
                if instance.claim_for_loop():
                    # Nothing queued or executing: the instance's thread is idle, and this
                    # request would be its next batch at once. Run it here, without the two
                    # thread wake-ups; its response is delivered before submit returns.
                    self._in_flight += 1
                    instance.execute_inline([request])
                    return
            elif (
                self._backend_model.loop_calls  # a Python model may turn it off
                and may_start()
                and instance.claim_for_loop()
            ):
                # The same, for a model that calls the server: a call that has to wait
                # suspends the execution (the loop goes on) and the response is delivered
                # when it ends. Not inside another one (a call from an inline execution):
                # that request goes to this model's thread.
                self._in_flight += 1
                InlineExecution(instance.execute_inline, self._loop).start([request])
                return
        try:
            if self._loop_dispatch:
                self._scheduler.hold(request)
            elif self._per_turn:
                self._scheduler.enqueue_for_turn(request)
                if not self._turn_end_scheduled:
                    self._turn_end_scheduled = True
                    self._loop.call_soon(self._end_of_turn)
            else:
                self._scheduler.enqueue(request)
        except InvalidArgumentError:
            # A request the scheduler finds malformed (a sequence without START...) failed
            # validation, which Triton neither counts nor prefixes with the request id.
            raise
        except ServerError as exc:
            self._forget_miss(request)
            self.stats.record_request_failure(
                request.arrival_ns, clock.now_ns(), FailureReason.REJECTED
            )
            if not self._scheduler.enqueue_errors_name_request:
                raise
            raise exc.with_request_id(request.id) from None
        self._in_flight += 1
        if self._ordered:
            self._keep_place(request)
        request.on_cancel(functools.partial(self._cancel_queued, request))
        if self._loop_dispatch and not self._dispatch_scheduled:
            # Handed over at the end of the turn, with the others the turn brings (one
            # bundle, one wake-up of the worker process for all of them).
            self._dispatch_scheduled = True
            self._loop.call_soon(self._dispatch_at_turn_end)

    def _dispatch_at_turn_end(self) -> None:
        """The requests a loop turn read are held: hand them over together."""
        self._dispatch_scheduled = False
        self._dispatch_held()

    def _dispatch_held(self) -> None:
        """Start held requests on idle instances (``loop_dispatch``), oldest first, then
        behind the bundles in flight on instances with room (``claim_next``); called at
        the end of a turn in which requests arrived, and when an execution finishes. Each
        request is an execution of its own (the default scheduler's), and an instance
        takes up to its ``bundle_limit`` of them in one hand-over (with several instances,
        its share of the held requests). Not re-entered: a bundle that fails at once
        finishes inside ``begin_claimed``, and the outer call goes on."""
        if self._dispatching:
            return
        self._dispatching = True
        try:
            scheduler = self._scheduler
            instances = self._instances
            # With several instances, each takes at most its share of what is held now.
            share = scheduler.pending_count()
            if len(instances) > 1:
                share = -(-share // len(instances))
            while scheduler.pending_count():
                # An idle instance first, else one with room behind its bundles in flight
                # (plain loops, no generators: this runs twice per bundle).
                instance = None
                for candidate in instances:
                    if candidate.claim():
                        instance = candidate
                        break
                else:
                    for candidate in instances:
                        if candidate.claim_next():
                            instance = candidate
                            break
                if instance is None:
                    return
                limit = instance.bundle_limit
                if share < limit:
                    limit = share
                batches: list[list[InferenceRequest]] = []
                while len(batches) < limit:
                    request = scheduler.take_held()
                    if request is None:
                        break
                    batches.append([request])
                if not batches:
                    instance.release()
                    return
                # Alone: nothing else of the model in flight (its worker may poll for the
                # next one, docs/architecture.md "Between requests").
                instance.begin_claimed(batches, self._in_flight == len(batches))
        finally:
            self._dispatching = False

    def execute_direct(self, request: InferenceRequest, on_loop: bool = False) -> bool:
        """Run a BLS request on the calling thread (a model's, or the loop's for a caller
        in an ``InlineExecution``: ``on_loop``) if it can run at once (see the module
        docstring): True once it has executed and its final response, if the model
        returned one, was delivered; False when it is left to ``submit``. Raises what
        ``submit`` would refuse it with."""
        if not (
            self._direct
            and self._backend_model.loop_execution  # holds the GIL, waits on no server
            and self._scheduler.accepting
            and request.compute_observer is None
            and not self._scheduler.pending_count()  # queued requests go first
        ):
            return False
        for instance in self._instances:
            # On the loop only an instance whose executions are short (as for ``submit``).
            if (not on_loop or instance.inline_ready) and instance.claim():
                break
        else:
            return False
        try:
            self._admit(request)
        except BaseException:
            instance.release()
            raise
        responses, timing, retained = instance.execute_claimed([request])
        request.executing = False
        end_ns = clock.now_ns()
        if request.trace is not None:
            _trace_compute(request, timing)
        # On the loop the statistics are counted now, before the response goes.
        if isinstance(responses, ServerError):
            if on_loop:
                self._count_failed_execution([request], responses, end_ns)
            else:
                self._defer_counts(self._count_failed_execution, [request], responses, end_ns)
            request.deliver(InferenceResponse.failed(responses), True)
            return True
        timing.end_ns = end_ns
        kept = retained.get(0) if retained else None
        assert not isinstance(kept, Requeued)  # the default scheduler re-queues nothing
        response = responses[0]
        if kept is not None:
            response = InferenceResponse.failed(kept)
        if on_loop:
            self._count_direct(request, timing, end_ns, kept is not None, response is not None)
        else:
            self._defer_counts(
                self._count_direct, request, timing, end_ns, kept is not None, response is not None
            )
        if response is None:  # answered through its response sender
            return True
        if response.error is None:
            response = self._apply_classification(request, response)
        request.deliver(response, True)
        return True

    def _count_direct(
        self,
        request: InferenceRequest,
        timing: ComputeTiming,
        end_ns: int,
        refused: bool,
        answered: bool,
    ) -> None:
        """The statistics of a request ``execute_direct`` ran (on the loop), as
        ``_batch_done`` counts them (``answered``: not through its response sender)."""
        stats = self.stats
        stats.record_execution(request.batch_size, timing, request.batch_size)
        self._count_success(request, timing, end_ns, refused)
        if answered and stats.first_response is not None:
            stats.record_first_response(request.arrival_ns, end_ns)

    def _count_success(
        self, request: InferenceRequest, timing: ComputeTiming, end_ns: int, refused: bool
    ) -> None:
        """A request's execution ended with an answer (``refused``: a reschedule that could
        not be honoured, which fails it as well)."""
        stats = self.stats
        start_ns = request.queue_start_ns
        stats.record_request_success(start_ns, start_ns, timing, end_ns)
        if request.compute_observer is not None:
            request.compute_observer(timing)
        if refused:
            stats.record_request_failure(request.arrival_ns, end_ns, FailureReason.REJECTED)

    def _count_failed_execution(
        self, batch: list[InferenceRequest], error: ServerError, end_ns: int
    ) -> None:
        """The execution itself failed: every request fails; Triton counts the execution
        but no inferences for it."""
        stats = self.stats
        stats.execution_count += 1
        reason = (
            FailureReason.CANCELED if error.code is ErrorCode.CANCELLED else FailureReason.BACKEND
        )
        for request in batch:
            if not request.padding:
                stats.record_request_failure(request.arrival_ns, end_ns, reason)

    def _admit(self, request: InferenceRequest) -> None:
        """Refuse a request the model cannot take now; start its queue time."""
        if self._current_state() is not _READY:
            raise UnavailableError(
                f"Request for unknown model: '{self.name}' version {self.version} is not at "
                "ready state"
            )
        # Triton counts no statistics for a request that fails validation.
        self._rules.check(request)
        if request.cancelled:  # its client went away before it got here
            raise CancelledError(CANCELLED_MESSAGE).with_request_id(request.id)
        request.loop = self._loop
        request.queue_start_ns = clock.now_ns()
        if request.trace is not None:
            self._trace_submit(request)

    def _answer_from_cache(self, request: InferenceRequest) -> bool:
        """Look the request up; on a hit answer it from the cache (it skips the scheduler)
        and return True; on a miss remember its key, to store its response."""
        cache = self._cache
        assert cache is not None
        key = cache_key(request, self.name, self.version)
        if key is None:  # an input in GPU memory: not cacheable
            return False
        lookup_start = clock.now_ns()
        entry = cache.lookup(key)
        lookup_end = clock.now_ns()
        if entry is None:
            self._misses[id(request)] = (key, lookup_end - lookup_start)
            return False
        if self._release_order is not None:
            self._release_order.append(request)
        # Answered at once, inside submit: every caller has registered the request before
        # it submits it (a deferred answer would wait a whole loop turn under load).
        response = self._apply_classification(request, InferenceResponse(entry.tensors()))
        self.stats.record_cache_hit(
            request.queue_start_ns, request.queue_start_ns, lookup_start, lookup_end
        )
        self._release(request, response)
        return True

    def _forget_miss(self, request: InferenceRequest) -> None:
        """A missed request left without a response to store."""
        if self._misses:
            self._misses.pop(id(request), None)

    def _store_in_cache(self, request: InferenceRequest, response: InferenceResponse) -> None:
        """A missed request was answered: keep a successful response, count the miss."""
        miss = self._misses.pop(id(request), None)
        if miss is None or response.error is not None:
            return  # only successful responses are cached
        cache = self._cache
        assert cache is not None
        key, lookup_ns = miss
        insert_start = clock.now_ns()
        outcome = cache.insert(key, response.outputs)
        insert_ns = clock.now_ns() - insert_start
        if outcome is InsertOutcome.EXISTS:
            return  # another request with the same key got there first: Triton counts none
        if outcome is InsertOutcome.TOO_LARGE:
            log.error(
                "Failed to insert key into response cache: the response of model '%s' is "
                "larger than the whole cache",
                self.name,
            )
        self.stats.record_cache_miss(lookup_ns + insert_ns)

    def _end_of_turn(self) -> None:
        """The requests of a loop turn are queued: hand them over. While the instance is
        idle and its executions are short, run the batches they form here on the loop (no
        thread wake-ups; see runtime/instance.py); what is left wakes an instance."""
        self._turn_end_scheduled = False
        scheduler = self._scheduler
        if self._inline and self._backend_model.loop_execution:
            instance = self._instances[0]
            while scheduler.pending_count() and instance.claim_for_loop():
                batch = scheduler.take_ready_batch()
                if not batch:
                    instance.release()
                    break
                instance.execute_inline(batch)
        if scheduler.pending_count():
            scheduler.wake()

    @property
    def in_flight(self) -> int:
        """Requests accepted and not yet answered (queued or executing)."""
        return self._in_flight

    @property
    def in_flight_sequences(self) -> int:
        """Sequences started and not yet ended or released (0 without sequence batching)."""
        return self._scheduler.active_sequences()

    def stop_accepting(self) -> None:
        """The server is exiting: refuse new requests (new sequences), finish the rest."""
        self._scheduler.stop_accepting()

    def pending_request_count(self) -> int:
        """Requests queued in the scheduler, not yet handed to an instance."""
        return self._scheduler.pending_count()

    def _trace_submit(self, request: InferenceRequest) -> None:
        trace = request.trace
        assert trace is not None
        trace.model_version = self.version
        trace.request_id = request.id
        trace.stamp("REQUEST_START", request.arrival_ns)
        trace.stamp("QUEUE_START", request.queue_start_ns)
        for tensor in request.inputs.values():
            trace.record_tensor(
                "TENSOR_QUEUE_INPUT",
                tensor.name,
                tensor.datatype.wire_name,
                tensor.shape,
                tensor.data,
            )

    def _cancel_queued(self, request: InferenceRequest) -> None:
        """A request was cancelled: if it still waits in the queue it never runs, and is
        answered CANCELLED (on the next loop turn, not inside its canceller's call)."""
        if self._scheduler.cancel(request):
            self._loop.call_soon(self._finish_rejected, request, CancelledError(CANCELLED_MESSAGE))

    def _reject_threadsafe(self, request: InferenceRequest, error: ServerError) -> None:
        """The scheduler gave up on a queued request (e.g. its queue timeout expired)."""
        self._loop.call_soon_threadsafe(self._finish_rejected, request, error)

    def _finish_rejected(self, request: InferenceRequest, error: ServerError) -> None:
        """A queued request leaves without running: queue timeout (REJECTED) or cancelled."""
        self._in_flight -= 1
        self._forget_miss(request)
        reason = (
            FailureReason.CANCELED if error.code is ErrorCode.CANCELLED else FailureReason.REJECTED
        )
        now = clock.now_ns()
        self.stats.record_request_failure(request.arrival_ns, now, reason)
        if reason is FailureReason.REJECTED:
            self._report_busy_instances(now)
        self._release(request, InferenceResponse.failed(error.with_request_id(request.id)))
        self._signal_if_drained()

    def _report_busy_instances(self, now: int) -> None:
        """A queued request timed out: name each instance busy with a batch now, and for
        how long, once per batch (a hung model, or a slow one)."""
        for instance in self._instances:
            running = instance.running_batch
            if running is None or self._reported_executions.get(instance.index) == running[0]:
                continue
            self._reported_executions[instance.index] = running[0]
            log.warning(
                "model '%s' version %d: a queued request timed out while instance '%s' has "
                "been executing one batch of %d request(s) for %.1f s",
                self.name,
                self.version,
                instance.spec.name,
                running[1],
                (now - running[0]) / 1e9,
            )

    def _batch_done(
        self,
        batch: list[InferenceRequest],
        responses: Sequence[InferenceResponse | None] | ServerError,
        timing: ComputeTiming,
        retained: Retained,
    ) -> None:
        """An execution finished. Fillers of idle sequence slots (``padding``) count in
        the batch size only; a request the scheduler re-queued (``Requeued``) counts its
        execution but stays in flight."""
        if self._loop_dispatch:  # the next request starts while these responses leave
            self._dispatch_held()
        stats = self.stats
        end_ns = clock.now_ns()
        size = inferences = 0  # the batch's size, and its inferences (no fillers)
        for request in batch:
            request.executing = False
            if request.trace is not None:
                _trace_compute(request, timing)
            size += request.batch_size
            if not request.padding:
                inferences += request.batch_size
        if isinstance(responses, ServerError):
            self._count_failed_execution(batch, responses, end_ns)
            for request in batch:
                if request.padding:
                    continue
                if request.compute_observer is not None:
                    request.compute_observer(None)
                self._in_flight -= 1
                self._forget_miss(request)
                self._release(request, InferenceResponse.failed(responses))
            self._signal_if_drained()
            return
        # The durations cover the server's time as Triton's do: a request's starts when it
        # is handed to the model (after its front end parsed it, as Triton's starts at
        # InferAsync), and compute_output lasts until the responses reach the front ends
        # here on the loop, as Triton's lasts until the backend has sent them. So request
        # = queue + compute input + infer + output, with no unaccounted overhead.
        timing.end_ns = end_ns
        stats.record_execution(size, timing, inferences)
        if len(responses) != len(batch):  # (not ``zip(strict=True)``: its keyword is a slow call)
            raise ValueError(f"{len(responses)} responses for a batch of {len(batch)} requests")
        for index in range(len(batch)):
            request = batch[index]
            response = responses[index]
            if request.padding:
                continue
            # An error the model answered with still counts as a successful execution, as
            # Triton counts it; so does a request answered through its response sender, and
            # each execution of a request the model rescheduled.
            kept = retained.get(index) if retained else None
            if isinstance(kept, Requeued):
                start_ns = kept.queue_start_ns
                stats.record_request_success(start_ns, start_ns, timing, end_ns)
                continue  # queued again: not finished
            # A reschedule that could not be honoured fails the request, as in Triton.
            self._count_success(request, timing, end_ns, kept is not None)
            if kept is not None:
                response = InferenceResponse.failed(kept)
            self._in_flight -= 1
            if response is None:  # answered through its response sender
                self._forget_miss(request)
                if self._release_order is not None:
                    self._release_order.remove(request)
                continue
            if self._cache is not None:
                self._store_in_cache(request, response)
            if stats.first_response is not None and not self._decoupled:
                stats.record_first_response(request.arrival_ns, end_ns)
            if response.error is None and request.requested_outputs is not None:
                response = self._apply_classification(request, response)
            if self._release_order is None:  # (``_release``'s common case)
                request.deliver(response, True)
            else:
                self._release(request, response)
        if self._in_flight == 0 and self._drained is not None:  # ``_signal_if_drained``
            self._drained.set()

    def _keep_place(self, request: InferenceRequest) -> None:
        """With ``preserve_ordering``: ``request``'s place among the responses to come.
        Taken once the request is accepted, before the loop can deliver any of its
        responses; the dynamic batcher (one priority level) releases in this order."""
        if self._release_order is not None:
            self._release_order.append(request)
        elif self._sent_order is not None:
            self._sent_order.place([request])

    def _release(self, request: InferenceRequest, response: InferenceResponse) -> None:
        """Deliver a final response, after every earlier one when ordering is preserved."""
        order = self._release_order
        if order is None:
            request.deliver(response, True)
            return
        self._held[id(request)] = response
        while order and id(order[0]) in self._held:
            head = order.popleft()
            head.deliver(self._held.pop(id(head)), True)

    def _signal_if_drained(self) -> None:
        if self._in_flight == 0 and self._drained is not None:
            self._drained.set()

    def _apply_classification(
        self, request: InferenceRequest, response: InferenceResponse
    ) -> InferenceResponse:
        requested = request.requested_outputs
        if requested is None:
            return response
        outputs = response.outputs
        for i in range(len(outputs)):
            tensor = outputs[i]
            wanted = requested.get(tensor.name)
            if wanted is None or wanted.class_count <= 0:
                continue
            declared = self.spec.outputs.get(tensor.name)
            batched = self.spec.batching and declared is not None and bool(declared.dims)
            try:
                outputs[i] = classification.classify(
                    tensor, wanted.class_count, batched, self._labels.get(tensor.name, [])
                )
            except ServerError as exc:
                return InferenceResponse.failed(exc)
        return response

    async def stop(self, timeout_s: float) -> None:
        """Stop taking requests, let queued ones finish (up to ``timeout_s``), finalize.

        An instance still executing when the time is up is left to its (daemon) thread and
        the model is not finalized under it.
        """
        self.state = ModelState.UNLOADING
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        if self._in_flight:
            self._drained = asyncio.Event()
            try:
                await asyncio.wait_for(self._drained.wait(), timeout_s)
            except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
                log.warning("model %s: %d requests still in flight", self.name, self._in_flight)
        self._scheduler.stop(len(self._instances))
        # At least a moment for the instances to see the stop, even past the deadline.
        join_s = max(1.0, deadline - loop.time())
        await asyncio.to_thread(self._join_and_finalize, join_s)
        self.state = ModelState.UNAVAILABLE
        self.stats.release()

    def stop_blocking(self) -> None:
        """Stop a model that never served (a load that failed after it started): the
        instances end and the model is finalized. Call from a worker thread."""
        self.state = ModelState.UNAVAILABLE
        self._scheduler.stop(len(self._instances))
        self._join_and_finalize()
        self.stats.release()

    def _join_and_finalize(self, timeout_s: float | None = None) -> None:
        if self._rate_limiter is not None and self._rate_limit_slots:
            self._rate_limiter.unregister(self._rate_limit_slots)
            self._rate_limit_slots = []
        deadline = None if timeout_s is None else clock.now_s() + timeout_s
        for instance in self._instances:
            instance.join(None if deadline is None else max(0.0, deadline - clock.now_s()))
        busy = [i.spec.name for i in self._instances if i.is_alive()]
        if busy:
            log.warning(
                "model %s: instances %s still executing at the exit timeout; not finalized",
                self.name,
                ", ".join(busy),
            )
            return
        try:
            self._backend_model.finalize()
        except Exception:
            log.exception("finalize failed for model %s", self.name)


def _trace_compute(request: InferenceRequest, timing: ComputeTiming) -> None:
    trace = request.trace
    assert trace is not None
    trace.stamp("COMPUTE_START", timing.start_ns)
    trace.stamp("COMPUTE_INPUT_END", timing.input_end_ns)
    trace.stamp("COMPUTE_OUTPUT_START", timing.infer_end_ns)
    trace.stamp("COMPUTE_END", timing.end_ns)
