# cython: language_level=3, autotestdict=False
"""HTTP/1.1 framing: assemble requests from httptools callbacks, build response heads.

httptools (llhttp) does the parsing; this module keeps what the server needs from each
message and nothing else. Per connection::

    assembler = RequestAssembler(max_body_size)
    parser = httptools.HttpRequestParser(assembler)
    assembler.attach(parser)
    ...
    assembler.feed(data)              # may complete 0, 1 or several (pipelined) requests
    for request in assembler.drain():
        ...

``feed`` drives the parser: a Content-Length body of ``direct_body_min`` bytes or more is
copied once, from the received bytes straight into the request's body, instead of through
llhttp's ``on_body`` (which httptools hands over as a new bytes object per chunk: one more
copy of every byte). The parser that was left inside that body is then replaced by a new
one for the bytes after it, as after an ``Upgrade`` offer.

An exception raised by a callback does not reach ``feed_data``'s caller as itself:
httptools parks it, fails the parse, and raises ``httptools.HttpParserCallbackError`` with
the original exception as ``__context__``. :func:`framing_error` digs it out.
"""

cimport cython
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.bytes cimport (
    PyBytes_AS_STRING,
    PyBytes_Check,
    PyBytes_FromStringAndSize,
    PyBytes_GET_SIZE,
)
from cpython.unicode cimport PyUnicode_DecodeLatin1, PyUnicode_DecodeUTF8
from libc.string cimport memchr, memcmp, memcpy

from httptools import HttpParserCallbackError, HttpParserUpgrade, parse_url


cdef extern from "<string.h>":
    void* memmem(const void* haystack, size_t haystack_len, const void* needle,
                 size_t needle_len) nogil


cdef extern from "<strings.h>":
    int strncasecmp(const char* a, const char* b, size_t n) nogil

DEFAULT_MAX_BODY_SIZE = (1 << 26) + (1 << 16)  # Triton's 64 MiB input limit + framing slack
DEFAULT_MAX_HEAD_SIZE = 1 << 16
# Smaller bodies go through the parser: a second feed_data per request would cost more than
# the copy it saves.
DEFAULT_DIRECT_BODY_MIN = 1 << 14


class FramingError(Exception):
    """A request the framing layer refuses; ``status`` is the HTTP status to answer with.

    The connection cannot be reused after one: answer, then close.
    """
    status = 400


class BodyTooLargeError(FramingError):
    """The body exceeds ``max_body_size`` (declared by Content-Length, or as chunks arrive)."""
    status = 413


class HeadTooLargeError(FramingError):
    """Request target plus headers exceed ``max_head_size``."""
    status = 431


def framing_error(exc):
    """The FramingError behind an exception raised by ``parser.feed_data``, else None."""
    if isinstance(exc, FramingError):
        return exc
    if isinstance(exc, HttpParserCallbackError) and isinstance(exc.__context__, FramingError):
        return exc.__context__
    return None


# Header names the server reads (lower-case keys of HttpRequest.headers), matched
# case-insensitively. Values of a repeated header are joined with ", " (RFC 9110 §5.3).
KNOWN_HEADERS = (
    "content-length",
    "inference-header-content-length",
    "content-encoding",
    "accept-encoding",
    "connection",
    "content-type",
    "expect",
    "upgrade",
    "accept",
)
cdef tuple _KNOWN_NAMES = tuple(name.encode() for name in KNOWN_HEADERS)
# Indexes into KNOWN_HEADERS that _take_plain looks for.
cdef int _CONTENT_LENGTH = KNOWN_HEADERS.index("content-length")
cdef int _CONNECTION = KNOWN_HEADERS.index("connection")
cdef int _EXPECT = KNOWN_HEADERS.index("expect")
cdef int _UPGRADE = KNOWN_HEADERS.index("upgrade")
_METHODS = {
    m.encode(): m for m in ("GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH")
}


