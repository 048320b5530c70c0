"""The compiled HTTP/2 state machine of the gRPC front end (csrc/h2/h2_connection.pyx),
without sockets: python-hyper's ``h2`` plays the client (an independent implementation
of the protocol, as strict as gRPC's), ``hyperframe`` crafts the frames a broken client
would send."""

from __future__ import annotations

import struct
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
from hyperframe import frame as hf

from pytriton_core._native import h2_connection as native
from pytriton_core._native.hpack import HpackDecoder

STREAMING = b"/x.Y/Stream"
UNARY = "/x.Y/Unary"
STREAM_HEAD = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", STREAMING.decode()),
    (":authority", "localhost"),
]


class Call:
    def __init__(self) -> None:
        self.messages: list[tuple[bytes, bool]] = []
        self.ended = False
        self.resets: list[int] = []
        self.windows = 0

    def message_received(self, message: bytes, compressed: bool) -> None:
        self.messages.append((message, compressed))

    def end_received(self) -> None:
        self.ended = True

    def reset_received(self, code: int) -> None:
        self.resets.append(code)

    def window_opened(self) -> None:
        self.windows += 1


class Handler:
    """Records what the connection hands over; answers unary calls when told to."""

    def __init__(self) -> None:
        self.unary: list[tuple[native.H2Stream, bytes | None, bool]] = []
        self.streams: list[native.H2Stream] = []
        self.refused: list[tuple[int, str]] = []
        self.pings = 0
        self.acks: list[bytes] = []
        self.goaways: list[tuple[int, int]] = []
        self.answer: Any = None  # called with (stream, message) from unary_call

    def unary_call(self, stream: native.H2Stream, message: bytes | None, compressed: bool) -> Any:
        self.unary.append((stream, message, compressed))
        if self.answer is not None:
            self.answer(stream, message)
            return None
        return Call()

    def stream_started(self, stream: native.H2Stream) -> Call:
        self.streams.append(stream)
        return Call()

    def stream_refused(self, stream: native.H2Stream, status: int, message: str) -> None:
        self.refused.append((status, message))
        connection.send_status(stream, status, message)

    def ping_received(self) -> None:
        self.pings += 1

    def ping_acked(self, opaque: bytes) -> None:
        self.acks.append(opaque)

    def goaway_received(self, last_stream_id: int, code: int) -> None:
        self.goaways.append((last_stream_id, code))


connection: native.H2ServerConnection  # the one under test (Handler.stream_refused answers on it)


class Pair:
    """A client (h2) and the server connection, joined by hand."""

    def __init__(self, **settings: int) -> None:
        global connection
        self.handler = Handler()
        self.server = native.H2ServerConnection(
            self.handler, HpackDecoder(max_header_list_size=16384), {STREAMING}, **settings
        )
        connection = self.server
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self.client = h2.connection.H2Connection(config)
        self.client.initiate_connection()
        self.events: list[Any] = []
        self.pump()

    def pump(self, chunk: int = 0) -> list[Any]:
        """Move bytes both ways until neither side has more; the client's new events."""
        new: list[Any] = []
        while True:
            data = self.client.data_to_send()
            if data:
                if chunk:
                    for i in range(0, len(data), chunk):
                        self.server.feed(data[i : i + chunk])
                else:
                    self.server.feed(data)
            out = self.server.take_output()
            if not data and not out:
                break
            if out:
                new += self.client.receive_data(b"".join(bytes(b) for b in out))
        self.events += new
        return new

    def request(self, path: str, message: bytes | None, end: bool = True, **headers: str) -> int:
        stream_id = self.client.get_next_available_stream_id()
        head = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "localhost"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            *headers.items(),
        ]
        self.client.send_headers(stream_id, head, end_stream=message is None and end)
        if message is not None:
            self.send(stream_id, grpc_message(message), end)
        return stream_id

    def send(self, stream_id: int, data: bytes, end: bool = False) -> None:
        """DATA in frames of the size the server takes."""
        size = self.client.max_outbound_frame_size
        chunks = [data[i : i + size] for i in range(0, len(data), size)] or [b""]
        for i, chunk in enumerate(chunks):
            self.client.send_data(stream_id, chunk, end_stream=end and i == len(chunks) - 1)


def grpc_message(message: bytes, compressed: bool = False) -> bytes:
    return struct.pack(">BI", int(compressed), len(message)) + message


def of(events: list[Any], kind: type) -> list[Any]:
    return [event for event in events if isinstance(event, kind)]


