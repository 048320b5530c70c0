"""Restricted APIs: ``--http-restricted-api`` and ``--grpc-restricted-protocol``.

tritonserver's syntax and semantics: ``<api>[,<api>...]:<key>=<value>``, repeatable, each
API in at most one group. A request to a restricted API must carry the header ``<key>``
(gRPC: the metadata key ``triton-grpc-protocol-<key>``) with exactly ``<value>``; otherwise
HTTP answers 403 and gRPC UNAVAILABLE, with Triton's messages. Nothing is restricted by
default, as in Triton.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import MappingProxyType

from pytriton_core.options import ApiCategory, RestrictedApis, RestrictedOptions, Restriction

# gRPC keys get this prefix (Triton's kRestrictedProtocolHeaderTemplate).
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"


class RestrictionSyntaxError(ValueError):
    """A malformed flag value; the message is tritonserver's."""


def parse_restrictions(
    values: Sequence[str], option_name: str, feature_type: str, key_prefix: str = ""
) -> RestrictedApis:
    """The groups of one flag (``option_name`` without dashes, e.g. "http-restricted-api";
    ``feature_type`` "api" or "protocol"), as tritonserver's ParseRestrictedFeatureOption."""
    found: dict[ApiCategory, Restriction] = {}
    for value in values:
        names, header, expected = _split_option(value, option_name)
        for name in names.split(","):
            try:
                category = ApiCategory(name)
            except ValueError:
                raise RestrictionSyntaxError(
                    f"unknown restricted {feature_type} '{name}' "
                ) from None
            if category in found:
                raise RestrictionSyntaxError(
                    f"restricted {feature_type} '{name}' can not be specified in multiple "
                    "config groups"
                )
            found[category] = Restriction(key_prefix + header, expected)
    return RestrictedApis(MappingProxyType(found))


def _split_option(value: str, option_name: str) -> tuple[str, str, str]:
    """``<name>:<setting>=<value>`` as tritonserver's ParseGenericConfigOption splits it."""
    message = f"--{option_name} option format is '<config name>:<setting>=<value>'. Got {value}"
    names, colon, rest = value.partition(":")
    header, equals, expected = rest.partition("=")
    if not colon or not equals or not names or not header or not expected:
        raise RestrictionSyntaxError(message)
    return names, header, expected


def http_denial(restriction: Restriction, headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """Triton's message when ``headers`` (as received) lack the restriction's header with
    its exact value, else None. Header names match case-insensitively."""
    wanted = restriction.header.lower().encode("latin-1")
    for name, value in headers:
        if name.lower() == wanted:
            if value.decode("latin-1") == restriction.value:
                return None
            break  # the first one counts, as in Triton
    return f"This API is restricted, expecting header '{restriction.header}'"


def grpc_denial(restriction: Restriction, metadata: Iterable[tuple[str, object]]) -> str | None:
    """Triton's message when the call's metadata lacks the key with its exact value."""
    wanted = restriction.header.lower()
    for key, value in metadata:
        if key.lower() == wanted:
            if value == restriction.value:
                return None
            break
    return f"This protocol is restricted, expecting header '{restriction.header}'"


def open_repository_api_warning(
    restricted: RestrictedOptions, *, explicit_mode: bool, http: bool, grpc: bool
) -> str | None:
    """What to log at start when the model-repository API is open to every client."""
    if not explicit_mode:
        return None  # load and unload are refused in the other modes
    open_on = [
        name
        for name, enabled, apis in (
            ("HTTP", http, restricted.http),
            ("gRPC", grpc, restricted.grpc),
        )
        if enabled and apis.get(ApiCategory.MODEL_REPOSITORY) is None
    ]
    if not open_on:
        return None
    return (
        f"the model-repository API is open to every {' and '.join(open_on)} client: one that "
        "loads a Python model with file: overrides runs its own code in this server. Restrict "
        "it with --http-restricted-api=model-repository:<key>=<value> and "
        "--grpc-restricted-protocol=model-repository:<key>=<value> (see docs/security.md)"
    )
