"""HTTP/2 for gRPC, the server's side of one connection (csrc/h2/h2_connection.pyx).

A state machine with no I/O: ``feed`` the received bytes, write ``take_output()``; the
handler (the asyncio protocol) and each stream's ``call`` get what the client asks for.
See the module's docstring for the handler's calls.
"""

from collections.abc import Iterable
from typing import Any, Final, Protocol, final

NO_ERROR: Final[int]
PROTOCOL_ERROR: Final[int]
INTERNAL_ERROR: Final[int]
FLOW_CONTROL_ERROR: Final[int]
STREAM_CLOSED: Final[int]
FRAME_SIZE_ERROR: Final[int]
REFUSED_STREAM: Final[int]
CANCEL: Final[int]
COMPRESSION_ERROR: Final[int]
ENHANCE_YOUR_CALM: Final[int]
CONNECTION_PREFACE: Final[bytes]

def status_trailers(code: int, message: str) -> bytes:
    """The header block of a status, ``grpc-message`` percent-encoded (no indexing)."""

class H2ConnectionError(Exception):
    """The peer broke the protocol; a GOAWAY with ``code`` is queued."""

    code: int

class HeaderDecoder(Protocol):
    def decode(self, block: bytes | bytearray | memoryview) -> list[tuple[bytes, bytes]]: ...

@final
class H2Stream:
    """One call: its head as the client sent it, and where it stands."""

    @property
    def stream_id(self) -> int: ...
    @property
    def path(self) -> bytes: ...
    @property
    def authority(self) -> bytes | None: ...
    @property
    def encoding(self) -> bytes | None: ...
    @property
    def accept_encoding(self) -> bytes | None: ...
    @property
    def timeout(self) -> bytes | None: ...
    @property
    def content_type(self) -> bytes | None: ...
    @property
    def metadata(self) -> list[tuple[bytes, bytes]]: ...
    call: Any  # the handler's object for the call
    wants_window: bool
    @property
    def held_back(self) -> int: ...
    @property
    def open(self) -> bool: ...

@final
class H2ServerConnection:
    """The server side of one HTTP/2 connection carrying gRPC calls."""

    streams: dict[int, H2Stream]
    @property
    def closed(self) -> bool: ...
    @property
    def draining(self) -> bool: ...
    @property
    def last_stream_id(self) -> int: ...
    @property
    def error(self) -> H2ConnectionError | None: ...
    @property
    def has_output(self) -> bool: ...
    def __init__(
        self,
        handler: Any,
        decoder: HeaderDecoder,
        streaming_paths: Iterable[bytes] = ...,
        *,
        max_concurrent_streams: int = 1024,
        max_receive_message_size: int = 2147483647,
        initial_window_size: int = 4194304,
        max_header_list_size: int = 16384,
    ) -> None: ...
    def feed(self, data: bytes | bytearray | memoryview) -> None: ...
    def take_output(self) -> list[bytes | memoryview] | None: ...
    def send_unary(
        self, stream: H2Stream, message: bytes | memoryview, compressed: bool, encoding: int
    ) -> None: ...
    def send_message(
        self, stream: H2Stream, message: bytes | memoryview, compressed: bool, encoding: int
    ) -> int: ...
    def send_status(self, stream: H2Stream, code: int, message: str) -> None: ...
    def hold_window(self, stream: H2Stream) -> None: ...
    def release_window(self, stream: H2Stream) -> None: ...
    def reset(self, stream: H2Stream, code: int = ...) -> None: ...
    def ping(self, opaque: bytes) -> None: ...
    def goaway(self, code: int = ..., debug: bytes = ...) -> None: ...
    def close_streams(self) -> list[Any]: ...
