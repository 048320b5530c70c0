"""Installs what the bench needs, under the repo's ``.cache/`` (git ignores it), then re-runs
the bench inside its own venv.

- ``.cache/bench-venv``: this project (``pip install .``), matplotlib, tritonclient. The project
  is reinstalled only when its sources changed since the last install (a fingerprint of file
  names, sizes and times under src/ and csrc/, setup.py and pyproject.toml).
- ``.cache/perf-analyzer``: Triton's perf_analyzer, by tools/install-perf-analyzer.sh.
- ``$REAL_TRITON_HOME`` (default ~/.cache/real-triton): the real Triton, by
  ../shared/tools/real-triton/setup.sh, when that tool is there.
- ``wrk``: Debian's package, with apt-get, when running as root.
- the framework scenarios' onnx, onnxruntime and torch, into the bench venv (torch from the
  PyTorch CPU index where it is reachable: the CPU build, not the CUDA one), only for a preset
  that has them.
- ``.cache/bench-peers/kserve``: a venv of its own for the KServe peer (its dependencies stay
  apart from the server under test).

Only the bench venv is required; a tool that fails to install is reported, and the rows that
need it are skipped with the reason.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import urllib.request
import venv
from collections.abc import Sequence
from pathlib import Path

from bench.toolbox import (
    BENCH_VENV,
    KSERVE_REQUIREMENT,
    PEERS_DIR,
    PERF_ANALYZER_INSTALLER,
    REAL_TRITON_TOOL,
    REPO_ROOT,
    find_wrk,
)

BENCH_REQUIREMENTS = ("matplotlib>=3.7", "tritonclient[http,grpc]>=2.50", "threadpoolctl>=3")
# pyproject.toml's [onnxruntime] and [torch] extras (a separate step: the project is not rebuilt)
FRAMEWORK_REQUIREMENTS = ("onnx>=1.15", "onnxruntime>=1.17", "torch>=2.1")
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH_PIN = "torch==2.13.0"  # as pyproject.toml's test extra
FRAMEWORKS_STAMP = ".bench-frameworks"
FINGERPRINT_FILE = ".bench-fingerprint"
COMMAND_ENV = "PYTRITON_BENCH_COMMAND"  # the command as typed, for the report
PIP_TIMEOUT_S = 1800


class InstallError(RuntimeError):
    pass


def say(message: str) -> None:
    print(f"[bench install] {message}", file=sys.stderr, flush=True)


def _run(command: Sequence[str], log: Path, timeout_s: float = PIP_TIMEOUT_S) -> bool:
    with log.open("a") as file:
        file.write(f"\n$ {' '.join(command)}\n")
        file.flush()
        try:
            result = subprocess.run(
                list(command),
                stdin=subprocess.DEVNULL,
                stdout=file,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            file.write(f"[{error}]\n")
            return False
    return result.returncode == 0


def _python(venv_dir: Path) -> Path:
    return venv_dir / "bin" / "python"


def _ensure_venv(venv_dir: Path) -> Path:
    python = _python(venv_dir)
    if not python.exists():
        say(f"creating {venv_dir}")
        venv.EnvBuilder(with_pip=True).create(venv_dir)
    return python


def _project_fingerprint() -> str:
    digest = hashlib.sha256("\n".join(BENCH_REQUIREMENTS).encode())
    paths = [REPO_ROOT / "setup.py", REPO_ROOT / "pyproject.toml"]
    for folder in (REPO_ROOT / "src", REPO_ROOT / "csrc"):
        paths += sorted(
            p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts
        )
    for path in paths:
        if path.suffix in (".so", ".c", ".cpp", ".html") and not path.name.endswith("_impl.cpp"):
            continue  # build outputs (see .gitignore)
        stat = path.stat()
        digest.update(f"{path.relative_to(REPO_ROOT)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def ensure_bench_venv(log: Path) -> Path:
    python = _ensure_venv(BENCH_VENV)
    stamp = BENCH_VENV / FINGERPRINT_FILE
    fingerprint = _project_fingerprint()
    if stamp.exists() and stamp.read_text() == fingerprint:
        return python
    say("installing this project, matplotlib and tritonclient into the bench venv (minutes)")
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    if not _run([*pip, str(REPO_ROOT), *BENCH_REQUIREMENTS], log):
        raise InstallError(f"pip install into {BENCH_VENV} failed: see {log}")
    stamp.write_text(fingerprint)
    return python


def ensure_frameworks(python: Path, log: Path) -> None:
    stamp = BENCH_VENV / FRAMEWORKS_STAMP
    wanted = "\n".join(FRAMEWORK_REQUIREMENTS)
    if stamp.exists() and stamp.read_text() == wanted:
        return
    say("installing onnx, onnxruntime and torch into the bench venv (minutes)")
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # Probed first: pip retries an unreachable index for every package it resolves.
    requirements = list(FRAMEWORK_REQUIREMENTS)
    if _reachable(TORCH_CPU_INDEX):
        pip += ["--extra-index-url", TORCH_CPU_INDEX]
    else:
        # The default index serves a multi-GB CUDA build of any newer torch; the test extra's
        # pin is the CPU build these machines keep on local disk.
        requirements = [r for r in requirements if not r.startswith("torch")] + [TORCH_PIN]
        say(f"{TORCH_CPU_INDEX} is unreachable: installing {TORCH_PIN} from the default index")
    if _run([*pip, *requirements], log):
        stamp.write_text(wanted)
    else:
        say(f"the frameworks could not be installed (see {log}); their rows will be skipped")


def _reachable(url: str, timeout_s: float = 10.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return bool(response.status == 200)
    except (OSError, ValueError):
        return False


def ensure_perf_analyzer(log: Path) -> None:
    if not _run(["bash", str(PERF_ANALYZER_INSTALLER)], log):
        say(f"perf_analyzer could not be installed (see {log}); its rows will be skipped")


def ensure_real_triton(log: Path) -> None:
    setup = REAL_TRITON_TOOL / "setup.sh"
    if not setup.is_file():
        say(f"no real-Triton tool at {REAL_TRITON_TOOL}: Triton's rows will be skipped")
        return
    if not _run(["bash", str(setup)], log):
        say(f"the real Triton could not be installed (see {log}); its rows will be skipped")


def ensure_wrk(log: Path) -> None:
    if find_wrk().path is not None:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        say("wrk is not installed and apt-get is not usable here: the Python load generator")
        return
    say("installing wrk (apt-get)")
    install = ["apt-get", "install", "-y", "-qq", "wrk"]
    if not _run(install, log) and not (
        _run(["apt-get", "update", "-qq"], log) and _run(install, log)
    ):
        say(f"apt-get install wrk failed (see {log}): the Python load generator will be used")


def ensure_kserve(log: Path) -> None:
    peer = PEERS_DIR / "kserve"
    stamp = peer / FINGERPRINT_FILE
    if stamp.exists() and stamp.read_text() == KSERVE_REQUIREMENT:
        return
    python = _ensure_venv(peer)
    say(f"installing {KSERVE_REQUIREMENT} into {peer}")
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    if _run([*pip, KSERVE_REQUIREMENT], log):
        stamp.write_text(KSERVE_REQUIREMENT)
    else:
        say(f"{KSERVE_REQUIREMENT} could not be installed (see {log}); its rows will be skipped")


def install(servers: Sequence[str], http_client: str, *, frameworks: bool) -> Path:
    """Install everything a run of ``servers`` (with ``frameworks`` scenarios or not) needs;
    returns the bench venv's python."""
    BENCH_VENV.parent.mkdir(parents=True, exist_ok=True)
    log = BENCH_VENV.parent / "bench-install.log"
    python = ensure_bench_venv(log)
    if frameworks:
        ensure_frameworks(python, log)
    ensure_perf_analyzer(log)
    if "triton" in servers:
        ensure_real_triton(log)
    if http_client in ("auto", "wrk"):
        ensure_wrk(log)
    if "kserve" in servers:
        ensure_kserve(log)
    return python


def reexec(python: Path, argv: Sequence[str]) -> None:
    """Replace this process with ``python -m bench ARGV --no-install`` (never returns)."""
    env = dict(os.environ)
    env.setdefault(COMMAND_ENV, " ".join(["python -m bench", *sys.argv[1:]]))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(str(python), [str(python), "-m", "bench", *argv, "--no-install"], env)
