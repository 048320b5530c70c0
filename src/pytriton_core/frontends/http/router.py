"""Path routing with Triton's URL patterns; 404, 405 and restricted APIs' 403 answered
here, once. Patterns match the path as sent; each captured parameter is percent-decoded
once, when the path is first resolved."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import unquote

import orjson

from pytriton_core.frontends.http.exchange import Exchange
from pytriton_core.frontends.http.messages import HttpResponse, plain_error
from pytriton_core.options import ApiCategory, RestrictedApis, Restriction
from pytriton_core.restricted import http_denial


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

    # The protocol's ``Exchange`` for this request, None outside a connection.
    exchange: Exchange | None


# A handler answers at once, or with what to await for the answer (an ``async def``'s, or
# a ``DeferredResponse``, which the protocol takes without awaiting).
Handler = Callable[[Request, "RouteMatch"], HttpResponse | Awaitable[HttpResponse]]
# (status, message) -> the answer to a request no handler takes (404, 405, a restricted 403).
ErrorRenderer = Callable[[int, str], HttpResponse]


@dataclass(frozen=True, slots=True)
class RouteMatch:
    params: Mapping[str, str | None]  # percent-decoded

    def get(self, key: str) -> str | None:
        return self.params.get(key)


@dataclass(frozen=True)
class Route:
    pattern: re.Pattern[str]
    category: ApiCategory | None  # what --http-restricted-api calls it (None: no category)
    methods: Mapping[str, Handler]  # "GET" -> handler


# Paths resolved to their route, remembered so that a client's repeated requests (the
# same infer path, over and over) skip the pattern scan; cleared when full.
_RESOLVED_PATHS = 1024


class Router:
    def __init__(
        self, restricted: RestrictedApis | None = None, render_error: ErrorRenderer | None = None
    ) -> None:
        """``render_error``: how this router's protocol writes an error (the OpenAI front
        end's); by default Triton's answers."""
        self._routes: list[Route] = []
        self._restricted = restricted or RestrictedApis()
        self._render_error = render_error
        # path -> its route, the match and the route's restriction (None: open).
        self._resolved: dict[str, tuple[Route, RouteMatch, Restriction | None] | None] = {}

    def add(self, pattern: str, category: ApiCategory | None, **methods: Handler) -> None:
        self._routes.append(Route(re.compile(pattern), category, methods))
        self._resolved.clear()

    def _resolve(self, path: str) -> tuple[Route, RouteMatch, Restriction | None] | None:
        try:
            return self._resolved[path]
        except KeyError:
            pass
        found = None
        for route in self._routes:
            match = route.pattern.fullmatch(path)
            if match is not None:
                params = {
                    k: None if v is None else unquote(v) for k, v in match.groupdict().items()
                }
                category = route.category
                restriction = None if category is None else self._restricted.get(category)
                found = (route, RouteMatch(params), restriction)
                break
        if len(self._resolved) >= _RESOLVED_PATHS:
            self._resolved.clear()
        self._resolved[path] = found
        return found

    def route(self, request: Request) -> HttpResponse | Awaitable[HttpResponse]:
        """The answer of the handler of ``request``'s path and method (at once, or what to
        await for it), or the refusal (a restricted API's 403, 404, 405). Not a coroutine
        itself: a request costs the handler's alone, if the handler has one."""
        resolved = self._resolve(request.path)
        if resolved is not None:
            route, match, restriction = resolved
            if restriction is not None:  # checked first, as Triton's handlers do
                denial = http_denial(restriction, request.raw_headers)
                if denial is not None:
                    if self._render_error is not None:
                        return self._render_error(403, denial)
                    # Triton's answer: its JSON error, sent as text/plain.
                    return HttpResponse(403, (orjson.dumps({"error": denial}),), b"text/plain")
            handler = route.methods.get(request.method)
            if handler is None:
                return self._error(405, "Method Not Allowed")
            return handler(request, match)
        return self._error(404, "Not Found")

    def _error(self, status: int, message: str) -> HttpResponse:
        render = self._render_error or plain_error
        return render(status, message)
