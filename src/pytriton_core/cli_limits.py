"""The limits one client may ask of the server, and TLS on HTTP (docs/security.md).

tritonserver has none of these flags but ``--http-max-input-size`` (in cli.py); TLS on HTTP
takes the style of its ``--grpc-use-ssl*`` flags, so both protocols read alike.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from pytriton_core.options import LimitOptions, TlsOptions


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got '{text}'")
    return value


# flag -> (the LimitOptions field it sets, how to read it, what it means)
_LIMIT_FLAGS: dict[str, tuple[str, Callable[[str], object], str]] = {
    "--http-max-header-size": (
        "http_max_header_size",
        _positive_int,
        "bytes of request line and headers; past it 431",
    ),
    "--http-max-connections": (
        "http_max_connections",
        _positive_int,
        "HTTP connections at once; a further one is answered 503 and closed",
    ),
    "--http-max-pipelined-requests": (
        "http_max_pipelined_requests",
        _positive_int,
        "requests one connection may queue behind the one running; past it the "
        "connection is not read until they drain",
    ),
    "--http-request-timeout": (
        "http_request_timeout_s",
        _seconds,
        "seconds a request's bytes (head and body) may take to arrive from its first "
        "byte; past it 408 and the connection closes (0: no limit)",
    ),
    "--http-max-json-depth": (
        "http_max_json_depth",
        _positive_int,
        "nesting of arrays and objects in a JSON body; past it 400",
    ),
    "--http-max-json-elements": (
        "http_max_json_elements",
        _positive_int,
        "values (array elements, object members) in a JSON body; past it 400",
    ),
    "--max-tensor-byte-size": (
        "max_tensor_byte_size",
        _positive_int,
        "bytes of one input tensor, from any protocol or shared memory; past it 400 / "
        "INVALID_ARGUMENT",
    ),
    "--max-tensor-element-count": (
        "max_tensor_element_count",
        _positive_int,
        "elements of one input tensor; past it 400 / INVALID_ARGUMENT",
    ),
    "--max-bytes-element-count": (
        "max_bytes_elements",
        _positive_int,
        "elements of one BYTES input, checked before they are decoded",
    ),
}
_LIMIT_DEST = "limit_"

# TLS on HTTP: flag -> TlsOptions field, parser
_HTTP_TLS_FLAGS: dict[str, tuple[str, Callable[[str], object]]] = {
    "--http-use-ssl": ("use_ssl", bool),
    "--http-use-ssl-mutual": ("use_ssl_mutual", bool),
    "--http-server-cert": ("server_cert", Path),
    "--http-server-key": ("server_key", Path),
    "--http-root-cert": ("root_cert", Path),
}
_TLS_DEST = "http_tls_"
_TLS_HELP = {
    "use_ssl": "serve HTTPS (needs --http-server-cert and --http-server-key); SIGHUP "
    "reloads the certificate files",
    "use_ssl_mutual": "serve HTTPS and require a client certificate that chains to "
    "--http-root-cert",
    "server_cert": "PEM file holding the server's certificate chain",
    "server_key": "PEM file holding the server's private key",
    "root_cert": "PEM file holding the CAs that client certificates must chain to",
}


def add_limit_arguments(parser: argparse.ArgumentParser, parse_bool: Callable[[str], bool]) -> None:
    defaults = LimitOptions()
    for flag, (option, parse, meaning) in _LIMIT_FLAGS.items():
        parser.add_argument(
            flag,
            dest=_LIMIT_DEST + option,
            type=parse,
            default=getattr(defaults, option),
            metavar="SECONDS" if parse is _seconds else "INT",
            help=f"{meaning} (default {getattr(defaults, option)})",
        )
    tls = TlsOptions()
    for flag, (option, parse) in _HTTP_TLS_FLAGS.items():
        parser.add_argument(
            flag,
            dest=_TLS_DEST + option,
            type=parse_bool if parse is bool else parse,
            default=getattr(tls, option),
            metavar="BOOL" if parse is bool else "PEM_FILE",
            help=_TLS_HELP[option],
        )
    parser.add_argument(
        "--debug-live-objects",
        type=parse_bool,
        default=False,
        metavar="BOOL",
        help="serve GET /v2/debug/live_objects: counts of live requests, responses, "
        "shared-memory views and mappings and pooled buffer bytes in use, for leak checks "
        "(each call runs a full garbage collection; default false)",
    )


def limit_options(args: argparse.Namespace) -> LimitOptions:
    return LimitOptions(
        **{option: getattr(args, _LIMIT_DEST + option) for option, _, _ in _LIMIT_FLAGS.values()}
    )


def http_tls_options(args: argparse.Namespace) -> TlsOptions:
    """Checked when the HTTP front end starts (missing files fail the start, as for gRPC)."""
    return TlsOptions(
        **{option: getattr(args, _TLS_DEST + option) for option, _ in _HTTP_TLS_FLAGS.values()}
    )
