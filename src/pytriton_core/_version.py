"""The package version: one source, read by the build (pyproject) and by server metadata."""

__version__ = "0.1.0"
