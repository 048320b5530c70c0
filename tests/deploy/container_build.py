"""Building and running docker/Dockerfile without a Docker daemon: podman, offline.

What works on machines without a daemon or registry access (../shared/tools/deploy-checks.md):
podman with vfs storage in a folder of its own, chroot isolation for builds, runc with
lowered ulimits for containers; a Debian base made with debootstrap and imported, passed as
BASE_IMAGE; the project's wheels built on the host and installed with WHEELS=prebuilt
(pip --no-index inside the build). The base and the wheels are cached under .cache/deploy/.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from deploy_support import CACHE_DIR, DOCKER_DIR, REPO_ROOT

# The base's Python must be the host's minor version: the host builds the wheels.
BASE_SUITE, BASE_PYTHON = "bookworm", (3, 11)
BASE_TARBALL = CACHE_DIR / f"base-{BASE_SUITE}.tar"
BASE_IMAGE = f"localhost/pytriton-deploy-base:{BASE_SUITE}"
WHEELS_CACHE = CACHE_DIR / "wheels"
# The package's sources: what the wheel is built from, and its cache key.
SOURCES = ("src", "csrc", "setup.py", "pyproject.toml", "README.md", "examples")


class ContainerToolError(RuntimeError):
    """A step of building or running the image failed; the message has its output."""


def _run(command: Sequence[str | Path], timeout: float = 600, cwd: Path | None = None) -> str:
    result = subprocess.run(
        [str(c) for c in command],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
    )
    if result.returncode != 0:
        raise ContainerToolError(
            f"{' '.join(map(str, command))} exited with {result.returncode}:\n"
            f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        )
    return str(result.stdout)


def debian_mirror() -> str:
    """The Debian archive this machine's apt uses (debootstrap needs one)."""
    candidates: list[str] = []
    sources = Path("/etc/apt/sources.list.d")
    for path in sorted(sources.glob("*.sources")) if sources.is_dir() else []:
        for stanza in path.read_text().split("\n\n"):
            fields = dict(
                line.split(":", 1) for line in stanza.splitlines() if re.match(r"^\w[\w-]*:", line)
            )
            if BASE_SUITE in fields.get("Suites", "").split():
                candidates += fields.get("URIs", "").split()
    list_file = Path("/etc/apt/sources.list")
    if list_file.is_file():
        for line in list_file.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb" and parts[2] == BASE_SUITE:
                candidates.append(parts[1])
    for uri in candidates:
        if "security" not in uri:
            return uri
    raise ContainerToolError(f"no apt source for Debian {BASE_SUITE} on this machine")


@contextlib.contextmanager
def _cache_lock() -> Iterator[None]:
    """One writer of .cache/deploy/ at a time: test sessions may run side by side."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with (CACHE_DIR / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ensure_base_tarball() -> Path:
    """A minimal Debian with python3 and its venv module, as a tarball (cached)."""
    with _cache_lock():
        if not BASE_TARBALL.is_file():
            _debootstrap()
    return BASE_TARBALL


def _debootstrap() -> None:
    with tempfile.TemporaryDirectory(prefix="pytriton-rootfs-") as rootfs:
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                "--include=python3,python3-venv",
                BASE_SUITE,
                rootfs,
                debian_mirror(),
            ],
            timeout=900,
        )
        # apt's downloads and lists are a third of the size and no use in the image.
        for folder in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in Path(rootfs, folder).glob("*"):
                if entry.is_file():
                    entry.unlink()
        # The folder becomes the image's /: mkdtemp's 0700 would lock uid 1000 out of it.
        Path(rootfs).chmod(0o755)
        partial = BASE_TARBALL.with_suffix(".partial")
        _run(["tar", "-C", rootfs, "--numeric-owner", "-cf", partial, "."])
        partial.rename(BASE_TARBALL)


def _source_files() -> list[Path]:
    listed = _run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z", "--", *SOURCES], cwd=REPO_ROOT
    )
    return sorted(REPO_ROOT / name for name in listed.split("\0") if name)


def ensure_wheels(extras: str) -> Path:
    """The project's wheel and every wheel it needs (with ``extras``), built on this host
    and cached by the sources' content: a folder for pip --no-index --find-links."""
    with _cache_lock():
        return _build_wheels(extras)


