"""HttpProtocol without sockets: raw bytes in through ``data_received``, bytes out checked.

In the style of uvicorn's tests/protocols/test_http.py: a fake transport records what the
protocol writes and whether it closed or paused the connection. Behind the protocol are real
parts: the router of the HTTP front end over an InferenceService serving a one-model
repository (a Python ``echo`` model) written to a temporary folder.
"""

from __future__ import annotations

import asyncio
import gc
import json
import textwrap
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pytriton_core.backends.registry import BackendRegistry
from pytriton_core.errors import UnavailableError
from pytriton_core.frontends.http.exchange import Exchange, current_exchange
from pytriton_core.frontends.http.handlers import build_router
from pytriton_core.frontends.http.held_writes import HeldWrites
from pytriton_core.frontends.http.infer_codec import DecodedInfer
from pytriton_core.frontends.http.messages import DeferredResponse, HttpResponse
from pytriton_core.frontends.http.router import Handler, Request, RouteMatch, Router
from pytriton_core.frontends.http.server import HttpProtocol
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.options import ServerOptions
from pytriton_core.repository.manager import ModelManager
from pytriton_core.service import InferenceService

T = TypeVar("T")
MAX_BODY = 4096
WAIT_S = 10.0

ECHO_CONFIG = """
name: "echo"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_INT32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_INT32, dims: [ -1 ] } ]
# In its thread: a request then stays in flight across loop turns, as these tests need (a
# lone request may otherwise be answered on the loop before its handler first yields).
parameters: { key: "EXECUTE_ON_EVENT_LOOP" value: { string_value: "no" } }
"""
ECHO_MODEL = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        if any(r.request_id() == "slow" for r in requests):
            time.sleep(0.3)  # still in flight after what the test does next
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor(
                        "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
                    )
                ]
            )
            for r in requests
        ]
"""

INLINE_ECHO = "inline_echo"
# What an infer request makes (the last test checks none is left to the garbage collector).
_REQUEST_OBJECTS = (
    InferenceRequest,
    InferenceResponse,
    DecodedInfer,
    Exchange,
    HttpResponse,
    DeferredResponse,
)

LIVE = b"GET /v2/health/live HTTP/1.1\r\nHost: test\r\n\r\n"
LIVE_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n"


def infer_request(
    values: list[int], request_id: str = "", extra_headers: bytes = b"", model: str = "echo"
) -> bytes:
    document: dict[str, Any] = {
        "inputs": [{"name": "INPUT0", "shape": [len(values)], "datatype": "INT32", "data": values}]
    }
    if request_id:
        document["id"] = request_id
    body = json.dumps(document).encode()
    return (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: test\r\n".encode()
        + extra_headers
        + b"Content-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


def infer_answer(values: list[int], request_id: str = "", model: str = "echo") -> dict[str, Any]:
    answer: dict[str, Any] = {"id": request_id} if request_id else {}
    answer.update(
        model_name=model,
        model_version="1",
        outputs=[{"name": "OUTPUT0", "datatype": "INT32", "shape": [len(values)], "data": values}],
    )
    return answer


# --------------------------------------------------------------------------- fakes


@dataclass(frozen=True)
class Response:
    status_line: str
    headers: dict[str, str]  # lower-case names
    body: bytes

    @property
    def status(self) -> int:
        return int(self.status_line.split(" ")[1])

    def json(self) -> Any:
        assert self.headers["content-type"] == "application/json"
        return json.loads(self.body)


def parse_responses(data: bytes) -> list[Response]:
    """The complete responses in ``data`` (the server always sends Content-Length)."""
    responses = []
    position = 0
    while (end := data.find(b"\r\n\r\n", position)) >= 0:
        status_line, *lines = data[position:end].decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        if len(data) < end + 4 + length:
            break
        responses.append(Response(status_line, headers, data[end + 4 : end + 4 + length]))
        position = end + 4 + length
    return responses


class FakeTransport:
    """The part of asyncio.Transport that HttpProtocol uses; it records everything."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False
        self.reading = True
        self.pauses = 0
        self._changed = asyncio.Event()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default  # no socket

    def write(self, data: bytes) -> None:
        assert not self.closed, "write after close"
        self.written += data
        self._changed.set()

    def writelines(self, parts: Any) -> None:
        assert not self.closed, "write after close"
        for part in parts:
            self.written += part
        self._changed.set()

    def close(self) -> None:
        self.closed = True
        self._changed.set()

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.reading = False
        self.pauses += 1

    def resume_reading(self) -> None:
        self.reading = True

    @property
    def responses(self) -> list[Response]:
        return parse_responses(bytes(self.written))

    async def wait_for_responses(self, count: int) -> list[Response]:
        """Until ``count`` complete responses were written (or the connection closed)."""
        while len(self.responses) < count and not self.closed:
            self._changed.clear()
            await asyncio.wait_for(self._changed.wait(), WAIT_S)
        return self.responses


