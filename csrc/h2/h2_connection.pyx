# cython: language_level=3, autotestdict=False
"""HTTP/2 for gRPC, the server's side of one connection (RFC 9113, gRPC's PROTOCOL-HTTP2).

A state machine with no I/O: the received bytes go in (``feed``), the frames to send come
out (``take_output``, a list of buffers for one ``writelines``), and what the peer asks
for reaches the connection's handler (a Python object) as calls:

- ``handler.unary_call(stream, message, compressed)``: a call whose path is not one of the
  streaming paths, once its client has sent everything (``message`` is its one gRPC
  message, or None when it sent none);
- ``handler.stream_started(stream)``: a call on a streaming path, as soon as its headers
  are in; its messages then go to ``stream.call.message_received(message, compressed)``
  and its end to ``stream.call.end_received()``;
- ``stream.call.reset_received(code)``: the client reset a call that has a ``call``
  (its RST_STREAM, or the stream failed here);
- ``stream.call.window_opened()``: the peer's window let out what ``send_message`` had to
  keep back, once ``stream.wants_window`` was set;
- ``handler.stream_refused(stream, status, message)``: a call this layer answers itself
  before it reaches the handler (a message past the size limit, an unknown compression
  flag): the handler writes the status;
- ``handler.ping_received()``, ``handler.ping_acked(opaque)``,
  ``handler.goaway_received(last_stream_id, code)``: for the connection's keepalive and
  ping policy, which live in Python.

What the server sends goes through ``send_unary`` (headers, one message and the OK
trailers at once: the common answer), ``send_message`` and ``send_status`` (a streamed
answer, or an error), ``reset``, ``ping`` and ``goaway``. Flow control is kept both ways:
received bytes are granted back to the peer as they are taken (``hold_window`` stops that
for a stream whose reader is behind), and data beyond the peer's windows waits here until
its WINDOW_UPDATE.

Header blocks are decoded by the HPACK decoder handed in; the blocks this side sends use
no dynamic table (literals without indexing and static-table entries), so the common
response heads are the same bytes every time and are made once.
"""

cimport cython
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int64_t, uint8_t, uint32_t
from libc.string cimport memcmp, memcpy

from pytriton_core._native.hpack import HeaderListTooLarge


# ---------------------------------------------------------------- protocol constants

cdef enum:
    FRAME_DATA = 0
    FRAME_HEADERS = 1
    FRAME_PRIORITY = 2
    FRAME_RST_STREAM = 3
    FRAME_SETTINGS = 4
    FRAME_PUSH_PROMISE = 5
    FRAME_PING = 6
    FRAME_GOAWAY = 7
    FRAME_WINDOW_UPDATE = 8
    FRAME_CONTINUATION = 9

cdef enum:
    FLAG_END_STREAM = 0x1
    FLAG_ACK = 0x1
    FLAG_END_HEADERS = 0x4
    FLAG_PADDED = 0x8
    FLAG_PRIORITY = 0x20

# Error codes (RFC 9113 section 7), as Python names for the handler and the tests.
NO_ERROR = 0x0
PROTOCOL_ERROR = 0x1
INTERNAL_ERROR = 0x2
FLOW_CONTROL_ERROR = 0x3
STREAM_CLOSED = 0x5
FRAME_SIZE_ERROR = 0x6
REFUSED_STREAM = 0x7
CANCEL = 0x8
COMPRESSION_ERROR = 0x9
ENHANCE_YOUR_CALM = 0xB

cdef enum:
    SETTINGS_HEADER_TABLE_SIZE = 0x1
    SETTINGS_ENABLE_PUSH = 0x2
    SETTINGS_MAX_CONCURRENT_STREAMS = 0x3
    SETTINGS_INITIAL_WINDOW_SIZE = 0x4
    SETTINGS_MAX_FRAME_SIZE = 0x5
    SETTINGS_MAX_HEADER_LIST_SIZE = 0x6

cdef enum:
    DEFAULT_WINDOW = 65535
    DEFAULT_FRAME_SIZE = 16384  # what this side accepts: the protocol's default, never raised
    MAX_WINDOW = 0x7FFFFFFF
    # A header block's fragments (HEADERS and CONTINUATION) may not add up to more than
    # this, whatever the decoded list: a bound on what a client can make this side hold.
    MAX_HEADER_BLOCK = 1 << 20
    # Messages this small go out in one buffer with their frames (one copy, one allocation);
    # larger ones as views of the caller's buffer.
    SMALL_MESSAGE = 8192

# gRPC status codes this layer answers with itself.
GRPC_INTERNAL = 13
GRPC_RESOURCE_EXHAUSTED = 8

CONNECTION_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# The response heads, encoded once: ":status: 200" is static entry 8; the rest are literals
# without indexing (``_literal``), with static-table names where there is one.
_ACCEPT_ENCODING = b"identity, deflate, gzip"


cdef bytes _literal(bytes name, bytes value):
    """A header field as a literal without indexing and a new name (RFC 7541 6.2.2)."""
    return b"\x00" + _hpack_length(len(name)) + name + _hpack_length(len(value)) + value


cdef bytes _hpack_length(Py_ssize_t length):
    """A string length: HPACK's integer with a 7-bit prefix, Huffman bit clear."""
    cdef bytearray out = bytearray()
    if length < 127:
        out.append(length)
        return bytes(out)
    out.append(127)
    length -= 127
    while length >= 128:
        out.append((length & 0x7F) | 0x80)
        length >>= 7
    out.append(length)
    return bytes(out)


