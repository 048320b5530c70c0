"""What crosses between the server and a process-mode worker (``process_transport``): every
datatype through an arena and back, and control messages over real socket pairs, with and
without descriptors, small (one read) and large (read on past the first chunk); a reader
blocked on one end is not woken when the other end reads what it sent."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import deque
from pathlib import Path

import numpy as np
import pytest

from pytriton_core import types
from pytriton_core._native.message_codec import FRAME_HEADER_BYTES, receive_chunk, send_frame
from pytriton_core.backends.python.process_transport import (
    HEADER_BYTES,
    Arena,
    Channel,
    ChannelClosed,
    ResponseWriter,
    build_response,
    channel_pair,
    layout,
    request_arguments,
    request_header,
    response_header,
    take_responses,
)
from pytriton_core.errors import InvalidArgumentError
from pytriton_core.inference.request import InferenceRequest, RequestedOutput
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.tensor import Tensor


def _sample(datatype: types.DataType) -> np.ndarray:
    if datatype.is_bytes:
        return np.array([b"a", b"", b"\x00bc"], dtype=object).reshape(3, 1)
    return np.arange(6).astype(datatype.numpy_dtype).reshape(2, 3)


@pytest.mark.parametrize("datatype", types.DATATYPES, ids=lambda d: d.wire_name)
@pytest.mark.parametrize("copy", [False, True])
def test_every_datatype_crosses_an_arena_unchanged(datatype: types.DataType, copy: bool) -> None:
    arena = Arena.create(0)
    try:
        tensor = Tensor("T", datatype, _sample(datatype))
        data, nbytes = Arena.encoded(tensor)
        (offset,), _end = layout([nbytes], 64)
        read = arena.read(arena.write(offset, tensor, data, nbytes), copy)
        assert read.datatype is datatype
        assert read.data.shape == tensor.data.shape
        assert read.data.tolist() == tensor.data.tolist()
        if not datatype.is_bytes:
            assert read.data.dtype == datatype.numpy_dtype
            # A view over the arena is read-only; a copy is the caller's own.
            assert read.data.flags.writeable is copy
        del read
    finally:
        arena.close()


def _pair() -> tuple[Channel, Channel]:
    ours, theirs = channel_pair()
    return ours, Channel(*theirs)


def test_a_view_keeps_the_mapping_after_its_arena_is_closed() -> None:
    arena = Arena.create(0)
    tensor = Tensor("T", types.BY_WIRE_NAME["FP32"], np.arange(16, dtype=np.float32).reshape(1, 16))
    data, nbytes = Arena.encoded(tensor)
    view = arena.read(arena.write(64, tensor, data, nbytes), False).data
    copied = arena.read((tensor.name, "FP32", (1, 16), 64, nbytes), True).data
    arena.close()
    arena.close()  # a second close does nothing (the descriptor may be another's by now)
    # Unmapped only once the view goes: reading it after the close reads the arena's bytes.
    assert view.tolist() == copied.tolist() == tensor.data.tolist()
    assert view.base is not None and copied.base is None
    with pytest.raises(ValueError):  # and it stays read-only
        view.flags.writeable = True


@pytest.mark.parametrize(
    ("offset", "nbytes", "shape"),
    [
        (-64, 64, (16,)),  # before the mapping
        ((1 << 20) - 32, 64, (16,)),  # runs past its end
        (1 << 20, 4, (1,)),  # starts at its end
        (64, 60, (16,)),  # bytes that do not hold the shape
        (64, 1 << 62, (1 << 60,)),  # a size past the end, however large
        (64, 64, (-1, -16)),  # negative dimensions
    ],
)
def test_reads_outside_the_arena_or_not_matching_their_shape_fail(
    offset: int, nbytes: int, shape: tuple[int, ...]
) -> None:
    arena = Arena.create(0)
    try:
        for copy in (False, True):
            with pytest.raises(ValueError):
                arena.read(("T", "FP32", shape, offset, nbytes), copy)
    finally:
        arena.close()


def test_writes_outside_the_arena_fail_and_write_nothing() -> None:
    arena = Arena.create(0)
    try:
        tensor = Tensor("T", types.BY_WIRE_NAME["UINT8"], np.full(64, 7, dtype=np.uint8))
        data, nbytes = Arena.encoded(tensor)
        for offset in (-1, (1 << 20) - 63, 1 << 20):
            with pytest.raises(ValueError):
                arena.write(offset, tensor, data, nbytes)
        with pytest.raises(ValueError):  # not contiguous: never handed over as it is
            arena.write(64, tensor, np.arange(8.0)[::2], 32)
        with pytest.raises(ValueError):  # objects are pointers, not data
            arena.write(64, tensor, np.array([b"a"], dtype=object), 8)
        end = arena.read(("T", "UINT8", (64,), (1 << 20) - 64, 64), True).data
        assert not end.any()
    finally:
        arena.close()


def test_an_arena_larger_than_its_file_is_refused() -> None:
    # The size comes from the other process: mapped past the file's end, a read there
    # would kill this one with SIGBUS.
    arena = Arena.create(0)
    try:
        with pytest.raises(ValueError, match="over a file of"):
            Arena(arena.fd, arena.size + 4096)
    finally:
        arena.close()


def test_the_worker_arena_counters_start_at_zero_and_add_up() -> None:
    arena = Arena.create(0)
    try:
        assert arena.counters() == (0, 0)
        arena.set_written(4096)
        arena.add_taken(1024)
        arena.add_taken(3072)
        assert arena.counters() == (4096, 4096)
        # The other process's mapping of the same file sees them.
        other = Arena(arena.fd, arena.size)
        assert other.counters() == (4096, 4096)
        del other
    finally:
        arena.close()


@pytest.mark.parametrize("size", [10, 100_000])  # within one read, and past it
def test_messages_and_descriptors_cross_a_socket_pair(size: int) -> None:
    ours, theirs = _pair()
    read_end, write_end = os.pipe()
    try:
        ours.send({"kind": "execute", "blob": b"x" * size}, [write_end])
        message, fds = theirs.recv()
        assert message == {"kind": "execute", "blob": b"x" * size}
        assert len(fds) == 1
        os.write(fds[0], b"!")  # the descriptor received is the pipe's write end
        os.close(fds[0])
        assert os.read(read_end, 1) == b"!"
        theirs.send(("done", size))
        assert ours.recv() == (("done", size), [])
    finally:
        for fd in (read_end, write_end):
            os.close(fd)
        ours.close()
        theirs.close()


def test_a_closed_peer_is_channel_closed() -> None:
    ours, theirs = _pair()
    theirs.close()
    with pytest.raises(ChannelClosed):
        ours.recv()
    ours.close()


def test_messages_read_together_come_out_one_by_one_with_their_descriptors() -> None:
    """Two batches in flight: both messages (and descriptors sent with the second) wait in
    the socket and one read takes them; each comes out of ``recv`` with its own."""
    ours, theirs = _pair()
    pipes = [os.pipe(), os.pipe()]
    try:
        ours.send("one")
        ours.send({"two": b"y" * 50_000}, [pipes[0][1]])  # past the first read
        ours.send("three", [pipes[1][1]])
        ours.send("four")
        assert theirs.recv() == ("one", [])
        message, fds = theirs.recv()
        assert message == {"two": b"y" * 50_000}
        assert len(fds) == 1
        os.write(fds[0], b"2")
        os.close(fds[0])
        message, fds = theirs.recv()
        assert message == "three"
        assert len(fds) == 1
        os.write(fds[0], b"3")
        os.close(fds[0])
        assert theirs.recv() == ("four", [])
        assert not theirs.buffered()
        assert os.read(pipes[0][0], 1) == b"2"
        assert os.read(pipes[1][0], 1) == b"3"
    finally:
        for fd in (fd for pair in pipes for fd in pair):
            os.close(fd)
        ours.close()
        theirs.close()


def test_frames_refuse_too_many_descriptors_and_report_the_socket_s_state() -> None:
    """The compiled frame calls: at most 8 descriptors a frame; a read that must not wait
    and finds nothing raises BlockingIOError; the peer's end reads b""; a closed channel
    refuses to send (its descriptors are forgotten, never reused)."""
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    read_end, write_end = os.pipe()
    fds: deque[int] = deque()
    try:
        with pytest.raises(ValueError, match="at most 8"):
            send_frame(left.fileno(), b"x", [write_end] * 9)
        with pytest.raises(BlockingIOError):
            receive_chunk(right.fileno(), 64, True, fds)
        assert send_frame(left.fileno(), b"abc", [write_end]) == FRAME_HEADER_BYTES + 3
        frame = receive_chunk(right.fileno(), 64, False, fds)
        assert frame[FRAME_HEADER_BYTES:] == b"abc" and len(fds) == 1
        os.close(fds.pop())
        left.close()
        assert receive_chunk(right.fileno(), 64, False, fds) == b""
    finally:
        for fd in (read_end, write_end):
            os.close(fd)
        right.close()
    ours, theirs = _pair()
    ours.close()
    with pytest.raises(ChannelClosed):
        ours.send("late")
    theirs.close()


def test_a_second_small_message_waits_in_the_buffer() -> None:
    ours, theirs = _pair()
    ours.send("one")
    ours.send("two")  # both wait in the socket: one read takes them together
    assert theirs.recv() == ("one", [])
    assert theirs.buffered()  # a reader woken by the socket takes it without a wake-up
    assert theirs.recv() == ("two", [])
    assert not theirs.buffered()
    ours.close()
    theirs.close()


def test_request_and_response_headers_round_trip() -> None:
    tensor = Tensor("IN", types.BY_WIRE_NAME["FP32"], np.zeros(2, np.float32))
    request = InferenceRequest(
        model_name="m",
        model_version=3,
        id="r1",
        inputs={"IN": tensor},
        requested_outputs={"OUT": RequestedOutput("OUT")},
        parameters={"p": 1},
        timeout_us=5,
        correlation_id="seq",
        flags=1,
    )
    again = InferenceRequest(*request_arguments(request_header(request), [tensor]))
    for name in ("model_name", "model_version", "id", "parameters", "timeout_us", "flags"):
        assert getattr(again, name) == getattr(request, name)
    assert again.correlation_id == "seq"
    assert list(again.inputs) == ["IN"]
    assert again.requested_outputs is not None and list(again.requested_outputs) == ["OUT"]

    error = InvalidArgumentError("bad")
    rebuilt = build_response(response_header(InferenceResponse.failed(error)), [])
    assert rebuilt.error is not None
    assert (rebuilt.error.code, rebuilt.error.message) == (error.code, "bad")
    ok = InferenceResponse(outputs=[tensor], parameters={"q": "v"})
    header = response_header(ok)
    assert header[2] == 1
    assert build_response(header, [tensor]).parameters == {"q": "v"}


def _answer_tensors() -> list[Tensor]:
    fp32, bytes_type = types.BY_WIRE_NAME["FP32"], types.BY_WIRE_NAME["BYTES"]
    return [
        Tensor("A", fp32, np.arange(3, dtype=np.float32)),
        Tensor("EMPTY", fp32, np.zeros((0, 4), np.float32)),
        Tensor("B", bytes_type, np.array([b"x", b"", b"yz"], dtype=object)),
        Tensor("C", types.BY_WIRE_NAME["INT64"], np.arange(100, dtype=np.int64).reshape(4, 25)),
    ]


def _same_response(got: InferenceResponse | None, expected: InferenceResponse | None) -> None:
    if expected is None:
        assert got is None
        return
    assert got is not None
    assert got.parameters == expected.parameters
    assert (got.error is None) == (expected.error is None)
    if expected.error is not None and got.error is not None:
        assert (got.error.code, got.error.message) == (expected.error.code, expected.error.message)
    assert [(t.name, t.datatype, t.data.shape) for t in got.outputs] == [
        (t.name, t.datatype, t.data.shape) for t in expected.outputs
    ]
    for mine, theirs in zip(got.outputs, expected.outputs, strict=True):
        assert mine.data.dtype == theirs.data.dtype
        assert mine.data.tolist() == theirs.data.tolist()  # BYTES: the values, not pointers


def test_an_answer_reads_back_as_the_general_path_builds_it() -> None:
    """The writer places an answer's tensors where ``layout`` does (one after the other, on
    ``ALIGN``), and ``take_responses`` gives the responses that ``build_response`` over
    each tensor read gives, counting the answer's span as taken in the shared header."""
    worker_end, server_end = _pair()
    writer = ResponseWriter(worker_end)
    mapped = Arena(os.dup(writer.arena.fd), writer.arena.size)  # the server's own mapping
    try:
        tensors = _answer_tensors()
        responses: list[InferenceResponse | None] = [
            InferenceResponse(outputs=tensors[:2], parameters={"p": 1}),
            None,
            InferenceResponse.failed(InvalidArgumentError("no")),
            InferenceResponse(outputs=tensors[2:]),
        ]
        headers = [None if r is None else response_header(r) for r in responses]
        sizes = [Arena.encoded(t)[1] for t in tensors]
        start, written = HEADER_BYTES, 0
        for _ in range(2):  # the second answer follows the first in the arena
            writer.send({"kind": "done", "responses": headers}, tensors)
            message, fds = server_end.recv()
            assert fds == []
            offsets, end = layout(sizes, start)
            assert [ref[3] for ref in message["outputs"]] == offsets
            assert [ref[4] for ref in message["outputs"]] == sizes
            assert message["span"] == end - start
            written += end - start
            assert mapped.counters() == (written, written - message["span"])
            general = [mapped.read(ref, copy=True) for ref in message["outputs"]]
            counts = [0 if h is None else h[2] for h in headers]
            expected = [
                None if h is None else build_response(h, general[sum(counts[:i]) :][: h[2]])
                for i, h in enumerate(headers)
            ]
            got = take_responses(mapped, headers, message)
            for mine, theirs in zip(got, expected, strict=True):
                _same_response(mine, theirs)
            assert mapped.counters() == (written, written)
            start = end
    finally:
        mapped.close()
        worker_end.close()
        server_end.close()


