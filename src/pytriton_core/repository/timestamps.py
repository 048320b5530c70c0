"""What changed in a model folder since it was last loaded (Triton's ModelTimestamp).

A snapshot keeps one signature per entry of the model folder (each version folder, the
config file, every other file or folder) over the whole subtree of that entry. A load
compares a new snapshot with the one of the loaded model: nothing changed means the load
is a no-op; a changed version folder reloads only that version; a change outside the
version folders and the config (a shared ``utils.py``, a label file) reloads every
version. Triton compares modification times only; the signature adds the names and sizes
of the files, so a rewrite within the same clock tick is seen as well.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

# (newest modification time in ns, the files' relative names, their total size) of an
# entry's files. Folders' own times are left out: Python writes ``__pycache__`` into the
# folders of the models it imports, which would make every model look changed once loaded.
Signature = tuple[int, tuple[str, ...], int]

_NOTHING: Signature = (0, (), 0)
_OVERRIDE_ENTRY = "<config override>"


def _signature(path: Path) -> Signature:
    try:
        stat = path.stat()
    except OSError:
        return _NOTHING
    if not path.is_dir():
        return (stat.st_mtime_ns, ("",), stat.st_size)
    newest, names, size = 0, [], 0
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            full = os.path.join(root, name)
            try:
                entry = os.stat(full)
            except OSError:
                continue
            newest = max(newest, entry.st_mtime_ns)
            names.append(os.path.relpath(full, path))
            size += entry.st_size
    return (newest, tuple(names), size)


@dataclass(frozen=True)
class ModelTimestamp:
    """Signatures of a model folder's entries; ``forced`` snapshots never match another."""

    entries: dict[str, Signature] = field(default_factory=dict)
    config_entry: str = ""  # the entry holding the config in use ("config.pbtxt", "configs")
    forced: bool = False  # a load with overrides: the next load always reloads

    @classmethod
    def read(cls, model_dir: Path, config_file: Path | None) -> ModelTimestamp:
        entries: dict[str, Signature] = {}
        config_entry = ""
        for child in sorted(model_dir.iterdir()) if model_dir.is_dir() else ():
            if child.name == "__pycache__":
                continue
            entries[child.name] = _signature(child)
            if config_file is not None and config_file.is_relative_to(child):
                config_entry = child.name
        return cls(entries, config_entry)

    @classmethod
    def overridden(cls) -> ModelTimestamp:
        """A model folder made of a load's own files: whatever comes next reloads it."""
        return cls(forced=True)

    def with_config_overridden(self) -> ModelTimestamp:
        """The folder as read, its config replaced by a load's override: the config entry
        matches no other snapshot (so the next plain load reads config.pbtxt again), the
        version folders still compare as they are."""
        entry = self.config_entry or _OVERRIDE_ENTRY
        entries = {**self.entries, entry: (time.monotonic_ns(), (_OVERRIDE_ENTRY,), -1)}
        return ModelTimestamp(entries, entry)

    def modified(self, newer: ModelTimestamp) -> bool:
        """Anything in the folder changed (a load that is not a no-op)."""
        return self.forced or newer.forced or self.entries != newer.entries

    def version_modified(self, newer: ModelTimestamp, version: int) -> bool:
        """The version's folder or a file every version shares changed (not the config)."""
        if self.forced or newer.forced:
            return True
        return self._version_view(version) != newer._version_view(version)

    def _version_view(self, version: int) -> tuple[Signature | None, dict[str, Signature]]:
        shared = {
            name: signature
            for name, signature in self.entries.items()
            if name != self.config_entry and not name.isdigit()
        }
        return self.entries.get(str(version)), shared
