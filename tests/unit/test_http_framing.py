"""HTTP/1.1 framing, fed bytes directly (no sockets); urllib and httptools' response parser
as the oracles."""

from __future__ import annotations

import itertools
import random
import sys
from typing import Any

import httptools
import numpy as np
import pytest

from pytriton_core._native.http_framing import (
    DEFAULT_MAX_BODY_SIZE,
    KNOWN_HEADERS,
    BodyTooLargeError,
    FramingError,
    HeadTooLargeError,
    HttpRequest,
    RequestAssembler,
    build_response_head,
    frame_response,
    framing_error,
    reason_phrase,
)

INFER = (
    b"POST /v2/models/simple/infer HTTP/1.1\r\n"
    b"Host: localhost:8000\r\n"
    b"Content-Type: application/octet-stream\r\n"
    b"Inference-Header-Content-Length: 11\r\n"
    b"Content-Length: 19\r\n"
    b"\r\n"
    b'{"inputs":[]}\x00\x01\x02\x03\x04\x05'
)
HEALTH = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"
CHUNKED = (
    b"POST /v2/models/m/infer HTTP/1.1\r\n"
    b"Transfer-Encoding: chunked\r\n"
    b"Content-Type: application/json\r\n"
    b"\r\n"
    b"4\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-Trailer: t\r\n\r\n"
)


class Connection:
    """What the protocol does per connection, minus the socket."""

    def __init__(self, **limits: int) -> None:
        self.assembler = RequestAssembler(**limits)
        self.parser = httptools.HttpRequestParser(self.assembler)
        self.assembler.attach(self.parser)

    def feed(self, *pieces: bytes) -> list[HttpRequest]:
        for piece in pieces:
            self.parser.feed_data(piece)
        return self.assembler.drain()


def parse(data: bytes, **limits: int) -> HttpRequest:
    (request,) = Connection(**limits).feed(data)
    return request


def fields(request: HttpRequest) -> tuple[Any, ...]:
    return (
        request.method,
        request.path,
        request.query,
        request.headers,
        request.raw_headers,
        bytes(request.body),
        request.keep_alive,
        request.http_version,
    )


def test_binary_infer_request() -> None:
    request = parse(INFER)
    assert request.method == "POST"
    assert request.path == "/v2/models/simple/infer"
    assert request.query == ""
    assert request.http_version == "1.1"
    assert request.keep_alive is True
    assert request.headers == {
        "content-type": "application/octet-stream",
        "inference-header-content-length": "11",
        "content-length": "19",
    }
    assert request.raw_headers == [
        (b"Host", b"localhost:8000"),
        (b"Content-Type", b"application/octet-stream"),
        (b"Inference-Header-Content-Length", b"11"),
        (b"Content-Length", b"19"),
    ]
    assert isinstance(request.body, bytearray)
    assert bytes(request.body) == b'{"inputs":[]}\x00\x01\x02\x03\x04\x05'


def test_body_is_viewable_by_numpy_without_a_copy() -> None:
    request = parse(INFER)
    tensor = np.frombuffer(request.body, dtype=np.uint8, offset=13)
    assert tensor.tolist() == [0, 1, 2, 3, 4, 5]
    assert np.shares_memory(tensor, np.frombuffer(request.body, dtype=np.uint8))


def test_assembler_lets_go_of_a_completed_body() -> None:
    connection = Connection()
    (request,) = connection.feed(INFER)
    alone = HttpRequest("POST", "/", body=bytearray(b"x"))  # a body only its request holds
    assert sys.getrefcount(request.body) == sys.getrefcount(alone.body)


def test_request_without_body_has_an_empty_bytearray() -> None:
    request = parse(HEALTH)
    assert request.method == "GET"
    assert request.body == bytearray() and isinstance(request.body, bytearray)
    assert request.headers == {}
    assert parse(b"POST /x HTTP/1.1\r\nContent-Length: 0\r\n\r\n").body == bytearray()


