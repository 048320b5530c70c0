"""pytriton-core: a Triton-compatible inference server with compiled hot paths."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
