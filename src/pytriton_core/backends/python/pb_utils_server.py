"""What a model asks of the server running it: BLS and model management through the server's
bridge, and the model's own folder (``pb_utils`` re-exports all but ``require_bls``, which
its BLS calls use).

The server installs both per call, in the model's scope (one context variable,
``pb_utils_context``), so that each model sees the bridge and folder of the server running
it (see ``pb_utils``'s docstring: ``server_context``, ``model_dir_context``,
``ModelContext``).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Protocol, TypeVar

from pytriton_core.backends.python.pb_utils_context import CURRENT, ModelScope, set_part
from pytriton_core.backends.python.pb_utils_errors import TritonModelException

if TYPE_CHECKING:
    from pytriton_core.backends.custom_metrics import MetricRegistry
    from pytriton_core.backends.python.pb_utils import InferenceRequest, InferenceResponse

__all__ = [
    "ModelContext",
    "ServerBridge",
    "get_model_dir",
    "is_model_ready",
    "load_model",
    "model_dir_context",
    "require_bls",
    "server_context",
    "unload_model",
]


class ServerBridge(Protocol):
    """What BLS and model management call (see ``server_context``).

    ``infer_decoupled``'s iterator may have a ``cancel()`` method, which
    ``ResponseIterator.cancel()`` calls.
    """

    def infer(self, request: InferenceRequest) -> InferenceResponse: ...

    def infer_async(self, request: InferenceRequest) -> Awaitable[InferenceResponse]: ...

    def infer_decoupled(self, request: InferenceRequest) -> Iterator[InferenceResponse]: ...

    def infer_decoupled_async(
        self, request: InferenceRequest
    ) -> Awaitable[Iterator[InferenceResponse]]: ...

    def load_model(self, name: str, config: str, files: Mapping[str, bytes]) -> None: ...

    def unload_model(self, name: str, unload_dependents: bool) -> None: ...

    def is_model_ready(self, name: str, version: int) -> bool: ...


_EXECUTE = "execute"
_T = TypeVar("_T")
_INITIALIZE = "initialize"


class _ServerScope:
    """``server_context``'s block."""

    __slots__ = ("_token", "_value")

    def __init__(self, value: tuple[ServerBridge, str] | None) -> None:
        self._value = value
        self._token: contextvars.Token[ModelScope] | None = None

    def __enter__(self) -> None:
        self._token = set_part(server=self._value)

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        CURRENT.reset(self._token)


def server_context(bridge: ServerBridge | None, phase: str) -> _ServerScope:
    """Route BLS and model management to ``bridge`` inside the block (server hook)."""
    return _ServerScope(None if bridge is None else (bridge, phase))


def require_bls() -> ServerBridge:
    current = CURRENT.get().server
    if current is None or current[1] != _EXECUTE:
        raise TritonModelException("BLS is only supported during the 'execute' function.")
    return current[0]


def _require_bridge(what: str) -> ServerBridge:
    current = CURRENT.get().server
    if current is None or current[1] not in (_EXECUTE, _INITIALIZE):
        raise TritonModelException(
            f"{what} is only supported during the 'initialize' and 'execute' functions"
        )
    return current[0]


def load_model(model_name: str, config: str = "", files: Mapping[str, bytes] | None = None) -> None:
    """Load (or reload) a model; ``config`` is JSON, ``files`` maps ``file:<path>`` to bytes."""
    if files is not None and not isinstance(files, Mapping):
        raise TritonModelException(
            f"failed to load model '{model_name}': files must be a dict of file paths to bytes"
        )
    for path, content in (files or {}).items():
        if not isinstance(path, str) or not isinstance(content, bytes | bytearray):
            raise TritonModelException(
                f"failed to load model '{model_name}': files must map str paths to bytes"
            )
    bridge = _require_bridge("load_model")
    with _reraised("Failed to load model"):
        bridge.load_model(model_name, config, dict(files or {}))


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    bridge = _require_bridge("unload_model")
    with _reraised("Failed to unload model"):
        bridge.unload_model(model_name, bool(unload_dependents))


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """Whether a version (``""``: the latest) of a model is ready."""
    version = -1
    if model_version != "":
        try:
            version = int(model_version)
        except ValueError:
            version = -2
        if version < 0:
            raise TritonModelException(f"model version '{model_version}' is not an integer >= 0")
    bridge = _require_bridge("is_model_ready")
    with _reraised("Failed to check model readiness"):
        ready = bool(bridge.is_model_ready(model_name, version))
    return ready


@contextlib.contextmanager
def _reraised(prefix: str) -> Iterator[None]:
    try:
        yield
    except TritonModelException:
        raise
    except Exception as exc:
        raise TritonModelException(f"{prefix}: {exc}") from exc


@contextlib.contextmanager
def model_dir_context(path: str) -> Iterator[None]:
    """Make ``get_model_dir()`` return ``path`` inside the block (server hook)."""
    token = set_part(model_dir=path)
    try:
        yield
    finally:
        CURRENT.reset(token)


class ModelContext:
    """What model code sees while the server runs it: ``path`` as ``get_model_dir()``, and
    ``metrics`` (its server's registry) for the ``MetricFamily`` objects it creates. The
    backend's hook, entered around a model's import, initialize, execute and finalize; one
    object serves every call (a class, not a generator: ``execute`` enters it per batch)."""

    __slots__ = ("_metrics", "_path", "_tokens")

    def __init__(self, path: str, metrics: MetricRegistry | None) -> None:
        self._path = path
        self._metrics = metrics
        self._tokens: list[contextvars.Token[ModelScope]] = []

    def __enter__(self) -> None:
        self._tokens.append(set_part(model_dir=self._path, metrics=self._metrics))

    def __exit__(self, *exc_info: object) -> None:
        CURRENT.reset(self._tokens.pop())

    def executing(self, bridge: ServerBridge | None) -> ExecuteScope:
        """This context and ``server_context(bridge, "execute")`` as one block."""
        return ExecuteScope(self._path, self._metrics, bridge)


class ExecuteScope:
    """``ModelContext`` and ``server_context(bridge, "execute")`` in one: made once per
    instance, and every ``execute`` runs inside it (``run``). A copy of the context it is
    made in, made once, holds the model's scope; running in it swaps the thread's current
    context, where a ``set`` and a ``reset`` of the variable built two new contexts per
    execution (callgrind, JSON ``[16]`` c8: 96.7k -> 94.6k instructions per request). The
    model's code sees its instance's context, the same on its thread and on the loop, not
    its caller's (the HTTP front end's exchange is none of its business). Not re-entrant:
    an instance executes one batch at a time, and a second entry while one is open is
    refused (``Context.run``'s RuntimeError). An extension type (pb_utils_server.pxd)."""

    def __init__(
        self, path: str, metrics: MetricRegistry | None, bridge: ServerBridge | None
    ) -> None:
        scope = ModelScope(path, metrics, None if bridge is None else (bridge, _EXECUTE))
        self._context = contextvars.copy_context()
        self._context.run(CURRENT.set, scope)

    def run(self, call: Callable[..., _T], *arguments: object) -> _T:
        """``call(*arguments)`` inside the scope."""
        return self._context.run(call, *arguments)


def get_model_dir() -> str:
    """The directory of the running model (``<repository>/<model>``)."""
    path = CURRENT.get().model_dir
    if path is None:
        raise TritonModelException(
            "get_model_dir() is only available while the server runs a model's "
            "initialize, execute or finalize"
        )
    return path