def _build_wheels(extras: str) -> Path:
    files = [f for f in _source_files() if f.is_file() and "__pycache__" not in f.parts]
    digest = hashlib.sha256(f"{extras}\0{sys.version_info[:2]}".encode())
    for path in files:
        digest.update(str(path.relative_to(REPO_ROOT)).encode() + b"\0" + path.read_bytes())
    folder = WHEELS_CACHE / digest.hexdigest()[:16]
    if (folder / ".complete").is_file():
        return folder
    shutil.rmtree(WHEELS_CACHE, ignore_errors=True)  # one set of wheels at a time
    folder.mkdir(parents=True)
    pip = [sys.executable, "-m", "pip"]
    with tempfile.TemporaryDirectory(prefix="pytriton-wheel-src-") as source:
        # A copy of the sources, so the build does not touch the checkout's build/.
        for path in files:
            target = Path(source, path.relative_to(REPO_ROOT))
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        _run([*pip, "wheel", "--no-deps", "-q", "-w", folder, source], timeout=900)
    (project_wheel,) = folder.glob("pytriton_core-*.whl")
    requirement = f"{project_wheel}[{extras}]" if extras else str(project_wheel)
    _run([*pip, "wheel", "-q", "-w", folder, "--find-links", folder, requirement], timeout=900)
    (folder / ".complete").touch()
    return folder


@dataclass
class Podman:
    """podman on storage of its own (vfs in a temporary folder), as it works here."""

    root: Path

    def command(self, *args: str | Path) -> list[str]:
        return [
            "podman",
            *("--root", str(self.root / "storage"), "--runroot", str(self.root / "run")),
            *("--storage-driver", "vfs", "--cgroup-manager", "cgroupfs"),
            *("--events-backend", "file", "--runtime", "runc"),
            *map(str, args),
        ]

    def __call__(self, *args: str | Path, timeout: float = 600) -> str:
        return _run(self.command(*args), timeout=timeout)

    def run_result(
        self, *args: str | Path, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*args), capture_output=True, text=True, timeout=timeout, check=False
        )

    def remove_storage(self) -> None:
        # vfs keeps a full copy of every layer: gigabytes, gone with the folder.
        shutil.rmtree(self.root, ignore_errors=True)


# Lowered limits: raising them needs CAP_SYS_RESOURCE, which this sandbox lacks.
RUN_LIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096")


def build_cpu_image(podman: Podman, tag: str, extras: str) -> None:
    """docker/Dockerfile built offline: the local base as BASE_IMAGE, WHEELS=prebuilt."""
    if podman.run_result("image", "exists", BASE_IMAGE).returncode != 0:
        podman("import", ensure_base_tarball(), BASE_IMAGE)
    wheels = ensure_wheels(extras)
    with tempfile.TemporaryDirectory(prefix="pytriton-context-") as context:
        # The prebuilt path reads only the entry point and the wheels from its context.
        Path(context, "docker").mkdir()
        shutil.copy2(DOCKER_DIR / "entrypoint.sh", Path(context, "docker", "entrypoint.sh"))
        shutil.copytree(wheels, Path(context, "wheels"), ignore=shutil.ignore_patterns(".*"))
        podman(
            "build",
            *("--isolation", "chroot", "--pull=never", "--format", "docker", "--layers=false"),
            *("--build-arg", f"BASE_IMAGE={BASE_IMAGE}", "--build-arg", "WHEELS=prebuilt"),
            *("--build-arg", f"EXTRAS={extras}"),
            *("-f", DOCKER_DIR / "Dockerfile", "-t", tag, context),
            timeout=1200,
        )


def podman_available() -> str | None:
    """Why podman cannot run here, or None when it can."""
    for tool in ("podman", "runc", "debootstrap"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if sys.version_info[:2] != BASE_PYTHON:
        return (
            f"the image's Debian {BASE_SUITE} base has Python {BASE_PYTHON[0]}.{BASE_PYTHON[1]}, "
            f"the host {sys.version_info[0]}.{sys.version_info[1]}: host-built wheels won't fit"
        )
    if os.geteuid() != 0:
        return "debootstrap and rootful podman need root"
    return None