@pytest.mark.parametrize(
    "target",
    [
        "/v2/models/simple/infer",
        "/v2/models/my%20model/versions/1/infer",
        "/v2/models/caf%C3%A9",
        "/a%2Fb/%25/%zz/%4/%",
        "/bad%FFutf8%C3",
        "/plus+stays",
        "/%e6%97%a5%E6%9C%AC",
        "/",
    ],
)
def test_path_is_kept_as_sent(target: str) -> None:
    # Decoding is the router's, once per captured parameter: decoding here too decoded
    # "%2561" into "a" and "%252F" into "/".
    request = parse(f"GET {target}?q=%20a&b HTTP/1.1\r\n\r\n".encode())
    assert request.path == target
    assert request.query == "q=%20a&b"


def test_query_and_fragment() -> None:
    assert parse(b"GET /p HTTP/1.1\r\n\r\n").query == ""
    assert parse(b"GET /p? HTTP/1.1\r\n\r\n").query == ""
    request = parse(b"GET /p%20q?x=1?y#frag HTTP/1.1\r\n\r\n")
    assert (request.path, request.query) == ("/p%20q", "x=1?y")


def test_absolute_form_and_asterisk_targets() -> None:
    request = parse(b"GET http://example.com:8000/v2/a%20b?x=1 HTTP/1.1\r\n\r\n")
    assert (request.path, request.query) == ("/v2/a%20b", "x=1")
    assert parse(b"OPTIONS * HTTP/1.1\r\n\r\n").path == "*"


def test_methods() -> None:
    for method in ("GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "PURGE"):
        assert parse(f"{method} / HTTP/1.1\r\n\r\n".encode()).method == method


def test_known_headers_match_case_insensitively_and_repeats_join() -> None:
    request = parse(
        b"POST / HTTP/1.1\r\n"
        b"CONTENT-TYPE: application/json\r\n"
        b"accept-encoding: gzip;q=0.5\r\n"
        b"X-Other: 1\r\n"
        b"Accept-Encoding:   deflate  \r\n"
        b"aCCept-enCoding: identity\r\n"
        b"Content-Encoding: gzip\r\n"
        b"Connection: keep-alive\r\n"
        b"Expect: 100-continue\r\n"
        b"Content-Length: 2\r\n"
        b"\r\n"
        b"{}"
    )
    assert request.headers == {
        "content-type": "application/json",
        "accept-encoding": "gzip;q=0.5, deflate, identity",
        "content-encoding": "gzip",
        "connection": "keep-alive",
        "expect": "100-continue",
        "content-length": "2",
    }
    assert set(request.headers) <= set(KNOWN_HEADERS)
    names = [name for name, _ in request.raw_headers]
    assert names[:4] == [b"CONTENT-TYPE", b"accept-encoding", b"X-Other", b"Accept-Encoding"]
    assert len(request.raw_headers) == 9


def test_header_values_keep_latin1_bytes() -> None:
    request = parse(b"GET / HTTP/1.1\r\nContent-Type: caf\xe9\r\nX-Raw: \xff\r\n\r\n")
    assert request.headers["content-type"] == "café"
    assert (b"X-Raw", b"\xff") in request.raw_headers


def test_pipelined_requests_in_one_feed() -> None:
    connection = Connection()
    requests = connection.feed(INFER + HEALTH + CHUNKED + HEALTH)
    assert [r.path for r in requests] == [
        "/v2/models/simple/infer",
        "/v2/health/ready",
        "/v2/models/m/infer",
        "/v2/health/ready",
    ]
    assert bytes(requests[2].body) == b"Wikipedia in\r\n\r\nchunks."
    assert connection.assembler.drain() == []
    # requests do not share state
    assert requests[1].headers == {} and requests[1].body == bytearray()


def test_partial_request_stays_pending_until_complete() -> None:
    connection = Connection()
    assert connection.feed(INFER + HEALTH[:10]) != []
    assert connection.feed(HEALTH[10:-1]) == []
    assert [r.path for r in connection.feed(HEALTH[-1:])] == ["/v2/health/ready"]


@pytest.mark.parametrize("stream", [INFER + HEALTH, CHUNKED, INFER + CHUNKED + HEALTH])
def test_byte_by_byte_feed_gives_the_same_requests(stream: bytes) -> None:
    whole = [fields(r) for r in Connection().feed(stream)]
    connection = Connection()
    for i in range(len(stream)):
        connection.parser.feed_data(stream[i : i + 1])
    assert [fields(r) for r in connection.assembler.drain()] == whole


@pytest.mark.parametrize("seed", range(5))
def test_random_splits_give_the_same_requests(seed: int) -> None:
    stream = INFER + CHUNKED + HEALTH + INFER
    whole = [fields(r) for r in Connection().feed(stream)]
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(stream)), 25))
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    assert [fields(r) for r in Connection().feed(*pieces)] == whole


