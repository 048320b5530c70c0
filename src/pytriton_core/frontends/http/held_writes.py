"""Answers written at the end of the event loop's turn, all together, rather than each the
moment it is made.

Why: a client that waits for its answers sleeps in ``epoll_wait``, and the write that
wakes it makes the kernel interrupt the CPU it sleeps on. On the 2-vCPU virtual machine
the benchmarks run on, that wake-up is the costliest part of a small request: under wrk
at 8 connections, the interrupt raised inside ``writev`` (``sock_def_readable``) took 18 %
of the server's CPU, and wrk slept once per answer (15,400 of its voluntary context
switches a second at 16,300 answers a second). When one turn of the loop answers several
requests (8 connections whose requests came together), writing their answers back to
back at the turn's end wakes the client once: it reads them all and sends the next ones
together (docs/benchmarks.md, "Answers written at the end of the loop's turn").

How: a connection's plain answer (``HttpProtocol._write``) is framed at once and held on
the connection; the first held in a turn schedules ``HeldWrites.flush`` (one
``call_soon``), which runs after the turn's other ready callbacks and I/O, before the
loop polls again. A connection writes what it holds before anything it writes directly
(an interim ``100 Continue``, a streamed answer, a probe) and before it closes, so a
connection's bytes keep their order. An answer that closes the connection or that a trace
times (its ``on_sent``) is written at once.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

log = logging.getLogger(__name__)


class Holder(Protocol):
    """A connection holding answers (``HttpProtocol``)."""

    def write_held(self) -> None: ...


class HeldWrites:
    """The connections of one event loop that hold answers this turn. An extension type
    (held_writes.pxd): every answer of a loaded server passes here."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._holders: list[Holder] = []

    def hold(self, holder: Holder) -> None:
        """``holder`` holds answers now: it writes them at the end of the turn."""
        if not self._holders:
            self._loop.call_soon(self.flush)
        self._holders.append(holder)

    def flush(self) -> None:
        holders, self._holders = self._holders, []
        for holder in holders:
            try:
                holder.write_held()
            except Exception:  # one connection's failure leaves the others' answers to go
                log.exception("writing a connection's held answers failed")
