"""HTTP/1.1 framing over httptools (csrc/http/http_framing.pyx).

Per connection::

    assembler = RequestAssembler(max_body_size)
    parser = httptools.HttpRequestParser(assembler)
    assembler.attach(parser)
    try:
        parser.feed_data(data)
    except httptools.HttpParserError as exc:
        error = framing_error(exc)  # FramingError subclass with .status, or None: 400
        ...                         # answer, then close: the parser stays failed
    for request in assembler.drain():  # completed before any error, oldest first
        ...

Exceptions raised in the callbacks do not reach ``feed_data``'s caller as themselves:
httptools parks the exception, fails the parse and raises
``httptools.HttpParserCallbackError`` (a ``HttpParserError``) with the original as its
``__context__``; ``framing_error`` unwraps it. Malformed HTTP raises other
``HttpParserError`` subclasses (400).
"""

from collections.abc import Sequence
from typing import Any, Final, final

import httptools

DEFAULT_MAX_BODY_SIZE: Final[int]  # 64 MiB (Triton's --http-max-input-size) + 64 KiB
DEFAULT_MAX_HEAD_SIZE: Final[int]  # 64 KiB of request target + headers
DEFAULT_DIRECT_BODY_MIN: Final[int]  # 16 KiB: smaller bodies go through the parser
KNOWN_HEADERS: Final[tuple[str, ...]]
"""The lower-case header names kept in ``HttpRequest.headers``: content-length,
inference-header-content-length, content-encoding, accept-encoding, connection,
content-type, expect, accept."""

class FramingError(Exception):
    """A request the framing refuses; answer with ``status`` and close the connection."""

    status: int  # 400

class BodyTooLargeError(FramingError):
    """The body is over ``max_body_size``: raised as soon as Content-Length declares it
    (before any body byte is buffered), or when chunked data passes the limit."""

    status: int  # 413

class HeadTooLargeError(FramingError):
    """The request target plus headers are over ``max_head_size``."""

    status: int  # 431

def framing_error(exc: BaseException) -> FramingError | None:
    """The FramingError behind an exception from ``parser.feed_data``, else None."""

@final
class HttpRequest:
    """One complete request; the assembler never touches it again after ``drain``."""

    # The HTTP front end's ``Exchange`` for this request, set before it is routed; None
    # for a request made outside a connection.
    exchange: Any

    def __init__(
        self,
        method: str,
        path: str,
        query: str = "",
        headers: dict[str, str] | None = None,
        raw_headers: list[tuple[bytes, bytes]] | None = None,
        body: bytes | bytearray = b"",
        keep_alive: bool = True,
        http_version: str = "1.1",
    ) -> None: ...
    @property
    def method(self) -> str: ...
    @property
    def path(self) -> str:
        """As sent, not percent-decoded (UTF-8, invalid -> U+FFFD), without query and
        fragment; absolute-form targets reduced to their path. The router decodes the
        parameters it captures, once."""
    @property
    def query(self) -> str:
        """The raw query string after ``?`` (not decoded); "" if none."""
    @property
    def headers(self) -> dict[str, str]:
        """``KNOWN_HEADERS`` that were present: lower-case name -> latin-1 value without
        surrounding blanks; a repeated header's values joined with ", "."""
    @property
    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        """Every header (not chunked trailers) as received, in order, for forwarding."""
    @property
    def body(self) -> bytes | bytearray:
        """The whole body; from the assembler always a ``bytearray`` of exactly the body's
        length (empty when there is none), owned by this request: numpy can view it
        without a copy (``np.frombuffer``)."""
    @property
    def keep_alive(self) -> bool:
        """``parser.should_keep_alive()`` at message end (HTTP/1.0 without keep-alive and
        ``Connection: close`` give False)."""
    @property
    def http_version(self) -> str:
        """ "1.1" or "1.0"."""

@final
class RequestAssembler:
    """The httptools callback object of one connection: collects complete requests.

    A body with Content-Length is copied once into a preallocated bytearray (by ``feed``
    from the received bytes when it is large); a chunked one grows geometrically.
    Request-line and header sizes are bounded by ``max_head_size`` as the pieces reach the
    callbacks (httptools itself buffers one header line before calling ``on_header``).
    """

    @property
    def max_body_size(self) -> int: ...
    @property
    def max_head_size(self) -> int: ...
    @property
    def direct_body_min(self) -> int: ...
    @property
    def take_plain(self) -> bool:
        """Whether a plain request that has arrived whole is read without the parser
        (``GET``/``POST``, HTTP/1.1, a Content-Length body or none, no header the parser
        gives a meaning of its own): each is one llhttp reads alike."""
    def __init__(
        self,
        max_body_size: int = ...,
        max_head_size: int = ...,
        direct_body_min: int = ...,
        take_plain: bool = ...,
    ) -> None: ...
    def attach(self, parser: httptools.HttpRequestParser) -> None:
        """The parser that calls this assembler (for method, version and keep-alive).
        Required before the first ``feed_data``; the two reference each other until
        ``detach()`` or garbage collection."""
    def detach(self) -> None: ...
    def drain(self) -> list[HttpRequest]:
        """Requests completed since the last call, oldest first (pipelining: several may
        complete in one ``feed_data``)."""
    def take_expect_continue(self) -> bool:
        """True once for an HTTP/1.1 request with ``Expect: 100-continue`` whose body has
        not started: the protocol writes ``HTTP/1.1 100 Continue\\r\\n\\r\\n``."""
    def feed(self, data: bytes) -> None:
        """Parse ``data`` with the attached parser: completed requests go to ``drain()``;
        raises ``httptools.HttpParserError`` as ``feed_data`` does (after the requests
        completed before the bad bytes). A keep-alive request's Content-Length body of
        ``direct_body_min`` bytes or more is copied once, straight from ``data`` into its
        bytearray (not through ``on_body``, which copies each chunk into bytes first); the
        parser left inside it, or one that met an ``Upgrade`` offer, is replaced by a new
        one (same class) for what follows, in HTTP/1.1."""
    # httptools callbacks
    def on_message_begin(self) -> None: ...
    def on_url(self, url: bytes) -> None: ...
    def on_header(self, name: bytes, value: bytes) -> None: ...
    def on_headers_complete(self) -> None: ...
    def on_body(self, chunk: bytes) -> None: ...
    def on_message_complete(self) -> None: ...

def reason_phrase(status: int) -> str:
    """The reason phrase sent for ``status`` ("Unknown" for codes the server never uses)."""

def build_response_head(
    status: int,
    content_type: bytes | None,
    content_length: int | None,
    keep_alive: bool,
    extra_headers: Sequence[tuple[bytes, bytes]] = (),
) -> bytes:
    """``HTTP/1.1 <status> <reason>\\r\\n``, then Content-Type (if given), Content-Length
    (``Transfer-Encoding: chunked`` when ``content_length`` is None: a streamed body),
    ``Connection: keep-alive|close``, the extra headers in order, and the blank line.

    Raises ValueError for a status outside 100-999, a negative length, a header name
    that is not a token, or CR/LF/NUL in a name or value (header injection); TypeError
    for non-bytes names or values.
    """

def frame_response(
    status: int,
    content_type: bytes | None,
    body: Sequence[bytes | bytearray | memoryview],
    keep_alive: bool,
    extra_headers: Sequence[tuple[bytes, bytes]] = (),
) -> list[bytes | bytearray | memoryview]:
    """The buffers of a whole answer for ``writelines``: the head ``build_response_head``
    makes with Content-Length the total size of ``body`` (a memoryview counts its bytes,
    ``nbytes``), then ``body``'s parts as they are (no copy)."""
