"""The server as model code calls it (``backends.base.ServerCalls``), in process.

A BLS request from a Python model is a function call into the target model's scheduler:
no socket, no serialization, no copy of tensor data. Model code runs on instance threads
(or a model's own event loop); requests and model management are handed to the server's
loop, where models are looked up and submitted to as for a request from a front end.
Model code running on the loop inside an ``InlineExecution`` (inference/inline.py) does
that work at once, and waits for model management by suspending the execution.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pytriton_core.config.spec import ModelSpec
from pytriton_core.errors import InternalError, ServerError, UnavailableError
from pytriton_core.inference.inline import current_inline
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.options import ModelControlMode, ServerOptions

if TYPE_CHECKING:
    from pytriton_core.repository.manager import ModelManager


class ModelChanges(Protocol):
    """``--workers N``: a model load or unload made on every worker in the order of
    changes (``workers.peers.PeerLink``); ``caller`` names the model whose ``execute``
    asks."""

    async def load(
        self,
        name: str,
        config: str | None,
        files: Mapping[str, bytes] | None,
        caller: str = "",
    ) -> None: ...

    async def unload(self, name: str, unload_dependents: bool, caller: str = "") -> None: ...


_T = TypeVar("_T")

# The repository extension's refusal outside explicit mode (Triton's message).
EXPLICIT_ONLY = "explicit model load / unload is not allowed if polling is enabled"


# Refusal of a BLS request made on the server's event loop thread.
BLS_ON_LOOP = (
    "a BLS request cannot be made from the server's event loop thread (it would wait on "
    "the loop it blocks); model code that calls models runs on its instance's thread"
)


class InProcessCalls:
    """``ServerCalls`` over a repository manager and its event loop."""

    def __init__(
        self,
        manager: ModelManager,
        loop: asyncio.AbstractEventLoop,
        options: ServerOptions,
        changes: ModelChanges | None = None,
    ) -> None:
        self._manager = manager
        self._loop = loop
        self._options = options
        self._changes = changes  # --workers N: the other workers

    def model_spec(self, name: str, version: int) -> ModelSpec:
        # Reads of the manager's tables, safe from another thread: a model's version table
        # is replaced when it changes, never changed in place.
        return self._manager.get(name, version).spec

    def is_model_ready(self, name: str, version: int) -> bool:
        try:
            self._manager.get(name, version)
        except ServerError:
            return False
        return True

    def submit(self, request: InferenceRequest, refused: Callable[[ServerError], None]) -> None:
        def submit_on_loop() -> None:
            try:
                self._manager.get(request.model_name, request.model_version).submit(request)
            except ServerError as exc:
                refused(exc)

        if current_inline() is not None:  # on the loop: the caller waits by suspending
            submit_on_loop()
            return
        _refuse_on_loop(self._loop)
        self._loop.call_soon_threadsafe(submit_on_loop)

    def execute_direct(self, request: InferenceRequest, inline: bool) -> bool:
        # An inline execution (``inline``, the caller's word) runs on the loop (and the
        # test is cheaper than asking asyncio, which costs a getpid system call there).
        on_loop = inline
        if not on_loop and _on_loop(self._loop):
            return False  # ``submit`` refuses it
        # The manager's tables may be read from any thread (see ``model_spec``).
        model = self._manager.get(request.model_name, request.model_version)
        return model.execute_direct(request, on_loop)

    def cancel(self, request: InferenceRequest) -> None:
        request.cancel_threadsafe()

    def load_model(
        self, name: str, config_json: str, files: Mapping[str, bytes], caller: str = ""
    ) -> None:
        self._require_explicit_mode()
        if caller and self._changes is not None:
            # From ``execute``: this worker's event loop sends it to the parent and, when
            # the parent sends it back, applies it there as every worker does; this
            # instance thread only waits, and no change needs it to apply.
            self._run(self._changes.load(name, config_json or None, files or None, caller))
        else:
            self._run(self._manager.load(name, config_json or None, files or None))

    def unload_model(self, name: str, unload_dependents: bool, caller: str = "") -> None:
        self._require_explicit_mode()
        if caller and self._changes is not None:
            self._run(self._changes.unload(name, unload_dependents, caller))
        else:
            self._run(self._manager.unload(name, unload_dependents))

    def _require_explicit_mode(self) -> None:
        if self._options.model_control_mode is not ModelControlMode.EXPLICIT:
            raise UnavailableError(EXPLICIT_ONLY)

    def _run(self, work: Coroutine[Any, Any, _T]) -> _T:
        if not _on_loop(self._loop):
            return asyncio.run_coroutine_threadsafe(work, self._loop).result()
        inline = current_inline()
        if inline is None:
            work.close()
            raise InternalError("model management cannot wait on the server's own event loop")
        task = self._loop.create_task(work)
        task.add_done_callback(lambda _: inline.wake())
        inline.suspend()  # the loop runs the task meanwhile
        return task.result()


def _refuse_on_loop(loop: asyncio.AbstractEventLoop) -> None:
    if _on_loop(loop):
        # The caller would block the loop that has to run the request and bring its
        # answer back: a deadlock. Model code that calls models runs on instance threads
        # (or its model's own loop), or on the loop inside an ``InlineExecution``.
        raise InternalError(BLS_ON_LOOP)


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:  # no loop runs in this thread
        return False
