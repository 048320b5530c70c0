"""tritonserver's ``--http-restricted-api`` and ``--grpc-restricted-protocol`` flags."""

from __future__ import annotations

import argparse

from pytriton_core.options import ApiCategory, RestrictedOptions
from pytriton_core.restricted import (
    GRPC_HEADER_PREFIX,
    RestrictionSyntaxError,
    parse_restrictions,
)

_CATEGORIES = ", ".join(category.value for category in ApiCategory)


def add_restricted_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--http-restricted-api",
        action="append",
        default=[],
        metavar="<apis>:<key>=<value>",
        help="HTTP requests to these APIs (comma-separated) must carry the header <key> with "
        f"<value>, else 403 (repeatable). APIs: {_CATEGORIES}",
    )
    add(
        "--grpc-restricted-protocol",
        action="append",
        default=[],
        metavar="<protocols>:<key>=<value>",
        help="gRPC calls of these protocols must carry the metadata "
        f"'{GRPC_HEADER_PREFIX}<key>' with <value>, else UNAVAILABLE (repeatable). "
        f"Protocols: {_CATEGORIES}",
    )


def restricted_options(args: argparse.Namespace) -> RestrictedOptions:
    try:
        return RestrictedOptions(
            http=parse_restrictions(args.http_restricted_api, "http-restricted-api", "api"),
            grpc=parse_restrictions(
                args.grpc_restricted_protocol,
                "grpc-restricted-protocol",
                "protocol",
                GRPC_HEADER_PREFIX,
            ),
        )
    except RestrictionSyntaxError as exc:
        raise SystemExit(f"error: {exc}") from None
