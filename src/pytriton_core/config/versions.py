"""Version folders of a model and the version policy that picks among them."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf.message import Message

from pytriton_core.errors import ModelConfigError

logger = logging.getLogger(__name__)

# Triton ignores folders whose names are not numbers or start with "0" ("0", "01", "1a").
_VERSION_DIR_NAME = re.compile(r"[1-9][0-9]*")


def version_dir_names(model_dir: Path) -> list[str]:
    """Names of the version folders, in lexicographic order (Triton's order for auto-fill)."""
    return sorted(
        entry.name
        for entry in model_dir.iterdir()
        if _VERSION_DIR_NAME.fullmatch(entry.name) and entry.is_dir()
    )


def list_version_dirs(model_dir: Path) -> list[int]:
    """The model's versions: its numerically named sub-folders, ascending."""
    return sorted(int(name) for name in version_dir_names(model_dir))


def select_versions(config: Message, available: Sequence[int]) -> list[int]:
    """The versions to serve (ascending) out of ``available``, per ``config.version_policy``.

    Like Triton, a specific version without a folder is reported (logged) and skipped;
    a policy that selects nothing fails the load.
    """
    cfg: Any = config
    policy = cfg.version_policy
    present = sorted(set(available))
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        selected = present
    elif choice == "specific":
        wanted = sorted(set(policy.specific.versions))
        selected = [v for v in wanted if v in present]
        for missing in sorted(set(wanted) - set(selected)):
            logger.error(
                "version %d is specified for model '%s', but the version directory is not present",
                missing,
                cfg.name,
            )
    else:
        # An unset policy means Triton's default, latest { num_versions: 1 }.
        count = policy.latest.num_versions if choice == "latest" else 1
        selected = present[-count:] if count > 0 else []
    if not selected:
        raise ModelConfigError(
            f"model '{cfg.name}': at least one version must be available under its version "
            f"policy (available: {present})"
        )
    return selected