def test_a_unary_call_is_answered_with_headers_data_and_trailers() -> None:
    pair = Pair()
    pair.handler.answer = lambda stream, message: pair.server.send_unary(
        stream, message[::-1], False, 0
    )
    stream_id = pair.request(UNARY, b"hello", **{"x-key": "v", "grpc-timeout": "5S"})
    events = pair.pump()
    ((stream, message, compressed),) = pair.handler.unary
    assert (stream.path, message, compressed) == (UNARY.encode(), b"hello", False)
    assert stream.metadata == [(b"x-key", b"v")] and stream.timeout == b"5S"
    (response,) = of(events, h2.events.ResponseReceived)
    assert dict(response.headers)[b":status"] == b"200"
    assert dict(response.headers)[b"content-type"] == b"application/grpc"
    data = b"".join(e.data for e in of(events, h2.events.DataReceived))
    assert data == grpc_message(b"olleh")
    (trailers,) = of(events, h2.events.TrailersReceived)
    assert dict(trailers.headers)[b"grpc-status"] == b"0"
    assert of(events, h2.events.StreamEnded)[0].stream_id == stream_id
    assert pair.server.streams == {}


def test_bytes_fed_one_at_a_time_make_the_same_calls() -> None:
    pair = Pair()
    pair.request(UNARY, b"x" * 70_000)  # several DATA frames
    pair.pump(chunk=1)
    ((_, message, _),) = pair.handler.unary
    assert message == b"x" * 70_000


def test_a_large_answer_waits_for_the_clients_window() -> None:
    pair = Pair()
    pair.client.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1000})
    answer = bytes(range(256)) * 4096  # 1 MiB, past both of the client's windows
    pair.handler.answer = lambda stream, message: pair.server.send_unary(stream, answer, False, 0)
    stream_id = pair.request(UNARY, b"")
    received = bytearray()
    for _ in range(10_000):
        events = pair.pump()
        for event in of(events, h2.events.DataReceived):
            received += event.data
            pair.client.acknowledge_received_data(event.flow_controlled_length, stream_id)
        if of(pair.events, h2.events.StreamEnded):
            break
    assert bytes(received) == grpc_message(answer)
    assert dict(of(pair.events, h2.events.TrailersReceived)[0].headers)[b"grpc-status"] == b"0"


def test_a_stream_gets_each_message_then_its_end_and_answers_with_a_status() -> None:
    pair = Pair()
    stream_id = pair.client.get_next_available_stream_id()
    pair.client.send_headers(stream_id, STREAM_HEAD)
    pair.pump()
    (stream,) = pair.handler.streams
    call = stream.call
    for word in (b"one", b"two"):
        pair.client.send_data(stream_id, grpc_message(word))
        pair.pump()
    pair.client.end_stream(stream_id)
    pair.pump()
    assert call.messages == [(b"one", False), (b"two", False)] and call.ended
    pair.server.send_message(stream, b"reply", False, 0)
    pair.server.send_status(stream, 3, "bad ünïcode 100%")
    events = pair.pump()
    data = b"".join(e.data for e in of(events, h2.events.DataReceived))
    assert data == grpc_message(b"reply")
    trailers = dict(of(events, h2.events.TrailersReceived)[0].headers)
    assert trailers[b"grpc-status"] == b"3"
    assert trailers[b"grpc-message"] == b"bad %C3%BCn%C3%AFcode 100%25"


def test_an_error_before_any_message_is_a_trailers_only_answer() -> None:
    pair = Pair()
    pair.handler.answer = lambda stream, message: pair.server.send_status(stream, 12, "nope")
    pair.request(UNARY, b"")
    events = pair.pump()
    (response,) = of(events, h2.events.ResponseReceived)
    assert (b"grpc-status", b"12") in response.headers
    assert of(events, h2.events.StreamEnded)


def test_a_client_reset_reaches_the_call() -> None:
    pair = Pair()
    stream_id = pair.request(UNARY, b"hi")
    pair.pump()
    ((stream, _, _),) = pair.handler.unary
    stream.call = call = Call()
    pair.client.reset_stream(stream_id, error_code=8)
    pair.pump()
    assert call.resets == [8] and pair.server.streams == {}
    pair.server.send_unary(stream, b"late", False, 0)  # nobody to answer: nothing sent
    assert pair.server.take_output() is None


