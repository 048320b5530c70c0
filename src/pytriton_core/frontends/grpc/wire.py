"""The protobuf wire format by hand, for the repeated ``bytes`` fields that carry tensors.

``ModelInferRequest.raw_input_contents`` and ``ModelInferResponse.raw_output_contents`` hold
the tensor data. Through protobuf each entry would be copied twice on the way in (into the
message's arena when parsing, into a new ``bytes`` on every access) and twice on the way out
(into the arena on append, into the output on serialize). Here the request's entries become
memoryviews over the received bytes, and a response's entries are written once, from the
tensors' own memory, after the serialized header message. Everything else in the messages
still goes through protobuf: the two forms concatenate, as the wire format allows.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytriton_core.inference.tensor_data import Buffer

_VARINT, _I64, _LEN, _START_GROUP, _END_GROUP, _I32 = 0, 1, 2, 3, 4, 5
_MAX_GROUP_DEPTH = 100  # protobuf's own recursion limit


class WireError(ValueError):
    """The received bytes are not a well-formed protobuf message."""


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while pos < len(data):
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            break
    raise WireError("malformed varint")


def split_field(data: bytes, field_number: int) -> tuple[Buffer, list[memoryview]]:
    """Split out every entry of a length-delimited field: (the rest, the entries as views).

    Only the top level of the message is walked, field by field (a handful of steps for an
    infer request); the rest is left for protobuf to parse.
    """
    wanted_tag = (field_number << 3) | _LEN
    view = memoryview(data)
    entries: list[memoryview] = []
    rest: list[memoryview] = []
    kept_from = 0  # start of the run of other fields not yet copied to ``rest``
    pos = 0
    end = len(data)
    while pos < end:
        field_start = pos
        tag, pos = _read_varint(data, pos)
        value_start = pos
        wire_type = tag & 7
        if wire_type == _LEN:
            length, pos = _read_varint(data, pos)
            value_start = pos
            pos += length
        elif wire_type == _VARINT:
            _, pos = _read_varint(data, pos)
        elif wire_type == _I64:
            pos += 8
        elif wire_type == _I32:
            pos += 4
        elif wire_type == _START_GROUP:  # an unknown (proto2) group: skipped, as protobuf does
            pos = _skip_group(data, pos, tag >> 3, 1)
        else:
            raise WireError(f"unsupported wire type {wire_type}")
        if pos > end:
            raise WireError("truncated message")
        if tag == wanted_tag:
            if kept_from < field_start:
                rest.append(view[kept_from:field_start])
            entries.append(view[value_start:pos])
            kept_from = pos
    if not entries:
        return data, entries
    if kept_from < end:
        rest.append(view[kept_from:end])
    if len(rest) == 1:
        return rest[0], entries  # the usual case: the entries come last
    return b"".join(rest), entries


def _skip_group(data: bytes, pos: int, field_number: int, depth: int) -> int:
    """The position after the end-group tag that closes ``field_number``'s group."""
    if depth > _MAX_GROUP_DEPTH:
        raise WireError("groups nested too deeply")
    end = len(data)
    while pos < end:
        tag, pos = _read_varint(data, pos)
        wire_type = tag & 7
        if wire_type == _VARINT:
            _, pos = _read_varint(data, pos)
        elif wire_type == _I64:
            pos += 8
        elif wire_type == _LEN:
            length, pos = _read_varint(data, pos)
            pos += length
        elif wire_type == _I32:
            pos += 4
        elif wire_type == _START_GROUP:
            pos = _skip_group(data, pos, tag >> 3, depth + 1)
        elif wire_type == _END_GROUP:
            if tag >> 3 != field_number:
                raise WireError("mismatched end of group")
            return pos
        else:
            raise WireError(f"unsupported wire type {wire_type}")
    raise WireError("truncated group")


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _size(buffer: Buffer) -> int:
    return buffer.nbytes if isinstance(buffer, memoryview) else len(buffer)


def field_prefix(field_number: int, size: int) -> bytes:
    """Tag and length of one length-delimited field entry of ``size`` bytes."""
    return _varint((field_number << 3) | _LEN) + _varint(size)


def append_field(parts: list[Buffer], field_number: int, entries: Sequence[Buffer]) -> None:
    """Add one entry of a length-delimited field per buffer (empty ones included)."""
    for entry in entries:
        parts.append(field_prefix(field_number, _size(entry)))
        parts.append(entry)


def nest(parts: list[Buffer], field_number: int) -> list[Buffer]:
    """The serialized message ``parts`` as a field of an enclosing message."""
    return [field_prefix(field_number, sum(_size(p) for p in parts)), *parts]
