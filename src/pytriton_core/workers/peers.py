"""Model loads and unloads, log and trace settings and client shared-memory registrations
applied to every worker of ``--workers N`` before the call returns, in one order.

The parent orders every change (``sequencer.py``). A worker that receives one from a
client does not apply it itself: it sends it to the parent, which applies it to every
worker that has joined (the sender included), one change at a time, and answers with each
worker's answer; the sender answers its client with its own. So two changes of the same
thing through two workers land in the same order everywhere, and no worker waits for
another while the other waits for it.

A model's ``pb_utils.load_model`` / ``unload_model`` from its ``execute`` is sent to the
parent like a client's change, with the asking model's name (``"caller"``, beside the
message), and applied as the parent sends it back, on this worker's event loop (the
asking instance thread only waits).

Each worker listens on a Unix socket in the board's private folder (0700, made by the
parent), for what the parent sends. One JSON object a line, each way: ``{"op": "load",
"name", "config", "files": {name: base64}, "stamp"}``, ``{"op": "unload", "name",
"unload_dependents"}``, ``{"op": "poll"}`` (POLL mode: poll the repositories once, as
the parent's clock says), ``{"op": "call", "method", "args"}`` for the service's setters
(log and trace settings, shared-memory registrations) or ``{"op": "state"}`` (what a worker
joining asks for, through the parent: the ready models with their configs and load stamps,
the log settings, the global and per-model trace settings and the system shared-memory
regions). The answer is ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "...",
"code": "...", "message": "..."}``.

A worker joins once its startup models are loaded, before its front ends listen: the
parent, holding the order, hands it a joined worker's state, waits until it has applied
it, and only then sends it the changes that follow. No change falls between.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from pytriton_core.errors import ErrorCode, InternalError, ServerError
from pytriton_core.inference.statistics import ModelStatistics
from pytriton_core.logging_settings import SETTABLE
from pytriton_core.options import LogFormat
from pytriton_core.workers.board import WorkerBoard
from pytriton_core.workers.shared_stats import SharedStatistics, SharedStatisticsFactory

log = logging.getLogger(__name__)

LIMIT = 256 * 1024 * 1024  # a load may carry a model's files
# The service's setters that are changes of every worker (each takes replicate=False).
REPLAYED = frozenset(
    {
        "update_log_settings",
        "update_trace_settings",
        "register_system_shm",
        "register_cuda_shm",
        "unregister_shm",
    }
)


class RepositoryCalls(Protocol):
    """What a worker's service does for the parent (``InferenceService``)."""

    async def load_model(
        self,
        name: str,
        config: str | None = None,
        files: Mapping[str, bytes] | None = None,
        *,
        replicate: bool = True,
    ) -> None: ...

    async def unload_model(
        self, name: str, unload_dependents: bool = False, *, replicate: bool = True
    ) -> None: ...

    async def poll_repository(self) -> None: ...

    def ready_model_configs(self) -> dict[str, str]: ...

    def ready_model_statistics(self) -> dict[str, ModelStatistics]: ...

    def log_settings(self) -> dict[str, Any]: ...

    def trace_settings(self, model: str | None = None) -> dict[str, list[str] | str]: ...

    def trace_overrides(self) -> dict[str, dict[str, list[str] | str]]: ...

    def shm_status(self, kind: str, region: str | None) -> list[dict[str, Any]]: ...


def socket_path(board: WorkerBoard, index: int) -> Path:
    return board.path.parent / f"worker-{index}.sock"


def parent_socket_path(board: WorkerBoard) -> Path:
    return board.path.parent / "parent.sock"


def error_answer(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, ServerError):
        return {
            "ok": False,
            "error": exc.status_text,
            "code": exc.code.value,
            "message": exc.message,
        }
    return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def error_of(answer: Mapping[str, Any]) -> ServerError:
    """The error a worker answered, as the class it raised."""
    if "code" in answer:
        return ServerError.from_code(ErrorCode(answer["code"]), str(answer["message"]))
    return InternalError(str(answer.get("error", "no answer")))