def test_streams_past_the_limit_are_refused() -> None:
    pair = Pair(max_concurrent_streams=1)
    pair.request(UNARY, b"a")
    pair.pump()
    # h2 keeps to the server's limit: the second stream's HEADERS are written by hand.
    block = pair.client.encoder.encode([(":method", "POST"), (":path", UNARY)])
    pair.server.feed(raw_frame(1, END_HEADERS | 1, 3, block))
    assert frames(pair.server) == [(3, 3, native.REFUSED_STREAM)]  # RST_STREAM on stream 3
    assert len(pair.handler.unary) == 1


def test_a_message_past_the_size_limit_is_resource_exhausted() -> None:
    pair = Pair(max_receive_message_size=10)
    pair.request(UNARY, b"x" * 11)
    events = pair.pump()
    assert pair.handler.refused == [(8, "Received message larger than max (11 vs. 10)")]
    assert pair.handler.unary == []
    assert (b"grpc-status", b"8") in of(events, h2.events.ResponseReceived)[0].headers


def test_pings_are_acknowledged_and_reported() -> None:
    pair = Pair()
    pair.client.ping(b"12345678")
    events = pair.pump()
    assert of(events, h2.events.PingAckReceived)[0].ping_data == b"12345678"
    assert pair.handler.pings == 1
    pair.server.ping(b"87654321")
    pair.pump()
    assert pair.handler.acks == [b"87654321"]


def test_a_held_window_is_granted_back_on_release() -> None:
    pair = Pair()
    stream_id = pair.client.get_next_available_stream_id()
    pair.client.send_headers(stream_id, STREAM_HEAD)
    pair.pump()
    (stream,) = pair.handler.streams
    pair.server.hold_window(stream)
    window = pair.client.local_flow_control_window(stream_id)
    pair.send(stream_id, b"\0" * (window - 1000))
    pair.pump()
    assert pair.client.local_flow_control_window(stream_id) == 1000
    pair.server.release_window(stream)
    pair.pump()
    # The stream's window is whole again (the connection's is granted at half, apart).
    assert pair.client._get_stream_by_id(stream_id).outbound_flow_control_window == window


def test_a_change_of_the_clients_table_size_is_acknowledged_in_the_next_block() -> None:
    pair = Pair()
    pair.client.update_settings({h2.settings.SettingCodes.HEADER_TABLE_SIZE: 0})
    pair.pump()
    pair.handler.answer = lambda stream, message: pair.server.send_unary(stream, b"", False, 0)
    pair.request(UNARY, b"")
    events = pair.pump()  # h2 refuses a block without the update: this would raise
    assert of(events, h2.events.TrailersReceived)


def test_an_answer_before_the_request_ended_resets_the_rest_of_it() -> None:
    pair = Pair()
    stream_id = pair.client.get_next_available_stream_id()
    pair.client.send_headers(stream_id, STREAM_HEAD)
    pair.pump()
    (stream,) = pair.handler.streams
    pair.server.send_status(stream, 0, "")
    events = pair.pump()
    assert of(events, h2.events.StreamReset)[0].error_code == native.NO_ERROR
    assert pair.server.streams == {}


# ---------------------------------------------------------------- broken clients


def raw_server() -> tuple[native.H2ServerConnection, Handler]:
    global connection
    handler = Handler()
    connection = native.H2ServerConnection(handler, HpackDecoder(), {STREAMING})
    connection.take_output()
    connection.feed(native.CONNECTION_PREFACE + hf.SettingsFrame(0).serialize())
    return connection, handler


def frames(server: native.H2ServerConnection) -> list[tuple[int, int, int]]:
    """The frames the server sent: (type, stream id, error code of RST_STREAM/GOAWAY)."""
    out = b"".join(bytes(b) for b in server.take_output() or ())
    found = []
    while out:
        frame, length = hf.Frame.parse_frame_header(memoryview(out[:9]))
        frame.parse_body(memoryview(out[9 : 9 + length]))
        found.append((frame.type, frame.stream_id, int(getattr(frame, "error_code", 0))))
        out = out[9 + length :]
    return found


def goaway_code(server: native.H2ServerConnection) -> int:
    (code,) = [code for kind, _, code in frames(server) if kind == hf.GoAwayFrame.type]
    return code


def raw_frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes((kind, flags))
        + struct.pack(">I", stream_id)
        + payload
    )


