"""Micro-benchmark of the HPACK codec (``_native.hpack``) on gRPC's header blocks, beside
python-hyper's pure-Python ``hpack`` package:

    python bench/micro_hpack.py [--seconds 0.5]

The request blocks are what a client's encoder sends for a unary ``ModelInfer`` (written by
``hpack``'s encoder as grpc C-core would: each field indexed, Huffman-coded): the first of a
connection (literals) and a repeated one (all indexed, one byte a field). The response's
header and trailer blocks are encoded in steady state (their fields in the dynamic table).
A figure is the fastest of several rounds, the codecs interleaved round by round.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable

import hpack

from pytriton_core._native.hpack import HpackDecoder, HpackEncoder

REQUEST = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", b"/inference.GRPCInferenceService/ModelInfer"),
    (b":authority", b"localhost:8001"),
    (b"content-type", b"application/grpc"),
    (b"te", b"trailers"),
    (b"grpc-accept-encoding", b"identity,deflate,gzip"),
    (b"user-agent", b"grpc-c++/1.x"),
    (b"grpc-timeout", b"100m"),
]
RESPONSE = [
    (b":status", b"200"),
    (b"content-type", b"application/grpc"),
    (b"grpc-accept-encoding", b"identity,deflate,gzip"),
]
TRAILERS = [(b"grpc-status", b"0")]
ROUNDS = 7


def best_ns(fns: list[Callable[[], object]], seconds: float) -> list[float]:
    """Each fn's fastest mean per call over ROUNDS, in nanoseconds."""
    counts = [timeit.Timer(fn).autorange()[0] for fn in fns]
    counts = [max(1, int(n * seconds / ROUNDS / 0.2)) for n in counts]  # autorange: >= 0.2 s
    best = [float("inf")] * len(fns)
    for _ in range(ROUNDS):
        for i, (fn, calls) in enumerate(zip(fns, counts, strict=True)):
            best[i] = min(best[i], timeit.Timer(fn).timeit(calls) / calls * 1e9)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="seconds per case and codec")
    args = parser.parse_args()

    client = hpack.Encoder()
    first, repeated = client.encode(REQUEST), client.encode(REQUEST)
    ours, theirs = HpackDecoder(), hpack.Decoder()
    for decoder in (ours.decode, lambda block: theirs.decode(block, raw=True)):
        assert [tuple(f) for f in decoder(first)] == [tuple(f) for f in decoder(repeated)]
    encoder, reference = HpackEncoder(), hpack.Encoder()
    for _ in range(2):  # into the tables
        encoder.encode(RESPONSE), encoder.encode(TRAILERS)
        reference.encode(RESPONSE), reference.encode(TRAILERS)

    cases: list[tuple[str, int, Callable[[], object], Callable[[], object]]] = [
        (
            "decode repeated request",
            len(repeated),
            lambda: ours.decode(repeated),
            lambda: theirs.decode(repeated, raw=True),
        ),
        (
            "decode first request",
            len(first),
            lambda: HpackDecoder().decode(first),
            lambda: hpack.Decoder().decode(first, raw=True),
        ),
        (
            "encode response headers",
            len(encoder.encode(RESPONSE)),
            lambda: encoder.encode(RESPONSE),
            lambda: reference.encode(RESPONSE),
        ),
        (
            "encode trailers",
            len(encoder.encode(TRAILERS)),
            lambda: encoder.encode(TRAILERS),
            lambda: reference.encode(TRAILERS),
        ),
    ]
    baseline = best_ns([HpackDecoder, hpack.Decoder], args.seconds)
    print(f"{'case':<26}{'bytes':>6}{'ours ns':>10}{'hpack ns':>11}{'ratio':>8}")
    for name, size, mine, oracle in cases:
        ns_ours, ns_theirs = best_ns([mine, oracle], args.seconds)
        print(f"{name:<26}{size:>6}{ns_ours:>10.0f}{ns_theirs:>11.0f}{ns_theirs / ns_ours:>7.0f}x")
    print(
        f"(the first-request rows include a new decoder: {baseline[0]:.0f} ns ours, "
        f"{baseline[1]:.0f} ns hpack's)"
    )


if __name__ == "__main__":
    main()
