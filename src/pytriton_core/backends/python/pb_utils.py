"""``triton_python_backend_utils``: the API that Triton ``model.py`` files import as ``pb_utils``.

The Python backend installs this module as ``sys.modules["triton_python_backend_utils"]``.
Model code sees Triton's names and behaviours (see ``spec/python-backend.md`` §2); tensors
are numpy arrays shared with the server, never copied on the way in or out. The parts live
in sibling modules and are re-exported here: ``pb_utils_tensor`` (Tensor, DLPack, BYTES
helpers), ``pb_utils_config`` (ModelConfig, dict and numpy-type helpers),
``pb_utils_errors`` (TritonError, TritonModelException), ``pb_utils_metrics``
(MetricFamily), ``pb_utils_server`` (the server bridge that BLS and model management call,
``get_model_dir``), ``pb_utils_logging`` (Logger); this module holds requests, responses,
the sender and the BLS calls.

Server-facing hooks (private names; the backend and the server drive these, models don't):

* ``Tensor._from_server(name, array, datatype) -> Tensor`` (the function
  ``pb_utils_tensor.tensor_from_server``): wraps a CPU array without copying or checking
  (BYTES: an object array; BF16: any 2-byte dtype, viewed as ``ml_dtypes.bfloat16``).
  ``tensor._server_array()`` gives the array back (BF16 as bfloat16, no ``as_numpy``
  refusal); the server reads ``tensor._name``, ``_datatype`` and ``_array`` (the host
  array; None: GPU memory) directly.
* ``InferenceRequest._from_server(request_id, correlation_id, inputs,
  requested_output_names, parameters, flags, timeout, send_hook=None, responder=None,
  origin=None, decoupled=True, trace=None) -> InferenceRequest`` (the function
  ``request_from_server``); ``trace``: the server's
  trace of the request (``request.trace()._server``), which a BLS request given it traces
  as a child. ``origin``: what ``is_cancelled()`` reads (its ``cancelled``; None: never
  cancelled), the server's request. ``send_hook(response, final)`` receives each response
  the model sends (``None`` for a flag-only FINAL); it is called under the sender's lock,
  so in order, and must not block; if it raises, the model sees the exception and the
  sender's state is unchanged. Without ``send_hook``, ``responder.send_hook(origin)``
  makes it when the model first asks for the sender (neither: the request has no sender).
  ``decoupled=False`` applies Triton's default-mode rules (at most one response, no FINAL
  before it). After ``execute``, ``request._release_flags`` holds what
  ``set_release_flags`` set (RELEASE_ALL by default).
* ``InferenceResponse._from_server(output_tensors, error=None, parameters=None)``: a response
  built by the server (BLS results) without validation; ``response._parameters`` is the
  parameter dict behind ``parameters()``.
* ``TritonError._from_exception(exc)`` / ``error._to_server_error()``: to and from
  :class:`pytriton_core.errors.ServerError`, keeping the error code.
* ``server_context(bridge, phase)``: context manager in which BLS (``exec``,
  ``async_exec``) and ``load_model``, ``unload_model``, ``is_model_ready`` call ``bridge``
  (a :class:`ServerBridge`); the backend enters it around ``initialize`` (phase
  ``"initialize"``: model management only, as in Triton), ``execute`` (``"execute"``) and
  ``finalize`` (``"finalize"``: neither). It is a context variable, so each model sees the
  bridge of the server running it, and threads a model starts see none unless the model
  runs them in a copy of its context (``contextvars.copy_context().run``). The bridge reads
  BLS requests through their accessors plus ``request._model_name``,
  ``request._model_version`` (-1: latest), ``request._parameters`` (dict) and
  ``request._preferred_memory``. A bridge raises TritonModelException for misuse that must
  surface in the model; any other exception from ``infer`` becomes an error response, as
  Triton reports failed BLS calls.
* ``model_dir_context(path)``: context manager that sets what ``get_model_dir()`` returns
  (a context variable, so concurrent models in one process each see their own);
  ``ModelContext(path, metrics)`` sets it and the metric registry below together.
* ``metric_registry_context(registry)`` (context manager), ``set_metric_registry(registry)
  -> previous`` / ``metric_registry()``: the server's :class:`MetricRegistry` that
  ``MetricFamily`` objects created in the current context keep their values in (a context
  variable: two servers in one process keep theirs apart); ``registry.snapshot()`` reads
  them all.
"""

