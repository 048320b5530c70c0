"""What a hand-off between two processes costs on this machine: wall time and CPU per round
trip of a small message over Unix sockets, the two processes on one CPU or on two.

    python -m bench.wake_costs [--round-trips 20000]

Each side waits in ``recv`` for the other's message, as the server's loop and a process-mode
worker do (one socket pair per direction, as ``process_transport.Channel`` uses). On one
CPU a message hands the CPU straight to the woken process; on two, the sender wakes a
sleeping CPU, which on a virtual machine is an interrupt through the hypervisor. The
figures say whether keeping a server and its worker on two CPUs can pay (docs/benchmarks.md,
"Process mode: bundles, and what stands in the way").
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import time


def _cpu_s(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def round_trips(count: int, cpus: tuple[int, int]) -> tuple[float, float, float]:
    """µs per round trip: wall time, the first process's CPU, the second's CPU."""
    to_child, child_receives = socket.socketpair()
    parent_receives, from_child = socket.socketpair()
    report_read, report_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the echoing side
        os.sched_setaffinity(0, {cpus[1]})
        for _ in range(count):
            from_child.send(child_receives.recv(64))
        os.write(report_write, repr(_cpu_s(resource.getrusage(resource.RUSAGE_SELF))).encode())
        os._exit(0)
    os.sched_setaffinity(0, {cpus[0]})
    time.sleep(0.05)
    start, used = time.perf_counter(), _cpu_s(resource.getrusage(resource.RUSAGE_SELF))
    for _ in range(count):
        to_child.send(b"x" * 32)
        parent_receives.recv(64)
    wall = time.perf_counter() - start
    used = _cpu_s(resource.getrusage(resource.RUSAGE_SELF)) - used
    os.waitpid(pid, 0)
    child = float(os.read(report_read, 64))
    for end in (to_child, child_receives, parent_receives, from_child):
        end.close()
    os.close(report_read)
    os.close(report_write)
    return wall / count * 1e6, used / count * 1e6, child / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--round-trips", type=int, default=20000)
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    layouts = [("one CPU", (cpus[0], cpus[0]))]
    if len(cpus) > 1:
        layouts.append(("two CPUs", (cpus[0], cpus[1])))
    for name, pair in layouts:
        wall, first, second = round_trips(args.round_trips, pair)
        print(
            f"{name}: {wall:.1f} µs per round trip; CPU per round trip {first:.1f} µs "
            f"(sender) + {second:.1f} µs (echo)",
            flush=True,
        )


if __name__ == "__main__":
    main()
