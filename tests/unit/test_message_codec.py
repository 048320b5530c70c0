"""Process mode's control-message codec (``_native.message_codec``): generated messages of
plain built-in values come back equal and of the same types; anything else is refused
(and pickled by the channel); malformed payloads raise ``ValueError`` and never crash."""

from __future__ import annotations

import enum
import pickle
import random
import socket
from typing import Any

import numpy as np
import pytest

from pytriton_core import types
from pytriton_core._native.message_codec import FORMAT, decode, encode, waiting_bytes
from pytriton_core.backends.python.process_transport import (
    Arena,
    Channel,
    channel_pair,
    request_header,
)
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.tensor import Tensor


def _value(rng: random.Random, depth: int) -> Any:
    kinds = ["none", "bool", "int", "float", "str", "bytes"]
    if depth < 4:
        kinds += ["tuple", "list", "dict"] * 2
    kind = rng.choice(kinds)
    if kind == "none":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "int":
        return rng.choice([0, 1, -1, 2**63 - 1, -(2**63), rng.randrange(-(2**40), 2**40)])
    if kind == "float":
        return rng.choice([0.0, -1.5, 1e300, float("inf"), rng.random()])
    if kind == "str":
        return rng.choice(["", "INPUT0", "FP32", "é☃", "a\x00b", "x" * rng.randrange(300)])
    if kind == "bytes":
        return bytes(rng.randrange(256) for _ in range(rng.randrange(20)))
    items = [_value(rng, depth + 1) for _ in range(rng.randrange(6))]
    if kind == "tuple":
        return tuple(items)
    if kind == "list":
        return items
    return {f"k{i}": item for i, item in enumerate(items)}


def _same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (True is not 1, a tuple not a list)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple | list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) and a != a:
        return b != b
    return bool(a == b)


def test_generated_messages_come_back_equal_and_of_the_same_types() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        message = _value(rng, 0)
        payload = encode(message)
        assert payload is not None and payload[0] == FORMAT
        assert _same(decode(payload, 0, len(payload)), message)
        # Read where a channel finds it: after its header, before the next message.
        framed = b"12345678" + payload + b"next"
        assert _same(decode(framed, 8, 8 + len(payload)), message)


def test_a_string_met_again_is_written_once_and_read_as_one_object() -> None:
    name = "identity_model_" + "x" * 40
    message = [(name, "FP32", i) for i in range(20)]
    payload = encode(message)
    assert payload is not None and payload.count(name.encode()) == 1
    read = decode(payload, 0, len(payload))
    assert read == message and all(item[0] is read[0][0] for item in read)


class _Code(enum.Enum):
    A = "A"


class _Text(str):
    pass


class _Number(int):
    pass


@pytest.mark.parametrize(
    "value",
    [
        _Code.A,
        _Text("x"),
        _Number(3),
        np.int64(1),
        np.float32(1.0),
        np.zeros(2),
        bytearray(b"x"),
        memoryview(b"x"),
        2**63,
        -(2**63) - 1,
        {1, 2},
        1 + 2j,
        object(),
        "lone \ud800 surrogate",  # no UTF-8 for it; pickle keeps it
    ],
    ids=lambda v: type(v).__name__,
)
def test_anything_but_exact_built_in_values_is_refused(value: Any) -> None:
    # Written as its base type, it would come back changed (an enum as its value, an array
    # as bytes): refused, the channel pickles that message instead.
    assert encode({"kind": "x", "parts": [1, ("a", value)]}) is None


def test_nesting_past_the_limit_is_refused() -> None:
    deep: list[Any] = []
    inner = deep
    for _ in range(40):
        inner.append([])
        inner = inner[0]
    assert encode(deep) is None


def test_malformed_payloads_raise_and_never_crash() -> None:
    rng = random.Random(11)
    message = {"kind": "execute", "executions": [[("m", 1, "", None, {}, 0, 0, 0)] * 3]}
    payload = encode(message)
    assert payload is not None
    for cut in range(len(payload)):
        with pytest.raises(ValueError):
            decode(payload, 0, cut)
    with pytest.raises(ValueError):
        decode(payload + b"N", 0, len(payload) + 1)  # bytes after its end
    with pytest.raises(ValueError):
        decode(payload, 0, len(payload) + 1)  # past the buffer
    with pytest.raises(ValueError):
        decode(pickle.dumps(message), 0, 10)  # another format
    for hostile in (
        b"\x01l\xff\xff\xff\xff",
        b"\x01r\x00",
        b"\x01s\x05\x00\x00\x00\xff\xfe\xfd\xfc\xfb",
    ):
        with pytest.raises((ValueError, UnicodeDecodeError)):
            decode(hostile, 0, len(hostile))
    for _ in range(20000):
        mutated = bytearray(payload)
        for _ in range(rng.randrange(1, 4)):
            mutated[rng.randrange(1, len(mutated))] = rng.randrange(256)
        try:
            decode(bytes(mutated), 0, len(mutated))
        except (ValueError, TypeError, UnicodeDecodeError):
            pass


def test_a_bundle_message_is_plain_and_a_message_with_objects_still_crosses() -> None:
    tensor = Tensor("INPUT0", types.BY_WIRE_NAME["FP32"], np.ones((1, 16), np.float32))
    request = InferenceRequest("m", 1, "id", {"INPUT0": tensor}, None, {"p": 1, "q": "s"})
    arena = Arena.create(0)
    try:
        data, nbytes = Arena.encoded(tensor)
        ref = arena.write(64, tensor, data, nbytes)
    finally:
        arena.close()
    execute = {"kind": "execute", "executions": [[(request_header(request), 1, [ref])]]}
    assert encode(execute) is not None  # the request path's messages skip pickle
    ours, theirs = channel_pair()
    peer = Channel(*theirs)
    try:
        with_objects = {"kind": "heartbeat", "metrics": [_Code.A], "at": np.int64(5)}
        ours.send(execute)
        ours.send(with_objects)
        assert peer.recv() == (execute, [])
        received, _fds = peer.recv()
        assert received == with_objects and type(received["at"]) is np.int64
    finally:
        ours.close()
        peer.close()


def test_waiting_bytes_counts_what_a_socket_holds_unread() -> None:
    ours, theirs = socket.socketpair()
    try:
        assert waiting_bytes(ours.fileno()) == 0
        theirs.sendall(b"12345")
        assert waiting_bytes(ours.fileno()) == 5
        ours.recv(2)
        assert waiting_bytes(ours.fileno()) == 3
    finally:
        ours.close()
        theirs.close()
    assert waiting_bytes(-1) == 0  # a closed socket's fileno()
