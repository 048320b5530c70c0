"""Load-time overrides: a model folder made from ``file:<path>`` contents sent by a client.

Paths are confined to the model folder: no absolute paths, no ``..``, nothing that
resolves outside it.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from pytriton_core.errors import InvalidArgumentError

FILE_PREFIX = "file:"


def _safe_relative_path(key: str) -> PurePosixPath:
    raw = key[len(FILE_PREFIX) :]
    path = PurePosixPath(raw)
    if (
        not raw
        or "\\" in raw
        or "\0" in raw
        or path.is_absolute()
        or any(part in ("..", "") for part in raw.split("/"))
    ):
        raise InvalidArgumentError(
            f"invalid file override '{key}': the path must be relative to the model folder "
            "and stay inside it"
        )
    return path


class OverrideDirectory:
    """A temporary model folder holding exactly the override files; removed on ``cleanup``."""

    def __init__(self, model_name: str, files: Mapping[str, bytes]) -> None:
        self._root = Path(tempfile.mkdtemp(prefix="pytriton-override-"))
        self.model_dir = self._root / model_name
        self.model_dir.mkdir()
        try:
            for key, content in files.items():
                relative = _safe_relative_path(key)
                target = (self.model_dir / relative).resolve()
                if not target.is_relative_to(self.model_dir.resolve()):
                    raise InvalidArgumentError(
                        f"invalid file override '{key}': outside the model folder"
                    )
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
        except BaseException:
            self.cleanup()
            raise

    def cleanup(self) -> None:
        shutil.rmtree(self._root, ignore_errors=True)