def test_url_split_across_feeds() -> None:
    connection = Connection()
    requests = connection.feed(b"GET /v2/mod", b"els/a%2", b"0b?x", b"=1 HTTP/1.1\r\n\r\n")
    assert [(r.path, r.query) for r in requests] == [("/v2/models/a%20b", "x=1")]


def test_chunked_body_and_trailers() -> None:
    request = parse(CHUNKED)
    assert bytes(request.body) == b"Wikipedia in\r\n\r\nchunks."
    assert isinstance(request.body, bytearray)
    assert "content-length" not in request.headers
    # the trailer is not a request header
    assert [name for name, _ in request.raw_headers] == [b"Transfer-Encoding", b"Content-Type"]


def test_large_chunked_body_is_assembled() -> None:
    chunk = bytes(range(256)) * 64
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(100))
    request = parse(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + body + b"0\r\n\r\n")
    assert bytes(request.body) == chunk * 100


@pytest.mark.parametrize(
    ("head", "keep_alive", "version"),
    [
        (b"GET / HTTP/1.1\r\n\r\n", True, "1.1"),
        (b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", False, "1.1"),
        (b"GET / HTTP/1.1\r\nConnection: Keep-Alive\r\n\r\n", True, "1.1"),
        (b"GET / HTTP/1.0\r\n\r\n", False, "1.0"),
        (b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", True, "1.0"),
        (b"POST / HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc", False, "1.0"),
        (b"GET / HTTP/2.0\r\n\r\n", False, "2.0"),
        (b"GET / HTTP/2.0\r\nConnection: keep-alive\r\n\r\n", True, "2.0"),
        (b"GET / HTTP/0.9\r\n\r\n", False, "0.9"),
    ],
)
def test_keep_alive_and_version(head: bytes, keep_alive: bool, version: str) -> None:
    request = parse(head)
    assert request.keep_alive is keep_alive
    assert request.http_version == version


def test_keep_alive_is_per_request() -> None:
    requests = Connection().feed(
        b"GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\nConnection: close\r\n\r\n"
    )
    assert [r.keep_alive for r in requests] == [True, False]


# --- limits and errors -------------------------------------------------------------------


def feed_error(connection: Connection, *pieces: bytes) -> BaseException:
    with pytest.raises(httptools.HttpParserError) as info:
        connection.feed(*pieces)
    return info.value


def test_declared_body_over_the_limit_fails_before_the_body_arrives() -> None:
    connection = Connection(max_body_size=100)
    error = feed_error(connection, b"POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n")
    # httptools wraps callback exceptions; the original is the __context__
    assert isinstance(error, httptools.HttpParserCallbackError)
    assert isinstance(error.__context__, BodyTooLargeError)
    framing = framing_error(error)
    assert isinstance(framing, BodyTooLargeError) and isinstance(framing, FramingError)
    assert framing.status == 413
    assert "101 bytes exceeds the limit of 100" in str(framing)


def test_body_at_the_limit_is_accepted() -> None:
    request = parse(
        b"POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\n" + b"x" * 100, max_body_size=100
    )
    assert len(request.body) == 100


def test_default_body_limit_allows_64_mib() -> None:
    assert DEFAULT_MAX_BODY_SIZE > 1 << 26
    assert RequestAssembler().max_body_size == DEFAULT_MAX_BODY_SIZE


def test_chunked_body_over_the_limit() -> None:
    connection = Connection(max_body_size=10)
    error = feed_error(
        connection,
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"8\r\n12345678\r\n",
        b"8\r\n12345678\r\n0\r\n\r\n",
    )
    framing = framing_error(error)
    assert isinstance(framing, BodyTooLargeError) and framing.status == 413


def test_requests_before_a_failure_are_still_drained() -> None:
    connection = Connection(max_body_size=50)
    with pytest.raises(httptools.HttpParserError):
        connection.parser.feed_data(HEALTH + b"POST / HTTP/1.1\r\nContent-Length: 51\r\n\r\n")
    assert [r.path for r in connection.assembler.drain()] == ["/v2/health/ready"]


def test_head_size_limit() -> None:
    long_url = b"GET /" + b"a" * 200 + b" HTTP/1.1\r\n\r\n"
    framing = framing_error(feed_error(Connection(max_head_size=100), long_url))
    assert isinstance(framing, HeadTooLargeError) and framing.status == 431
    many = b"GET / HTTP/1.1\r\n" + b"X-H: 0123456789\r\n" * 10 + b"\r\n"
    assert isinstance(
        framing_error(feed_error(Connection(max_head_size=150), many)), HeadTooLargeError
    )
    assert len(parse(many, max_head_size=1000).raw_headers) == 10


def test_many_repeats_of_a_known_header_join_once() -> None:
    head = b"GET / HTTP/1.1\r\n" + b"Accept-Encoding: a\r\n" * 5000 + b"\r\n"
    request = parse(head, max_head_size=1 << 20)
    assert request.headers["accept-encoding"] == ", ".join(["a"] * 5000)


@pytest.mark.parametrize(
    "data",
    [
        b"NOT A REQUEST\r\n\r\n",
        b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
    ],
)
def test_malformed_http_is_not_a_framing_error(data: bytes) -> None:
    error = feed_error(Connection(), data)
    assert framing_error(error) is None


def test_framing_error_passes_framing_errors_through() -> None:
    error = BodyTooLargeError("x")
    assert framing_error(error) is error
    assert framing_error(ValueError()) is None


def test_parser_must_be_attached() -> None:
    parser = httptools.HttpRequestParser(RequestAssembler())
    with pytest.raises(httptools.HttpParserCallbackError) as info:
        parser.feed_data(HEALTH)
    assert isinstance(info.value.__context__, RuntimeError)


def test_detach_breaks_the_cycle() -> None:
    connection = Connection()
    connection.assembler.detach()
    with pytest.raises(httptools.HttpParserCallbackError):
        connection.parser.feed_data(HEALTH)


def test_limits_must_be_non_negative() -> None:
    with pytest.raises(ValueError):
        RequestAssembler(max_body_size=-1)
    assert RequestAssembler(max_body_size=5, max_head_size=7).max_head_size == 7


def test_expect_continue() -> None:
    connection = Connection()
    head = b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n"
    assert connection.feed(head) == []
    assert connection.assembler.take_expect_continue() is True
    assert connection.assembler.take_expect_continue() is False
    assert len(connection.feed(b"abc")) == 1
    # body already here: nothing to ask for
    connection.feed(head + b"abc")
    assert connection.assembler.take_expect_continue() is False
    # HTTP/1.0 clients do not understand 100 Continue
    connection.feed(head.replace(b"HTTP/1.1", b"HTTP/1.0"))
    assert connection.assembler.take_expect_continue() is False


def test_http_request_can_be_built_directly() -> None:
    request = HttpRequest("GET", "/v2", body=b"x", headers={"connection": "close"})
    assert (request.method, request.path, request.query, request.body) == ("GET", "/v2", "", b"x")
    assert request.raw_headers == [] and request.keep_alive is True
    assert request.http_version == "1.1"
    assert "GET '/v2'" in repr(request)
    with pytest.raises(AttributeError):
        request.path = "/other"  # type: ignore[misc]


# --- response head ----------------------------------------------------------------------


def test_response_head_exact_bytes() -> None:
    head = build_response_head(
        200, b"application/octet-stream", 1234, True, [(b"Inference-Header-Content-Length", b"99")]
    )
    assert head == (
        b"HTTP/1.1 200 OK\r\n"
        b"Content-Type: application/octet-stream\r\n"
        b"Content-Length: 1234\r\n"
        b"Connection: keep-alive\r\n"
        b"Inference-Header-Content-Length: 99\r\n"
        b"\r\n"
    )
    assert build_response_head(404, None, 0, False) == (
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )


def test_response_head_of_a_streamed_body_is_chunked() -> None:
    assert build_response_head(200, b"text/event-stream; charset=utf-8", None, True) == (
        b"HTTP/1.1 200 OK\r\n"
        b"Content-Type: text/event-stream; charset=utf-8\r\n"
        b"Transfer-Encoding: chunked\r\n"
        b"Connection: keep-alive\r\n"
        b"\r\n"
    )


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (200, "OK"),
        (400, "Bad Request"),
        (403, "Forbidden"),
        (404, "Not Found"),
        (405, "Method Not Allowed"),
        (413, "Payload Too Large"),
        (431, "Request Header Fields Too Large"),
        (500, "Internal Server Error"),
        (501, "Not Implemented"),
        (503, "Service Unavailable"),
        (418, "Unknown"),
        (299, "Unknown"),
    ],
)
def test_status_lines(status: int, reason: str) -> None:
    assert reason_phrase(status) == reason
    head = build_response_head(status, b"application/json", 2, True)
    assert head.startswith(f"HTTP/1.1 {status} {reason}\r\n".encode())