from __future__ import annotations

import enum
import json
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from pytriton_core.backends.python.pb_utils_config import (
    TRITON_STRING_TO_NUMPY,
    ModelConfig,
    get_input_config_by_name,
    get_output_config_by_name,
    numpy_to_triton_type,
    triton_string_to_numpy,
    triton_to_numpy_type,
    using_decoupled_model_transaction_policy,
)
from pytriton_core.backends.python.pb_utils_errors import TritonError, TritonModelException
from pytriton_core.backends.python.pb_utils_logging import Logger
from pytriton_core.backends.python.pb_utils_metrics import (
    Metric,
    MetricFamily,
    MetricKind,
)
from pytriton_core.backends.python.pb_utils_metrics import MetricRegistry as MetricRegistry
from pytriton_core.backends.python.pb_utils_metrics import metric_registry as metric_registry
from pytriton_core.backends.python.pb_utils_metrics import (
    metric_registry_context as metric_registry_context,
)
from pytriton_core.backends.python.pb_utils_metrics import (
    set_metric_registry as set_metric_registry,
)
from pytriton_core.backends.python.pb_utils_server import (
    ModelContext as ModelContext,
)
from pytriton_core.backends.python.pb_utils_server import (
    ServerBridge,
    get_model_dir,
    is_model_ready,
    load_model,
    require_bls,
    unload_model,
)
from pytriton_core.backends.python.pb_utils_server import (
    model_dir_context as model_dir_context,
)
from pytriton_core.backends.python.pb_utils_server import (
    server_context as server_context,
)
from pytriton_core.backends.python.pb_utils_tensor import (
    Tensor,
    deserialize_bytes_tensor,
    serialize_byte_tensor,
)

__all__ = [
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "InferenceTrace",
    "Logger",
    "MemoryType",
    "Metric",
    "MetricFamily",
    "MetricKind",
    "ModelConfig",
    "PreferredMemory",
    "ResponseIterator",
    "ServerBridge",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_model_dir",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "is_model_ready",
    "load_model",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "unload_model",
    "using_decoupled_model_transaction_policy",
]

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2


# --------------------------------------------------------------------------- request parts


class MemoryType(enum.IntEnum):
    TRITONSERVER_MEMORY_GPU = 0
    TRITONSERVER_MEMORY_CPU = 1


TRITONSERVER_MEMORY_GPU = MemoryType.TRITONSERVER_MEMORY_GPU
TRITONSERVER_MEMORY_CPU = MemoryType.TRITONSERVER_MEMORY_CPU


class PreferredMemory:
    """Where a BLS call would like its outputs; ``_memory_type`` None means no preference."""

    __slots__ = ("_device_id", "_memory_type")

    def __init__(self, preferred_memory_type: int, preferred_device_id: int = 0) -> None:
        self._memory_type: MemoryType | None = MemoryType(preferred_memory_type)
        self._device_id = int(preferred_device_id)

    @classmethod
    def _default(cls) -> PreferredMemory:
        memory = cls.__new__(cls)
        memory._memory_type, memory._device_id = None, 0
        return memory


class InferenceTrace:
    """The request's trace; ``get_context()`` is the OpenTelemetry context, if any. A BLS
    request given the trace of a traced request (``trace=request.trace()``) is traced as
    its child, as in Triton; the server's trace object is ``_server`` (None: not traced)."""

    __slots__ = ("_context", "_server")

    def __init__(self) -> None:
        self._context: str | None = None
        self._server: Any = None

    @classmethod
    def _of(cls, server_trace: Any) -> InferenceTrace:
        trace = cls()
        trace._server = server_trace
        return trace

    def get_context(self) -> str | None:
        return self._context


# Neither is ever changed once made, so every request without its own shares one.
_NO_PREFERENCE = PreferredMemory._default()
_UNTRACED = InferenceTrace()