cdef Py_ssize_t _plain_length(const char* digits, Py_ssize_t size) noexcept:
    """A plain Content-Length value: 1 to 15 decimal digits, no leading zero (but
    ``0``); -1 otherwise (the parser then reads it)."""
    cdef Py_ssize_t i, length = 0
    if size > 15 or (size > 1 and digits[0] == c'0'):
        return -1
    for i in range(size):
        if not (c'0' <= digits[i] <= c'9'):
            return -1
        length = length * 10 + (digits[i] - c'0')
    return length


cdef list _split_plain_head(bytes head):
    """The (name, value) pairs of the header lines ``_take_plain`` checked: each
    ``name:value`` or ``name: value`` and CRLF."""
    cdef const char* p = PyBytes_AS_STRING(head)
    cdef const char* end = p + PyBytes_GET_SIZE(head)
    cdef const char* colon
    cdef const char* line_end
    pairs = []
    while p < end:
        colon = <const char*>memchr(p, c':', end - p)
        line_end = <const char*>memmem(colon, end - colon, b"\r\n", 2)
        name = PyBytes_FromStringAndSize(p, colon - p)
        colon += 1
        if colon[0] == c' ':
            colon += 1
        pairs.append((name, PyBytes_FromStringAndSize(colon, line_end - colon)))
        p = line_end + 2
    return pairs


cdef int _known_index(const char* name, Py_ssize_t size) noexcept:
    """The index in KNOWN_HEADERS of a header name the server reads, else -1."""
    cdef Py_ssize_t i
    cdef bytes known
    for i in range(len(_KNOWN_NAMES)):
        known = <bytes>_KNOWN_NAMES[i]
        if (PyBytes_GET_SIZE(known) == size
                and strncasecmp(name, PyBytes_AS_STRING(known), size) == 0):
            return i
    return -1


cdef object _known_header(bytes name):
    """The HttpRequest.headers key for a header name the server reads, else None."""
    cdef int index = _known_index(PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name))
    return None if index < 0 else KNOWN_HEADERS[index]


cdef inline bint _is_space(char c) noexcept nogil:
    return c == c' ' or c == c'\t'


# The bytes of a plain request (``RequestAssembler._take_plain``): each a strict subset of
# what llhttp accepts at that place, so that every request taken without the parser is one
# the parser reads alike.
cdef bint _TARGET[256]  # origin-form request target: RFC 3986 pchar, '/', '?'
cdef bint _TOKEN[256]  # header name: RFC 9110 tchar
cdef bint _VALUE[256]  # header value: visible ASCII, space and tab (no obs-text)


cdef void _fill_tables() noexcept:
    cdef int c
    for c in range(256):
        alnum = (c'0' <= c <= c'9') or (c'a' <= c <= c'z') or (c'A' <= c <= c'Z')
        _TARGET[c] = alnum or c in b"-._~!$&'()*+,;=:@/?%"
        _TOKEN[c] = alnum or c in b"!#$%&'*+-.^_`|~"
        _VALUE[c] = (0x20 <= c <= 0x7e) or c == c'\t'


_fill_tables()


cdef inline str _raw_path(const char* src, Py_ssize_t n):
    """The path as sent (UTF-8, invalid bytes -> U+FFFD), still percent-encoded: the router
    decodes each parameter it captures, once (decoding here too would decode twice)."""
    return PyUnicode_DecodeUTF8(src, n, "replace")


cdef tuple _split_target(bytes url):
    """(path, query) of a request target: origin-form, absolute-form or ``*``."""
    cdef const char* data = PyBytes_AS_STRING(url)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(url), end = size, path_end
    cdef const char* found
    if size and data[0] == c'/':  # origin-form, nearly every request
        found = <const char*>memchr(data, c'#', size)
        if found != NULL:
            end = found - data
        found = <const char*>memchr(data, c'?', end)
        if found == NULL:
            return _raw_path(data, end), ""
        path_end = found - data
        return (_raw_path(data, path_end),
                PyUnicode_DecodeLatin1(data + path_end + 1, end - path_end - 1, NULL))
    if size == 1 and data[0] == c'*':
        return "*", ""
    try:
        parsed = parse_url(url)
    except Exception:
        raise FramingError(f"cannot parse request target {url[:200]!r}") from None
    path = parsed.path or b"/"
    query = parsed.query or b""
    return _raw_path(path, len(path)), query.decode("latin-1")