class _Response:
    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = b""
        self.keep_alive: bool | None = None

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        # llhttp resets its flags once the message is done: ask while it completes
        self.keep_alive = self.parser.should_keep_alive()


@pytest.mark.parametrize("keep_alive", [True, False])
def test_response_head_parses_back(keep_alive: bool) -> None:
    extra = [
        (b"Content-Encoding", b"gzip"),
        (b"X-Empty", b""),
        (b"Accept-Encoding", b"gzip, deflate"),
    ]
    body = b"0123456789" * 100
    response = _Response()
    response.parser.feed_data(
        build_response_head(503, b"text/plain", len(body), keep_alive, extra) + body
    )
    assert response.body == body
    assert response.parser.get_status_code() == 503
    assert response.keep_alive is keep_alive
    assert response.headers == [
        (b"Content-Type", b"text/plain"),
        (b"Content-Length", str(len(body)).encode()),
        (b"Connection", b"keep-alive" if keep_alive else b"close"),
        *extra,
    ]


def test_response_head_accepts_any_iterable_of_pairs() -> None:
    pairs = iter([(b"A", b"1"), (b"B", b"2")])
    assert build_response_head(200, None, 0, True, pairs).endswith(b"A: 1\r\nB: 2\r\n\r\n")


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"status": 99}, ValueError),
        ({"status": 1000}, ValueError),
        ({"content_length": -1}, ValueError),
        ({"content_type": b"text/plain\r\nX-Injected: 1"}, ValueError),
        ({"content_type": "text/plain"}, TypeError),
        ({"extra_headers": [(b"X-A", b"1\r\n\r\nbody")]}, ValueError),
        ({"extra_headers": [(b"X-A", b"a\nb")]}, ValueError),
        ({"extra_headers": [(b"X-A", b"a\x00b")]}, ValueError),
        ({"extra_headers": [(b"", b"v")]}, ValueError),
        ({"extra_headers": [(b"X A", b"v")]}, ValueError),
        ({"extra_headers": [(b"X:A", b"v")]}, ValueError),
        ({"extra_headers": [(b"X(A)", b"v")]}, ValueError),
        ({"extra_headers": [(b"X\xe9", b"v")]}, ValueError),
        ({"extra_headers": [("X-A", b"v")]}, TypeError),
        ({"extra_headers": [(b"X-A", 1)]}, TypeError),
        ({"extra_headers": [(b"X-A",)]}, ValueError),
    ],
)
def test_response_head_refuses_bad_input(kwargs: dict[str, Any], error: type[Exception]) -> None:
    arguments: dict[str, Any] = {
        "status": 200,
        "content_type": b"application/json",
        "content_length": 0,
        "keep_alive": True,
        **kwargs,
    }
    with pytest.raises(error):
        build_response_head(**arguments)


