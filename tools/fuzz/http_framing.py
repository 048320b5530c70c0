"""Fuzz HTTP framing and request assembly (httptools + the compiled RequestAssembler).

Oracle: the requests assembled from the bytes in one piece by the parser alone equal those
assembled as the server assembles them (``feed`` taking plain requests without the parser,
and bodies itself), from the whole bytes and from the same bytes cut anywhere (Triton 2.51
mis-assembles a request line that arrives in pieces), and a refusal is the same refusal at
the same request.
"""

from __future__ import annotations

import sys

import atheris
import instrumentation

# what this target fuzzes (instrumentation.py)
SUBJECT = ("httptools", "pytriton_core._native.http_framing")

with instrumentation.imports(SUBJECT):
    import httptools
    from common import fuzz

    from pytriton_core._native.http_framing import RequestAssembler, framing_error

MAX_BODY = 4096
MAX_HEAD = 1024
PARSER_ONLY = MAX_BODY + 1  # no body reaches it: every one goes through on_body


def assemble(
    data: bytes, cuts: list[int], direct_body_min: int, take_plain: bool = True
) -> list[object]:
    """Requests (and the refusal that ended them) from ``data`` fed in pieces, as the
    server feeds them (``direct_body_min``: bodies from that size are taken by ``feed``;
    ``take_plain``: plain requests are read without the parser)."""
    assembler = RequestAssembler(MAX_BODY, MAX_HEAD, direct_body_min, take_plain)
    assembler.attach(httptools.HttpRequestParser(assembler))
    out: list[object] = []
    pieces, start = [], 0
    for cut in sorted(cuts):
        if start < cut < len(data):
            pieces.append(data[start:cut])
            start = cut
    pieces.append(data[start:])
    try:
        for piece in pieces:
            assembler.feed(piece)
            out.extend(_summary(r) for r in assembler.drain())
    except httptools.HttpParserError as exc:
        out.extend(_summary(r) for r in assembler.drain())
        refusal = framing_error(exc)
        out.append(("refused", refusal.status if refusal is not None else 400))
    finally:
        assembler.detach()
    return out


def _summary(request: object) -> tuple[object, ...]:
    r: object = request
    return (
        r.method,  # type: ignore[attr-defined]
        r.path,  # type: ignore[attr-defined]
        r.query,  # type: ignore[attr-defined]
        tuple(sorted(r.headers.items())),  # type: ignore[attr-defined]
        tuple(r.raw_headers),  # type: ignore[attr-defined]
        bytes(r.body),  # type: ignore[attr-defined]
        r.keep_alive,  # type: ignore[attr-defined]
        r.http_version,  # type: ignore[attr-defined]
    )


def test_one_input(data: bytes) -> None:
    provider = atheris.FuzzedDataProvider(data)
    cuts = [provider.ConsumeIntInRange(0, 512) for _ in range(provider.ConsumeIntInRange(0, 8))]
    provider_min = provider.ConsumeIntInRange(0, 63)
    payload = provider.ConsumeBytes(provider.remaining_bytes())
    # The parser alone (no request read without it, no body taken directly) is the reference.
    whole = assemble(payload, [], PARSER_ONLY, take_plain=False)
    for request in whole:
        if request[0] != "refused":
            assert len(request[4]) <= MAX_BODY  # type: ignore[arg-type]
    direct = assemble(payload, [], 1)
    assert whole == direct, (whole, direct)
    if cuts:
        pieces = assemble(payload, cuts, 1 + provider_min)
        assert whole == pieces, (whole, pieces, cuts)


if __name__ == "__main__":
    fuzz(test_one_input, SUBJECT)
    sys.exit(0)
