"""Model loads and unloads applied to every worker of ``--workers N`` before the call
returns.

Each worker listens on a Unix socket in the board's private folder (0700, made by the
parent). A worker that receives a load or unload from a client applies it, then sends it
to every other serving worker over their sockets and waits for each answer; a worker
applies what arrives on its socket without sending it on. One JSON object a line, each
way: ``{"op": "load", "name", "config", "files": {name: base64}}`` or ``{"op":
"unload", "name", "unload_dependents"}``, or ``{"op": "models"}`` (what a worker started
in a dead one's place asks a serving worker: its ready models and their configs); the
answer is ``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from pytriton_core.errors import InternalError, ServerError
from pytriton_core.workers.board import WorkerBoard, WorkerState

log = logging.getLogger(__name__)

_LIMIT = 256 * 1024 * 1024  # a load may carry a model's files


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

    async def replicate(self, message: dict[str, Any]) -> None:
        """Send ``message`` to every other serving worker; raises naming those that failed."""
        peers = [
            index
            for index, slot in enumerate(self._board.slots())
            if index != self._index and slot.state() is WorkerState.SERVING
        ]
        answers = await asyncio.gather(*(self._call(i, message) for i in peers))
        failed = [
            f"worker {i}: {answer.get('error', 'no answer')}"
            for i, answer in zip(peers, answers, strict=True)
            if not answer.get("ok")
        ]
        if failed:
            raise InternalError(f"'{message['op']}' failed on other workers: {'; '.join(failed)}")

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

    async def copy_models_from_a_peer(self, calls: RepositoryCalls) -> None:
        """A worker started in a dead one's place: load what a serving worker has loaded
        (with the config it is loaded with), so that it serves the same models."""
        for index, slot in enumerate(self._board.slots()):
            if index == self._index or slot.state() is not WorkerState.SERVING:
                continue
            answer = await self._call(index, {"op": "models"})
            if not answer.get("ok"):
                continue
            configs: dict[str, str] = answer["models"]
            mine = calls.ready_model_configs()
            for name, config in configs.items():
                if name not in mine:
                    await calls.load_model(name, config, replicate=False)
            for name in set(mine) - set(configs):
                await calls.unload_model(name, replicate=False)
            return


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


async def _models(calls: RepositoryCalls, message: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, "models": calls.ready_model_configs()}


_HANDLERS: dict[str, _Handler] = {"load": _load, "unload": _unload, "models": _models}


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