async def settle() -> None:
    """Run the loop until every task but this one is done (handlers awaiting the model)."""
    while tasks := [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
        await asyncio.wait(tasks, timeout=WAIT_S)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def router(
    loop: asyncio.AbstractEventLoop, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Router]:
    repository = tmp_path_factory.mktemp("protocol-models")
    model_dir = repository / "echo"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(textwrap.dedent(ECHO_CONFIG))
    (model_dir / "1" / "model.py").write_text(textwrap.dedent(ECHO_MODEL))
    # The same model as the server runs it by default: a lone request on the loop.
    inline_dir = repository / INLINE_ECHO
    (inline_dir / "1").mkdir(parents=True)
    inline_config = ECHO_CONFIG.replace('"echo"', f'"{INLINE_ECHO}"')
    inline_config = inline_config.split("# In its thread")[0]
    (inline_dir / "config.pbtxt").write_text(textwrap.dedent(inline_config))
    (inline_dir / "1" / "model.py").write_text(textwrap.dedent(ECHO_MODEL))
    options = ServerOptions(model_repositories=(Path(repository),), http_max_input_size=MAX_BODY)
    manager = ModelManager(options, BackendRegistry(), loop)
    assert loop.run_until_complete(manager.load_startup_models()) == []
    service = InferenceService(options, manager)
    service.live = True
    yield build_router(service)
    service.exiting = True
    loop.run_until_complete(manager.unload_all())


class Connection:
    """One HttpProtocol on a FakeTransport, driven on the module's loop."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        router: Router,
        idle_timeout_s: float | None = None,
        held_writes: HeldWrites | None = None,
    ) -> None:
        self.loop = loop
        self.registry: set[HttpProtocol] = set()
        self.transport = FakeTransport()
        self.protocol = HttpProtocol(
            router, MAX_BODY, self.registry, idle_timeout_s=idle_timeout_s, held_writes=held_writes
        )

        async def made() -> None:  # on the running loop, as asyncio calls it
            self.protocol.connection_made(self.transport)  # type: ignore[arg-type]

        self.run(made())

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coroutine)

    def feed(self, *chunks: bytes) -> None:
        """Each chunk is one ``data_received`` call, all before the loop runs anything else
        (called from the running loop, as asyncio does)."""

        async def receive() -> None:
            for chunk in chunks:
                self.protocol.data_received(chunk)

        self.run(receive())

    def responses(self, count: int) -> list[Response]:
        """Wait for ``count`` responses, then let every handler finish."""
        responses = self.run(self.transport.wait_for_responses(count))
        self.run(settle())
        return responses

    def finish(self) -> list[Response]:
        """Let every handler finish; every response written by then."""
        self.run(settle())
        return self.transport.responses


@pytest.fixture(params=["written-at-once", "held-to-the-turns-end"])
def connection(
    loop: asyncio.AbstractEventLoop, router: Router, request: pytest.FixtureRequest
) -> Connection:
    """A connection writing each answer when it is made, or (as the server runs it) holding
    its answers until the end of the loop's turn: every test below passes both ways."""
    held = HeldWrites(loop) if request.param == "held-to-the-turns-end" else None
    return Connection(loop, router, held_writes=held)


# --------------------------------------------------------------------------- one request


def test_health_request_gets_exact_bytes(connection: Connection) -> None:
    connection.feed(LIVE)
    connection.responses(1)
    assert bytes(connection.transport.written) == LIVE_OK
    assert not connection.transport.closed


def test_json_endpoint(connection: Connection) -> None:
    connection.feed(b"GET /v2/models/echo HTTP/1.1\r\nHost: test\r\n\r\n")
    (response,) = connection.responses(1)
    assert response.status_line == "HTTP/1.1 200 OK"
    assert response.headers["content-length"] == str(len(response.body))
    assert response.headers["connection"] == "keep-alive"
    assert response.json() == {
        "name": "echo",
        "versions": ["1"],
        "platform": "python",
        "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [-1]}],
        "outputs": [{"name": "OUTPUT0", "datatype": "INT32", "shape": [-1]}],
    }


def test_infer(connection: Connection) -> None:
    connection.feed(infer_request([1, -2, 3], "r1"))
    (response,) = connection.responses(1)
    assert (response.status, response.json()) == (200, infer_answer([1, -2, 3], "r1"))


def test_an_answered_request_is_freed_without_the_garbage_collector(
    loop: asyncio.AbstractEventLoop, router: Router
) -> None:
    """No reference cycle holds a request or its response once it is answered, on the
    model's thread or on the loop: reference counting frees them as the answer leaves, and
    the cyclic garbage collector has nothing of them to find (a request's objects collected
    that way cost every request a share of the collector's passes)."""
    connection = Connection(loop, router)
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds stays in gc.garbage
    try:
        for count, model in enumerate(["echo"] * 3 + [INLINE_ECHO] * 20, start=1):
            connection.feed(infer_request([count], f"r{count}", model=model))
            answer = connection.responses(count)[-1].json()
            assert answer == infer_answer([count], f"r{count}", model)
        gc.collect()
        held = [type(o).__name__ for o in gc.garbage if isinstance(o, _REQUEST_OBJECTS)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert held == []


def test_request_arriving_one_byte_at_a_time(connection: Connection) -> None:
    raw = infer_request([7, 8], "split")
    connection.feed(*(raw[i : i + 1] for i in range(len(raw))))
    (response,) = connection.responses(1)
    assert response.json() == infer_answer([7, 8], "split")


def test_chunked_request_body(connection: Connection) -> None:
    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "INT32", "data": [5, 6]}]}
    ).encode()
    connection.feed(
        b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n" % 10
        + body[:10]
        + b"\r\n"
        + b"%x\r\n" % (len(body) - 10)
        + body[10:]
        + b"\r\n0\r\n\r\n"
    )
    (response,) = connection.responses(1)
    assert response.json() == infer_answer([5, 6])