class PeerLink:
    """This worker's socket for the parent, and its changes sent to the parent."""

    def __init__(self, board: WorkerBoard, index: int, statistics: SharedStatisticsFactory) -> None:
        self._board = board
        self._index = index
        self._statistics = statistics
        self._server: asyncio.AbstractServer | None = None
        self._exchanges: set[asyncio.Task[dict[str, Any]]] = set()

    async def start(self, calls: RepositoryCalls) -> None:
        path = socket_path(self._board, self._index)
        path.unlink(missing_ok=True)  # a dead predecessor's

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while line := await reader.readline():
                    answer = await self._apply(calls, json.loads(line))
                    writer.write(json.dumps(answer).encode() + b"\n")
                    await writer.drain()
            finally:
                writer.close()

        self._server = await asyncio.start_unix_server(serve, path, limit=LIMIT)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    # ------------------------------------------------------------ changes

    async def load(
        self,
        name: str,
        config: str | None,
        files: Mapping[str, bytes] | None,
        caller: str = "",
    ) -> None:
        """``caller``: the model whose ``execute`` asks (BLS), "" for a client's load."""
        await self.change(load_message(name, config, files), caller)

    async def unload(self, name: str, unload_dependents: bool, caller: str = "") -> None:
        await self.change(unload_message(name, unload_dependents), caller)

    async def call(self, method: str, args: Sequence[Any]) -> Any:
        """A setter of the service, on every worker in the parent's order; returns this
        worker's result."""
        return await self.change(
            {"op": "call", "method": method, "args": [_encode(a) for a in args]}
        )

    async def change(self, message: dict[str, Any], caller: str = "") -> Any:
        """``message`` applied by every joined worker; this worker's own failure is raised
        as it was raised, the others' as one error naming them. ``caller``: the model
        whose ``execute`` asks, which the parent refuses when the change holding the order
        waits for that model's executions (see ``sequencer.py``)."""
        request = {"op": "change", "from": self._index, "message": message}
        if caller:
            request["caller"] = caller
        reply = await self._ask_parent(request)
        if not reply.get("ok"):
            if "code" in reply:  # the parent's refusal, as it said it
                raise error_of(reply)
            raise InternalError(f"the workers' parent refused the change: {reply.get('error')}")
        answers: dict[str, dict[str, Any]] = reply["answers"]
        own = answers.pop(str(self._index), None)
        if own is None:
            raise InternalError("this worker has not joined the others yet")
        if not own.get("ok"):
            raise error_of(own)
        _raise_failures(message, answers)
        return own.get("result")

    async def _ask_parent(self, message: dict[str, Any]) -> dict[str, Any]:
        # On a task this link holds: the exchange's stream reader is held only by the
        # coroutine that waits on it (its protocol keeps a weak reference), and the HTTP
        # front end drives its handlers without tasks, so a garbage collection during a
        # long load would otherwise close the waiting handler.
        task = asyncio.get_running_loop().create_task(self._exchange_with_parent(message))
        self._exchanges.add(task)
        task.add_done_callback(self._exchanges.discard)
        return await task

    async def _exchange_with_parent(self, message: dict[str, Any]) -> dict[str, Any]:
        try:
            reader, writer = await asyncio.open_unix_connection(
                parent_socket_path(self._board), limit=LIMIT
            )
        except OSError as exc:
            raise InternalError(f"the workers' parent is unreachable ({exc})") from None
        try:
            writer.write(json.dumps(message).encode() + b"\n")
            await writer.drain()
            line = await reader.readline()
        finally:
            writer.close()
        if not line:
            raise InternalError("the workers' parent closed without an answer")
        answer: dict[str, Any] = json.loads(line)
        return answer

    # ------------------------------------------------------------ joining

    async def join(
        self, calls: RepositoryCalls, explicit_models: bool, polled_models: bool = False
    ) -> None:
        """Join the workers that take every change: apply the state of one that has
        joined (a worker started in a dead one's place), while the parent holds back
        every change, then tell it so. ``explicit_models``: load what the others loaded
        through the API; ``polled_models`` (POLL mode): serve the models the others
        polled, from the repository, with their load stamps."""
        try:
            reader, writer = await asyncio.open_unix_connection(
                parent_socket_path(self._board), limit=LIMIT
            )
        except OSError as exc:
            raise InternalError(f"the workers' parent is unreachable ({exc})") from None
        try:
            request = {"op": "join", "index": self._index, "pid": os.getpid()}
            writer.write(json.dumps(request).encode() + b"\n")
            await writer.drain()
            line = await reader.readline()
            if not line:
                raise InternalError("the workers' parent closed without an answer")
            reply = json.loads(line)
            if reply.get("state") is not None:
                await self._copy_state(
                    calls, reply["state"], reply["loads"], explicit_models, polled_models
                )
            writer.write(b'{"op": "joined"}\n')
            await writer.drain()
            if not await reader.readline():
                raise InternalError("the workers' parent closed without an answer")
        finally:
            writer.close()

    async def _copy_state(
        self,
        calls: RepositoryCalls,
        state: dict[str, Any],
        loads: dict[str, dict[str, Any]],
        explicit_models: bool,
        polled_models: bool = False,
    ) -> None:
        """Serve what the other workers serve (``explicit_models``: load what they have
        loaded, as they loaded it, files included, with their load stamps;
        ``polled_models``: the same models from the repository, where they were polled
        since this worker's start loads took other stamps), with their log and trace
        settings and system shared-memory regions."""
        if explicit_models or polled_models:
            models: dict[str, dict[str, Any]] = state["models"]
            mine = {name: _stamp(stats) for name, stats in calls.ready_model_statistics().items()}
            self._statistics.stamps = {name: int(m["stamp"]) for name, m in models.items()}
            try:
                for name, model in models.items():
                    if mine.get(name) == model["stamp"]:
                        continue  # loaded at start, as there
                    if name in mine:
                        # Loaded at start, but loaded again there since: unloaded first,
                        # so that it starts again here even where its files are unchanged.
                        await calls.unload_model(name, replicate=False)
                    message = loads.get(name)
                    if polled_models:
                        await _load_polled(calls, name)
                    elif message is not None:
                        await calls.load_model(
                            name, message["config"], _files(message), replicate=False
                        )
                    else:
                        await calls.load_model(name, model["config"], replicate=False)
                for name in set(mine) - set(models):
                    await calls.unload_model(name, replicate=False)
            finally:
                self._statistics.stamps = {}
        try:
            await _copy_settings(calls, state)
        except ServerError as exc:
            log.warning("could not take the other workers' settings: %s", exc.status_text)

    # ----------------------------------------------------- what arrives here

    async def _apply(self, calls: RepositoryCalls, message: dict[str, Any]) -> dict[str, Any]:
        handler = _HANDLERS.get(str(message.get("op")))
        if handler is None:
            return {"ok": False, "error": f"unknown operation {message.get('op')!r}"}
        self._statistics.stamp = int(message.get("stamp", 0))
        try:
            return await handler(calls, message)
        except ServerError as exc:
            return error_answer(exc)
        except Exception as exc:  # answered, so that the calling worker reports it
            log.exception("replicated '%s' failed", message.get("op"))
            return error_answer(exc)
        finally:
            self._statistics.stamp = 0


