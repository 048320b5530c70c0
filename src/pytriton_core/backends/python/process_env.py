"""A Python model's own environment (``EXECUTION_ENV_PATH``), for process mode.

The parameter names a folder holding ``bin/python`` (a virtual environment, or an unpacked
conda-pack environment), a conda-pack archive (``.tar.gz``), which is unpacked once into
a cache keyed by the archive's hash and reused by later loads, or a ``requirements.txt``,
installed once (pip, from the server's environment) into a virtual environment of the
server's Python, cached by the hash of the file and the interpreter. ``$$TRITON_MODEL_DIRECTORY``
at its start stands for the model's folder, as in Triton.

The worker runs the environment's interpreter with the environment's packages first on its
path and the server's after them (for ``pytriton_core`` and what it needs), so the
environment's version of a package wins. The interpreter must be the server's Python
version (the server's compiled parts are imported in the worker).
"""

from __future__ import annotations

import hashlib
import shutil
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
    elif path.is_file() and path.name.endswith(".txt"):
        path = _installed(path, location)
    elif not path.is_dir():
        raise ModelConfigError(
            f"model '{location.name}': {ENV_PARAMETER} '{value}' is neither a folder, a "
            ".tar.gz archive nor a requirements .txt file"
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


def _cache(location: ModelLocation) -> Path:
    default = Path.home() / ".cache" / "pytriton-core" / "execution-envs"
    return Path(location.setting(_CACHE_SETTING) or default)


def _installed(requirements: Path, location: ModelLocation) -> Path:
    """A virtual environment with ``requirements`` installed, built on first use."""
    digest = hashlib.sha256(requirements.read_bytes())
    digest.update(f"{sys.executable}\0{sys.version}".encode())
    target = _cache(location) / f"requirements-{digest.hexdigest()}"
    if (target / ".installed").exists():
        return target
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(partial)], check=True)
    python = partial / "bin" / "python"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-input",
         "--disable-pip-version-check", "-r", str(requirements)],
        capture_output=True, text=True, check=False, cwd=requirements.parent,
    )  # fmt: skip
    if install.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise ModelConfigError(
            f"model '{location.name}': installing {ENV_PARAMETER} '{requirements}' failed "
            f"(pip needs to be in the server's environment): {install.stderr.strip()[-2000:]}"
        )
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    (target / ".installed").touch()
    return target


def _unpacked(archive: Path, location: ModelLocation) -> Path:
    digest = hashlib.sha256()
    with archive.open("rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    target = _cache(location) / digest.hexdigest()
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