_STATUS_200 = b"\x88"
_CONTENT_TYPE = b"\x0f\x10" + _hpack_length(16) + b"application/grpc"  # static name 31
_HEAD_PLAIN = _STATUS_200 + _CONTENT_TYPE + _literal(b"grpc-accept-encoding", _ACCEPT_ENCODING)
_HEAD_GZIP = _HEAD_PLAIN + _literal(b"grpc-encoding", b"gzip")
_HEAD_DEFLATE = _HEAD_PLAIN + _literal(b"grpc-encoding", b"deflate")
_TRAILERS_OK = _literal(b"grpc-status", b"0") + _literal(b"grpc-message", b"")
# Encodings a response can carry (``send_*``'s ``encoding``): 0 none, 1 gzip, 2 deflate.
_HEADS = (_HEAD_PLAIN, _HEAD_GZIP, _HEAD_DEFLATE)


def status_trailers(int code, str message) -> bytes:
    """The header block of a status: ``grpc-status`` and ``grpc-message``, the message
    percent-encoded as gRPC requires (bytes outside printable ASCII, and '%')."""
    cdef bytes raw = message.encode("utf-8", "replace")
    cdef bytearray encoded = bytearray()
    cdef uint8_t byte
    for byte in raw:
        if 0x20 <= byte <= 0x7E and byte != 0x25:
            encoded.append(byte)
        else:
            encoded += b"%%%02X" % byte
    return _literal(b"grpc-status", str(code).encode()) + _literal(b"grpc-message", bytes(encoded))


class H2ConnectionError(Exception):
    """The connection broke the protocol: a GOAWAY with ``code`` is queued and the
    connection is closed (``H2ServerConnection.closed``)."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


cdef inline uint32_t _u32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline void _put_u32(uint8_t* p, uint32_t value) noexcept nogil:
    p[0] = (value >> 24) & 0xFF
    p[1] = (value >> 16) & 0xFF
    p[2] = (value >> 8) & 0xFF
    p[3] = value & 0xFF


cdef inline void _frame_head(
    uint8_t* p, Py_ssize_t length, uint8_t kind, uint8_t flags, uint32_t stream_id
) noexcept nogil:
    p[0] = (length >> 16) & 0xFF
    p[1] = (length >> 8) & 0xFF
    p[2] = length & 0xFF
    p[3] = kind
    p[4] = flags
    _put_u32(p + 5, stream_id & 0x7FFFFFFF)


cdef bytes _frame(uint8_t kind, uint8_t flags, uint32_t stream_id, bytes payload):
    cdef Py_ssize_t length = len(payload)
    cdef bytes frame = PyBytes_FromStringAndSize(NULL, 9 + length)
    cdef uint8_t* p = <uint8_t*>PyBytes_AS_STRING(frame)
    _frame_head(p, length, kind, flags, stream_id)
    if length:
        memcpy(p + 9, PyBytes_AS_STRING(payload), length)
    return frame


# ---------------------------------------------------------------- streams


@cython.final
cdef class H2Stream:
    """One call: what its client sent in its headers, and where it stands both ways.

    ``path``, ``encoding`` (``grpc-encoding``), ``accept_encoding`` and ``timeout``
    (``grpc-timeout``, unparsed) are read from the head; ``metadata`` is every other header
    that is not a pseudo-header, ``te`` or ``content-type``, in order, as sent (gRPC's custom
    metadata, ``user-agent`` included). ``call`` is the handler's object.
    """

    cdef readonly uint32_t stream_id
    cdef readonly bytes path
    cdef readonly object encoding
    cdef readonly object accept_encoding
    cdef readonly object timeout
    cdef readonly list metadata
    cdef public object call
    # Set by the handler when it waits for ``send_message``'s held-back data to leave.
    cdef public bint wants_window

    cdef bint unary
    cdef bint remote_closed  # the client sent END_STREAM (or reset)
    cdef bint local_closed  # this side sent END_STREAM (or reset)
    cdef bint headers_sent
    cdef bint discarding  # refused: its further data is counted and dropped
    cdef bint window_held
    cdef int64_t send_window
    cdef int64_t recv_window
    cdef int64_t recv_unacked  # received bytes not yet granted back

    # The gRPC message being received: its 5-byte prefix, then its body.
    cdef uint8_t prefix[5]
    cdef int prefix_have
    cdef bint message_compressed
    # Being filled: bytes made at the message's length (not yet shared, so written in
    # place), or a bytearray growing with the data of a message past the stream's window.
    cdef object message
    cdef Py_ssize_t message_size
    cdef Py_ssize_t message_filled
    cdef object unary_message  # a unary call's one message, until END_STREAM
    cdef bint unary_compressed
    cdef int messages_seen

    # Sent data the peer's windows hold back: buffers in order, then the trailers.
    cdef list pending
    cdef Py_ssize_t pending_bytes
    cdef object pending_trailers

    def __cinit__(self):
        self.metadata = []
        self.pending = []

    @property
    def held_back(self) -> int:
        """Bytes of DATA waiting for the peer's window."""
        return self.pending_bytes

    @property
    def open(self) -> bool:
        """Whether this side may still send on the stream."""
        return not self.local_closed


# ---------------------------------------------------------------- the connection


