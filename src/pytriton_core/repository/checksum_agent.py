"""The bundled repository agent ``checksum``: refuse a model whose files do not hash to the
values its config lists, as Triton's checksum repository agent does.

    model_repository_agents {
      agents [ { name: "checksum"
                 parameters { key: "MD5:1/model.py" value: "<hex digest>" } } ]
    }

Each parameter's key is ``<algorithm>:<file>``, the file relative to the model's folder;
the value is the hex digest. ``MD5`` is Triton's; ``SHA256`` is this server's addition. The
messages are Triton's agent's.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pytriton_core.errors import InvalidArgumentError, UnsupportedError
from pytriton_core.repository.agents import AgentModel, RepositoryAgent

_ALGORITHMS = {"md5": ("MD5", hashlib.md5), "sha256": ("SHA256", hashlib.sha256)}


class ChecksumAgent(RepositoryAgent):
    name = "checksum"

    def on_load(self, model: AgentModel) -> None:
        for key, expected in model.parameters.items():
            algorithm, sep, relative = key.partition(":")
            if not sep:
                raise InvalidArgumentError(f"failed to parse key: {key}")
            known = _ALGORITHMS.get(algorithm.lower())
            if known is None:
                raise UnsupportedError(f"Unsupported checksum algorithm: {algorithm}")
            label, digest = known
            data = _read(model.location, relative)
            got = digest(data).hexdigest()
            if got != expected.lower():
                raise InvalidArgumentError(
                    f"Mismatched {label} hash for file {relative}, expect: {expected}, got: {got}"
                )


def _read(model_dir: Path, relative: str) -> bytes:
    """The file's bytes; a name that leaves the model's folder is refused."""
    root = model_dir.resolve()
    path = (root / relative).resolve()
    if Path(relative).is_absolute() or not path.is_relative_to(root):
        raise InvalidArgumentError(
            f"failed to open text file for read {relative}: the file must be inside the "
            "model's folder"
        )
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InvalidArgumentError(
            f"failed to open text file for read {relative}: {exc.strerror}"
        ) from None


def create_agent() -> RepositoryAgent:
    return ChecksumAgent()