END_HEADERS = 0x4


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (raw_frame(0, 0, 0, b"x"), native.PROTOCOL_ERROR),  # DATA on stream 0
        (raw_frame(0, 0, 7, b"x"), native.PROTOCOL_ERROR),  # on a stream never opened
        (raw_frame(1, END_HEADERS, 2, b"\x82"), native.PROTOCOL_ERROR),  # an even stream
        (raw_frame(1, END_HEADERS, 1, b"\xff\xff\xff\xff"), native.COMPRESSION_ERROR),
        (raw_frame(8, 0, 0, struct.pack(">I", 0x7FFFFFFF)), native.FLOW_CONTROL_ERROR),
        (raw_frame(8, 0, 0, struct.pack(">I", 0)), native.PROTOCOL_ERROR),
        (raw_frame(9, 0, 1, b""), native.PROTOCOL_ERROR),  # CONTINUATION, no block open
        (raw_frame(5, 0, 1, b"\0\0\0\2"), native.PROTOCOL_ERROR),  # PUSH_PROMISE
        (raw_frame(6, 0, 0, b"short"), native.FRAME_SIZE_ERROR),  # PING not 8 bytes
        (raw_frame(4, 0, 0, b"\0\4\xff\xff\xff\xff"), native.FLOW_CONTROL_ERROR),
        (raw_frame(4, 0, 0, b"\0\5\0\0\0\1"), native.PROTOCOL_ERROR),  # frame size 1
    ],
)
def test_protocol_errors_end_the_connection_with_their_code(frame: bytes, code: int) -> None:
    server, _ = raw_server()
    with pytest.raises(native.H2ConnectionError):
        server.feed(frame)
    assert server.closed
    assert goaway_code(server) == code
    server.feed(b"anything")  # a closed connection reads nothing more


def test_a_frame_past_the_size_limit_is_a_frame_size_error() -> None:
    server, _ = raw_server()
    with pytest.raises(native.H2ConnectionError):
        server.feed(raw_frame(0, 0, 1, b"x" * 16385))
    assert goaway_code(server) == native.FRAME_SIZE_ERROR


def test_a_client_without_the_preface_is_refused() -> None:
    server = native.H2ServerConnection(Handler(), HpackDecoder(), set())
    server.take_output()
    with pytest.raises(native.H2ConnectionError):
        server.feed(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert goaway_code(server) == native.PROTOCOL_ERROR


def test_a_header_block_in_continuation_frames() -> None:
    server, handler = raw_server()
    encoder = __import__("hpack").Encoder()
    block = encoder.encode(
        [(":method", "POST"), (":scheme", "http"), (":path", UNARY), ("x-long", "v" * 100)]
    )
    server.feed(hf.HeadersFrame(1, block[:10], flags=["END_STREAM"]).serialize())
    server.feed(hf.ContinuationFrame(1, block[10:40]).serialize())
    assert handler.unary == []
    server.feed(hf.ContinuationFrame(1, block[40:], flags=["END_HEADERS"]).serialize())
    ((stream, message, _),) = handler.unary
    assert stream.metadata == [(b"x-long", b"v" * 100)] and message is None


def test_padded_frames() -> None:
    server, handler = raw_server()
    block = (
        __import__("hpack")
        .Encoder()
        .encode([(":method", "POST"), (":scheme", "http"), (":path", UNARY)])
    )
    headers = hf.HeadersFrame(1, block, flags=["END_HEADERS", "PADDED", "PRIORITY"])
    headers.pad_length = 7
    server.feed(headers.serialize())
    data = hf.DataFrame(1, grpc_message(b"padded"), flags=["END_STREAM", "PADDED"])
    data.pad_length = 20
    server.feed(data.serialize())
    ((_, message, _),) = handler.unary
    assert message == b"padded"


def test_status_trailers_percent_encode_the_message() -> None:
    decoded = dict(HpackDecoder().decode(native.status_trailers(13, "a%b\nc")))
    assert decoded == {b"grpc-status": b"13", b"grpc-message": b"a%25b%0Ac"}


def test_a_message_longer_than_the_window_arrives_whole() -> None:
    # 1 MiB through a 1000-byte window: the message grows as its data comes, and the
    # window is granted back as it does.
    pair = Pair(initial_window_size=1000)
    message = bytes(range(256)) * 4096
    stream_id = pair.client.get_next_available_stream_id()
    pair.client.send_headers(stream_id, [*STREAM_HEAD[:2], (":path", UNARY), (":authority", "x")])
    data = grpc_message(message)
    while data:
        window = pair.client.local_flow_control_window(stream_id)
        assert window > 0, "the server granted no window back"
        chunk, data = data[: min(window, 16384)], data[min(window, 16384) :]
        pair.client.send_data(stream_id, chunk, end_stream=not data)
        pair.pump()
    ((_, received, _),) = pair.handler.unary
    assert received == message
