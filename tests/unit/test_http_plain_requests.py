"""Plain requests read without the parser (``RequestAssembler(take_plain=True)``, the
server's way) give what the parser alone gives, byte for byte, for every stream: requests,
their order, and the error a stream ends with."""

from __future__ import annotations

import itertools
import random
from typing import Any

import httptools
import pytest

from pytriton_core._native.http_framing import HttpRequest, RequestAssembler, framing_error

FIELDS = ("method", "path", "query", "headers", "raw_headers", "keep_alive", "http_version")


def fields(request: HttpRequest) -> tuple[Any, ...]:
    return (*(getattr(request, name) for name in FIELDS), bytes(request.body))


class CountingParser(httptools.HttpRequestParser):  # type: ignore[misc]
    """httptools' parser, counting the bytes it is fed."""

    fed = 0

    def feed_data(self, data: Any) -> None:
        self.fed += len(data)
        super().feed_data(data)


def assembled(
    stream: bytes, cuts: list[int], take_plain: bool, **limits: int
) -> tuple[list[tuple[Any, ...]], int]:
    """The requests (and the error, if any) the stream gives, fed in pieces at ``cuts``;
    and how many bytes reached the parser."""
    assembler = RequestAssembler(take_plain=take_plain, **limits)
    parser = CountingParser(assembler)
    assembler.attach(parser)
    out: list[tuple[Any, ...]] = []
    try:
        for a, b in itertools.pairwise([0, *cuts, len(stream)]):
            assembler.feed(stream[a:b])
            out.extend(fields(r) for r in assembler.drain())
    except Exception as exc:
        out.extend(fields(r) for r in assembler.drain())
        error = framing_error(exc) or exc
        out.append(("error", type(error).__name__, str(error)))
    return out, parser.fed


PLAIN = (
    b"POST /v2/models/identity/infer HTTP/1.1\r\n"
    b"Host: localhost:8000\r\n"
    b"Content-Type: application/octet-stream\r\n"
    b"Inference-Header-Content-Length: 5\r\n"
    b"Content-Length: 9\r\n"
    b"\r\n"
    b'{"a":1}xy'
)


def test_a_plain_request_does_not_reach_the_parser() -> None:
    stream = PLAIN + b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n" + PLAIN
    plain, fed = assembled(stream, [], take_plain=True)
    parsed, parsed_fed = assembled(stream, [], take_plain=False)
    assert plain == parsed
    assert len(plain) == 3
    assert fed == 0 and parsed_fed == len(stream)


@pytest.mark.parametrize(
    "request_bytes",
    [
        PLAIN.replace(b"HTTP/1.1", b"HTTP/1.0"),
        PLAIN.replace(b"Host: localhost:8000", b"Connection: close"),
        PLAIN.replace(b"Host: localhost:8000", b"Transfer-Encoding: identity"),
        PLAIN.replace(b"Host: localhost:8000", b"Expect: 100-continue"),
        PLAIN.replace(b"Content-Length: 9", b"Content-Length: 09"),
        PLAIN.replace(b"Host: localhost:8000", b"Host:  localhost:8000"),
        PLAIN.replace(b"Host: localhost:8000", b"Host: localhost:8000 "),
        PLAIN.replace(b"Host: localhost:8000", b"Host: caf\xe9"),
        PLAIN.replace(b"\r\n", b"\n"),
        PLAIN.replace(b"POST", b"PUT"),
    ],
)
def test_a_request_that_is_not_plain_goes_to_the_parser(request_bytes: bytes) -> None:
    plain, fed = assembled(request_bytes, [], take_plain=True)
    assert plain == assembled(request_bytes, [], take_plain=False)[0]
    assert fed == len(request_bytes)


@pytest.mark.parametrize("cut", [0, 40, 95])
def test_an_upgrade_offers_body_is_a_body_though_it_reads_as_a_request(cut: int) -> None:
    inner = b"GET /v2/health/ready HTTP/1.1\r\n\r\n"
    stream = (
        b"POST /v2/models/m/infer HTTP/1.1\r\nConnection: upgrade\r\nUpgrade: h2c\r\n"
        b"Content-Length: %d\r\n\r\n" % len(inner) + inner + PLAIN
    )
    plain, _ = assembled(stream, [cut] if cut else [], take_plain=True)
    assert plain == assembled(stream, [], take_plain=False)[0]
    assert [request[1] for request in plain] == ["/v2/models/m/infer", "/v2/models/identity/infer"]
    assert plain[0][-1] == inner


def test_a_request_not_whole_yet_goes_to_the_parser() -> None:
    plain, fed = assembled(PLAIN, [len(PLAIN) - 1], take_plain=True)
    assert plain == assembled(PLAIN, [], take_plain=False)[0]
    assert fed == len(PLAIN)