# --- feed: large bodies taken straight from the received bytes ------------------------------


def _post(body: bytes, *headers: bytes) -> bytes:
    head = b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\n" + b"".join(
        h + b"\r\n" for h in headers
    )
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def _fed(stream: bytes, cuts: list[int], direct_body_min: int) -> list[tuple[Any, ...]]:
    assembler = RequestAssembler(direct_body_min=direct_body_min)
    assembler.attach(httptools.HttpRequestParser(assembler))
    bounds = [0, *cuts, len(stream)]
    out: list[tuple[Any, ...]] = []
    for a, b in itertools.pairwise(bounds):
        assembler.feed(stream[a:b])
        out.extend(fields(r) for r in assembler.drain())
    return out


BIG = bytes(range(256)) * 300  # 76,800 bytes, no blank line in them
BIG_WITH_BLANK_LINE = b"x" * 20000 + b"\r\n\r\nGET / HTTP/1.1\r\n\r\n" + b"y" * 20000


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("direct_body_min", [1, 7, 1 << 14])
def test_feed_takes_bodies_directly_with_the_parsers_result(
    seed: int, direct_body_min: int
) -> None:
    stream = (
        _post(BIG)
        + HEALTH
        + _post(BIG_WITH_BLANK_LINE)
        + INFER
        + CHUNKED
        + _post(b"small")
        + _post(BIG)
    )
    reference = Connection().feed(stream)  # the parser alone: every body through on_body
    assert [bytes(r.body) for r in reference][:3] == [BIG, b"", BIG_WITH_BLANK_LINE]
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(stream)), 12)) if seed else []
    assert _fed(stream, cuts, direct_body_min) == [fields(r) for r in reference]