@cython.final
@cython.auto_pickle(False)
cdef class HttpRequest:
    """One complete request. Immutable once the assembler has handed it out."""
    cdef readonly str method
    cdef readonly str path  # as sent (not percent-decoded), without query or fragment
    cdef readonly str query  # raw (not decoded), without the '?'
    cdef readonly dict headers  # lower-cased name -> value, only the headers the server reads
    cdef list _raw_headers  # every header as received: (name, value) bytes pairs ...
    cdef bytes _plain_head  # ... or, for a plain request, its header lines, split when asked
    cdef readonly object body  # bytearray of exactly the body's length, owned by the request
    cdef readonly bint keep_alive
    cdef readonly str http_version  # "1.1", "1.0"
    # The front end's record of this request's exchange (its ``Exchange``: when it arrived,
    # whether the client is still there), set by the HTTP protocol before the request is
    # routed; None for a request made outside a connection.
    cdef public object exchange

    def __init__(self, str method, str path, str query="", dict headers=None,
                 list raw_headers=None, body=b"", bint keep_alive=True,
                 str http_version="1.1"):
        self.method = method
        self.path = path
        self.query = query
        self.headers = {} if headers is None else headers
        self._raw_headers = [] if raw_headers is None else raw_headers
        self.body = body
        self.keep_alive = keep_alive
        self.http_version = http_version

    @property
    def raw_headers(self):
        """Every header as received: (name, value) bytes pairs, values without the
        whitespace around them."""
        if self._raw_headers is None:
            self._raw_headers = _split_plain_head(self._plain_head)
            self._plain_head = None
        return self._raw_headers

    def __repr__(self):
        return (
            f"<HttpRequest {self.method} {self.path!r} HTTP/{self.http_version} "
            f"body={len(self.body)}B keep_alive={self.keep_alive}>"
        )


