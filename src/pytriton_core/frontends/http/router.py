"""Path routing with Triton's URL patterns; 404 and 405 answered here, once."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import unquote

from pytriton_core.frontends.http.messages import HttpResponse, plain_error


class Request(Protocol):
    """What a handler reads of an HTTP request (the compiled framing's HttpRequest)."""

    @property
    def method(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def raw_headers(self) -> list[tuple[bytes, bytes]]: ...
    @property
    def body(self) -> bytes | bytearray | memoryview: ...


Handler = Callable[[Request, "RouteMatch"], Awaitable[HttpResponse]]


@dataclass(frozen=True, slots=True)
class RouteMatch:
    params: Mapping[str, str | None]

    def get(self, key: str) -> str | None:
        value = self.params.get(key)
        return None if value is None else unquote(value)


@dataclass(frozen=True)
class Route:
    pattern: re.Pattern[str]
    methods: Mapping[str, Handler]  # "GET" -> handler


class Router:
    def __init__(self) -> None:
        self._routes: list[Route] = []

    def add(self, pattern: str, **methods: Handler) -> None:
        self._routes.append(Route(re.compile(pattern), methods))

    async def dispatch(self, request: Request) -> HttpResponse:
        for route in self._routes:
            match = route.pattern.fullmatch(request.path)
            if match is None:
                continue
            handler = route.methods.get(request.method)
            if handler is None:
                return plain_error(405, "Method Not Allowed")
            return await handler(request, RouteMatch(match.groupdict()))
        return plain_error(404, "Not Found")