def _parameters_dict(parameters: Mapping[str, Any] | None) -> dict[str, bool | int | str]:
    if parameters is None:
        return {}
    if not isinstance(parameters, Mapping):
        raise TypeError(f"parameters must be a dict, not {type(parameters).__name__}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(
                f"parameter keys must be str, found type {type(key).__name__}"
            )
        if not isinstance(value, bool | int | str):
            raise TritonModelException(
                f"parameter values must be bool, int or str; '{key}' has type "
                f"{type(value).__name__}"
            )
    return dict(parameters)


def _validated_tensors(tensors: Sequence[Any], what: str) -> list[Tensor]:
    # A list (what models pass) skips the Sequence ABC's isinstance, which is slow.
    if type(tensors) is not list and (
        isinstance(tensors, str | bytes) or not isinstance(tensors, Sequence)
    ):
        raise TypeError(f"{what} must be a list of Tensor, not {type(tensors).__name__}")
    for tensor in tensors:
        if type(tensor) is Tensor:
            continue
        if tensor is None:
            raise TritonModelException(f"{what} must not contain None")
        if not isinstance(tensor, Tensor):
            raise TypeError(f"{what} must hold Tensor objects, not {type(tensor).__name__}")
    return list(tensors)


# --------------------------------------------------------------------------- responses


class InferenceResponse:
    """A response: output tensors, or an error, plus optional response parameters (an
    extension type, pb_utils.pxd)."""

    _error: TritonError | None
    _output_tensors: list[Tensor]
    _parameters: dict[str, Any]

    def __init__(
        self,
        output_tensors: Sequence[Tensor] = (),
        error: TritonError | None = None,
        parameters: Mapping[str, bool | int | str] | None = None,
    ) -> None:
        if error is not None and not isinstance(error, TritonError):
            raise TypeError(f"error must be a TritonError, not {type(error).__name__}")
        # Every response a model makes passes here: a list of Tensor objects (what models
        # pass) is checked in this loop, anything else by ``_validated_tensors``.
        tensors: list[Tensor] | None = None
        if type(output_tensors) is list:
            tensors = list(output_tensors)
            for tensor in tensors:
                if type(tensor) is not Tensor:
                    tensors = None
                    break
        self._output_tensors = (
            tensors if tensors is not None else _validated_tensors(output_tensors, "output_tensors")
        )
        self._error = error
        self._parameters = {} if parameters is None else _parameters_dict(parameters)

    @classmethod
    def _from_server(
        cls,
        output_tensors: list[Tensor],
        error: TritonError | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> InferenceResponse:
        response: InferenceResponse = cls.__new__(cls)
        response._output_tensors = output_tensors
        response._error = error
        response._parameters = parameters or {}
        return response

    def output_tensors(self) -> list[Tensor]:
        return self._output_tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        """The response parameters as a JSON string (``"{}"`` when none)."""
        return json.dumps(self._parameters)


SendHook = Callable[[InferenceResponse | None, bool], None]


class Cancellable(Protocol):
    """What a request delivered by the server is for (the server's request): whether
    it is cancelled."""

    @property
    def cancelled(self) -> bool: ...


class Responder(Protocol):
    """Makes a delivered request's send hook when the model first asks for its sender
    (most models never do: no hook is made for their requests)."""

    def send_hook(self, origin: Any) -> SendHook: ...


def _no_sender(response: InferenceResponse | None, final: bool) -> None:
    raise TritonModelException(
        "Unable to send response. This request was not delivered by the server, so it has "
        "no response sender."
    )


class InferenceResponseSender:
    """Sends a request's responses (``request.get_response_sender()``); thread-safe."""

    __slots__ = ("_closed", "_decoupled", "_hook", "_is_cancelled", "_lock", "_sent")

    def __init__(self, hook: SendHook, decoupled: bool, is_cancelled: Callable[[], bool]) -> None:
        self._hook = hook
        self._decoupled = decoupled
        self._is_cancelled = is_cancelled
        self._lock = threading.Lock()
        self._sent = 0
        self._closed = False

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        """Send ``response``; ``flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL`` closes the sender."""
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if response is None and flags == 0:
            raise TritonModelException(
                "Unable to send response. A response is required unless flags is "
                "TRITONSERVER_RESPONSE_COMPLETE_FINAL."
            )
        if response is not None and not isinstance(response, InferenceResponse):
            raise TypeError(f"response must be an InferenceResponse, not {type(response).__name__}")
        final = flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL
        with self._lock:
            if not self._decoupled:
                if response is not None and self._sent:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than "
                        "one response."
                    )
                if response is None and not self._sent:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send complete "
                        "final before sending a response."
                    )
            if self._closed:
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed."
                )
            self._hook(response, final)
            if response is not None:
                self._sent += 1
            self._closed = final

    def is_cancelled(self) -> bool:
        return self._is_cancelled()


