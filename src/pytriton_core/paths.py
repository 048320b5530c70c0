"""The one rule for paths a client can influence, and for model names.

A path a config names (``default_model_filename``, a warm-up ``input_data_file``, a
``label_filename``), a ``file:<path>`` override key and a version folder are all joined to
their model's folder the way Triton joins paths (``JoinPath``: an absolute second part is
appended, so ``/etc/passwd`` names ``<model>/etc/passwd``), normalized, and refused unless
the result stays inside the folder. The check is lexical: ``..`` cannot climb out, and
symbolic links the operator placed in a repository are followed as they are for every other
file of it (a client cannot create links: overrides write regular files only).

Model names are checked once, where a client hands one to the repository API
(:func:`check_model_name`): they key folders, logs and metrics, so they may not be a path.
"""

from __future__ import annotations

import os
from pathlib import Path

from pytriton_core.errors import InvalidArgumentError


class PathEscapeError(InvalidArgumentError):
    """A client-influenced path that leaves the folder it must stay in."""

    def __init__(self, message: str, normalized: str) -> None:
        super().__init__(message)
        self.normalized = normalized


def join_path(base: str, relative: str) -> str:
    """Triton's ``JoinPath({base, relative})``: a leading ``/`` of ``relative`` does not
    restart the path, it is appended after ``base``."""
    if not relative:
        return base
    if base.endswith("/"):
        return base + (relative[1:] if relative.startswith("/") else relative)
    return base + relative if relative.startswith("/") else f"{base}/{relative}"


def confined_path(base: Path, *parts: str, what: str) -> Path:
    """``parts`` joined to ``base`` (Triton's JoinPath) and normalized; PathEscapeError
    unless the result is inside ``base`` (``base`` itself counts as inside). ``what`` names
    the setting for the message, e.g. ``"default_model_filename '../x.py'"``."""
    if any("\0" in part for part in parts):
        raise PathEscapeError(f"{what} must not contain a NUL character", "")
    root = os.path.normpath(os.path.abspath(base))
    joined = root
    for part in parts:
        joined = join_path(joined, part)
    normalized = os.path.normpath(joined)
    if normalized != root and not normalized.startswith(root.rstrip("/") + "/"):
        raise PathEscapeError(
            f"{what} with normalized path '{normalized}' must stay within the model directory",
            normalized,
        )
    return Path(normalized)


def check_model_name(name: str) -> str:
    """``name`` if it can name a model; InvalidArgumentError otherwise.

    A model name is one folder name of a repository: not empty, not ``.`` or ``..``, and
    without ``/``, ``\\``, NUL or other control characters.
    """
    if not name or name in (".", "..") or any(c in "/\\" or ord(c) < 0x20 for c in name):
        raise InvalidArgumentError(
            f"invalid model name {name!r}: a model name is one folder name (not empty, "
            "not '.' or '..', no '/', '\\' or control characters)"
        )
    return name