@pytest.mark.parametrize(
    ("version", "connection", "keep_alive"),
    [(b"1.0", b"keep-alive", True), (b"1.1", b"keep-alive", True), (b"1.1", b"", True)],
)
def test_a_body_taken_directly_keeps_its_requests_version(
    version: bytes, connection: bytes, keep_alive: bool
) -> None:
    head = b"POST /v2/models/m/infer HTTP/" + version + b"\r\n"
    if connection:
        head += b"Connection: " + connection + b"\r\n"
    stream = head + b"Content-Length: %d\r\n\r\n" % len(BIG) + BIG
    (request,) = _fed(stream, [len(head) + 30], direct_body_min=1)
    (reference,) = Connection().feed(stream)
    assert request == fields(reference)
    assert reference.http_version == version.decode()
    assert reference.keep_alive is keep_alive


def test_feed_after_a_closing_request_refuses_as_the_parser_does() -> None:
    stream = _post(BIG, b"Connection: close") + HEALTH
    with pytest.raises(httptools.HttpParserError):
        Connection().feed(stream)
    assembler = RequestAssembler(direct_body_min=1)
    assembler.attach(httptools.HttpRequestParser(assembler))
    with pytest.raises(httptools.HttpParserError):
        assembler.feed(stream)
    (request,) = assembler.drain()
    assert bytes(request.body) == BIG and not request.keep_alive


def test_feed_finishes_an_upgrade_offers_body_and_goes_on_in_http11() -> None:
    offer = _post(BIG, b"Connection: upgrade", b"Upgrade: h2c")
    assembler = RequestAssembler()
    assembler.attach(httptools.HttpRequestParser(assembler))
    assembler.feed(offer[:100])
    assembler.feed(offer[100:] + HEALTH)
    first, second = assembler.drain()
    assert bytes(first.body) == BIG and first.headers["upgrade"] == "h2c"
    assert second.path == "/v2/health/ready"


def test_feed_takes_a_body_that_arrives_after_its_head_and_clears_expect_continue() -> None:
    request = _post(BIG, b"Expect: 100-continue")
    head_end = request.index(b"\r\n\r\n") + 4
    assembler = RequestAssembler()
    assembler.attach(httptools.HttpRequestParser(assembler))
    assembler.feed(request[:head_end])
    assert assembler.take_expect_continue()
    assembler.feed(request[head_end : head_end + 5000])
    assert not assembler.take_expect_continue() and not assembler.drain()
    assembler.feed(request[head_end + 5000 :])
    (done,) = assembler.drain()
    assert bytes(done.body) == BIG and done.keep_alive


def test_feed_needs_an_attached_parser_and_direct_body_min_is_positive() -> None:
    with pytest.raises(RuntimeError):
        RequestAssembler().feed(HEALTH)
    with pytest.raises(ValueError):
        RequestAssembler(direct_body_min=0)


def test_frame_response_is_the_head_then_the_body_as_it_is() -> None:
    floats = memoryview(np.arange(3, dtype=np.float32))  # 3 items, 12 bytes
    body = [b"head", bytearray(b"xy"), floats]
    headers = [(b"Inference-Header-Content-Length", b"4")]
    framed = frame_response(200, b"application/octet-stream", body, True, headers)
    assert framed[0] == build_response_head(200, b"application/octet-stream", 18, True, headers)
    assert all(a is b for a, b in zip(framed[1:], body, strict=True))
    assert frame_response(200, None, (), False) == [build_response_head(200, None, 0, False)]