@cython.final
cdef class H2ServerConnection:
    """The server side of one HTTP/2 connection carrying gRPC calls."""

    cdef object _handler
    cdef object _decoder
    cdef frozenset _streaming_paths
    cdef readonly dict streams
    cdef list _out
    cdef bytearray _input
    cdef Py_ssize_t _consumed  # of the bytes being parsed
    cdef bint _preface_seen
    cdef bint _settings_seen
    cdef readonly bint closed  # a GOAWAY for an error went out: nothing more is read
    cdef readonly bint draining  # a GOAWAY went out: no new calls
    cdef readonly uint32_t last_stream_id
    cdef Py_ssize_t _max_concurrent_streams
    cdef Py_ssize_t _max_receive_message_size
    cdef int64_t _local_window  # the stream window this side grants (its INITIAL_WINDOW_SIZE)
    cdef int64_t _recv_window  # the connection's receive window left
    cdef int64_t _recv_unacked
    cdef int64_t _connection_window  # the size this side keeps the connection window at
    cdef int64_t _send_window  # the peer's connection window left
    cdef int64_t _peer_initial_window
    cdef Py_ssize_t _peer_max_frame_size
    cdef bint _table_size_update  # the next header block starts with a size update (to 0)
    cdef uint32_t _continuation_stream  # 0: no header block in progress
    cdef bint _continuation_end_stream
    cdef bytearray _header_block
    cdef list _blocked  # streams with data held back, oldest first
    cdef readonly object error  # the H2ConnectionError that closed it, if one did

    def __init__(
        self,
        handler,
        decoder,
        streaming_paths=frozenset(),
        *,
        Py_ssize_t max_concurrent_streams=1024,
        Py_ssize_t max_receive_message_size=0x7FFFFFFF,
        int64_t initial_window_size=4 << 20,
        Py_ssize_t max_header_list_size=16384,
    ):
        if not 0 < initial_window_size <= MAX_WINDOW:
            raise ValueError("initial_window_size must be in 1..2**31-1")
        self._handler = handler
        self._decoder = decoder
        self._streaming_paths = frozenset(streaming_paths)
        self.streams = {}
        self._out = []
        self._input = bytearray()
        self._max_concurrent_streams = max_concurrent_streams
        self._max_receive_message_size = max_receive_message_size
        self._local_window = initial_window_size
        self._connection_window = initial_window_size
        self._recv_window = DEFAULT_WINDOW
        self._send_window = DEFAULT_WINDOW
        self._peer_initial_window = DEFAULT_WINDOW
        self._peer_max_frame_size = DEFAULT_FRAME_SIZE
        self._header_block = bytearray()
        self._blocked = []
        self._queue_preface(max_concurrent_streams, max_header_list_size)

    cdef _queue_preface(self, Py_ssize_t max_concurrent_streams, Py_ssize_t max_header_list_size):
        """SETTINGS, then a WINDOW_UPDATE raising the connection window to the stream's."""
        cdef bytearray settings = bytearray()
        cdef uint8_t entry[6]
        for key, value in (
            (SETTINGS_MAX_CONCURRENT_STREAMS, max_concurrent_streams),
            (SETTINGS_INITIAL_WINDOW_SIZE, self._local_window),
            (SETTINGS_MAX_HEADER_LIST_SIZE, max_header_list_size),
        ):
            entry[0] = (key >> 8) & 0xFF
            entry[1] = key & 0xFF
            _put_u32(entry + 2, <uint32_t>value)
            settings += (<char*>entry)[:6]
        self._out.append(_frame(FRAME_SETTINGS, 0, 0, bytes(settings)))
        increment = self._connection_window - DEFAULT_WINDOW
        if increment > 0:
            self._queue_window_update(0, increment)
            self._recv_window += increment

    # ------------------------------------------------------------ input

    def feed(self, data) -> None:
        """Take received bytes; what they complete reaches the handler before this returns.

        Raises ``H2ConnectionError`` when the peer broke the protocol (its GOAWAY is queued;
        send the output, then close). An exception from the handler propagates: the
        stream it concerned is left as it was."""
        cdef Py_ssize_t n
        if self.closed:
            return
        self._consumed = 0
        if not PyByteArray_GET_SIZE(self._input) and type(data) is bytes:
            n = PyBytes_GET_SIZE(data)
            try:
                self._parse(<const uint8_t*>PyBytes_AS_STRING(data), n)
            finally:
                if self._consumed < n and not self.closed:
                    self._input += memoryview(data)[self._consumed:]
            return
        self._input += data
        try:
            self._parse(
                <const uint8_t*>PyByteArray_AS_STRING(self._input),
                PyByteArray_GET_SIZE(self._input),
            )
        finally:
            # What was parsed goes, even when a handler raised (a bytearray drops its
            # front without moving the rest).
            del self._input[:self._consumed]

    cdef int _parse(self, const uint8_t* p, Py_ssize_t n) except -1:
        """Handle the whole frames in ``p``; ``_consumed`` follows, frame by frame."""
        cdef Py_ssize_t pos = 0
        cdef Py_ssize_t length
        cdef uint8_t kind, flags
        cdef uint32_t stream_id
        cdef Py_ssize_t preface_length = len(CONNECTION_PREFACE)
        if not self._preface_seen:
            if n < preface_length:
                if memcmp(p, PyBytes_AS_STRING(CONNECTION_PREFACE), n) != 0:
                    self._fail(PROTOCOL_ERROR, "the client did not start with HTTP/2's preface")
                return 0
            if memcmp(p, PyBytes_AS_STRING(CONNECTION_PREFACE), preface_length) != 0:
                self._fail(PROTOCOL_ERROR, "the client did not start with HTTP/2's preface")
            self._preface_seen = True
            pos = self._consumed = preface_length
        while n - pos >= 9 and not self.closed:
            length = (<Py_ssize_t>p[pos] << 16) | (<Py_ssize_t>p[pos + 1] << 8) | p[pos + 2]
            kind = p[pos + 3]
            flags = p[pos + 4]
            stream_id = _u32(p + pos + 5) & 0x7FFFFFFF
            if length > DEFAULT_FRAME_SIZE:
                self._fail(FRAME_SIZE_ERROR, f"a frame of {length} bytes, past 16384")
            if n - pos - 9 < length:
                break
            pos += 9 + length
            self._consumed = pos  # before the handlers run: a frame is never read twice
            self._frame(kind, flags, stream_id, p + pos - length, length)
        return 0

    cdef int _frame(
        self, uint8_t kind, uint8_t flags, uint32_t stream_id, const uint8_t* payload,
        Py_ssize_t length
    ) except -1:
        if not self._settings_seen:
            if kind != FRAME_SETTINGS or flags & FLAG_ACK:
                self._fail(PROTOCOL_ERROR, "the client's first frame was not SETTINGS")
            self._settings_seen = True
        if self._continuation_stream and kind != FRAME_CONTINUATION:
            self._fail(PROTOCOL_ERROR, "a frame inside a header block")
        if kind == FRAME_DATA:
            self._on_data(flags, stream_id, payload, length)
        elif kind == FRAME_HEADERS:
            self._on_headers(flags, stream_id, payload, length)
        elif kind == FRAME_CONTINUATION:
            self._on_continuation(flags, stream_id, payload, length)
        elif kind == FRAME_WINDOW_UPDATE:
            self._on_window_update(stream_id, payload, length)
        elif kind == FRAME_SETTINGS:
            self._on_settings(flags, stream_id, payload, length)
        elif kind == FRAME_PING:
            self._on_ping(flags, stream_id, payload, length)
        elif kind == FRAME_RST_STREAM:
            self._on_rst_stream(stream_id, payload, length)
        elif kind == FRAME_PRIORITY:
            if stream_id == 0:
                self._fail(PROTOCOL_ERROR, "PRIORITY on stream 0")
            if length != 5:
                self._fail(FRAME_SIZE_ERROR, "PRIORITY frame not 5 bytes")
        elif kind == FRAME_GOAWAY:
            if stream_id != 0:
                self._fail(PROTOCOL_ERROR, "GOAWAY on a stream")
            if length < 8:
                self._fail(FRAME_SIZE_ERROR, "GOAWAY frame shorter than 8 bytes")
            self._handler.goaway_received(_u32(payload) & 0x7FFFFFFF, _u32(payload + 4))
        elif kind == FRAME_PUSH_PROMISE:
            self._fail(PROTOCOL_ERROR, "PUSH_PROMISE from a client")
        # Frames of unknown types are ignored (RFC 9113 5.5).
        return 0

    cdef H2Stream _known_stream(self, uint32_t stream_id, str frame):
        """The open stream ``stream_id``, or None for one that was closed; a stream never
        opened is a connection error."""
        stream = self.streams.get(stream_id)
        if stream is None and stream_id > self.last_stream_id:
            self._fail(PROTOCOL_ERROR, f"{frame} on stream {stream_id}, never opened")
        return stream

    cdef int _on_data(
        self, uint8_t flags, uint32_t stream_id, const uint8_t* payload, Py_ssize_t length
    ) except -1:
        cdef Py_ssize_t start = 0, padding = 0
        cdef H2Stream stream
        if stream_id == 0:
            self._fail(PROTOCOL_ERROR, "DATA on stream 0")
        if flags & FLAG_PADDED:
            if length < 1 or payload[0] >= length:
                self._fail(PROTOCOL_ERROR, "DATA padding longer than the frame")
            start = 1
            padding = payload[0]
        self._recv_window -= length
        if self._recv_window < 0:
            self._fail(FLOW_CONTROL_ERROR, "DATA past the connection's window")
        self._recv_unacked += length
        stream = self._known_stream(stream_id, "DATA")
        if stream is None or stream.remote_closed:
            # A closed stream's data still counted against the connection's window.
            self._grant_connection()
            if stream is not None:
                self._stream_error(stream, STREAM_CLOSED)
            return 0
        stream.recv_window -= length
        if stream.recv_window < 0:
            self._grant_connection()
            self._stream_error(stream, FLOW_CONTROL_ERROR)
            return 0
        stream.recv_unacked += length
        if not stream.discarding:
            self._deframe(stream, payload + start, length - start - padding)
        self._grant_connection()
        if stream.stream_id in self.streams:
            self._grant_stream(stream)
            if flags & FLAG_END_STREAM:
                self._remote_end(stream)
        return 0

    cdef int _deframe(self, H2Stream stream, const uint8_t* data, Py_ssize_t n) except -1:
        """Split DATA into gRPC messages: a 5-byte prefix (compressed flag, length), then
        the message. A message is copied once, into a bytes object made at its length;
        one longer than the stream's window grows with what arrives instead (a prefix alone
        makes no large allocation), and is copied once more when whole."""
        cdef Py_ssize_t take
        cdef uint32_t size
        while n > 0 and not stream.discarding and stream.stream_id in self.streams:
            if stream.message is None:
                take = 5 - stream.prefix_have
                if take > n:
                    take = n
                memcpy(stream.prefix + stream.prefix_have, data, take)
                stream.prefix_have += take
                data += take
                n -= take
                if stream.prefix_have < 5:
                    return 0
                if stream.prefix[0] > 1:
                    self._refuse(
                        stream, GRPC_INTERNAL, "a message's compressed flag is neither 0 nor 1"
                    )
                    return 0
                stream.message_compressed = stream.prefix[0] == 1
                size = _u32(stream.prefix + 1)
                if size > <uint32_t>self._max_receive_message_size:
                    self._refuse(
                        stream,
                        GRPC_RESOURCE_EXHAUSTED,
                        f"Received message larger than max ({size} vs. "
                        f"{self._max_receive_message_size})",
                    )
                    return 0
                if size <= n:  # all of it here: one copy straight out of the frame
                    message = PyBytes_FromStringAndSize(<const char*>data, size)
                    stream.prefix_have = 0
                    data += size
                    n -= size
                    self._message(stream, message)
                    continue
                stream.message_size = size
                stream.message_filled = 0
                if size <= self._local_window:
                    stream.message = PyBytes_FromStringAndSize(NULL, size)
                else:
                    stream.message = bytearray()
            take = stream.message_size - stream.message_filled
            if take > n:
                take = n
            if type(stream.message) is bytes:
                memcpy(PyBytes_AS_STRING(stream.message) + stream.message_filled, data, take)
            else:
                stream.message += (<const char*>data)[:take]
            stream.message_filled += take
            data += take
            n -= take
            if stream.message_filled == stream.message_size:
                message = stream.message
                stream.message = None
                stream.prefix_have = 0
                self._message(stream, message if type(message) is bytes else bytes(message))
        return 0

    cdef int _message(self, H2Stream stream, bytes message) except -1:
        stream.messages_seen += 1
        if stream.unary:
            if stream.messages_seen > 1:
                self._refuse(stream, GRPC_INTERNAL, "a unary call sent more than one message")
                return 0
            stream.unary_message = message
            stream.unary_compressed = stream.message_compressed
        elif stream.call is not None:
            stream.call.message_received(message, stream.message_compressed)
        return 0

    cdef int _remote_end(self, H2Stream stream) except -1:
        stream.remote_closed = True
        if stream.discarding:
            return 0
        if stream.prefix_have or stream.message is not None:
            self._refuse(stream, GRPC_INTERNAL, "the call ended inside a message")
            return 0
        if stream.unary:
            message, stream.unary_message = stream.unary_message, None
            call = self._handler.unary_call(stream, message, stream.unary_compressed)
            if stream.stream_id in self.streams:  # not answered yet: the call goes on
                stream.call = call
        elif stream.call is not None:
            stream.call.end_received()
        self._forget_if_done(stream)
        return 0

    cdef int _on_headers(
        self, uint8_t flags, uint32_t stream_id, const uint8_t* payload, Py_ssize_t length
    ) except -1:
        cdef Py_ssize_t start = 0, end = length
        if stream_id == 0 or stream_id % 2 == 0:
            self._fail(PROTOCOL_ERROR, f"HEADERS on stream {stream_id}")
        if flags & FLAG_PADDED:
            if length < 1:
                self._fail(PROTOCOL_ERROR, "HEADERS padding longer than the frame")
            start = 1
            end -= payload[0]
        if flags & FLAG_PRIORITY:
            start += 5
        if end < start:
            self._fail(PROTOCOL_ERROR, "HEADERS padding longer than the frame")
        del self._header_block[:]
        self._header_block += (<const char*>payload)[start:end]
        if flags & FLAG_END_HEADERS:
            self._header_block_done(stream_id, flags & FLAG_END_STREAM)
        else:
            self._continuation_stream = stream_id
            self._continuation_end_stream = flags & FLAG_END_STREAM
        return 0

    cdef int _on_continuation(
        self, uint8_t flags, uint32_t stream_id, const uint8_t* payload, Py_ssize_t length
    ) except -1:
        if self._continuation_stream == 0 or stream_id != self._continuation_stream:
            self._fail(PROTOCOL_ERROR, "CONTINUATION outside a header block")
        if PyByteArray_GET_SIZE(self._header_block) + length > MAX_HEADER_BLOCK:
            self._fail(ENHANCE_YOUR_CALM, "a header block past 1 MiB")
        self._header_block += (<const char*>payload)[:length]
        if flags & FLAG_END_HEADERS:
            self._continuation_stream = 0
            self._header_block_done(stream_id, self._continuation_end_stream)
        return 0

    cdef int _header_block_done(self, uint32_t stream_id, bint end_stream) except -1:
        cdef H2Stream stream
        cdef bint too_large = False
        try:
            headers = self._decoder.decode(self._header_block)
        except HeaderListTooLarge:
            headers = None
            too_large = True
        except Exception as exc:
            self._fail(COMPRESSION_ERROR, f"a header block that does not decode: {exc}")
        stream = self.streams.get(stream_id)
        if stream is not None:  # trailers from the client: they end its side
            if not end_stream:
                self._stream_error(stream, PROTOCOL_ERROR)
            elif not stream.remote_closed:
                self._remote_end(stream)
            return 0
        if stream_id <= self.last_stream_id:
            self._fail(STREAM_CLOSED, f"HEADERS on stream {stream_id}, closed")
        self.last_stream_id = stream_id
        stream = H2Stream.__new__(H2Stream)
        stream.stream_id = stream_id
        stream.send_window = self._peer_initial_window
        stream.recv_window = self._local_window
        if self.draining or len(self.streams) >= self._max_concurrent_streams:
            self._queue_rst(stream_id, REFUSED_STREAM)
            return 0
        self.streams[stream_id] = stream
        if too_large:
            stream.unary = True
            self._refuse(stream, GRPC_RESOURCE_EXHAUSTED, "the call's headers are past the size limit")
            stream.remote_closed = end_stream
            self._forget_if_done(stream)
            return 0
        if not self._read_head(stream, headers):
            self._stream_error(stream, PROTOCOL_ERROR)
            return 0
        stream.unary = stream.path not in self._streaming_paths
        if not stream.unary:
            stream.call = self._handler.stream_started(stream)
        if end_stream and stream.stream_id in self.streams:
            self._remote_end(stream)
        return 0

    cdef int _read_head(self, H2Stream stream, list headers) except -1:
        """Read a request head; 0 when it is not one (no POST, no path)."""
        cdef bint is_post = False
        for name, value in headers:
            if name[:1] == b":":
                if name == b":path":
                    stream.path = value
                elif name == b":method":
                    is_post = value == b"POST"
                elif name != b":scheme" and name != b":authority":
                    return 0
            elif name == b"te" or name == b"content-type":
                continue
            elif name == b"grpc-timeout":
                stream.timeout = value
            elif name == b"grpc-encoding":
                stream.encoding = value
            elif name == b"grpc-accept-encoding":
                stream.accept_encoding = value
            else:
                stream.metadata.append((name, value))
        return 1 if is_post and stream.path is not None else 0

    cdef int _on_window_update(
        self, uint32_t stream_id, const uint8_t* payload, Py_ssize_t length
    ) except -1:
        cdef uint32_t increment
        cdef H2Stream stream
        if length != 4:
            self._fail(FRAME_SIZE_ERROR, "WINDOW_UPDATE not 4 bytes")
        increment = _u32(payload) & 0x7FFFFFFF
        if stream_id == 0:
            if increment == 0:
                self._fail(PROTOCOL_ERROR, "a WINDOW_UPDATE of 0")
            self._send_window += increment
            if self._send_window > MAX_WINDOW:
                self._fail(FLOW_CONTROL_ERROR, "the connection's window past 2**31-1")
            self._send_blocked()
            return 0
        stream = self._known_stream(stream_id, "WINDOW_UPDATE")
        if stream is None:
            return 0
        if increment == 0:
            self._stream_error(stream, PROTOCOL_ERROR)
            return 0
        stream.send_window += increment
        if stream.send_window > MAX_WINDOW:
            self._stream_error(stream, FLOW_CONTROL_ERROR)
            return 0
        if stream.pending_bytes or stream.pending_trailers is not None:
            self._send_blocked()
        return 0

    cdef int _on_settings(
        self, uint8_t flags, uint32_t stream_id, const uint8_t* payload, Py_ssize_t length
    ) except -1:
        cdef Py_ssize_t i
        cdef uint32_t key, value
        cdef int64_t delta
        cdef H2Stream stream
        if stream_id != 0:
            self._fail(PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & FLAG_ACK:
            if length:
                self._fail(FRAME_SIZE_ERROR, "a SETTINGS acknowledgement with a payload")
            return 0
        if length % 6:
            self._fail(FRAME_SIZE_ERROR, "SETTINGS not a multiple of 6 bytes")
        for i in range(0, length, 6):
            key = (<uint32_t>payload[i] << 8) | payload[i + 1]
            value = _u32(payload + i + 2)
            if key == SETTINGS_HEADER_TABLE_SIZE:
                # This side's blocks use no dynamic table; a change is acknowledged with a
                # size update to 0 at the start of the next one (RFC 7541 4.2).
                self._table_size_update = True
            elif key == SETTINGS_ENABLE_PUSH:
                if value > 1:
                    self._fail(PROTOCOL_ERROR, "SETTINGS_ENABLE_PUSH neither 0 nor 1")
            elif key == SETTINGS_INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    self._fail(FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE past 2**31-1")
                delta = <int64_t>value - self._peer_initial_window
                self._peer_initial_window = value
                for stream in self.streams.values():
                    stream.send_window += delta
                    if stream.send_window > MAX_WINDOW:
                        self._fail(FLOW_CONTROL_ERROR, "a stream's window past 2**31-1")
            elif key == SETTINGS_MAX_FRAME_SIZE:
                if value < DEFAULT_FRAME_SIZE or value > 0xFFFFFF:
                    self._fail(PROTOCOL_ERROR, "SETTINGS_MAX_FRAME_SIZE out of range")
                self._peer_max_frame_size = value
            # MAX_CONCURRENT_STREAMS (this side opens none), MAX_HEADER_LIST_SIZE (its
            # heads are a few short fields) and unknown settings need nothing.
        self._out.append(_frame(FRAME_SETTINGS, FLAG_ACK, 0, b""))
        self._send_blocked()
        return 0

    cdef int _on_ping(
        self, uint8_t flags, uint32_t stream_id, const uint8_t* payload, Py_ssize_t length
    ) except -1:
        if stream_id != 0:
            self._fail(PROTOCOL_ERROR, "PING on a stream")
        if length != 8:
            self._fail(FRAME_SIZE_ERROR, "PING not 8 bytes")
        opaque = PyBytes_FromStringAndSize(<const char*>payload, 8)
        if flags & FLAG_ACK:
            self._handler.ping_acked(opaque)
            return 0
        self._out.append(_frame(FRAME_PING, FLAG_ACK, 0, opaque))
        self._handler.ping_received()
        return 0

    cdef int _on_rst_stream(
        self, uint32_t stream_id, const uint8_t* payload, Py_ssize_t length
    ) except -1:
        cdef H2Stream stream
        if stream_id == 0:
            self._fail(PROTOCOL_ERROR, "RST_STREAM on stream 0")
        if length != 4:
            self._fail(FRAME_SIZE_ERROR, "RST_STREAM not 4 bytes")
        stream = self._known_stream(stream_id, "RST_STREAM")
        if stream is None:
            return 0
        stream.remote_closed = stream.local_closed = True
        call = stream.call
        self._drop(stream)
        if call is not None:
            call.reset_received(_u32(payload))
        return 0

    # ------------------------------------------------------------ flow control, in

    cdef int _grant_connection(self) except -1:
        if self._recv_unacked * 2 >= self._connection_window:
            self._queue_window_update(0, self._recv_unacked)
            self._recv_window += self._recv_unacked
            self._recv_unacked = 0
        return 0

    cdef int _grant_stream(self, H2Stream stream) except -1:
        if (
            not stream.window_held
            and not stream.remote_closed
            and stream.recv_unacked * 2 >= self._local_window
        ):
            self._queue_window_update(stream.stream_id, stream.recv_unacked)
            stream.recv_window += stream.recv_unacked
            stream.recv_unacked = 0
        return 0

    def hold_window(self, H2Stream stream) -> None:
        """Stop granting ``stream``'s window back: its reader is behind."""
        stream.window_held = True

    def release_window(self, H2Stream stream) -> None:
        """Grant back what ``stream`` received while held."""
        stream.window_held = False
        if stream.stream_id in self.streams:
            self._grant_stream(stream)

    cdef _queue_window_update(self, uint32_t stream_id, int64_t increment):
        cdef bytes frame = PyBytes_FromStringAndSize(NULL, 13)
        cdef uint8_t* p = <uint8_t*>PyBytes_AS_STRING(frame)
        _frame_head(p, 4, FRAME_WINDOW_UPDATE, 0, stream_id)
        _put_u32(p + 9, <uint32_t>increment)
        self._out.append(frame)

    # ------------------------------------------------------------ output

    def take_output(self):
        """The buffers to write now, in order (None when there are none)."""
        if not self._out:
            return None
        out = self._out
        self._out = []
        return out

    @property
    def has_output(self) -> bool:
        return bool(self._out)

    cdef bytes _size_update(self, bytes block):
        """``block`` as it goes out now: after a change of the peer's table size, the first
        block sent starts with a size update (to 0: this side indexes nothing)."""
        if self._table_size_update:
            self._table_size_update = False
            return b"\x20" + block
        return block

    cpdef send_unary(self, H2Stream stream, object message, bint compressed, int encoding):
        """Answer a call with one message and the OK status, the whole answer at once."""
        cdef Py_buffer view
        cdef bytes head_block
        cdef bytes out
        cdef uint8_t* p
        cdef Py_ssize_t size, total
        if stream.local_closed:
            return
        PyObject_GetBuffer(message, &view, PyBUF_SIMPLE)
        try:
            size = view.len
            if (
                size <= SMALL_MESSAGE
                and size + 5 <= self._peer_max_frame_size
                and size + 5 <= stream.send_window
                and size + 5 <= self._send_window
                and not stream.headers_sent
            ):
                # The common answer: HEADERS, DATA and the trailers in one buffer.
                head_block = self._size_update(_HEADS[encoding])
                total = 9 + len(head_block) + 9 + 5 + size + 9 + len(_TRAILERS_OK)
                out = PyBytes_FromStringAndSize(NULL, total)
                p = <uint8_t*>PyBytes_AS_STRING(out)
                _frame_head(p, len(head_block), FRAME_HEADERS, FLAG_END_HEADERS, stream.stream_id)
                memcpy(p + 9, PyBytes_AS_STRING(head_block), len(head_block))
                p += 9 + len(head_block)
                _frame_head(p, size + 5, FRAME_DATA, 0, stream.stream_id)
                p[9] = 1 if compressed else 0
                _put_u32(p + 10, <uint32_t>size)
                memcpy(p + 14, view.buf, size)
                p += 14 + size
                _frame_head(p, len(_TRAILERS_OK), FRAME_HEADERS,
                            FLAG_END_HEADERS | FLAG_END_STREAM, stream.stream_id)
                memcpy(p + 9, PyBytes_AS_STRING(_TRAILERS_OK), len(_TRAILERS_OK))
                stream.send_window -= size + 5
                self._send_window -= size + 5
                self._out.append(out)
                stream.headers_sent = True
                self._local_end(stream)
                return
        finally:
            PyBuffer_Release(&view)
        self.send_message(stream, message, compressed, encoding)
        self._end(stream, _TRAILERS_OK)

    cpdef Py_ssize_t send_message(
        self, H2Stream stream, object message, bint compressed, int encoding
    ) except -1:
        """Send one message on ``stream`` (its headers first, with ``encoding``'s, if they
        have not gone); returns the bytes the peer's windows hold back on the stream."""
        cdef uint8_t prefix[5]
        cdef Py_ssize_t size
        if stream.local_closed:
            return 0
        if not stream.headers_sent:
            self._queue_headers(stream, _HEADS[encoding], False)
        buffer = memoryview(message)
        if buffer.ndim != 1 or buffer.itemsize != 1:
            buffer = buffer.cast("B")
        size = len(buffer)
        prefix[0] = 1 if compressed else 0
        _put_u32(prefix + 1, <uint32_t>size)
        self._queue_data(stream, (<char*>prefix)[:5])
        if size:
            self._queue_data(stream, buffer)
        return stream.pending_bytes

    cpdef send_status(self, H2Stream stream, int code, str message):
        """End ``stream`` with a status: after its messages, or alone (a trailers-only
        answer, the status in the response head)."""
        if stream.local_closed:
            return
        block = status_trailers(code, message)
        if not stream.headers_sent and not stream.pending:
            self._queue_headers(stream, _STATUS_200 + _CONTENT_TYPE + block, True)
            self._local_end(stream)
            return
        self._end(stream, block)

    cdef _end(self, H2Stream stream, bytes trailers):
        if stream.pending:
            stream.pending_trailers = trailers
            return
        self._queue_headers(stream, trailers, True)
        self._local_end(stream)

    cdef _queue_headers(self, H2Stream stream, bytes block, bint end_stream):
        """One header block, in CONTINUATION frames if it is past the peer's frame size."""
        cdef Py_ssize_t size, first
        cdef uint8_t flags = FLAG_END_STREAM if end_stream else 0
        block = self._size_update(block)
        size = first = len(block)
        if first > self._peer_max_frame_size:
            first = self._peer_max_frame_size
        if first == size:
            flags |= FLAG_END_HEADERS
        self._out.append(_frame(FRAME_HEADERS, flags, stream.stream_id, block[:first]))
        while first < size:
            chunk = block[first:first + self._peer_max_frame_size]
            first += len(chunk)
            self._out.append(_frame(
                FRAME_CONTINUATION, FLAG_END_HEADERS if first == size else 0,
                stream.stream_id, chunk,
            ))
        stream.headers_sent = True

    cdef _queue_data(self, H2Stream stream, object data):
        """DATA for ``data`` (bytes or a byte view), as much as the windows let out now;
        the rest waits on the stream."""
        cdef Py_ssize_t sent
        if stream.pending:
            stream.pending.append(data)
            stream.pending_bytes += len(data)
            return
        sent = self._send_data(stream, data)
        if sent < len(data):
            stream.pending.append(data[sent:])
            stream.pending_bytes += len(data) - sent
            self._blocked.append(stream)

    cdef Py_ssize_t _send_data(self, H2Stream stream, object data) except -1:
        """Frame what the windows and the frame size allow of ``data``; the bytes sent."""
        cdef Py_ssize_t size = len(data), sent = 0, chunk
        cdef bytes head
        while sent < size:
            chunk = size - sent
            if chunk > self._peer_max_frame_size:
                chunk = self._peer_max_frame_size
            if chunk > stream.send_window:
                chunk = stream.send_window
            if chunk > self._send_window:
                chunk = self._send_window
            if chunk <= 0:
                break
            head = PyBytes_FromStringAndSize(NULL, 9)
            _frame_head(<uint8_t*>PyBytes_AS_STRING(head), chunk, FRAME_DATA, 0, stream.stream_id)
            self._out.append(head)
            self._out.append(data if chunk == size else data[sent:sent + chunk])
            sent += chunk
            stream.send_window -= chunk
            self._send_window -= chunk
        return sent

    cdef int _send_blocked(self) except -1:
        """Let out what the windows now allow, oldest blocked stream first; then tell the
        callers that waited for it."""
        cdef H2Stream stream
        cdef Py_ssize_t sent
        if not self._blocked:
            return 0
        blocked, self._blocked = self._blocked, []
        opened = []
        for stream in blocked:
            if stream.local_closed:
                continue
            while stream.pending and self._send_window > 0 and stream.send_window > 0:
                data = stream.pending[0]
                sent = self._send_data(stream, data)
                stream.pending_bytes -= sent
                if sent < len(data):
                    stream.pending[0] = data[sent:]
                    break
                del stream.pending[0]
            if stream.pending:
                self._blocked.append(stream)
                continue
            if stream.pending_trailers is not None:
                trailers, stream.pending_trailers = stream.pending_trailers, None
                self._queue_headers(stream, trailers, True)
                self._local_end(stream)
            if stream.wants_window and stream.call is not None:
                stream.wants_window = False
                opened.append(stream.call)
        for call in opened:
            call.window_opened()
        return 0

    cdef int _local_end(self, H2Stream stream) except -1:
        stream.local_closed = True
        if not stream.remote_closed:
            # Answered before the client finished sending: ask it to stop (RFC 9113 8.1).
            self._queue_rst(stream.stream_id, NO_ERROR)
            stream.remote_closed = True
        self._drop(stream)
        return 0

    cdef int _forget_if_done(self, H2Stream stream) except -1:
        if stream.local_closed and stream.remote_closed:
            self._drop(stream)
        return 0

    cdef _drop(self, H2Stream stream):
        """The stream is over: forget it, and what it held (its call too: the call refers
        to the stream, and that cycle would wait for a garbage collection)."""
        self.streams.pop(stream.stream_id, None)
        stream.call = None
        stream.pending = []
        stream.pending_bytes = 0
        stream.pending_trailers = None
        stream.message = None
        stream.unary_message = None

    # ------------------------------------------------------------ errors and control

    cdef _queue_rst(self, uint32_t stream_id, uint32_t code):
        cdef bytes frame = PyBytes_FromStringAndSize(NULL, 13)
        cdef uint8_t* p = <uint8_t*>PyBytes_AS_STRING(frame)
        _frame_head(p, 4, FRAME_RST_STREAM, 0, stream_id)
        _put_u32(p + 9, code)
        self._out.append(frame)

    cdef int _stream_error(self, H2Stream stream, uint32_t code) except -1:
        """RST_STREAM ``code``; the call, if the handler has one, is told."""
        self._queue_rst(stream.stream_id, code)
        stream.remote_closed = stream.local_closed = True
        call = stream.call
        self._drop(stream)
        if call is not None:
            call.reset_received(code)
        return 0

    cdef int _refuse(self, H2Stream stream, int status, str message) except -1:
        """A call this layer answers itself: the handler writes ``status``; what the client
        still sends on it is dropped."""
        stream.discarding = True
        stream.message = None
        stream.unary_message = None
        self._handler.stream_refused(stream, status, message)
        return 0

    def reset(self, H2Stream stream, int code=CANCEL) -> None:
        """Reset ``stream`` from this side (no status follows)."""
        if stream.local_closed and stream.remote_closed:
            return
        self._queue_rst(stream.stream_id, code)
        stream.remote_closed = stream.local_closed = True
        self._drop(stream)

    def ping(self, bytes opaque) -> None:
        if len(opaque) != 8:
            raise ValueError("a PING carries 8 bytes")
        self._out.append(_frame(FRAME_PING, 0, 0, opaque))

    def goaway(self, int code=NO_ERROR, bytes debug=b"") -> None:
        """Tell the client that no new call will be taken (calls up to ``last_stream_id``
        go on); with an error ``code`` the connection is over."""
        cdef uint8_t head[8]
        _put_u32(head, self.last_stream_id)
        _put_u32(head + 4, code)
        self._out.append(_frame(FRAME_GOAWAY, 0, 0, (<char*>head)[:8] + debug))
        self.draining = True
        if code != NO_ERROR:
            self.closed = True

    cdef int _fail(self, uint32_t code, str message) except -1:
        """A connection error: GOAWAY with ``code``, and stop."""
        if not self.closed:
            self.goaway(code, message.encode("utf-8", "replace")[:256])
        self.error = H2ConnectionError(code, message)
        raise self.error

    def close_streams(self) -> list:
        """The connection is gone: every open stream's call (those that have one), each
        stream closed here."""
        cdef H2Stream stream
        calls = []
        for stream in list(self.streams.values()):
            stream.remote_closed = stream.local_closed = True
            if stream.call is not None:
                calls.append(stream.call)
            stream.call = None
        self.streams.clear()
        self._blocked = []
        return calls