def test_unknown_path_answers_404(connection: Connection) -> None:
    connection.feed(b"GET /v2/unknown HTTP/1.1\r\nHost: test\r\n\r\n")
    (response,) = connection.responses(1)
    assert (response.status_line, response.json()) == (
        "HTTP/1.1 404 Not Found",
        {"error": "Not Found"},
    )
    assert not connection.transport.closed


def test_wrong_method_answers_405(connection: Connection) -> None:
    connection.feed(b"DELETE /v2/health/live HTTP/1.1\r\nHost: test\r\n\r\n")
    (response,) = connection.responses(1)
    assert (response.status_line, response.json()) == (
        "HTTP/1.1 405 Method Not Allowed",
        {"error": "Method Not Allowed"},
    )
    assert not connection.transport.closed


def test_core_errors_keep_the_connection(connection: Connection) -> None:
    connection.feed(
        b"GET /v2/models/missing HTTP/1.1\r\nHost: test\r\n\r\n", infer_request([1], "after")
    )
    first, second = connection.responses(2)
    assert (first.status, first.json()) == (
        404,
        {"error": "Request for unknown model: 'missing' is not found"},
    )
    assert (second.status, second.json()) == (200, infer_answer([1], "after"))
    assert not connection.transport.closed


# --------------------------------------------------------------------------- pipelining