def _stamp(stats: ModelStatistics) -> int:
    return stats.load_stamp if isinstance(stats, SharedStatistics) else 0


def _raise_failures(message: dict[str, Any], answers: Mapping[str, dict[str, Any]]) -> None:
    failed = [
        f"worker {i}: {answer.get('error', 'no answer')}"
        for i, answer in sorted(answers.items())
        if not answer.get("ok")
    ]
    if failed:
        what = message.get("method", message["op"])
        raise InternalError(f"'{what}' failed on other workers: {'; '.join(failed)}")


def _encode(value: Any) -> Any:
    """JSON for a setter's argument: bytes (a CUDA handle) and log formats tagged."""
    if isinstance(value, bytes):
        return {"bytes": base64.b64encode(value).decode()}
    if isinstance(value, LogFormat):
        return {"log_format": value.value}
    if isinstance(value, dict):
        return {"dict": {k: _encode(v) for k, v in value.items()}}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "bytes" in value:
            return base64.b64decode(value["bytes"])
        if "log_format" in value:
            return LogFormat(value["log_format"])
        return {k: _decode(v) for k, v in value["dict"].items()}
    return value


def _files(message: dict[str, Any]) -> dict[str, bytes]:
    return {key: base64.b64decode(value) for key, value in message.get("files", {}).items()}