class ResponseIterator:
    """The responses of a decoupled BLS call, in order; errors arrive as error responses."""

    __slots__ = ("_done", "_source")

    def __init__(self, source: Iterator[InferenceResponse]) -> None:
        self._source = source
        self._done = False

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> InferenceResponse:
        if self._done:
            raise StopIteration
        try:
            return next(self._source)
        except StopIteration:
            self._done = True
            raise
        except TritonModelException:
            self._done = True
            raise
        except Exception as exc:
            self._done = True
            return InferenceResponse._from_server([], TritonError._from_exception(exc))

    def cancel(self) -> None:
        """Ask the callee to stop; responses already produced may still arrive."""
        cancel = getattr(self._source, "cancel", None)
        if callable(cancel):
            cancel()


# --------------------------------------------------------------------------- requests


def request_from_server(
    request_id: str,
    correlation_id: int | str,
    inputs: list[Tensor],
    requested_output_names: list[str],
    parameters: dict[str, Any],
    flags: int,
    timeout: int,
    send_hook: SendHook | None = None,
    responder: Responder | None = None,
    origin: Cancellable | None = None,
    decoupled: bool = True,
    trace: Any = None,
) -> InferenceRequest:
    """``InferenceRequest._from_server`` (the server's hook, see the module docstring), a
    function the compiled backend calls directly."""
    request = InferenceRequest.__new__(InferenceRequest)
    request._request_id = request_id
    request._correlation_id = correlation_id
    request._inputs = inputs
    request._requested_output_names = requested_output_names
    request._model_name = ""
    request._model_version = -1
    request._flags = flags
    request._timeout = timeout
    request._preferred_memory = _NO_PREFERENCE
    request._trace = InferenceTrace._of(trace) if trace is not None else _UNTRACED
    request._parameters = parameters
    request._send_hook = send_hook
    request._responder = responder
    request._decoupled = decoupled
    request._origin = origin
    request._sender = None
    request._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
    return request


