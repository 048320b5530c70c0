"""The model repository: finding models on disk and managing their lifecycle."""

from pytriton_core.repository.manager import IndexEntry, ModelManager

__all__ = ["IndexEntry", "ModelManager"]
