"""tritonserver's flags for the response cache, the rate limiter and the plug-in folders:
their arguments and the option objects they resolve to (``CacheOptions``,
``RateLimiterOptions``, the backend and repository-agent directories).

Refusals use tritonserver's words where it has them (its command-line parser's).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pytriton_core.options import (
    CacheOptions,
    RateLimiterOptions,
    RateLimitMode,
    RateLimitResource,
)


def add_extension_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--cache-config",
        action="append",
        default=[],
        metavar="<cache>,<setting>=<value>",
        help="response cache: local,size=<bytes> (repeatable); models opt in with "
        "response_cache { enable: true }",
    )
    add(
        "--response-cache-byte-size",
        type=int,
        default=None,
        metavar="BYTES",
        help="deprecated: --cache-config local,size=<bytes>",
    )
    add(
        "--cache-directory",
        type=Path,
        default=None,
        metavar="PATH",
        help="tritonserver's folder of cache libraries: this server's cache is built in "
        "(local); the folder is not read",
    )
    add(
        "--rate-limit",
        default=RateLimitMode.OFF.value,
        metavar="{off,execution_count}",
        help="execution_count: model instances run by their rate_limiter resources and "
        "priority; off: as soon as an instance is free",
    )
    add(
        "--rate-limit-resource",
        action="append",
        default=[],
        metavar="<name>:<count>[:<device>]",
        help="a rate-limiter resource's count (on one device, or on every device)",
    )
    add(
        "--backend-directory",
        type=Path,
        default=None,
        metavar="PATH",
        help="a folder of backend plug-ins: <name>/__init__.py (a plug-in package) or "
        "<name>/model.py (a Python-based backend)",
    )
    add(
        "--repoagent-directory",
        type=Path,
        default=None,
        metavar="PATH",
        help="a folder of repository-agent plug-ins: <name>/__init__.py",
    )


def extension_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``ServerOptions`` fields these flags set (a plug-in folder that does not exist
    is said at startup: tritonserver command lines name /opt/tritonserver/backends)."""
    return {
        "cache": cache_options(args),
        "rate_limiter": rate_limiter_options(args),
        "backend_directory": args.backend_directory,
        "repoagent_directory": args.repoagent_directory,
    }


def cache_options(args: argparse.Namespace) -> CacheOptions:
    if args.response_cache_byte_size is not None and args.cache_config:
        raise SystemExit(
            "error: Incompatible flags --response-cache-byte-size and --cache-config both "
            "provided. Please provide one or the other."
        )
    if args.response_cache_byte_size is not None:
        size = args.response_cache_byte_size
        print(
            "Warning: '--response-cache-byte-size' has been deprecated! This will default "
            "to the 'local' cache implementation with the provided byte size for its config. "
            "Please use '--cache-config' instead. The equivalent --cache-config CLI args "
            f"would be: '--cache-config=local,size={size}'",
            flush=True,
        )
        return CacheOptions("local", MappingProxyType({"size": str(size)}), args.cache_directory)
    name: str | None = None
    settings: dict[str, str] = {}
    for item in args.cache_config:
        cache, setting, value = _cache_setting(item)
        if name is not None and cache != name:
            raise SystemExit(
                f"error: --cache-config names two caches ('{name}' and '{cache}'): a server "
                "has one response cache"
            )
        name = cache
        settings[setting] = value
    return CacheOptions(name, MappingProxyType(settings), args.cache_directory)


def _cache_setting(item: str) -> tuple[str, str, str]:
    """``<cache>,<setting>=<value>``, refused in tritonserver's words."""
    name, comma, rest = item.partition(",")
    if not comma or not name:
        raise SystemExit(
            "error: No cache specified. --cache-config option format is "
            f"<cache name>,<setting>=<value>. Got {item}"
        )
    setting, equals, value = rest.partition("=")
    if not equals or not setting or not value:
        raise SystemExit(
            f"error: --cache-config option format is '<cache name>,<setting>=<value>'. Got {item}"
        )
    return name, setting, value


def rate_limiter_options(args: argparse.Namespace) -> RateLimiterOptions:
    try:
        mode = RateLimitMode(args.rate_limit.lower())
    except ValueError:
        raise SystemExit("error: invalid argument for --rate-limit") from None
    return RateLimiterOptions(
        mode=mode, resources=tuple(_resource(item) for item in args.rate_limit_resource)
    )


def _resource(item: str) -> RateLimitResource:
    """``<name>:<count>[:<device>]``, as tritonserver parses it."""
    problem = (
        "error: --rate-limit-resource option format is '<resource_name>:<count>:<device>' or "
        f"'<resource_name>:<count>'. Got {item}"
    )
    parts = item.split(":")
    if len(parts) not in (2, 3) or not parts[0]:
        raise SystemExit(problem)
    try:
        numbers = [int(part) for part in parts[1:]]
    except ValueError:
        raise SystemExit(problem) from None
    if numbers[0] < 0 or (len(numbers) == 2 and numbers[1] < 0):
        raise SystemExit(problem)
    return RateLimitResource(parts[0], numbers[0], numbers[1] if len(numbers) == 2 else None)
