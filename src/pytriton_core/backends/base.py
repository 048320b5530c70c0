"""The backend contract: three levels, as in Triton (backend, model, instance).

* ``Backend``: one per framework, created once per server; knows how to auto-complete
  a config and load a model version.
* ``BackendModel``: one per loaded model version; creates instances.
* ``BackendInstance``: one per model instance, each driven by its own worker thread.
  ``execute`` is never called concurrently on one instance.

Backends know nothing of front ends or the event loop: they receive core requests and
return core responses. The one exception is ``BackendInstance.begin``, for backends whose
work happens elsewhere (process mode's worker processes): it is called on the loop, only
sends the batch away, and reports the outcome back on the loop.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

from google.protobuf.message import Message

from pytriton_core.backends.custom_metrics import MetricRegistry
from pytriton_core.config.spec import InstanceGroup, ModelSpec
from pytriton_core.errors import ServerError
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ComputeTiming, MemoryUsage
from pytriton_core.memory.device import DevicePools
from pytriton_core.memory.pinned import StagingPool


class ServerCalls(Protocol):
    """The server as model code calls it (Python models' BLS and model management).

    Every method may be called from any thread but the server's event loop, or on the
    loop from inside an ``InlineExecution`` (inference/inline.py), which a wait suspends;
    the server does the work on its loop.
    """

    def model_spec(self, name: str, version: int) -> ModelSpec:
        """The spec of the version requests would go to (-1: the latest ready one); raises
        a ServerError when there is none."""
        ...

    def submit(self, request: InferenceRequest, refused: Callable[[ServerError], None]) -> None:
        """Send ``request`` to the model it names, through that model's scheduler. Its
        responses reach ``request.on_response`` on the server's loop; if the model cannot
        take it, ``refused`` gets the error there instead."""
        ...

    def execute_direct(self, request: InferenceRequest, inline: bool) -> bool:
        """For a caller that blocks until the answer: execute ``request`` on the calling
        thread if the model it names can run it at once (runtime/model.py
        ``execute_direct``), answering before this returns; False when it must be
        submitted instead. ``inline``: the caller runs in an ``InlineExecution`` (on the
        server's loop). Raises the ServerError the model refuses it with."""
        ...

    def cancel(self, request: InferenceRequest) -> None:
        """Cancel a request given to ``submit`` (its model sees ``is_cancelled()``)."""
        ...

    def is_model_ready(self, name: str, version: int) -> bool: ...

    def load_model(
        self, name: str, config_json: str, files: Mapping[str, bytes], caller: str = ""
    ) -> None:
        """Load or reload a model (explicit model control only); blocks until done.

        ``caller``: the model whose ``execute`` asks. Under ``--workers N`` such a change
        is made on every worker, in the order of changes, before this returns; one asked
        from ``initialize`` (``""``) is this worker's own, since every worker runs the
        same ``initialize`` and so asks for it too."""
        ...

    def unload_model(self, name: str, unload_dependents: bool, caller: str = "") -> None:
        """Unload a model (explicit model control only); blocks until done. ``caller``:
        as for ``load_model``."""
        ...


@dataclass(frozen=True)
class ModelLocation:
    """Where a model version lives and what the server was told about its backend."""

    name: str
    version: int
    model_dir: Path  # <repository>/<model>
    version_dir: Path  # <repository>/<model>/<version>
    backend_config: Mapping[str, str]  # --backend-config=<this backend>,k=v pairs
    # --backend-config=k=v pairs without a backend (e.g. default-max-batch-size)
    global_backend_config: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # The server's host staging pool (pinned when a GPU is usable): GPU instances gather
    # their batches into it so the copy to the device runs at full speed.
    host_staging: StagingPool | None = None
    # --cuda-memory-pool-byte-size: the device buffers GPU instances allocate themselves.
    device_pools: DevicePools | None = None
    # The server's custom metric families (pb_utils.MetricFamily): each server has its own.
    custom_metrics: MetricRegistry | None = None
    # A Python-based backend's folder (<--backend-directory>/<backend>): its model.py serves
    # the model, not one in the version folder.
    python_based_dir: Path | None = None
    # The server itself, for model code that calls other models (BLS).
    server: ServerCalls | None = None

    def setting(self, key: str, default: str | None = None) -> str | None:
        """A backend setting: this backend's own value first, else the global one."""
        return self.backend_config.get(key, self.global_backend_config.get(key, default))


@dataclass(frozen=True)
class InstanceSpec:
    name: str  # e.g. "add_sub_0_0": group name + index, as Triton names them
    kind: str  # "CPU" | "GPU" | "MODEL"
    device_id: int
    group: InstanceGroup | None = None  # the instance group it comes from


# What the loop hands a ``loop_dispatch`` backend for one execution (``begin``): the batch,
# its timing (start marked), and where its outcome goes: the responses (one per request,
# as ``execute`` returns them) or the error that fails the batch. A plain tuple: one is
# made per execution.
Finished = Callable[[Sequence[InferenceResponse | None] | ServerError], None]
LoopExecution = tuple[Sequence[InferenceRequest], ComputeTiming, Finished]


class DeferredResponses(Sequence[InferenceResponse | None]):
    """What ``execute`` may return once its batch has run, in place of the responses:
    ``finish()`` builds them from the batch's outputs (the framework backends' scatter,
    backends/batching.py).

    Why: an instance's worker thread hands every batch's outcome to the event loop, which
    is woken for it anyway; the core calls ``finish`` there, so the thread goes straight
    on to the next batch while the framework would otherwise wait (docs/architecture.md,
    "Where a batch's responses are built"). Read as a sequence (a test, a warm-up, a
    caller that ran the batch on its own thread) it finishes on first use. ``finish``
    raises the ServerError that fails the whole batch where the outputs are malformed.
    """

    __slots__ = ("_build", "_built", "_count")

    def __init__(self, count: int, build: Callable[[], list[InferenceResponse]]) -> None:
        self._count = count
        self._build: Callable[[], list[InferenceResponse]] | None = build
        self._built: list[InferenceResponse] = []

    def finish(self) -> list[InferenceResponse]:
        """The responses, built on the first call (the outputs are let go then)."""
        build = self._build
        if build is not None:
            self._build = None
            self._built = build()
        return self._built

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index):  # type: ignore[no-untyped-def]  # (Sequence's overloads)
        return self.finish()[index]


class BackendInstance(abc.ABC):
    @abc.abstractmethod
    def execute(
        self, requests: Sequence[InferenceRequest], timing: ComputeTiming
    ) -> Sequence[InferenceResponse | None]:
        """Run one batch; return one entry per request, in order.

        An entry is that request's final response, or None when the request is (or will
        be) answered through ``request.send_threadsafe`` (decoupled models). Call
        ``timing.mark_input_done()`` / ``mark_infer_done()`` between the stages.
        Raising fails every request of the batch. A ``DeferredResponses`` may stand for
        the entries: the core builds them on the event loop.
        """

    def begin(self, executions: Sequence[LoopExecution], alone: bool = False) -> None:
        """Start executions from the event loop without waiting for them (only where the
        model's ``loop_dispatch`` is True), handed over together (a bundle: up to the
        model's ``loop_bundle``). Each execution's ``finished`` gets, on the loop, what
        ``execute`` would return for its batch, or the error that fails it. Raising instead
        fails every execution of the bundle at once. Up to the model's ``loop_depth``
        bundles may be begun before the first finishes: their executions run one at a
        time, in order, and finish in order. The backend may set each execution's
        ``timing.infer_end_ns`` (when its execution ended) before calling ``finished``.
        ``alone``: the bundle holds every request of the model in flight, so the next one
        will come after its answer (a lone client's turn), and waiting for it actively may
        pay (process mode's worker polls only then)."""
        raise NotImplementedError(f"{type(self).__name__} cannot start batches on the loop")

    def finalize(self) -> None:  # noqa: B027 - optional hook
        """Release what the instance holds; called once, from its worker thread."""

    def memory_usage(self) -> Sequence[MemoryUsage]:
        """The memory the instance's model holds, by kind and device, once it is created
        (the statistics' ``memory_usage``); empty where the framework cannot tell."""
        return ()


class BackendModel(abc.ABC):
    decoupled: bool = False
    # True when executions hold the GIL throughout and wait on nothing the event loop
    # delivers: short ones may then run on the loop (runtime/instance.py). Backends whose
    # frameworks release the GIL keep their threads, which run beside the loop.
    loop_execution: bool = False
    # True when executions hold the GIL throughout and wait only on the server's answers
    # to their calls (BLS), which an ``InlineExecution`` (inference/inline.py) waits for
    # without blocking the loop: short ones may then run on the loop inside one.
    loop_calls: bool = False
    # True when its instances' ``begin`` starts a batch on the loop and reports back there
    # (the work runs in another process): with a scheduler that ``holds_for_loop`` the loop
    # then hands requests out itself, and no instance thread is on a request's path.
    loop_dispatch: bool = False
    # With ``loop_dispatch``: how many bundles (``begin`` calls) the loop may start on one
    # instance before the first has finished. The backend queues those after the first and
    # still executes one batch at a time (``execute`` never runs twice at once on an
    # instance); a queued one starts as soon as the one before has finished, without
    # waiting for the loop.
    loop_depth: int = 1
    # With ``loop_dispatch``: how many executions (one batch each) the loop may hand over
    # in one ``begin``, so that the work of several wakes the backend's process, and its
    # answer wakes the loop, once. The loop bundles only executions known to be short.
    loop_bundle: int = 1

    def healthy(self) -> bool:
        """Whether every instance can run requests now (false while a Python model's worker
        process is being restarted): the model is reported not ready meanwhile."""
        return True

    @abc.abstractmethod
    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        """Create one instance; called from the instance's own worker thread."""

    def finalize(self) -> None:  # noqa: B027 - optional hook
        """Release model-level resources after every instance has finalized."""


class Backend(abc.ABC):
    name: str

    def auto_complete_config(self, config: Message, location: ModelLocation) -> None:  # noqa: B027
        """Fill what the model file tells (inputs, outputs, max_batch_size...) in place."""

    @abc.abstractmethod
    def load_model(self, spec: ModelSpec, location: ModelLocation, config: Message) -> BackendModel:
        """Load one version of a model whose config is complete and validated.

        Read the model's settings from ``spec``; ``config`` is the validated message it was
        built from, for a backend that hands Triton's JSON of it to model code
        (``config.config_to_json_dict``), as the Python backend's ``model_config`` does.
        """
