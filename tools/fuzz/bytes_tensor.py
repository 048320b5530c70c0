"""Fuzz BYTES decoding (the compiled ``deserialize_bytes_tensor``) against a plain Python
oracle of the wire form: a 4-byte little-endian length, then that many bytes, repeated."""

from __future__ import annotations

import struct
import sys

import atheris
import instrumentation

# what this target fuzzes (instrumentation.py)
SUBJECT = ("pytriton_core._native.bytes_codec",)

with instrumentation.imports(SUBJECT):
    from common import fuzz

    from pytriton_core._native.bytes_codec import (
        count_bytes_elements,
        deserialize_bytes_tensor,
        serialize_bytes_tensor,
    )


def oracle(data: bytes) -> list[bytes] | None:
    elements, offset = [], 0
    while offset < len(data):
        if offset + 4 > len(data):
            return None
        (length,) = struct.unpack_from("<I", data, offset)
        offset += 4
        if offset + length > len(data):
            return None
        elements.append(data[offset : offset + length])
        offset += length
    return elements


def test_one_input(data: bytes) -> None:
    provider = atheris.FuzzedDataProvider(data)
    expected_count = provider.ConsumeIntInRange(-1, 64)
    payload = provider.ConsumeBytes(provider.remaining_bytes())
    want = oracle(payload)
    if want is not None and expected_count not in (-1, len(want)):
        want = None  # a count that does not match is refused too
    try:
        got = deserialize_bytes_tensor(payload, expected_count)
    except ValueError:
        assert want is None, (payload, expected_count, want)
        return
    assert want is not None and list(got) == want, (payload, got, want)
    assert bytes(serialize_bytes_tensor(got)) == payload
    assert count_bytes_elements(payload) == len(want)


if __name__ == "__main__":
    fuzz(test_one_input, SUBJECT)
    sys.exit(0)