@cython.final
@cython.auto_pickle(False)
cdef class RequestAssembler:
    """The httptools callback object for one connection; collects completed requests."""
    cdef object _parser  # the httptools.HttpRequestParser feeding us (see attach)
    # its bound methods, looked up once per connection instead of once per call
    cdef object _get_method
    cdef object _get_http_version
    cdef object _should_keep_alive
    cdef readonly Py_ssize_t max_body_size
    cdef readonly Py_ssize_t max_head_size
    cdef readonly Py_ssize_t direct_body_min
    cdef list _completed

    # The message being assembled (reset by on_message_begin).
    cdef bytes _url  # the request target when it arrived in one piece ...
    cdef bytearray _url_parts  # ... else its pieces, joined without quadratic copying
    cdef Py_ssize_t _head_size  # request target + header bytes seen so far
    cdef list _raw_headers
    cdef dict _headers
    cdef dict _repeated  # header key -> every value, for headers that came more than once
    cdef bint _headers_done  # later on_header calls are chunked trailers (ignored)
    cdef str _method
    cdef str _path
    cdef str _query
    cdef bytearray _body
    cdef Py_ssize_t _body_size
    cdef Py_ssize_t _content_length  # -1 without a Content-Length header
    cdef bint _expect_continue
    # The rest of the body is taken by ``feed`` itself, not through the parser: a large
    # Content-Length body, or an Upgrade offer's (llhttp ends that message at its headers
    # and hands the body over as the upgraded protocol's bytes; the server does not switch).
    cdef bint _awaiting_body
    cdef bint _held_keep_alive  # the message's, read while its parser still had it
    cdef str _held_version
    # The parser is between messages and keeps the connection open: the next request may
    # be taken without it (``_take_plain``); False while it is inside a message.
    cdef bint _between
    cdef readonly bint take_plain  # whether plain requests skip the parser (see __init__)

    def __init__(self, Py_ssize_t max_body_size=DEFAULT_MAX_BODY_SIZE,
                 Py_ssize_t max_head_size=DEFAULT_MAX_HEAD_SIZE,
                 Py_ssize_t direct_body_min=DEFAULT_DIRECT_BODY_MIN,
                 bint take_plain=True):
        """``take_plain``: read a plain request (see ``_take_plain``) without the parser,
        when the whole of it has arrived; the tests compare both ways."""
        if max_body_size < 0 or max_head_size < 0:
            raise ValueError("size limits must be non-negative")
        if direct_body_min < 1:
            raise ValueError("direct_body_min must be at least 1")
        self.max_body_size = max_body_size
        self.max_head_size = max_head_size
        self.direct_body_min = direct_body_min
        self.take_plain = take_plain
        self._completed = []
        self._reset()

    def attach(self, parser):
        """Give the assembler the parser that calls it, for the method, version and
        keep-alive of each message. The pair forms a reference cycle; ``detach()`` breaks it
        when the connection closes (the garbage collector would otherwise)."""
        self._parser = parser
        self._between = True
        self._get_method = parser.get_method
        self._get_http_version = parser.get_http_version
        self._should_keep_alive = parser.should_keep_alive

    def detach(self):
        self._parser = None
        self._get_method = None
        self._get_http_version = None
        self._should_keep_alive = None

    def drain(self):
        """The requests completed since the last call, oldest first."""
        done = self._completed
        self._completed = []
        return done

    def take_expect_continue(self):
        """True once for a request whose headers asked for ``100-continue`` and whose body
        has not arrived yet: the protocol then writes ``HTTP/1.1 100 Continue``."""
        if self._expect_continue:
            self._expect_continue = False
            return True
        return False

    cdef int _reset(self) except -1:
        self._url = None
        self._url_parts = None
        self._head_size = 0
        self._raw_headers = []
        self._headers = {}
        self._repeated = None
        self._headers_done = False
        self._method = None
        self._path = None
        self._query = None
        self._body = None
        self._body_size = 0
        self._content_length = -1
        self._expect_continue = False
        self._awaiting_body = False
        return 0

    cdef int _add_head_bytes(self, Py_ssize_t size) except -1:
        self._head_size += size
        if self._head_size > self.max_head_size:
            raise HeadTooLargeError(
                f"request target and headers exceed {self.max_head_size} bytes")
        return 0

    # --- httptools callbacks ------------------------------------------------------------

    def on_message_begin(self):
        self._between = False
        self._reset()

    def on_url(self, bytes url):
        self._add_head_bytes(len(url))
        if self._url is None and self._url_parts is None:
            self._url = url
        else:  # the request line arrived split over several feeds
            if self._url_parts is None:
                self._url_parts = bytearray(self._url)
                self._url = None
            self._url_parts += url

    def on_header(self, bytes name, bytes value):
        if self._headers_done:
            return  # a trailer after a chunked body: nothing the server reads
        cdef Py_ssize_t size = PyBytes_GET_SIZE(value)
        cdef const char* data = PyBytes_AS_STRING(value)
        self._add_head_bytes(PyBytes_GET_SIZE(name) + size + 4)
        self._raw_headers.append((name, value))
        key = _known_header(name)
        if key is None:
            return
        text = PyUnicode_DecodeLatin1(data, size, NULL)
        if size and (_is_space(data[0]) or _is_space(data[size - 1])):
            text = text.strip(" \t")
        previous = self._headers.get(key)
        if previous is None:
            self._headers[key] = text
            return
        # Joined at headers-complete: appending here would copy quadratically.
        if self._repeated is None:
            self._repeated = {}
        parts = self._repeated.get(key)
        if parts is None:
            self._repeated[key] = [previous, text]
        else:
            parts.append(text)

    def on_headers_complete(self):
        cdef Py_ssize_t length
        self._headers_done = True
        if self._repeated is not None:
            for key, parts in self._repeated.items():
                self._headers[key] = ", ".join(parts)
        if self._parser is None:
            raise RuntimeError("RequestAssembler.attach(parser) was not called")
        method = self._get_method()
        self._method = _METHODS.get(method) or method.decode("latin-1")
        url = self._url if self._url_parts is None else bytes(self._url_parts)
        self._path, self._query = _split_target(url if url is not None else b"")

        declared = self._headers.get("content-length")
        if declared is not None:
            # llhttp has already refused malformed and conflicting values.
            try:
                value = int(declared)
            except ValueError:
                raise FramingError(f"invalid Content-Length {declared!r}") from None
            if value > self.max_body_size:
                raise BodyTooLargeError(
                    f"request body of {value} bytes exceeds the limit of "
                    f"{self.max_body_size} bytes")
            length = value
            self._content_length = length
            if length > 0:
                # Uninitialised: every byte is written by on_body before the message ends.
                self._body = PyByteArray_FromStringAndSize(NULL, length)
        expect = self._headers.get("expect")
        if expect is not None and expect.lower() == "100-continue":
            self._expect_continue = self._get_http_version() == "1.1"

    def on_body(self, bytes chunk):
        cdef Py_ssize_t size = PyBytes_GET_SIZE(chunk)
        self._expect_continue = False
        if self._content_length >= 0:
            if size > self._content_length - self._body_size:
                raise FramingError("body longer than its Content-Length")
            memcpy(PyByteArray_AS_STRING(self._body) + self._body_size,
                   PyBytes_AS_STRING(chunk), size)
        else:  # chunked: grow geometrically (bytearray += is amortised O(1) per byte)
            if size > self.max_body_size - self._body_size:
                raise BodyTooLargeError(
                    f"chunked request body exceeds the limit of {self.max_body_size} bytes")
            if self._body is None:
                self._body = bytearray(chunk)
            else:
                self._body += chunk
        self._body_size += size

    def on_message_complete(self):
        if self._content_length >= 0 and self._body_size != self._content_length:
            if "upgrade" in self._headers:
                self._awaiting_body = True
                self._held_keep_alive = self._should_keep_alive()
                self._held_version = self._get_http_version()
                return
            raise FramingError("body shorter than its Content-Length")
        keep_alive = self._should_keep_alive()
        self._complete(keep_alive, self._version(keep_alive))
        self._between = keep_alive  # after a closing request the parser refuses more

    cdef str _version(self, bint keep_alive):
        """The message's HTTP version. llhttp accepts only 0.9, 1.0, 1.1 and 2.0, and keeps
        a connection alive without a ``Connection`` header only in 1.1: that common case
        needs no call (httptools formats the version string anew on each)."""
        if keep_alive and "connection" not in self._headers:
            return "1.1"
        return self._get_http_version()

    def feed(self, bytes data not None):
        """Parse ``data``: requests completed by it go to ``drain()``. Raises what the
        parser's ``feed_data`` raises (``httptools.HttpParserError``), after the requests
        completed before the bad bytes. An ``Upgrade`` offer completes its request like any
        other; the server does not switch protocols, so parsing goes on in HTTP/1.1 with a
        new parser from the first byte after that request."""
        cdef const char* p = PyBytes_AS_STRING(data)
        cdef Py_ssize_t start = 0, stop, end = PyBytes_GET_SIZE(data)
        # At most one cut at a head's end per large piece of data: pipelined small
        # requests are not fed one by one (where the cut falls never changes the result).
        cdef bint cut = end >= self.direct_body_min
        cdef const char* head_end
        if self._parser is None:
            raise RuntimeError("RequestAssembler.attach(parser) was not called")
        view = None
        while start < end:
            if self._awaiting_body:  # (first: these bytes are a body, whatever they hold)
                start += self._take_body(p + start, end - start)
                if not self._awaiting_body:  # the old parser stopped inside that body
                    self._renew_parser()
                    cut = end - start >= self.direct_body_min
                continue
            if self._between and self.take_plain:
                taken = self._take_plain(p + start, end - start)
                if taken:
                    start += taken
                    continue
            stop = end
            if cut:
                cut = False
                head_end = <const char*>memmem(p + start, end - start, b"\r\n\r\n", 4)
                if head_end != NULL:
                    stop = head_end - p + 4
            if start == 0 and stop == end:
                piece = data
            else:
                if view is None:
                    view = memoryview(data)
                piece = view[start:stop]
            try:
                self._parser.feed_data(piece)
            except HttpParserUpgrade as upgrade:
                start += upgrade.args[0] if upgrade.args else stop - start
                self._renew_parser()
                continue
            start = stop
            self._take_body_directly()

    cdef Py_ssize_t _take_plain(self, const char* data, Py_ssize_t size) except -1:
        """Take the request at ``data`` without the parser when all of it has arrived and
        it is plain: ``GET`` or ``POST``, an origin-form target, ``HTTP/1.1``, CRLF line
        ends, headers of token names and visible-ASCII values (one space at most before a
        value, none after), a Content-Length body or none, and no header the parser gives
        a meaning of its own (Transfer-Encoding, Upgrade, Expect, a Connection other than
        keep-alive), each header the server reads given once, within the limits. Every
        such request is read by llhttp alike, so the parser, between messages, stays so.
        Returns the bytes taken; 0 leaves the request to the parser."""
        cdef const char* p = data
        cdef const char* end = data + size
        cdef const char* start
        cdef const char* name
        cdef const char* head_start
        cdef Py_ssize_t target_size, name_size, value_size, head_size, length = 0
        cdef int index
        cdef unsigned long seen = 0  # the known headers met, by index
        cdef HttpRequest request
        if size >= 5 and memcmp(p, b"POST ", 5) == 0:
            method = "POST"
            p += 5
        elif size >= 4 and memcmp(p, b"GET ", 4) == 0:
            method = "GET"
            p += 4
        else:
            return 0
        start = p
        while p < end and _TARGET[<unsigned char>p[0]]:
            p += 1
        target_size = p - start
        if target_size == 0 or start[0] != c'/':
            return 0
        if end - p < 11 or memcmp(p, b" HTTP/1.1\r\n", 11) != 0:
            return 0
        url = PyBytes_FromStringAndSize(start, target_size)
        p += 11
        head_size = target_size
        headers = {}
        head_start = p
        while True:
            if end - p < 2:
                return 0
            if p[0] == c'\r':
                if p[1] != c'\n':
                    return 0
                p += 2
                break
            name = p
            while p < end and _TOKEN[<unsigned char>p[0]]:
                p += 1
            name_size = p - name
            if name_size == 0 or p == end or p[0] != c':':
                return 0
            p += 1
            if p < end and p[0] == c' ':
                p += 1
            start = p
            while p < end and _VALUE[<unsigned char>p[0]]:
                p += 1
            value_size = p - start
            if (value_size == 0 or _is_space(start[0]) or _is_space(p[-1])
                    or end - p < 2 or p[0] != c'\r' or p[1] != c'\n'):
                return 0
            p += 2
            head_size += name_size + value_size + 4
            if head_size > self.max_head_size:
                return 0  # the parser words the error
            index = _known_index(name, name_size)
            if index < 0:
                if name_size == 17 and strncasecmp(name, b"transfer-encoding", 17) == 0:
                    return 0
            else:
                if seen & (1 << index) or index == _EXPECT or index == _UPGRADE:
                    return 0
                seen |= 1 << index
                if index == _CONTENT_LENGTH:
                    length = _plain_length(start, value_size)
                    if length < 0 or length > self.max_body_size:
                        return 0
                elif index == _CONNECTION:
                    if value_size != 10 or strncasecmp(start, b"keep-alive", 10) != 0:
                        return 0
                headers[KNOWN_HEADERS[index]] = PyUnicode_DecodeLatin1(start, value_size, NULL)
        if end - p < length:
            return 0  # the rest of the body is still on its way
        request = HttpRequest.__new__(HttpRequest)
        request.method = method
        request.path, request.query = _split_target(url)
        request.headers = headers
        request._plain_head = PyBytes_FromStringAndSize(head_start, p - 2 - head_start)
        request.body = PyByteArray_FromStringAndSize(p, length) if length else bytearray()
        request.keep_alive = True
        request.http_version = "1.1"
        self._completed.append(request)
        return p + length - data

    cdef int _renew_parser(self) except -1:
        parser = type(self._parser)(self)
        self.detach()
        self.attach(parser)
        return 0

    cdef int _take_body_directly(self) except -1:
        """After a feed that ended inside a large Content-Length body: take the rest of it
        in ``feed``. Only for a keep-alive request: after one that closes the connection
        llhttp refuses further bytes, which a new parser would read as a request."""
        if (not self._headers_done or self._body is None or self._content_length < 0
                or self._content_length - self._body_size < self.direct_body_min):
            return 0
        if not self._should_keep_alive():
            return 0
        self._held_keep_alive = True
        self._held_version = self._version(True)
        self._awaiting_body = True
        return 0

    cdef Py_ssize_t _take_body(self, const char* data, Py_ssize_t size) except -1:
        """Copy what ``data`` holds of the awaited body; completes the request once the body
        is whole. Returns the bytes taken (the rest is the next request)."""
        cdef Py_ssize_t take = min(size, self._content_length - self._body_size)
        if take > 0:
            self._expect_continue = False
            memcpy(PyByteArray_AS_STRING(self._body) + self._body_size, data, take)
            self._body_size += take
        if self._body_size == self._content_length:
            self._complete(self._held_keep_alive, self._held_version)
        return take

    cdef int _complete(self, bint keep_alive, str http_version) except -1:
        cdef HttpRequest request = HttpRequest.__new__(HttpRequest)
        request.method = self._method
        request.path = self._path
        request.query = self._query
        request.headers = self._headers
        request._raw_headers = self._raw_headers
        request.body = self._body if self._body is not None else bytearray()
        request.keep_alive = keep_alive
        request.http_version = http_version
        self._completed.append(request)
        # Drop what now belongs to the request (a large body must not outlive it here);
        # on_message_begin sets up the next message.
        self._raw_headers = self._headers = self._repeated = None
        self._url = self._url_parts = self._body = None
        self._awaiting_body = False
        return 0