_Handler = Callable[[RepositoryCalls, dict[str, Any]], Awaitable[dict[str, Any]]]


async def _load(calls: RepositoryCalls, message: dict[str, Any]) -> dict[str, Any]:
    await calls.load_model(message["name"], message.get("config"), _files(message), replicate=False)
    return {"ok": True}


async def _unload(calls: RepositoryCalls, message: dict[str, Any]) -> dict[str, Any]:
    await calls.unload_model(
        message["name"], bool(message.get("unload_dependents")), replicate=False
    )
    return {"ok": True}


async def _poll(calls: RepositoryCalls, message: dict[str, Any]) -> dict[str, Any]:
    await calls.poll_repository()
    return {"ok": True}


async def _load_polled(calls: RepositoryCalls, name: str) -> None:
    try:
        await calls.load_model(name, replicate=False)
    except ServerError as exc:  # removed from the folder since: the next poll unloads it
        log.warning("could not load model '%s' as the other workers: %s", name, exc.status_text)


async def _state(calls: RepositoryCalls, message: dict[str, Any]) -> dict[str, Any]:
    stats = calls.ready_model_statistics()
    return {
        "ok": True,
        "result": {
            "models": {
                name: {"config": config, "stamp": _stamp(stats[name])}
                for name, config in calls.ready_model_configs().items()
            },
            "log": calls.log_settings(),
            "trace": calls.trace_settings(),
            "trace_models": calls.trace_overrides(),
            "system_shm": calls.shm_status("system", None),
        },
    }


async def _call(calls: RepositoryCalls, message: dict[str, Any]) -> dict[str, Any]:
    method = str(message.get("method"))
    if method not in REPLAYED:
        return {"ok": False, "error": f"not a replayed method: {method!r}"}
    setter = getattr(calls, method)
    result = await setter(*(_decode(a) for a in message["args"]), replicate=False)
    return {"ok": True, "result": result}


_HANDLERS: dict[str, _Handler] = {
    "load": _load,
    "unload": _unload,
    "poll": _poll,
    "state": _state,
    "call": _call,
}


def load_message(
    name: str, config: str | None, files: Mapping[str, bytes] | None
) -> dict[str, Any]:
    return {
        "op": "load",
        "name": name,
        "config": config,
        "files": {k: base64.b64encode(v).decode() for k, v in (files or {}).items()},
    }


def unload_message(name: str, unload_dependents: bool) -> dict[str, Any]:
    return {"op": "unload", "name": name, "unload_dependents": unload_dependents}


async def _copy_settings(calls: Any, state: dict[str, Any]) -> None:
    """What the joined workers changed since start, on this new worker."""
    log_changes = {k: v for k, v in state["log"].items() if k in SETTABLE}
    if "log_format" in log_changes:
        log_changes["log_format"] = LogFormat(log_changes["log_format"])
    await calls.update_log_settings(log_changes, replicate=False)
    await calls.update_trace_settings(None, _trace_changes(state["trace"]), replicate=False)
    for model, overrides in state["trace_models"].items():
        try:
            await calls.update_trace_settings(model, _trace_changes(overrides), replicate=False)
        except ServerError as exc:  # a model this worker could not load
            log.warning("could not take model '%s' trace settings: %s", model, exc.status_text)
    for region in state["system_shm"]:
        await calls.register_system_shm(
            region["name"], region["key"], region["offset"], region["byte_size"], replicate=False
        )
    for registration in state.get("cuda_regions", ()):
        args = [_decode(a) for a in registration["args"]]
        try:
            await calls.register_cuda_shm(*args, replicate=False)
        except ServerError as exc:
            log.warning("could not map CUDA region '%s': %s", args[0], exc.status_text)


def _trace_changes(settings: Mapping[str, Any]) -> dict[str, list[str]]:
    return {
        k: [v] if isinstance(v, str) else list(v) for k, v in settings.items() if k != "trace_file"
    }
