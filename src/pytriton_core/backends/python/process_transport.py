"""What crosses between the server and a Python model's worker process (process mode).

Two parts, both used on each side:

* ``Channel``: length-prefixed control messages over Unix sockets, one socket pair per
  direction, with file descriptors passed alongside (``SCM_RIGHTS``). Messages carry names,
  datatypes, shapes, offsets and parameters; never tensor data. Those of plain built-in
  values (every message of the request path) are written by a compiled codec
  (``_native.message_codec``), anything else by pickle; each frame is sent and read by
  compiled calls there too (``send_frame``, ``receive_chunk``: one ``sendmsg`` or
  ``recvmsg`` each).
* ``Arena``: a shared-memory file (memfd on Linux, so no ``/dev/shm`` sizing is needed)
  mapped by both processes. Each arena has one writer: the server writes a batch's inputs
  into its arena, the worker writes responses into its own. Tensor data is copied into an
  arena once (a compiled ``memcpy``, ``_native.arena_io``; BYTES through the compiled codec)
  and read on the other side as views, or copied out once.

The worker's arena is reused as a bump allocator: the server counts in the arena's header
the bytes it has taken out, and the worker starts again from the beginning once everything
written has been taken, so responses sent from background threads (decoupled models) never
overwrite data the server has not read.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
import tempfile
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from pytriton_core import types
from pytriton_core._native.arena_io import ArenaMemory
from pytriton_core._native.bytes_codec import deserialize_bytes_tensor, serialize_bytes_tensor
from pytriton_core._native.message_codec import FORMAT as _PLAIN_FORMAT
from pytriton_core._native.message_codec import FRAME_HEADER_BYTES
from pytriton_core._native.message_codec import decode as _decode_plain
from pytriton_core._native.message_codec import encode as _encode_plain
from pytriton_core._native.message_codec import receive_chunk as _receive_chunk
from pytriton_core._native.message_codec import send_frame as _send_frame
from pytriton_core._native.message_codec import waiting_bytes as _waiting_bytes
from pytriton_core.errors import ServerError
from pytriton_core.inference.request import InferenceRequest, RequestedOutput
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.tensor import Tensor

# A message's header: its payload's length and how many descriptors came with it (the
# compiled ``send_frame`` writes it in the machine's order: both ends are one host).
_HEADER = struct.Struct("=II")
_HEADER_BYTES = _HEADER.size
assert _HEADER_BYTES == FRAME_HEADER_BYTES
ALIGN = 64  # where each tensor in an arena starts
HEADER_BYTES = 64  # the worker arena's header: bytes written, bytes taken (two u64)
MIN_ARENA_BYTES = 1 << 20
_READ = 16384  # one read: a control message mostly fits, and often the next one too


class ChannelClosed(Exception):
    """The other process went away (or closed its end)."""


class Channel:
    """One end of a control connection. ``send`` may be called from several threads;
    ``recv`` from one at a time.

    Each direction has a socket pair of its own: this end receives on one socket and sends
    on another. On one socket for both, the peer's every read of what this end sent would
    also wake a thread of this end blocked in ``recv`` on it (the kernel tells a Unix
    socket's sleepers that it can write again), for nothing: a wake-up, and on a busy
    machine a preemption, per message (measured: a worker woke 1.87 times per round trip
    instead of 0.95).

    ``recv`` reads up to ``_READ`` bytes at once: usually a whole message in one system
    call, and sometimes the next ones too (a worker with two batches in flight finds both
    in one read), which wait in ``_data`` for the following calls (``buffered``). The
    header says how many descriptors each message carries, so descriptors that a read
    brings early (the kernel hands them over with the first byte of their message) wait in
    ``_fds`` until their message is taken.
    """

    def __init__(self, receiving: socket.socket, sending: socket.socket) -> None:
        self._sock = receiving
        self._sending = sending
        # The sockets' descriptors, for the compiled frame calls (``send_frame``,
        # ``receive_chunk``); -1 once closed, so that a late call fails on it (EBADF)
        # rather than reach a descriptor number the process has given to another file.
        self._receiving_fd = receiving.fileno()
        self._sending_fd = sending.fileno()
        self._send_lock = threading.Lock()
        self._data = b""  # bytes received and not yet taken: from a message's start
        self._fds: deque[int] = deque()  # descriptors received and not yet taken, in order

    def fileno(self) -> int:
        return self._sock.fileno()

    def send(self, message: Any, fds: Sequence[int] = ()) -> None:
        # The compiled codec writes what the hot path sends (plain built-in values) at a
        # fraction of pickle's cost; whatever else a message holds goes by pickle.
        payload = _encode_plain(message)
        if payload is None:
            payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        # One system call for the header, the payload and any descriptors (no joined copy);
        # what a full socket buffer leaves over goes after it.
        length = len(payload)
        with self._send_lock:
            try:
                sent = _send_frame(self._sending_fd, payload, fds)
                if sent < _HEADER_BYTES + length:
                    self._sending.sendall((_HEADER.pack(length, len(fds)) + payload)[sent:])
            except OSError as exc:
                raise ChannelClosed(str(exc)) from None

    def buffered(self) -> bool:
        """Whether a whole message was already read: ``recv`` returns it without waiting
        (a reader woken by the socket takes these before it waits for the socket again)."""
        data = self._data
        if not data:  # the common case: the last read ended with its message
            return False
        size = len(data)
        if size < _HEADER_BYTES:
            return False
        length: int = _HEADER.unpack_from(data)[0]
        return size >= _HEADER_BYTES + length

    def recv(self) -> tuple[Any, list[int]]:
        """The next message and the descriptors that came with it (the caller owns them)."""
        data = self._data
        size = len(data)
        while size < _HEADER_BYTES:
            data += self._receive(_READ)
            size = len(data)
        length, count = _HEADER.unpack_from(data)
        end = _HEADER_BYTES + length
        if size < end:
            chunks = [data]
            while size < end:
                chunk = self._receive(max(end - size, _READ))
                chunks.append(chunk)
                size += len(chunk)
            data = b"".join(chunks)
        if length and data[_HEADER_BYTES] == _PLAIN_FORMAT:  # pickle's start with 0x80
            message = _decode_plain(data, _HEADER_BYTES, end)
        else:
            message = pickle.loads(memoryview(data)[_HEADER_BYTES:end])
        self._data = data[end:] if size > end else b""
        if not count:  # most messages carry no descriptors
            return message, []
        fds = self._fds
        if len(fds) < count:
            raise ChannelClosed("a message came without the descriptors it names")
        return message, [fds.popleft() for _ in range(count)]

    def arrived(self) -> bool:
        """Whether a whole message is here, reading what has arrived without waiting: a
        reader that expects an answer at once takes it without waiting for the loop to
        poll the socket (``recv`` then returns it)."""
        if self.buffered():
            return True
        # Mostly nothing yet: asked without a read that fails and its exception (a closed
        # socket's -1 answers 0).
        if not _waiting_bytes(self._receiving_fd):
            return False
        try:
            self._data += self._receive(_READ, True)
        except BlockingIOError:
            return False
        return self.buffered()

    def _receive(self, size: int, dont_wait: bool = False) -> bytes:
        try:
            # (descriptors that come with the bytes go to ``_fds``, close-on-exec)
            data = _receive_chunk(self._receiving_fd, size, dont_wait, self._fds)
        except BlockingIOError:
            raise
        except OSError as exc:
            raise ChannelClosed(str(exc)) from None
        if not data:
            raise ChannelClosed("connection closed")
        return data

    def close(self) -> None:
        self._receiving_fd = self._sending_fd = -1
        for sock in (self._sock, self._sending):
            try:
                sock.shutdown(socket.SHUT_RDWR)  # a thread blocked on it wakes up
            except OSError:
                pass
            sock.close()
        while self._fds:  # received for messages never taken
            os.close(self._fds.popleft())


# The sockets of a channel's other end: the one it receives on, the one it sends on.
ChannelSockets = tuple[socket.socket, socket.socket]


def channel_pair() -> tuple[Channel, ChannelSockets]:
    """The server's channel, and the sockets of the worker's end (``Channel(*sockets)``
    there): one socket pair per direction."""
    to_them, theirs_receiving = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours_receiving, theirs_sending = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return Channel(ours_receiving, to_them), (theirs_receiving, theirs_sending)


def _shared_file(size: int) -> int:
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("pytriton-python-arena", os.MFD_CLOEXEC)
    else:  # not Linux: an unlinked temporary file
        handle, path = tempfile.mkstemp(prefix="pytriton-python-arena-")
        os.unlink(path)
        fd = handle
    os.ftruncate(fd, size)
    return fd


# Where one tensor lies in an arena: (name, datatype wire name, shape, offset, nbytes). A
# plain tuple: it crosses in every control message, and pickles in a third of a frozen
# dataclass's time each way (measured: 1.2 vs 3.7 µs to dump, 1.1 vs 4.9 µs to load).
TensorRef = tuple[str, str, tuple[int, ...], int, int]


class Arena:
    """A shared mapping, written by one side (see the module docstring). The bytes move
    in compiled code (``_native.arena_io``): a ``memcpy`` each way, every offset checked
    against the mapping."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size
        # Unmapped when its last reference goes: the arrays viewing it hold it too.
        self._memory = ArenaMemory(fd, size)

    @classmethod
    def create(cls, size: int) -> Arena:
        return cls(_shared_file(max(size, MIN_ARENA_BYTES)), max(size, MIN_ARENA_BYTES))

    def close(self) -> None:
        if self.fd < 0:  # closed already
            return
        self._memory = None  # type: ignore[assignment]  # the mapping goes with its last view
        os.close(self.fd)
        self.fd = -1

    # ------------------------------------------------------------------ writing

    @staticmethod
    def encoded(tensor: Tensor) -> tuple[np.ndarray | bytes, int]:
        """The bytes to copy for ``tensor``: a contiguous array or the BYTES encoding."""
        if tensor.datatype.is_bytes:
            encoded: bytes = serialize_bytes_tensor(tensor.data)
            return encoded, len(encoded)
        array = np.ascontiguousarray(tensor.data)
        if array.dtype != tensor.datatype.numpy_dtype:
            array = array.astype(tensor.datatype.numpy_dtype)
        return array, array.nbytes

    def write(
        self, offset: int, tensor: Tensor, data: np.ndarray | bytes, nbytes: int
    ) -> TensorRef:
        self._memory.write(offset, data)
        return (tensor.name, tensor.datatype.wire_name, tensor.shape, offset, nbytes)

    # ------------------------------------------------------------------ reading

    def read(self, ref: TensorRef, copy: bool) -> Tensor:
        """The tensor ``ref`` names: a read-only view over the arena, or a copy of it."""
        name, wire_name, shape, offset, nbytes = ref
        datatype = types.BY_WIRE_NAME[wire_name]
        if datatype.is_bytes:
            raw_bytes = memoryview(self._memory)[offset : offset + nbytes]
            data = deserialize_bytes_tensor(raw_bytes, types.element_count(shape))
            data = data.reshape(shape)
        else:
            data = self._memory.array(offset, nbytes, datatype.numpy_dtype, shape, copy)
        return Tensor(name, datatype, data)

    # ---------------------------------------------------- the worker's counters

    def counters(self) -> tuple[int, int]:
        memory = self._memory
        return memory.written(), memory.taken()

    def set_written(self, value: int) -> None:
        self._memory.set_written(value)

    def add_taken(self, count: int) -> None:
        # Only the server writes this field; the worker only reads it.
        self._memory.add_taken(count)


def aligned(size: int) -> int:
    return (size + ALIGN - 1) // ALIGN * ALIGN


def layout(sizes: Sequence[int], start: int) -> tuple[list[int], int]:
    """Offsets for blocks of ``sizes`` from ``start``, and the end of the last one."""
    offsets = []
    position = start
    for size in sizes:
        offsets.append(position)
        position = aligned(position + size)
    return offsets, position


class ResponseWriter:
    """The writing side of an arena: places tensors, sends the message naming them, and
    grows the arena.

    The worker's writer (``wait_for_reader``) waits, when the arena is full, until the
    server has taken everything, then starts over. The server's writer (BLS answers to the
    worker, sent from the server's event loop, which must never wait on a worker) grows
    the arena instead; the worker gets the new one with the message that first uses it.
    """

    def __init__(self, channel: Channel, wait_for_reader: bool = True) -> None:
        self._channel = channel
        self._wait_for_reader = wait_for_reader
        self._lock = threading.Lock()
        self.arena = Arena.create(MIN_ARENA_BYTES)
        self._position = HEADER_BYTES
        self._written = 0  # bytes handed out since the start (the header's counter)

    def send(self, message: dict[str, Any], tensors: Sequence[Tensor]) -> None:
        """Write ``tensors`` and send ``message`` with ``message["outputs"]`` naming them;
        atomic, so the server reads messages in the order their data was written."""
        # Plain loops (each answer comes here): the blocks' places relative to the first
        # (the position is always aligned: every block ends on ``ALIGN``), then the copies.
        encoded = []
        relative = []
        need = 0
        for tensor in tensors:
            data, nbytes = Arena.encoded(tensor)
            encoded.append((tensor, data, nbytes))
            relative.append(need)
            need = (need + nbytes + ALIGN - 1) // ALIGN * ALIGN  # ``aligned``, inline
        with self._lock:
            fds: list[int] = []
            start = self._position
            if start + need > self.arena.size:
                grown_to = need
                if self._wait_for_reader:
                    self._wait_all_taken()
                elif self._all_taken():
                    self._position = HEADER_BYTES
                else:
                    grown_to = max(need, self.arena.size)  # grows past the unread data
                if HEADER_BYTES + grown_to > self.arena.size:
                    self._grow(HEADER_BYTES + grown_to)
                    fds = [self.arena.fd]
                start = HEADER_BYTES
            write = self.arena.write
            refs = []
            for (tensor, data, nbytes), offset in zip(encoded, relative, strict=True):
                refs.append(write(start + offset, tensor, data, nbytes))
            self._written += need
            self._position = start + need
            self.arena.set_written(self._written)
            message["outputs"] = refs
            message["span"] = need  # what the server adds to the taken count once read
            self._channel.send(message, fds)

    def _all_taken(self) -> bool:
        written, taken = self.arena.counters()
        return taken >= written

    def _wait_all_taken(self) -> None:
        """Wait until the server has taken everything written, then start over."""
        while not self._all_taken():
            time.sleep(0.0002)
        self._position = HEADER_BYTES

    def _grow(self, size: int) -> None:
        old = self.arena
        self.arena = Arena.create(max(size, old.size * 2))
        self.arena.set_written(self._written)
        self.arena.add_taken(self._written)
        old.close()


# ------------------------------------------------------------- requests and responses


# The headers below are plain tuples, not dicts: one crosses per request and per response,
# and a tuple pickles and unpickles in half a dict's time (no key strings; measured on a
# batch of one: 0.68 vs 1.33 µs to dump, 1.00 vs 1.87 µs to load).
# model name, version, id, requested outputs, parameters, timeout, correlation id, flags
RequestHeader = tuple[str, int, str, list[str] | None, dict[str, Any], int, int | str, int]
BatchItem = tuple[RequestHeader, int, list[TensorRef]]  # one request of a batch: its key
ResponseHeader = tuple[tuple[Any, str] | None, dict[str, Any], int]  # error, parameters, outputs
# What a worker answers for one execution of a bundle: the failure that failed it (None if
# it ran), its responses' headers, which requests the model rescheduled, and when the
# execution ended (monotonic ns: one clock for both processes).
ExecutionAnswer = tuple[tuple[Any, str] | None, list[ResponseHeader | None], list[bool], int]


def request_header(request: InferenceRequest) -> RequestHeader:
    """What a request is besides its tensors (``request_arguments`` on the other side)."""
    requested = request.requested_outputs
    return (
        request.model_name,
        request.model_version,
        request.id,
        None if requested is None else list(requested),
        dict(request.parameters),
        request.timeout_us,
        request.correlation_id,
        request.flags,
    )


# InferenceRequest's positional arguments from its model name to its flags.
RequestArguments = tuple[
    str, int, str, dict[str, Tensor], dict[str, RequestedOutput] | None, dict[str, Any], int,
    int, int | str, int,
]  # fmt: skip


def request_arguments(header: RequestHeader, inputs: Sequence[Tensor]) -> RequestArguments:
    """``InferenceRequest``'s positional arguments, from its name to its flags, for a
    ``request_header`` and its inputs (positional: a worker makes one request per request,
    and a call with keywords costs it the keywords' parse)."""
    name, version, request_id, requested, parameters, timeout_us, correlation_id, flags = header
    return (
        name,
        version,
        request_id,
        {tensor.name: tensor for tensor in inputs},
        None if requested is None else {output: RequestedOutput(output) for output in requested},
        parameters,
        0,  # priority: the server's scheduler has applied it
        timeout_us,
        correlation_id,
        flags,
    )


def response_header(response: InferenceResponse) -> ResponseHeader:
    """What a response is besides its tensors (``build_response`` on the other side)."""
    error = response.error
    return (
        None if error is None else (error.code, error.message),
        dict(response.parameters),
        len(response.outputs),
    )


def build_response(header: ResponseHeader, outputs: list[Tensor]) -> InferenceResponse:
    error, parameters, _count = header
    return InferenceResponse(
        outputs=outputs,
        parameters=parameters,
        error=None if error is None else ServerError.from_code(*error),
    )


def read_responses(
    arena: Arena, headers: Sequence[ResponseHeader | None], refs: Sequence[TensorRef], position: int
) -> tuple[list[InferenceResponse | None], int]:
    """The responses ``headers`` describe, their tensors copied out of ``arena`` from
    ``refs[position:]`` on, in the headers' order; and where the next execution's tensors
    start in ``refs`` (a bundle's answer names the tensors of all its executions). One
    loop, as ``build_response`` over ``take_tensors`` (every execution's answer comes
    here)."""
    built: list[InferenceResponse | None] = []
    for header in headers:
        if header is None:
            built.append(None)
            continue
        error, parameters, count = header
        outputs = []
        for ref in refs[position : position + count]:
            outputs.append(arena.read(ref, True))
        position += count
        built.append(  # positional: one per response
            InferenceResponse(
                outputs, parameters, None if error is None else ServerError.from_code(*error)
            )
        )
    return built, position


def take_responses(
    arena: Arena, headers: Sequence[ResponseHeader | None], message: dict[str, Any]
) -> list[InferenceResponse | None]:
    """The responses of one message (``read_responses`` over ``message["outputs"]``);
    counts their space as taken."""
    built, _end = read_responses(arena, headers, message["outputs"], 0)
    arena.add_taken(message["span"])
    return built


def take_tensors(arena: Arena, message: dict[str, Any]) -> list[Tensor]:
    """Copy out the tensors ``message`` names and count their space as taken."""
    tensors = [arena.read(ref, copy=True) for ref in message["outputs"]]
    arena.add_taken(message["span"])
    return tensors
