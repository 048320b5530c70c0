"""BYTES tensor codec: tritonclient's Python codec and a struct-based framer as the oracles."""

from __future__ import annotations

import gc
import re
import struct
from typing import Any

import numpy as np
import pytest
from tritonclient.utils import deserialize_bytes_tensor as tc_deserialize
from tritonclient.utils import serialize_byte_tensor as tc_serialize

from pytriton_core._native.bytes_codec import (
    bytes_tensor_byte_size,
    count_bytes_elements,
    deserialize_bytes_tensor,
    serialize_bytes_tensor,
)

SAMPLES: list[bytes] = [
    b"",
    b"a",
    b"hello world",
    "héllo wörld".encode(),
    "日本語 😀".encode(),
    b"\xff\xfe\x00\x80",  # not UTF-8
    b"\x00",
    b"trailing\x00\x00",
    bytes(range(256)),
    b"x" * 1000,
]


def frame(elements: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


def object_array(values: list[Any], shape: tuple[int, ...] | None = None) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out if shape is None else out.reshape(shape)


def tritonclient_bytes(array: np.ndarray) -> bytes:
    if array.size == 0:
        return b""
    return bytes(tc_serialize(array).item())


# --- serialize --------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(10,), (2, 5), (5, 2), (1, 10), (10, 1), (2, 1, 5)], ids=str)
def test_serialize_object_bytes_matches_tritonclient(shape: tuple[int, ...]) -> None:
    array = object_array(SAMPLES, shape)
    out = serialize_bytes_tensor(array)
    assert type(out) is bytes
    assert out == tritonclient_bytes(array) == frame(SAMPLES)
    assert bytes_tensor_byte_size(array) == len(out)


def test_serialize_str_and_other_objects_match_tritonclient() -> None:
    values: list[Any] = ["", "ascii", "héllo", "日本語", "😀", 0, -17, 3.5, None, True, (1, 2)]
    array = object_array(values)
    assert serialize_bytes_tensor(array) == tritonclient_bytes(array)
    assert serialize_bytes_tensor(array) == frame([str(v).encode() for v in values])
    assert bytes_tensor_byte_size(array) == len(tritonclient_bytes(array))


def test_serialize_numpy_scalars_and_bytearray_elements_are_raw() -> None:
    # tritonclient would send the repr ("b'abc'") for these; the raw bytes are meant.
    values = [np.bytes_(b"abc"), np.str_("dé"), bytearray(b"\x00\xff"), memoryview(b"mv")]
    out = serialize_bytes_tensor(object_array(values))
    assert out == frame([b"abc", "dé".encode(), b"\x00\xff", str(values[3]).encode()])


def test_serialize_null_slots_read_as_none() -> None:
    # numpy treats NULL object slots as None; np.empty(object) already holds None
    assert serialize_bytes_tensor(np.empty(3, dtype=object)) == frame([b"None"] * 3)


@pytest.mark.parametrize(
    "make",
    [
        lambda a: a.T,
        lambda a: a[::2],
        lambda a: a[:, ::-1],
        lambda a: a[1:, 1::2],
        lambda a: np.broadcast_to(a[:1], (3, 4)),
        lambda a: np.lib.stride_tricks.as_strided(a, (2, 2), (0, a.strides[1])),
    ],
    ids=["transposed", "step", "reversed", "slice", "broadcast", "zero-stride"],
)
@pytest.mark.parametrize("kind", ["object", "S"])
def test_serialize_non_contiguous_uses_logical_c_order(make: Any, kind: str) -> None:
    base = object_array([s for s in SAMPLES[:8] for _ in (0,)] * 2, (4, 4))
    if kind == "S":
        base = base.astype("S")
    view = make(base)
    expected = [bytes(x) for x in view.reshape(-1).tolist()]
    assert serialize_bytes_tensor(view) == frame(expected)
    assert serialize_bytes_tensor(view) == tritonclient_bytes(view)
    assert bytes_tensor_byte_size(view) == len(frame(expected))


def test_serialize_fixed_width_bytes_strips_trailing_nuls_like_numpy() -> None:
    array = np.array([[b"a\x00b", b""], [b"\x00\x00x", b"full"]], dtype="S4")
    out = serialize_bytes_tensor(array)
    assert out == frame([b"a\x00b", b"", b"\x00\x00x", b"full"])
    assert out == tritonclient_bytes(array)


@pytest.mark.parametrize("byteorder", ["<", ">"])
def test_serialize_unicode_array_as_utf8(byteorder: str) -> None:
    values = ["", "a", "héllo", "日本語", "😀 x", "\x7f\x80\u07ff\u0800\uffff\U00010000\U0010ffff"]
    array = np.array(values, dtype=f"{byteorder}U12").reshape(2, 3)
    assert serialize_bytes_tensor(array) == frame([v.encode() for v in values])
    assert serialize_bytes_tensor(array.T) == frame([v.encode() for v in array.T.reshape(-1)])
    assert bytes_tensor_byte_size(array) == len(frame([v.encode() for v in values]))


def test_serialize_refuses_what_utf8_cannot_encode() -> None:
    with pytest.raises(UnicodeEncodeError):
        serialize_bytes_tensor(object_array(["ok", "\ud800"]))
    with pytest.raises(UnicodeEncodeError):
        serialize_bytes_tensor(np.array(["ok", "a\udfff"]))
    with pytest.raises(UnicodeEncodeError):
        bytes_tensor_byte_size(np.array(["\ud800"]))


@pytest.mark.parametrize(
    "array",
    [
        np.empty((0,), dtype=object),
        np.empty((3, 0), dtype=object),
        np.empty((0, 2), dtype="S3"),
        np.empty((0,), dtype="U3"),
    ],
    ids=str,
)
def test_serialize_empty_tensor(array: np.ndarray) -> None:
    assert serialize_bytes_tensor(array) == b""
    assert bytes_tensor_byte_size(array) == 0


def test_serialize_scalar_array() -> None:
    scalar = np.empty((), dtype=object)
    scalar[()] = b"one"
    assert serialize_bytes_tensor(scalar) == frame([b"one"])
    assert serialize_bytes_tensor(np.array("dé")) == frame(["dé".encode()])


@pytest.mark.parametrize(
    "bad", [np.zeros(3, np.float32), np.zeros(2, np.uint8), np.zeros(2, bool)], ids=str
)
def test_serialize_refuses_non_bytes_dtypes(bad: np.ndarray) -> None:
    with pytest.raises(TypeError, match="cannot serialize"):
        serialize_bytes_tensor(bad)
    with pytest.raises(TypeError):
        bytes_tensor_byte_size(bad)


def test_serialize_refuses_non_arrays() -> None:
    with pytest.raises(TypeError, match=r"numpy\.ndarray"):
        serialize_bytes_tensor([b"a"])  # type: ignore[arg-type]


def test_serialize_large_buffers_released_gil_path() -> None:
    # > 1 MiB exercises the paths that drop the GIL
    rng = np.random.default_rng(0)
    values = [
        bytes(rng.integers(1, 256, int(n), dtype=np.uint8)) for n in rng.integers(0, 64, 40000)
    ]
    fixed = np.array(values, dtype="S64")
    assert serialize_bytes_tensor(fixed) == frame([v.rstrip(b"\x00") for v in values])
    text = np.array([v.hex() + "é" for v in values[:20000]])
    assert serialize_bytes_tensor(text) == frame([t.encode() for t in text.tolist()])
    big = object_array([b"\x01" * (1 << 20), b"", b"\x02" * (3 << 20)])
    assert serialize_bytes_tensor(big) == tritonclient_bytes(big)


class _SneakyStr(str):
    def encode(self, *args: Any, **kwargs: Any) -> Any:
        return 12345  # not bytes


class _ReturnsSneaky:
    def __str__(self) -> str:
        return _SneakyStr("sneaky")


def test_serialize_ignores_overridden_encode_of_str_results() -> None:
    array = object_array([_ReturnsSneaky(), _SneakyStr("sub")])
    assert serialize_bytes_tensor(array) == frame([b"sneaky", b"sub"])


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix
def test_serialize_ndarray_subclass() -> None:
    matrix = np.asmatrix(object_array([b"a", b"bc", b"", b"d"], (2, 2)))
    assert serialize_bytes_tensor(matrix.T) == frame([b"a", b"", b"bc", b"d"])


class _Evil:
    """Its __str__ replaces the other elements of the array being serialized."""

    def __init__(self, victim: np.ndarray) -> None:
        self.victim = victim

    def __str__(self) -> str:
        self.victim[0] = None
        self.victim[2] = "replaced"
        gc.collect()
        return "evil"


def test_serialize_survives_str_that_mutates_the_array() -> None:
    array = np.empty(4, dtype=object)
    array[0] = bytes(range(200)) * 50  # only this array references it
    array[1] = _Evil(array)
    array[2] = "x" * 5000 + "é"
    array[3] = bytearray(b"tail")
    expected = frame([bytes(range(200)) * 50, b"evil", ("x" * 5000 + "é").encode(), b"tail"])
    assert serialize_bytes_tensor(array) == expected


# --- deserialize ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wrap",
    [bytes, bytearray, memoryview, lambda b: np.frombuffer(b, dtype=np.uint8)],
    ids=["bytes", "bytearray", "memoryview", "numpy"],
)
def test_deserialize_round_trip_matches_tritonclient(wrap: Any) -> None:
    encoded = frame(SAMPLES)
    out = deserialize_bytes_tensor(wrap(encoded))
    assert out.dtype == object and out.shape == (len(SAMPLES),)
    assert all(type(x) is bytes for x in out)
    assert out.tolist() == SAMPLES == tc_deserialize(encoded).tolist()
    assert deserialize_bytes_tensor(wrap(encoded), len(SAMPLES)).tolist() == SAMPLES
    assert count_bytes_elements(wrap(encoded)) == len(SAMPLES)


