"""KServe v2 HTTP/REST with Triton's extensions."""

from pytriton_core.frontends.http.server import HttpFrontend

__all__ = ["HttpFrontend"]
