"""Load-time overrides: a model folder made from ``file:<path>`` contents sent by a client.

As in Triton, the folder is a fresh temporary directory that *is* the model folder (the
model's name plays no part in any path), and each key is placed with the one path rule
(``paths.confined_path``): joined as Triton joins it, refused unless it stays inside. Any
failure removes the folder before the error is raised.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from pytriton_core.errors import InternalError, InvalidArgumentError
from pytriton_core.paths import PathEscapeError, confined_path

log = logging.getLogger(__name__)

FILE_PREFIX = "file:"
# Triton's prefix for its override folders (mkdtemp's "/tmp/folderXXXXXX").
TEMP_PREFIX = "folder"


class OverrideDirectory:
    """A temporary model folder holding exactly the override files; removed on ``cleanup``."""

    def __init__(self, model_name: str, files: Mapping[str, bytes]) -> None:
        self.model_dir = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX))
        try:
            for key, content in files.items():
                self._write(model_name, key, content)
        except BaseException:
            self.cleanup()
            raise

    def _write(self, model_name: str, key: str, content: bytes) -> None:
        relative = key[len(FILE_PREFIX) :]
        try:
            target = confined_path(self.model_dir, relative, what=f"file parameter '{key}'")
        except PathEscapeError as exc:
            # Triton logs the reason and answers with the poll failure.
            log.error(
                "Poll failed for model directory '%s': Invalid file parameter '%s' with "
                "normalized path '%s' must stay within model directory.",
                model_name,
                key,
                exc.normalized,
            )
            raise InternalError(
                f"failed to load '{model_name}', failed to poll from model repository"
            ) from None
        try:
            if target == self.model_dir:
                raise IsADirectoryError(f"'{key}' names the model directory itself")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        except OSError as exc:
            raise InvalidArgumentError(
                f"Invalid file parameter '{key}': {exc.strerror or exc}"
            ) from None

    def cleanup(self) -> None:
        shutil.rmtree(self.model_dir, ignore_errors=True)