# --- response head ----------------------------------------------------------------------

_REASONS = {
    100: "Continue",
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    413: "Payload Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}
_STATUS_LINES = {
    code: f"HTTP/1.1 {code} {reason}\r\n".encode() for code, reason in _REASONS.items()
}


def reason_phrase(int status):
    return _REASONS.get(status, "Unknown")


cdef inline Py_ssize_t _append(char* out, const char* data, Py_ssize_t size) noexcept:
    memcpy(out, data, size)
    return size


cdef Py_ssize_t _checked_value(object value, str what) except -1:
    """Length of a header value; refuses non-bytes and CR/LF/NUL (header injection)."""
    if not PyBytes_Check(value):
        raise TypeError(f"{what} must be bytes, got {type(value).__name__}")
    cdef const char* data = PyBytes_AS_STRING(value)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(value)
    if (memchr(data, c'\r', size) != NULL or memchr(data, c'\n', size) != NULL
            or memchr(data, 0, size) != NULL):
        raise ValueError(f"{what} must not contain CR, LF or NUL: {value!r}")
    return size


cdef inline bint _is_tchar(unsigned char c) noexcept nogil:
    # RFC 9110 §5.6.2: a header name is a token
    if c'a' <= c <= c'z' or c'A' <= c <= c'Z' or c'0' <= c <= c'9':
        return True
    return memchr(b"!#$%&'*+-.^_`|~", c, 15) != NULL


cdef Py_ssize_t _checked_name(object name) except -1:
    if not PyBytes_Check(name):
        raise TypeError(f"header name must be bytes, got {type(name).__name__}")
    cdef const unsigned char* data = <const unsigned char*>PyBytes_AS_STRING(name)
    cdef Py_ssize_t i, size = PyBytes_GET_SIZE(name)
    if size == 0:
        raise ValueError("header name must not be empty")
    for i in range(size):
        if not _is_tchar(data[i]):
            raise ValueError(f"invalid header name {name!r}")
    return size


def build_response_head(int status, content_type, content_length,
                        bint keep_alive, extra_headers=()):
    """``HTTP/1.1 <status> <reason>`` and the headers, ending with the blank line."""
    cdef Py_ssize_t length = -1  # a streamed body (None): chunks of their own sizes
    if content_length is not None:
        length = content_length
        if length < 0:
            raise ValueError(f"content_length must be non-negative, got {length}")
    return _response_head(status, content_type, length, keep_alive, extra_headers)


include "decimal_digits.pxi"


cdef bytes _response_head(int status, content_type, Py_ssize_t content_length,
                          bint keep_alive, extra_headers):
    """``build_response_head`` at the C level (every answer's head): ``content_length``
    -1 for a chunked body; the length's digits written in place (no str, no joins)."""
    cdef bytes status_line = _STATUS_LINES.get(status)
    if status_line is None:
        if not 100 <= status <= 999:
            raise ValueError(f"invalid HTTP status {status}")
        status_line = f"HTTP/1.1 {status} Unknown\r\n".encode()
    cdef char digits[24]
    cdef int first = 24
    cdef Py_ssize_t length_size
    if content_length < 0:
        length_size = 28  # Transfer-Encoding: chunked\r\n
    else:
        first = _decimal_digits(content_length, digits)
        length_size = 16 + (24 - first) + 2  # Content-Length: <digits>\r\n
    cdef bytes connection = (
        b"Connection: keep-alive\r\n" if keep_alive else b"Connection: close\r\n")
    cdef Py_ssize_t total = (
        PyBytes_GET_SIZE(status_line) + length_size + PyBytes_GET_SIZE(connection) + 2
    )
    if content_type is not None:
        total += 14 + _checked_value(content_type, "content_type") + 2
    # Names and values are collected into a private list: the fill below must copy exactly
    # what was measured, whatever extra_headers is.
    cdef list fields = []
    for name, value_bytes in extra_headers:
        total += _checked_name(name) + 2 + _checked_value(value_bytes, "header value") + 2
        fields.append(name)
        fields.append(value_bytes)

    cdef bytes head = PyBytes_FromStringAndSize(NULL, total)
    cdef char* out = PyBytes_AS_STRING(head)
    out += _append(out, PyBytes_AS_STRING(status_line), PyBytes_GET_SIZE(status_line))
    if content_type is not None:
        out += _append(out, "Content-Type: ", 14)
        out += _append(out, PyBytes_AS_STRING(content_type), PyBytes_GET_SIZE(content_type))
        out += _append(out, "\r\n", 2)
    if content_length < 0:
        out += _append(out, "Transfer-Encoding: chunked\r\n", 28)
    else:
        out += _append(out, "Content-Length: ", 16)
        out += _append(out, digits + first, 24 - first)
        out += _append(out, "\r\n", 2)
    out += _append(out, PyBytes_AS_STRING(connection), PyBytes_GET_SIZE(connection))
    cdef Py_ssize_t i
    for i in range(0, len(fields), 2):
        out += _append(out, PyBytes_AS_STRING(fields[i]), PyBytes_GET_SIZE(fields[i]))
        out += _append(out, ": ", 2)
        out += _append(out, PyBytes_AS_STRING(fields[i + 1]), PyBytes_GET_SIZE(fields[i + 1]))
        out += _append(out, "\r\n", 2)
    out += _append(out, "\r\n", 2)
    return head


def frame_response(int status, content_type, body, bint keep_alive, extra_headers=()):
    """The buffers of a whole answer, head first, then ``body``'s parts as they are: the
    head's Content-Length is their total size (a memoryview counts its bytes)."""
    cdef Py_ssize_t length = 0
    cdef list framed = [None]
    for part in body:
        if isinstance(part, memoryview):
            length += (<memoryview>part).nbytes
        else:
            length += len(part)
        framed.append(part)
    framed[0] = _response_head(status, content_type, length, keep_alive, extra_headers)
    return framed
