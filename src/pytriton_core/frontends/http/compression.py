"""Content-Encoding of request bodies and Accept-Encoding of responses (gzip, deflate).

Large bodies are (de)compressed in a worker thread (zlib releases the GIL), so one client's
60 MiB answer does not stall every other connection on the event loop. "Large" is
``OFFLOAD_THRESHOLD`` bytes: level-6 deflate runs at roughly 30-100 MB/s here, so that much
costs the loop a few milliseconds, while a hand-off to a worker costs about 0.1 ms. Inflating
starts on the loop with that much output allowed and moves to a worker only if more remains
(a small compressed body can inflate a thousand-fold).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Sequence

import numpy as np

from pytriton_core.errors import InvalidArgumentError, UnsupportedError
from pytriton_core.frontends.http.messages import Buffer, HttpResponse

OFFLOAD_THRESHOLD = 256 << 10
_INFLATE_BLOCK = 1 << 20
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # gzip header and trailer around deflate
_COMPRESS_LEVEL = 6  # gzip's and zlib's default


class UnsupportedEncodingError(UnsupportedError):
    """A Content-Encoding we cannot decode; the answer names those we can."""

    accepted = b"gzip, deflate"


async def decode_body(body: Buffer, encoding: str | None, limit: int) -> Buffer:
    """The decompressed body; refuses to inflate past ``limit`` bytes."""
    if encoding is None or encoding in ("", "identity"):
        return body
    if encoding == "gzip":
        inflater = zlib.decompressobj(_GZIP_WBITS)
    elif encoding == "deflate":
        inflater = zlib.decompressobj()
    else:
        raise UnsupportedEncodingError("Unsupported compression type")
    try:
        first = inflater.decompress(body, min(limit + 1, OFFLOAD_THRESHOLD))
        data: Buffer = first
        if not inflater.eof and len(first) <= limit:
            data = await asyncio.to_thread(_inflate_rest, inflater, first, limit + 1)
    except zlib.error as exc:
        raise InvalidArgumentError(f"failed to decompress the request body: {exc}") from None
    if len(data) > limit or inflater.unconsumed_tail:
        raise InvalidArgumentError(
            f"decompressed request body exceeds the maximum input size of {limit} bytes"
        )
    return data


def _inflate_rest(inflater: zlib._Decompress, first: bytes, allowed: int) -> memoryview:
    """``first`` and what follows it, at most ``allowed`` bytes in all (in a worker).

    Inflated a block at a time into one buffer of ``allowed`` bytes: its pages that are never
    written are never touched, and no copy of the whole body holds the GIL (joining a
    60 MiB result in one piece stalls the event loop for tens of milliseconds)."""
    out = np.empty(allowed, dtype=np.uint8)
    out[: len(first)] = np.frombuffer(first, dtype=np.uint8)
    size = len(first)
    tail = inflater.unconsumed_tail
    while size < allowed and not inflater.eof:
        block = inflater.decompress(tail, min(_INFLATE_BLOCK, allowed - size))
        tail = inflater.unconsumed_tail
        if not block and not tail:
            break  # the input ended before the stream did: refused by the caller
        out[size : size + len(block)] = np.frombuffer(block, dtype=np.uint8)
        size += len(block)
    return out.data[:size]


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


def _compress(parts: Sequence[Buffer], encoding: str) -> bytes:
    wbits = _GZIP_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    deflater = zlib.compressobj(_COMPRESS_LEVEL, zlib.DEFLATED, wbits)
    chunks = [deflater.compress(part) for part in parts]
    chunks.append(deflater.flush())
    return b"".join(chunks)


async def encode_response(response: HttpResponse, accept_encoding: str | None) -> HttpResponse:
    if not accept_encoding:
        return response
    encoding = _preferred(accept_encoding)
    if encoding is None:
        return response
    if response.content_length >= OFFLOAD_THRESHOLD:
        compressed = await asyncio.to_thread(_compress, response.body, encoding)
    else:
        compressed = _compress(response.body, encoding)
    response.body = (compressed,)
    response.headers.append((b"Content-Encoding", encoding.encode()))
    return response
