"""Model loads and unloads, log and trace settings and client shared-memory registrations
applied to every worker of ``--workers N`` before the call returns.

Each worker listens on a Unix socket in the board's private folder (0700, made by the
parent). A worker that receives a load or unload from a client applies it, then sends it
to every other serving worker over their sockets and waits for each answer; a worker
applies what arrives on its socket without sending it on. One JSON object a line, each
way: ``{"op": "load", "name", "config", "files": {name: base64}}`` or ``{"op":
"unload", "name", "unload_dependents"}``; ``{"op": "call", "method", "args"}`` for the
service's synchronous setters (log and trace settings, shared-memory registrations), which
the calling worker sends with a blocking socket from its loop (they are rare, and their
answers come back in milliseconds); or ``{"op": "state"}`` (what a worker started in a dead
one's place asks a serving worker: its ready models and their configs, its log and trace
settings and its system shared-memory regions). The answer is ``{"ok": true, ...}`` or
``{"ok": false, "error": "..."}``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from pytriton_core.errors import InternalError, ServerError
from pytriton_core.logging_settings import SETTABLE
from pytriton_core.options import LogFormat
from pytriton_core.workers.board import WorkerBoard, WorkerState

log = logging.getLogger(__name__)

_LIMIT = 256 * 1024 * 1024  # a load may carry a model's files
# A setter's replay waits this long for each worker: two workers replaying to each other at
# the same moment both wait (each loop is blocked) and fail after it.
_REPLAY_TIMEOUT_S = 10.0
# The service's setters a worker replays on its peers (each takes replicate=False).
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
    """What a worker's service does for its peers (``InferenceService``)."""

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

    def ready_model_configs(self) -> dict[str, str]: ...

    def log_settings(self) -> dict[str, Any]: ...

    def trace_settings(self, model: str | None = None) -> dict[str, list[str] | str]: ...

    def shm_status(self, kind: str, region: str | None) -> list[dict[str, Any]]: ...


def socket_path(board: WorkerBoard, index: int) -> Path:
    return board.path.parent / f"worker-{index}.sock"


class PeerLink:
    """This worker's socket for its peers, and its calls to theirs."""

    def __init__(self, board: WorkerBoard, index: int) -> None:
        self._board = board
        self._index = index
        self._server: asyncio.AbstractServer | None = None

    async def start(self, calls: RepositoryCalls) -> None:
        path = socket_path(self._board, self._index)
        path.unlink(missing_ok=True)  # a dead predecessor's

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while line := await reader.readline():
                    answer = await _apply(calls, json.loads(line))
                    writer.write(json.dumps(answer).encode() + b"\n")
                    await writer.drain()
            finally:
                writer.close()

        self._server = await asyncio.start_unix_server(serve, path, limit=_LIMIT)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    async def load(self, name: str, config: str | None, files: Mapping[str, bytes] | None) -> None:
        await self.replicate(load_message(name, config, files))

    async def unload(self, name: str, unload_dependents: bool) -> None:
        await self.replicate(unload_message(name, unload_dependents))

    def _serving_peers(self) -> list[int]:
        return [
            index
            for index, slot in enumerate(self._board.slots())
            if index != self._index and slot.state() is WorkerState.SERVING
        ]

    async def replicate(self, message: dict[str, Any]) -> None:
        """Send ``message`` to every other serving worker; raises naming those that failed."""
        peers = self._serving_peers()
        answers = await asyncio.gather(*(self._call(i, message) for i in peers))
        _raise_failures(message, peers, answers)

    def replay(self, method: str, args: Sequence[Any]) -> None:
        """A synchronous setter, on every other serving worker, blocking until they answer."""
        message = {"op": "call", "method": method, "args": [_encode(a) for a in args]}
        peers = self._serving_peers()
        answers = [self._call_blocking(i, message) for i in peers]
        _raise_failures(message, peers, answers)

    def _call_blocking(self, index: int, message: dict[str, Any]) -> dict[str, Any]:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(_REPLAY_TIMEOUT_S)
                sock.connect(str(socket_path(self._board, index)))
                sock.sendall(json.dumps(message).encode() + b"\n")
                with sock.makefile("rb") as answers:
                    line = answers.readline()
        except OSError as exc:
            return {"ok": False, "error": f"no answer ({exc})"}
        answer: dict[str, Any] = json.loads(line) if line else {"ok": False}
        return answer

    async def _call(self, index: int, message: dict[str, Any]) -> dict[str, Any]:
        try:
            reader, writer = await asyncio.open_unix_connection(
                socket_path(self._board, index), limit=_LIMIT
            )
        except OSError as exc:
            return {"ok": False, "error": f"unreachable ({exc})"}
        try:
            writer.write(json.dumps(message).encode() + b"\n")
            await writer.drain()
            line = await reader.readline()
            answer: dict[str, Any] = json.loads(line) if line else {"ok": False}
            return answer
        finally:
            writer.close()

    async def copy_state_from_a_peer(self, calls: RepositoryCalls, explicit_models: bool) -> None:
        """A worker started in a dead one's place: take a serving worker's log and trace
        settings and system shared-memory regions and (``explicit_models``) load what it
        has loaded, with the configs it has them loaded with."""
        for index, slot in enumerate(self._board.slots()):
            if index == self._index or slot.state() is not WorkerState.SERVING:
                continue
            answer = await self._call(index, {"op": "state"})
            if not answer.get("ok"):
                continue
            if explicit_models:
                configs: dict[str, str] = answer["models"]
                mine = calls.ready_model_configs()
                for name, config in configs.items():
                    if name not in mine:
                        await calls.load_model(name, config, replicate=False)
                for name in set(mine) - set(configs):
                    await calls.unload_model(name, replicate=False)
            try:
                _copy_settings(calls, answer)
            except ServerError as exc:
                log.warning(
                    "could not take worker %d's settings and regions: %s", index, exc.status_text
                )
            return