class InferenceRequest:
    """A request: delivered to ``execute`` by the server, or built by a model for BLS (an
    extension type, pb_utils.pxd)."""

    _correlation_id: int | str
    _decoupled: bool
    _flags: int
    _inputs: list[Tensor]
    _model_name: str
    _model_version: int
    _origin: Cancellable | None
    _parameters: dict[str, Any]
    _preferred_memory: PreferredMemory
    _release_flags: int
    _request_id: str
    _requested_output_names: list[str]
    _responder: Responder | None
    _send_hook: SendHook | None
    _sender: InferenceResponseSender | None
    _timeout: int
    _trace: InferenceTrace

    def __init__(
        self,
        request_id: str = "",
        correlation_id: int | str = 0,
        inputs: Sequence[Tensor] = (),
        requested_output_names: Sequence[str] = (),
        model_name: str | bytes | None = None,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: PreferredMemory | None = None,
        trace: InferenceTrace | None = None,
        parameters: Mapping[str, bool | int | str] | None = None,
    ) -> None:
        """A BLS request for ``model_name`` (required); ``timeout`` is in microseconds."""
        if model_name is None:
            raise TypeError("InferenceRequest() missing required argument: 'model_name'")
        if isinstance(model_name, bytes):
            # Triton's bindings take bytes too (a BYTES input's element, as in its examples).
            model_name = model_name.decode("utf-8")
        if not isinstance(model_name, str):
            raise TypeError(f"model_name must be a str, not {type(model_name).__name__}")
        if isinstance(correlation_id, bool) or not isinstance(correlation_id, int | str):
            raise TritonModelException("correlation_id must be an int or a str")
        if isinstance(correlation_id, int) and correlation_id < 0:
            raise TritonModelException("an integer correlation_id must not be negative")
        if isinstance(requested_output_names, str):
            raise TypeError("requested_output_names must be a list of str, not a str")
        for output_name in requested_output_names:
            if not output_name:
                raise TritonModelException(
                    f"request '{request_id}' for model '{model_name}' names an empty "
                    "requested output"
                )
        if not isinstance(flags, int) or flags < 0:
            raise TypeError(f"flags must be a non-negative int, not {flags!r}")
        if not isinstance(timeout, int) or timeout < 0:
            raise TypeError(f"timeout must be a non-negative int, not {timeout!r}")
        self._request_id = str(request_id)
        self._correlation_id = correlation_id
        self._inputs = _validated_tensors(inputs, "inputs")
        self._requested_output_names = list(requested_output_names)
        self._model_name = model_name
        self._model_version = int(model_version)
        self._flags = flags
        self._timeout = timeout
        self._preferred_memory = preferred_memory or _NO_PREFERENCE
        self._trace = trace if trace is not None else _UNTRACED
        self._parameters = {} if parameters is None else _parameters_dict(parameters)
        self._send_hook = None
        self._responder = None
        self._decoupled = True
        self._origin = None
        self._sender = None
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL

    _from_server = staticmethod(request_from_server)

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        """Sequence flags: TRITONSERVER_REQUEST_FLAG_SEQUENCE_START | _END."""
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = int(flags)

    def timeout(self) -> int:
        """The timeout in microseconds (0: none)."""
        return self._timeout

    def parameters(self) -> str:
        """The request parameters as a JSON string (``"{}"`` when none)."""
        return json.dumps(self._parameters)

    def trace(self) -> InferenceTrace:
        return self._trace

    def requested_output_names(self) -> list[str]:
        return self._requested_output_names

    def get_response_sender(self) -> InferenceResponseSender:
        """This request's one sender (the same object on every call)."""
        if self._sender is None:
            hook = self._send_hook
            if hook is None:
                responder = self._responder
                hook = _no_sender if responder is None else responder.send_hook(self._origin)
            self._sender = InferenceResponseSender(hook, self._decoupled, self.is_cancelled)
        return self._sender

    def is_cancelled(self) -> bool:
        origin = self._origin
        return origin is not None and origin.cancelled

    def set_release_flags(self, flags: int) -> None:
        """RELEASE_RESCHEDULE puts the request back in the queue (iterative sequences)."""
        self._release_flags = int(flags)

    def exec(self, decoupled: bool = False) -> InferenceResponse | ResponseIterator:
        """Run this request on ``model_name`` and wait (BLS).

        Returns the response, or with ``decoupled=True`` an iterator over the responses.
        A failed call comes back as a response holding the error.
        """
        bridge = require_bls()
        if decoupled:
            try:
                return ResponseIterator(bridge.infer_decoupled(self))
            except TritonModelException:
                raise
            except Exception as exc:
                return ResponseIterator(iter([_error_response(exc)]))
        try:
            return bridge.infer(self)
        except TritonModelException:
            raise
        except Exception as exc:
            return _error_response(exc)

    def async_exec(
        self, decoupled: bool = False
    ) -> Awaitable[InferenceResponse | ResponseIterator]:
        """``exec`` without blocking the running event loop: await the result.

        Many calls may be in flight at once (``asyncio.gather``); each is a request to the
        target's scheduler, not a thread.
        """
        bridge = require_bls()
        return _awaited(bridge, self, decoupled)


async def _awaited(
    bridge: ServerBridge, request: InferenceRequest, decoupled: bool
) -> InferenceResponse | ResponseIterator:
    try:
        if decoupled:
            return ResponseIterator(await bridge.infer_decoupled_async(request))
        return await bridge.infer_async(request)
    except TritonModelException:
        raise
    except Exception as exc:
        response = _error_response(exc)
        return ResponseIterator(iter([response])) if decoupled else response


def _error_response(exc: BaseException) -> InferenceResponse:
    return InferenceResponse._from_server([], TritonError._from_exception(exc))


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None