def test_deserialize_copies_out_of_the_buffer() -> None:
    buffer = bytearray(frame([b"abc"]))
    out = deserialize_bytes_tensor(buffer)
    buffer[4:7] = b"xyz"
    assert out[0] == b"abc"


def test_deserialize_empty_buffer() -> None:
    out = deserialize_bytes_tensor(b"")
    assert out.shape == (0,) and out.dtype == object
    assert deserialize_bytes_tensor(b"", 0).shape == (0,)
    assert count_bytes_elements(b"") == 0


def test_deserialize_only_empty_elements() -> None:
    assert deserialize_bytes_tensor(b"\x00" * 12).tolist() == [b"", b"", b""]
    assert deserialize_bytes_tensor(b"\x00" * 12, 3).tolist() == [b"", b"", b""]


def test_round_trip_through_both_directions() -> None:
    array = object_array(SAMPLES * 3, (3, len(SAMPLES)))
    out = deserialize_bytes_tensor(serialize_bytes_tensor(array), array.size)
    assert out.reshape(array.shape).tolist() == array.tolist()


@pytest.mark.parametrize(
    ("buffer", "message"),
    [
        (b"\x01", r"element 0 at byte offset 0 has a truncated length prefix \(1 of 4"),
        (b"\x01\x00\x00", r"truncated length prefix \(3 of 4 bytes\)"),
        (frame([b"ab"]) + b"\x00\x00", r"element 1 at byte offset 6 has a truncated"),
        (b"\x05\x00\x00\x00abcd", r"element 0 at byte offset 0 declares 5 bytes but only 4"),
        (frame([b"a"]) + b"\xff\xff\xff\xff" + b"zz", r"element 1 .* declares 4294967295 bytes"),
        (b"\xff\xff\xff\xff", r"declares 4294967295 bytes but only 0 remain"),
    ],
    ids=["1-byte-prefix", "3-byte-prefix", "second-prefix", "past-end", "huge", "huge-empty"],
)
def test_deserialize_malformed_framing(buffer: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        deserialize_bytes_tensor(buffer)
    with pytest.raises(ValueError, match=message):
        count_bytes_elements(buffer)


def test_deserialize_count_mismatch() -> None:
    encoded = frame([b"a", b"bc", b""])
    with pytest.raises(ValueError, match=r"holds 3 elements, expected 4"):
        deserialize_bytes_tensor(encoded, 4)
    with pytest.raises(ValueError, match=r"more than the expected 2 elements: 4 bytes left"):
        deserialize_bytes_tensor(encoded, 2)
    with pytest.raises(ValueError, match=r"more than the expected 0 elements"):
        deserialize_bytes_tensor(encoded, 0)
    with pytest.raises(ValueError, match=r"holds 0 elements, expected 1"):
        deserialize_bytes_tensor(b"", 1)
    with pytest.raises(ValueError, match="count must be -1"):
        deserialize_bytes_tensor(encoded, -2)


def test_deserialize_never_reads_past_a_view() -> None:
    # The declared length fits the underlying bytes object but not the view handed in.
    encoded = frame([b"abcdef"])
    view = memoryview(encoded)[:7]
    with pytest.raises(ValueError, match="declares 6 bytes but only 3 remain"):
        deserialize_bytes_tensor(view)
    assert deserialize_bytes_tensor(memoryview(encoded + b"junk")[: len(encoded)]).tolist() == [
        b"abcdef"
    ]


def test_deserialize_reads_any_buffer_as_raw_bytes() -> None:
    words = np.frombuffer(frame([b"abcd", b"wxyz"]), dtype=np.uint32)
    assert deserialize_bytes_tensor(words).tolist() == [b"abcd", b"wxyz"]


def test_deserialize_refuses_non_contiguous_buffers() -> None:
    strided = np.frombuffer(frame([b"ab"]) * 2, dtype=np.uint8)[::2]
    with pytest.raises((BufferError, ValueError), match="contiguous"):
        deserialize_bytes_tensor(strided)
    with pytest.raises(TypeError):
        deserialize_bytes_tensor("not a buffer")  # type: ignore[arg-type]


def test_deserialize_large_buffer_released_gil_path() -> None:
    elements = [bytes([i % 251]) * (i % 97) for i in range(60000)]
    encoded = frame(elements)
    assert len(encoded) > 1 << 20
    assert deserialize_bytes_tensor(encoded, len(elements)).tolist() == elements
    assert count_bytes_elements(encoded) == len(elements)
    with pytest.raises(ValueError, match=re.escape("declares")):
        count_bytes_elements(encoded[:-1])
