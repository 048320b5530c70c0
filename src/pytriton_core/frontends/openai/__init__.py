"""The OpenAI-compatible API (``/v1/...``) on a listener of its own (docs/openai.md): the HTTP
front end's connections, flow control and event streams, with these routes."""

from pytriton_core.frontends.openai.routes import openai_router

__all__ = ["openai_router"]