def test_pipelined_requests_are_answered_in_order(connection: Connection) -> None:
    connection.feed(
        infer_request([1, 1], "a")
        + LIVE
        + infer_request([2, 2, 2], "b")
        + b"GET /v2/nope HTTP/1.1\r\nHost: test\r\n\r\n"
        + b"POST /v2/health/live HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\n\r\n"
        + infer_request([3], "c")
    )
    responses = connection.responses(6)
    assert [r.status for r in responses] == [200, 200, 200, 404, 405, 200]
    assert responses[0].json() == infer_answer([1, 1], "a")
    assert responses[1].body == b""
    assert responses[2].json() == infer_answer([2, 2, 2], "b")
    assert responses[5].json() == infer_answer([3], "c")
    assert len(connection.finish()) == 6
    assert not connection.transport.closed


def test_requests_fed_while_one_is_in_flight_are_answered_in_order(
    connection: Connection,
) -> None:
    connection.feed(infer_request([1], "first"), LIVE, infer_request([2], "third"))
    first, second, third = connection.responses(3)
    assert first.json() == infer_answer([1], "first")
    assert (second.status, second.body) == (200, b"")
    assert third.json() == infer_answer([2], "third")


def test_many_pipelined_requests_pause_and_resume_reading(connection: Connection) -> None:
    connection.feed(LIVE * 100)
    assert connection.transport.pauses == 1
    assert connection.transport.reading is False
    responses = connection.responses(100)
    assert len(responses) == 100
    assert bytes(connection.transport.written) == LIVE_OK * 100
    assert connection.transport.reading is True


# --------------------------------------------------------------------------- keep-alive


def test_http11_keeps_the_connection_by_default(connection: Connection) -> None:
    for count, values in enumerate(([1], [2, 3], [4]), start=1):
        connection.feed(infer_request(values))
        response = connection.responses(count)[-1]
        assert response.json() == infer_answer(values)
        assert response.headers["connection"] == "keep-alive"
    assert not connection.transport.closed


def test_connection_close_request_closes_after_the_response(connection: Connection) -> None:
    connection.feed(infer_request([9], "bye", b"Connection: close\r\n"))
    (response,) = connection.responses(1)
    assert response.json() == infer_answer([9], "bye")
    assert response.headers["connection"] == "close"
    assert connection.transport.closed


