"""Scanning repository folders for model folders."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ScanResult:
    models: dict[str, Path]  # model name -> its folder
    conflicts: dict[str, list[Path]]  # a name found in several repositories: not served


def scan_repositories(repositories: Sequence[Path]) -> ScanResult:
    """Every sub-folder of every repository is a model (hidden folders excepted)."""
    found: dict[str, list[Path]] = {}
    for repository in repositories:
        for entry in sorted(repository.iterdir()):
            if entry.is_dir() and not entry.name.startswith("."):
                found.setdefault(entry.name, []).append(entry)
    return ScanResult(
        models={name: dirs[0] for name, dirs in found.items() if len(dirs) == 1},
        conflicts={name: dirs for name, dirs in found.items() if len(dirs) > 1},
    )
