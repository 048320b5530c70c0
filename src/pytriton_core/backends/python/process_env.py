"""A Python model's own environment (``EXECUTION_ENV_PATH``), for process mode.

The parameter names a folder holding ``bin/python`` (a virtual environment, or an unpacked
conda-pack environment) or a conda-pack archive (``.tar.gz``), which is unpacked once into
a cache keyed by the archive's hash and reused by later loads. ``$$TRITON_MODEL_DIRECTORY``
at its start stands for the model's folder, as in Triton.

The worker runs the environment's interpreter with the environment's packages first on its
path and the server's after them (for ``pytriton_core`` and what it needs), so the
environment's version of a package wins. The interpreter must be the server's Python
version (the server's compiled parts are imported in the worker).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
from pathlib import Path

from pytriton_core.backends.base import ModelLocation
from pytriton_core.errors import ModelConfigError

ENV_PARAMETER = "EXECUTION_ENV_PATH"
_MODEL_DIR_VARIABLE = "$$TRITON_MODEL_DIRECTORY"
_CACHE_SETTING = "execution-env-cache-dir"


def interpreter_for(value: str, location: ModelLocation) -> str:
    """The Python the model's workers run: the server's, or its environment's."""
    if not value:
        return sys.executable
    if value.startswith(_MODEL_DIR_VARIABLE):
        path = Path(str(location.model_dir) + value[len(_MODEL_DIR_VARIABLE) :])
    else:
        path = Path(value)
    if path.is_file() and path.name.endswith((".tar.gz", ".tgz")):
        path = _unpacked(path, location)
    elif not path.is_dir():
        raise ModelConfigError(
            f"model '{location.name}': {ENV_PARAMETER} '{value}' is neither a folder nor a "
            ".tar.gz archive"
        )
    for name in ("bin/python3", "bin/python"):
        if (path / name).exists():
            python = str(path / name)
            break
    else:
        raise ModelConfigError(
            f"model '{location.name}': {ENV_PARAMETER} '{value}' holds no bin/python"
        )
    _check_version(python, location)
    return python


def _unpacked(archive: Path, location: ModelLocation) -> Path:
    digest = hashlib.sha256()
    with archive.open("rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    default = Path.home() / ".cache" / "pytriton-core" / "execution-envs"
    cache = Path(location.setting(_CACHE_SETTING) or default)
    target = cache / digest.hexdigest()
    if not (target / ".unpacked").exists():
        partial = target.with_name(target.name + ".partial")
        partial.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            tar.extractall(partial, filter="data")
        unpack = partial / "bin" / "conda-unpack"
        if unpack.exists():  # conda-pack's fix of the prefixes baked into its files
            subprocess.run([str(unpack)], check=True, cwd=partial)
        partial.rename(target)
        (target / ".unpacked").touch()
    return target


def _check_version(python: str, location: ModelLocation) -> None:
    found = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    ours = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if found != ours:
        raise ModelConfigError(
            f"model '{location.name}': the {ENV_PARAMETER} environment runs Python "
            f"'{found or 'unknown'}', the server Python {ours}; process mode needs the same "
            "Python version"
        )