def test_requests_pipelined_after_a_close_are_not_answered(connection: Connection) -> None:
    connection.feed(b"GET /v2/health/live HTTP/1.1\r\nConnection: close\r\n\r\n" + LIVE + LIVE)
    responses = connection.finish()
    assert bytes(connection.transport.written) == (
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    assert len(responses) == 1
    assert connection.transport.closed


def test_http10_closes_by_default(connection: Connection) -> None:
    connection.feed(b"GET /v2/health/live HTTP/1.0\r\n\r\n")
    (response,) = connection.responses(1)
    assert (response.status, response.headers["connection"]) == (200, "close")
    assert connection.transport.closed


def test_http10_keep_alive_is_honoured(connection: Connection) -> None:
    connection.feed(b"GET /v2/health/live HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    (response,) = connection.responses(1)
    assert (response.status, response.headers["connection"]) == (200, "keep-alive")
    assert not connection.transport.closed


def test_expect_100_continue_gets_an_interim_response(connection: Connection) -> None:
    request = infer_request([4, 2], "expect", b"Expect: 100-continue\r\n")
    head, _, body = request.partition(b"\r\n\r\n")
    connection.feed(head + b"\r\n\r\n")
    # A client waiting for "100 Continue" sends the body only once it has arrived.
    assert bytes(connection.transport.written) == b"HTTP/1.1 100 Continue\r\n\r\n"
    connection.feed(body)
    connection.responses(2)
    written = bytes(connection.transport.written)
    assert written.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")
    final = parse_responses(written[len(b"HTTP/1.1 100 Continue\r\n\r\n") :])
    assert final[0].json() == infer_answer([4, 2], "expect")


def test_close_when_idle_closes_an_idle_connection_at_once(connection: Connection) -> None:
    connection.protocol.close_when_idle()
    assert connection.transport.closed
    assert connection.transport.written == b""


def test_close_when_idle_lets_the_request_in_flight_finish(connection: Connection) -> None:
    connection.feed(infer_request([6], "last"))
    connection.protocol.close_when_idle()
    assert not connection.transport.closed
    (response,) = connection.responses(1)
    assert response.json() == infer_answer([6], "last")
    assert response.headers["connection"] == "close"
    assert connection.transport.closed


def test_an_idle_connection_closes_after_the_keep_alive_timeout(
    loop: asyncio.AbstractEventLoop, router: Router
) -> None:
    connection = Connection(loop, router, idle_timeout_s=0.05)
    connection.feed(LIVE)
    connection.responses(1)
    assert not connection.transport.closed
    connection.run(asyncio.sleep(0.2))
    assert connection.transport.closed
    assert bytes(connection.transport.written) == LIVE_OK


def test_the_keep_alive_timeout_restarts_with_each_request(
    loop: asyncio.AbstractEventLoop, router: Router
) -> None:
    connection = Connection(loop, router, idle_timeout_s=0.15)
    for _ in range(4):
        connection.run(asyncio.sleep(0.05))
        connection.feed(LIVE)
    connection.responses(4)
    assert not connection.transport.closed
    connection.run(asyncio.sleep(0.4))
    assert connection.transport.closed


def test_a_request_being_received_is_not_idle(
    loop: asyncio.AbstractEventLoop, router: Router
) -> None:
    connection = Connection(loop, router, idle_timeout_s=0.05)
    raw = infer_request([3], "slow")
    connection.feed(raw[:20])
    connection.run(asyncio.sleep(0.2))
    assert not connection.transport.closed  # a read timeout's business, not the idle one's
    connection.feed(raw[20:])
    (response,) = connection.responses(1)
    assert response.json() == infer_answer([3], "slow")


# --------------------------------------------------------------------------- bad input


def assert_error_then_close(response: Response, status: int, connection: Connection) -> None:
    assert response.status == status
    assert response.headers["connection"] == "close"
    error = response.json()
    assert list(error) == ["error"] and isinstance(error["error"], str) and error["error"]
    assert connection.transport.closed


@pytest.mark.parametrize(
    "raw",
    [
        b"NOT-HTTP\r\n\r\n",
        b"GET /v2/health/live HTTP/9.9\r\n\r\n",
        b"GET /v2/health/live HTTP/1.1\r\nBad Header Without Colon\r\n\r\n",
        b"POST /v2/models/echo/infer HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
        b"POST /v2/models/echo/infer HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
    ],
    ids=["garbage", "version", "header", "content-length", "two-content-lengths"],
)
def test_malformed_request_answers_400_and_closes(connection: Connection, raw: bytes) -> None:
    connection.feed(raw)
    (response,) = connection.responses(1)
    assert_error_then_close(response, 400, connection)
    assert len(connection.finish()) == 1


def test_body_over_the_limit_answers_413_and_closes(connection: Connection) -> None:
    connection.feed(
        b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: test\r\n"
        + f"Content-Length: {MAX_BODY + 1}\r\n\r\n".encode()
    )
    (response,) = connection.responses(1)
    assert_error_then_close(response, 413, connection)


def test_chunked_body_over_the_limit_answers_413_and_closes(connection: Connection) -> None:
    chunk = b"x" * 1024
    connection.feed(
        b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"
        + (b"400\r\n" + chunk + b"\r\n") * 5
    )
    (response,) = connection.responses(1)
    assert_error_then_close(response, 413, connection)


def test_body_at_the_limit_is_accepted(connection: Connection) -> None:
    document = json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "INT32", "data": [1]}]}
    ).encode()
    body = document + b" " * (MAX_BODY - len(document))  # JSON allows trailing spaces
    connection.feed(
        b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: test\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    (response,) = connection.responses(1)
    assert (response.status, response.json()) == (200, infer_answer([1]))


def test_good_request_before_a_malformed_one_is_answered_first(connection: Connection) -> None:
    connection.feed(LIVE + b"BROKEN\r\n\r\n")
    responses = connection.responses(2)
    assert [r.status for r in responses] == [200, 400]
    assert responses[0].body == b""
    assert_error_then_close(responses[1], 400, connection)


def test_malformed_data_while_a_request_is_in_flight(connection: Connection) -> None:
    connection.feed(infer_request([5], "pending"), b"BROKEN\r\n\r\n")
    responses = connection.responses(2)
    assert [r.status for r in responses] == [200, 400]
    assert responses[0].json() == infer_answer([5], "pending")
    assert_error_then_close(responses[1], 400, connection)


# --------------------------------------------------------------------------- lifecycle


def test_registry_tracks_open_connections(connection: Connection) -> None:
    assert connection.registry == {connection.protocol}
    connection.protocol.connection_lost(None)
    assert connection.registry == set()


def test_connection_lost_while_a_request_is_in_flight(connection: Connection) -> None:
    connection.feed(infer_request([1], request_id="slow"), LIVE)
    connection.protocol.connection_lost(ConnectionResetError())
    assert connection.finish() == []
    assert connection.transport.written == b""


def _routing(loop: asyncio.AbstractEventLoop, **handlers: Handler) -> Connection:
    """A connection whose router sends ``GET /<name>`` (underscores as dashes) to each
    handler."""
    router = Router()
    for name, handler in handlers.items():
        router.add(f"^/{name.replace('_', '-')}$", None, GET=handler)
    return Connection(loop, router)


def _get(path: str) -> bytes:
    return b"GET /%s HTTP/1.1\r\nHost: t\r\n\r\n" % path.encode()


def test_a_handler_finds_its_exchange_whether_it_answers_at_once_or_waits(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """A handler that answers at once is answered with no coroutine or context made for it:
    it finds its exchange on the request. One that waits finds it there and as
    ``current_exchange()``, in the context its steps run in. Each request has its own."""
    seen: dict[str, tuple[Exchange, Exchange | None]] = {}

    def at_once(request: Request, match: RouteMatch) -> HttpResponse:
        seen["at once"] = (request.exchange, None)
        return HttpResponse(200)

    async def later(request: Request, match: RouteMatch) -> HttpResponse:
        await asyncio.sleep(0)
        seen["later"] = (request.exchange, current_exchange())
        return HttpResponse(204)

    connection = _routing(loop, at_once=at_once, later=later)
    connection.feed(_get("at-once"), _get("later"))
    assert [response.status for response in connection.responses(2)] == [200, 204]
    first, _ = seen["at once"]
    second, current = seen["later"]
    assert isinstance(first, Exchange) and first.received_end_ns > 0
    assert isinstance(second, Exchange) and second is not first
    assert current is second
    assert current_exchange() is not second  # set in the waiting handler's context only


def test_a_request_pipelined_behind_a_deferred_answer_starts_after_its_delivery(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """A deferred answer is set from inside the model's delivery: the request waiting behind
    it starts at the loop's next turn, not nested in that delivery."""
    deferred = DeferredResponse()
    delivering = False
    started_while_delivering: list[bool] = []

    def first(request: Request, match: RouteMatch) -> Any:
        return deferred  # (the router's Handler type: a DeferredResponse is awaitable)

    def second(request: Request, match: RouteMatch) -> HttpResponse:
        started_while_delivering.append(delivering)
        return HttpResponse(204)

    connection = _routing(loop, first=first, second=second)
    connection.feed(_get("first") + _get("second"))  # pipelined, one read
    assert started_while_delivering == []  # it waits behind the first

    async def deliver() -> None:
        nonlocal delivering
        delivering = True
        deferred.set(HttpResponse(200))
        delivering = False

    connection.run(deliver())
    assert [response.status for response in connection.responses(2)] == [200, 204]
    assert started_while_delivering == [False]


def test_a_handler_s_failure_is_answered_whether_it_answers_at_once_or_waits(
    loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture
) -> None:
    """A ServerError answers with its own status; anything else is logged and answered 500,
    from a handler that answers at once and from one that waits alike."""

    def refused(request: Request, match: RouteMatch) -> HttpResponse:
        raise UnavailableError("not now")

    def broken(request: Request, match: RouteMatch) -> HttpResponse:
        raise RuntimeError("a bug")

    async def broken_later(request: Request, match: RouteMatch) -> HttpResponse:
        await asyncio.sleep(0)
        raise RuntimeError("a later bug")

    connection = _routing(loop, refused=refused, broken=broken, broken_later=broken_later)
    connection.feed(_get("refused"), _get("broken"), _get("broken-later"))
    answers = connection.responses(3)
    assert [answer.status for answer in answers] == [503, 500, 500]
    assert [answer.json() for answer in answers] == [
        {"error": "not now"},
        {"error": "internal server error"},
        {"error": "internal server error"},
    ]
    assert "unhandled error on GET /broken" in caplog.text
    assert "unhandled error on GET /broken-later" in caplog.text
    assert "a later bug" in caplog.text  # with its traceback


def test_a_deferred_answer_can_be_awaited_as_well() -> None:
    """A handler wrapping another (the OpenAI front end's) awaits what it returns: a
    ``DeferredResponse`` gives its answer once set, or at once if it is."""

    async def wait_for_both() -> tuple[HttpResponse, HttpResponse]:
        later, ready = DeferredResponse(), DeferredResponse()
        ready.set(HttpResponse(204))
        asyncio.get_running_loop().call_soon(later.set, HttpResponse(200))
        return await later, await ready

    later, ready = asyncio.run(wait_for_both())
    assert (later.status, ready.status) == (200, 204)


# --------------------------------------------------------------------------- held answers


def test_answers_made_in_one_turn_are_written_together_at_its_end(
    loop: asyncio.AbstractEventLoop, router: Router
) -> None:
    """Requests on two connections answered on the loop within one turn: nothing is written
    while the turn goes on, and both answers once it has ended."""
    held = HeldWrites(loop)
    first, second = (
        Connection(loop, router, held_writes=held),
        Connection(loop, router, held_writes=held),
    )

    async def one_turn() -> tuple[bytes, bytes]:
        first.protocol.data_received(infer_request([1, 2], "a", model=INLINE_ECHO))
        second.protocol.data_received(LIVE + infer_request([3], "b", model=INLINE_ECHO))
        during = (bytes(first.transport.written), bytes(second.transport.written))
        await asyncio.sleep(0)  # the turn ends
        return during

    during = first.run(one_turn())
    assert during == (b"", b"")
    assert [r.json() for r in first.transport.responses] == [infer_answer([1, 2], "a", INLINE_ECHO)]
    statuses = [r.status for r in second.transport.responses]
    assert statuses == [200, 200]
    assert second.transport.responses[1].json() == infer_answer([3], "b", INLINE_ECHO)
    assert bytes(second.transport.written).startswith(LIVE_OK)


@pytest.mark.parametrize(
    ("ending", "sent", "answered"),
    [
        ("half-close", LIVE, 1),
        ("half-close", LIVE + infer_request([7], "c", model=INLINE_ECHO), 2),
        ("server stops", LIVE, 1),
    ],
    ids=["half-close, an answer held", "half-close, one held, one to come", "server stops"],
)
def test_held_answers_go_out_before_the_connection_closes(
    loop: asyncio.AbstractEventLoop, router: Router, ending: str, sent: bytes, answered: int
) -> None:
    """A client that half-closes right after its requests gets every answer (held, or still
    to come), then the close; a connection closed by a server that stops
    (``close_when_idle``) right after an answer was held gets it, then the close."""
    connection = Connection(loop, router, held_writes=HeldWrites(loop))

    async def requests_then_end() -> None:
        connection.protocol.data_received(sent)
        if ending == "half-close":
            if not connection.protocol.eof_received():
                connection.transport.close()  # as the loop does
        else:
            connection.protocol.close_when_idle()
        while not connection.transport.closed:
            await asyncio.sleep(0.001)

    connection.run(asyncio.wait_for(requests_then_end(), WAIT_S))
    responses = connection.transport.responses
    assert [r.status for r in responses] == [200] * answered
    assert bytes(connection.transport.written).startswith(LIVE_OK)
    if answered == 2:
        assert responses[1].json() == infer_answer([7], "c", INLINE_ECHO)