def _voluntary_switches(thread_id: int) -> int:
    status = Path(f"/proc/self/task/{thread_id}/status").read_text()
    return int(status.split("voluntary_ctxt_switches:")[1].split()[0])


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc (Linux)")
def test_an_answer_read_does_not_wake_its_sender_waiting_for_the_next_message() -> None:
    """A worker answers each batch and waits in ``recv`` for the next one; the server's
    read of that answer must not wake it (on one socket for both directions each would:
    the worker would sleep twice per message instead of once)."""
    ours, theirs = _pair()
    rounds = 200
    thread_id: list[int] = []
    switches: list[int] = []

    def answer_each() -> None:
        thread_id.append(threading.get_native_id())
        before = _voluntary_switches(thread_id[0])
        for _ in range(rounds):
            theirs.send(theirs.recv()[0])
        switches.append(_voluntary_switches(thread_id[0]) - before)

    worker = threading.Thread(target=answer_each)
    worker.start()
    try:
        for index in range(rounds):
            ours.send(index)
            time.sleep(0.0005)  # it answers, then waits for the next one
            assert ours.recv()[0] == index
    finally:
        worker.join(10)
        ours.close()
        theirs.close()
    # One sleep per message (waiting for it), not two.
    assert switches[0] < 1.5 * rounds


def test_arrived_says_whether_a_whole_message_is_here_without_waiting() -> None:
    ours, peer = _pair()
    try:
        assert not ours.arrived()  # nothing sent: no read, no wait
        peer.send({"kind": "done", "n": 1})
        deadline = time.monotonic() + 5
        while not ours.arrived():
            assert time.monotonic() < deadline
        assert ours.recv() == ({"kind": "done", "n": 1}, [])
        assert not ours.arrived()
        peer.close()
        assert not ours.arrived()  # the end is the loop's reader's to see
        with pytest.raises(ChannelClosed):
            ours.recv()
    finally:
        ours.close()
