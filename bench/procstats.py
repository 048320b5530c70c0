"""CPU time and memory of a process tree, read from /proc (Linux only).

A server is often more than one process: Triton runs each Python model in a stub process, and
``start.sh`` wrappers or worker processes may sit beside the main one. Every figure here is summed
over the server's process and all its live descendants.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class TreeSample:
    """One reading of a process tree."""

    pids: tuple[int, ...]
    cpu_s: float  # user + system time of the live processes, in seconds
    rss_bytes: int  # VmRSS summed
    hwm_bytes: int  # VmHWM (peak RSS of each process since it started) summed


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    return text[text.rfind(")") + 2 :].split()


def _children_by_parent() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def process_tree(root: int) -> tuple[int, ...]:
    """``root`` and its live descendants."""
    children = _children_by_parent()
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending.extend(children.get(pid, ()))
    return tuple(tree)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process (0 when it is gone)."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    # After the name: state is index 0, so utime (field 14) is index 11 and stime index 12.
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def context_switches(pid: int) -> int:
    """Voluntary and involuntary context switches so far, over every thread of ``pid`` (0
    when it is gone)."""
    total = 0
    try:
        for task in (PROC / str(pid) / "task").iterdir():
            for line in (task / "status").read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total += int(line.split()[1])
    except OSError:  # gone meanwhile: what was counted
        pass
    return total


def _status_kib(pid: int, key: str) -> int:
    try:
        with open(PROC / str(pid) / "status") as status:
            for line in status:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def sample_tree(root: int) -> TreeSample:
    """CPU time and memory of ``root`` and its descendants, right now."""
    pids = process_tree(root)
    return TreeSample(
        pids=pids,
        cpu_s=sum(cpu_seconds(pid) for pid in pids),
        rss_bytes=sum(_status_kib(pid, "VmRSS:") for pid in pids) * 1024,
        hwm_bytes=sum(_status_kib(pid, "VmHWM:") for pid in pids) * 1024,
    )
