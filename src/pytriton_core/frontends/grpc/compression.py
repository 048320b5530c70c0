"""gRPC message compression (``grpc-encoding``): requests in gzip or deflate are taken, and
responses are compressed at ``--grpc-infer-response-compression-level`` as gRPC core does.

gRPC core picks a response's algorithm from those the client accepts
(``grpc-accept-encoding``), ranked gzip then deflate: the first for ``low``, the middle one
for ``medium``, the last for ``high``. A message that does not shrink is sent as it is
(its compressed flag clear), as gRPC core does.
"""

from __future__ import annotations

import zlib

from pytriton_core.frontends.grpc.status import CallStatus, StatusCode
from pytriton_core.options import CompressionLevel

# Encodings on the wire and the numbers the compiled connection takes for them.
NONE, GZIP, DEFLATE = 0, 1, 2
_BY_NAME = {b"identity": NONE, b"gzip": GZIP, b"deflate": DEFLATE}
_RANKING = (GZIP, DEFLATE)
_WBITS = {GZIP: 16 + zlib.MAX_WBITS, DEFLATE: zlib.MAX_WBITS}


def request_encoding(header: bytes | None) -> int:
    """The ``grpc-encoding`` a call's messages come in; an unknown one fails the call with
    gRPC core's status."""
    if header is None:
        return NONE
    encoding = _BY_NAME.get(header.strip().lower())
    if encoding is None:
        raise CallStatus(StatusCode.INTERNAL, "Error parsing 'grpc-encoding' metadata")
    return encoding


def decompress(message: bytes, encoding: int, limit: int) -> bytes:
    """A message whose compressed flag is set, decompressed (at most ``limit`` bytes)."""
    if encoding == NONE:
        raise CallStatus(StatusCode.INTERNAL, "Compression bit set but no encoding configured")
    inflater = zlib.decompressobj(_WBITS[encoding])
    try:
        plain = inflater.decompress(message, limit + 1)
    except zlib.error as exc:
        raise CallStatus(StatusCode.INTERNAL, f"Failed to decompress the message: {exc}") from None
    if len(plain) > limit:
        raise CallStatus(
            StatusCode.RESOURCE_EXHAUSTED,
            f"Received message larger than max (more than {limit} bytes once decompressed)",
        )
    return plain


def response_encoding(level: CompressionLevel, accepted: bytes | None) -> int:
    """The encoding of a call's responses: none at level NONE, else gRPC core's choice."""
    if level is CompressionLevel.NONE or accepted is None:
        return NONE
    names = {name.strip().lower() for name in accepted.split(b",")}
    offered = [encoding for encoding in _RANKING if _name(encoding) in names]
    if not offered:
        return NONE
    if level is CompressionLevel.LOW:
        return offered[0]
    if level is CompressionLevel.MEDIUM:
        return offered[len(offered) // 2]
    return offered[-1]


def compress(message: bytes | memoryview, encoding: int) -> tuple[bytes | memoryview, bool]:
    """The message to send and whether it is compressed (only when that makes it smaller)."""
    deflater = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, _WBITS[encoding])
    packed = deflater.compress(message) + deflater.flush()
    if len(packed) < len(message):
        return packed, True
    return message, False


def _name(encoding: int) -> bytes:
    return b"gzip" if encoding == GZIP else b"deflate"