# --- generated streams, both ways ----------------------------------------------------------

METHODS = [b"PUT", b"HEAD", b"get", b"POST "]
TARGETS = [
    b"/a#frag",
    b"/a?",
    b"*",
    b"http://host/v2/health/live",
    b"/caf\xc3\xa9",
    b"/a b",
    b"/a\tb",
    b"",
    b"v2/health/ready",
    b"/[x]",
]
VERSIONS = [b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.2", b"http/1.1"]
LINES = [  # plain request lines
    b"POST /v2/models/m/infer HTTP/1.1",
    b"POST /v2/models/m/versions/1/infer?x=1&y=%20 HTTP/1.1",
    b"GET /v2/health/ready HTTP/1.1",
    b"GET /v2/models/m/stats?a=b:c@d HTTP/1.1",
]
PLAIN_HEADERS = [
    b"Host: localhost",
    b"host:localhost",
    b"Content-Type: application/json",
    b"Accept: */*",
    b"Accept-Encoding: gzip, deflate",
    b"Content-Encoding: gzip",
    b"Inference-Header-Content-Length: 3",
    b"Connection: keep-alive",
    b"Connection: Keep-Alive",
    b"X-Inner: a\tb c",
    b"User-Agent: perf_analyzer",
]
ODD_HEADERS = [
    b"Connection: close",
    b"Connection: upgrade",
    b"Upgrade: h2c",
    b"Expect: 100-continue",
    b"Transfer-Encoding: chunked",
    b"TRANSFER-ENCODING: chunked",
    b"X-Empty:",
    b"X-Spaces:  two",
    b"X-Trailing: value ",
    b"X-Tab:\tvalue",
    b"X-Obs: caf\xe9",
    b"X-Ctl: a\x01b",
    b"Bad Name: x",
    b"X(Y): z",
    b" Folded: x",
    b"X-Del: a\x7fb",
    b"Host: again",
    b"Accept: again",
]
LENGTHS = [b"0", b"3", b"3", b"4"]
ODD_LENGTHS = [b"03", b"+3", b" 3", b"3 ", b"x", b"99999999999999999999", b"-1"]


def generated_request(rng: random.Random, odd: float) -> bytes:
    """A request, plain but for what ``odd`` (a probability per part) makes otherwise."""
    line = rng.choice(LINES)
    if rng.random() < odd:
        method, target, version = line.split(b" ")
        part = rng.randrange(3)
        method = rng.choice(METHODS) if part == 0 else method
        target = rng.choice(TARGETS) if part == 1 else target
        version = rng.choice(VERSIONS) if part == 2 else version
        line = b" ".join([method, target, version])
    headers = rng.sample(PLAIN_HEADERS, rng.randint(0, 4))
    if rng.random() < odd:
        headers.insert(rng.randint(0, len(headers)), rng.choice(ODD_HEADERS))
    body = b""
    if rng.random() < 0.7:
        length = rng.choice(ODD_LENGTHS if rng.random() < odd else LENGTHS)
        headers.insert(rng.randint(0, len(headers)), b"Content-Length: " + length)
        if rng.random() < odd / 2:  # a second Content-Length, equal or not
            headers.append(b"Content-Length: " + rng.choice(LENGTHS))
        body = b"abc" if length.strip() in (b"3", b"03") else b"abcd"[: int(length == b"4") * 4]
        if rng.random() < odd / 2:
            body += b"d"
    if any(h.lower().startswith(b"transfer-encoding") for h in headers):
        body = b"3\r\nabc\r\n0\r\n\r\n"
    elif rng.random() < odd / 2:  # an upgrade offer whose body reads as a plain request
        body = b"GET /v2/health/ready HTTP/1.1\r\n\r\n"
        headers = [h for h in headers if not h.lower().startswith(b"content-length")]
        headers += [b"Connection: upgrade", b"Upgrade: h2c", b"Content-Length: %d" % len(body)]
    ending = b"\n" if rng.random() < odd / 3 else b"\r\n"
    return line + ending + b"".join(h + ending for h in headers) + ending + body


@pytest.mark.parametrize("seed", range(40))
def test_generated_streams_read_alike_both_ways(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        odd = rng.choice([0.0, 0.05, 0.2])
        stream = b"".join(generated_request(rng, odd) for _ in range(rng.randint(1, 4)))
        cut_count = rng.randint(0, 3)
        cuts = sorted(rng.sample(range(1, len(stream)), min(cut_count, len(stream) - 1)))
        limits = {
            "max_head_size": rng.choice([60, 1 << 16]),
            "max_body_size": rng.choice([2, 1 << 20]),
        }
        assert (
            assembled(stream, cuts, True, **limits)[0]
            == assembled(stream, cuts, False, **limits)[0]
        ), stream