def _raise_failures(
    message: dict[str, Any], peers: Sequence[int], answers: Sequence[dict[str, Any]]
) -> None:
    failed = [
        f"worker {i}: {answer.get('error', 'no answer')}"
        for i, answer in zip(peers, answers, strict=True)
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


_Handler = Callable[[RepositoryCalls, dict[str, Any]], Awaitable[dict[str, Any]]]


async def _load(calls: RepositoryCalls, message: dict[str, Any]) -> dict[str, Any]:
    files = {key: base64.b64decode(value) for key, value in message.get("files", {}).items()}
    await calls.load_model(message["name"], message.get("config"), files, replicate=False)
    return {"ok": True}


async def _unload(calls: RepositoryCalls, message: dict[str, Any]) -> dict[str, Any]:
    await calls.unload_model(
        message["name"], bool(message.get("unload_dependents")), replicate=False
    )
    return {"ok": True}


async def _state(calls: RepositoryCalls, message: dict[str, Any]) -> dict[str, Any]:
    return {
        "ok": True,
        "models": calls.ready_model_configs(),
        "log": calls.log_settings(),
        "trace": calls.trace_settings(),
        "system_shm": calls.shm_status("system", None),
    }


async def _call(calls: RepositoryCalls, message: dict[str, Any]) -> dict[str, Any]:
    method = str(message.get("method"))
    if method not in REPLAYED:
        return {"ok": False, "error": f"not a replayed method: {method!r}"}
    getattr(calls, method)(*(_decode(a) for a in message["args"]), replicate=False)
    return {"ok": True}


_HANDLERS: dict[str, _Handler] = {"load": _load, "unload": _unload, "state": _state, "call": _call}


async def _apply(calls: RepositoryCalls, message: dict[str, Any]) -> dict[str, Any]:
    handler = _HANDLERS.get(str(message.get("op")))
    if handler is None:
        return {"ok": False, "error": f"unknown operation {message.get('op')!r}"}
    try:
        return await handler(calls, message)
    except ServerError as exc:
        return {"ok": False, "error": exc.status_text}
    except Exception as exc:  # answered, so that the calling worker reports it
        log.exception("replicated '%s' failed", message.get("op"))
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


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


def _copy_settings(calls: Any, state: dict[str, Any]) -> None:
    """What a serving worker changed since start, on this new worker."""
    log_changes = {k: v for k, v in state["log"].items() if k in SETTABLE}
    if "log_format" in log_changes:
        log_changes["log_format"] = LogFormat(log_changes["log_format"])
    calls.update_log_settings(log_changes, replicate=False)
    trace = {
        k: [v] if isinstance(v, str) else v for k, v in state["trace"].items() if k != "trace_file"
    }
    calls.update_trace_settings(None, trace, replicate=False)
    for region in state["system_shm"]:
        calls.register_system_shm(
            region["name"], region["key"], region["offset"], region["byte_size"], replicate=False
        )
