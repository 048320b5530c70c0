"""The Python backend: Triton ``model.py`` files, run in-process in worker threads."""

from pytriton_core.backends.python.backend import PythonBackend, create_backend

__all__ = ["PythonBackend", "create_backend"]
