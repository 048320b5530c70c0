"""Content-Encoding of request bodies and Accept-Encoding of responses (gzip, deflate)."""

from __future__ import annotations

import gzip
import zlib

from pytriton_core.errors import InvalidArgumentError, UnsupportedError
from pytriton_core.frontends.http.messages import Buffer, HttpResponse


class UnsupportedEncodingError(UnsupportedError):
    """A Content-Encoding we cannot decode; the answer names those we can."""

    accepted = b"gzip, deflate"


def decode_body(body: Buffer, encoding: str | None, limit: int) -> Buffer:
    """The decompressed body; refuses to inflate past ``limit`` bytes."""
    if encoding is None or encoding in ("", "identity"):
        return body
    if encoding == "gzip":
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif encoding == "deflate":
        inflater = zlib.decompressobj()
    else:
        raise UnsupportedEncodingError("Unsupported compression type")
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise InvalidArgumentError(f"failed to decompress the request body: {exc}") from None
    if len(data) > limit or inflater.unconsumed_tail:
        raise InvalidArgumentError(
            f"decompressed request body exceeds the maximum input size of {limit} bytes"
        )
    return data


def _preferred(accept: str) -> str | None:
    """The best of gzip/deflate by q-weight (ties: the first listed), None for identity."""
    best: tuple[float, str] | None = None
    for item in accept.split(","):
        name, _, params = item.strip().partition(";")
        name = name.strip().lower()
        weight = 1.0
        params = params.strip()
        if params.startswith("q="):
            try:
                weight = float(params[2:])
            except ValueError:
                continue
        if name in ("gzip", "deflate", "identity") and weight > 0:
            if best is None or weight > best[0]:
                best = (weight, name)
    return None if best is None or best[1] == "identity" else best[1]


def encode_response(response: HttpResponse, accept_encoding: str | None) -> HttpResponse:
    if not accept_encoding:
        return response
    encoding = _preferred(accept_encoding)
    if encoding is None:
        return response
    raw = b"".join(response.body)
    compressed = gzip.compress(raw, compresslevel=6) if encoding == "gzip" else zlib.compress(raw)
    response.body = (compressed,)
    response.headers.append((b"Content-Encoding", encoding.encode()))
    return response
