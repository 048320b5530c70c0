"""The clocks the request path reads: monotonic (nanoseconds and seconds) and the wall clock.

A compiled module reads them through ``clock.pxd`` (``from pytriton_core cimport clock``
in its ``.pxd`` beside ``from pytriton_core import clock`` in its ``.py``): there each call
is an inline ``clock_gettime``, without the attribute lookup on the ``time`` module, the call
through Python and the integer object that ``time.monotonic_ns()`` costs (a ``[16]`` HTTP
request reads a clock some fifteen times). Interpreted, these are the ``time`` functions
themselves; both read the same clocks, so values from either compare.
"""

from __future__ import annotations

from time import monotonic as now_s
from time import monotonic_ns as now_ns
from time import time_ns as wall_ns

__all__ = ["now_ns", "now_s", "wall_ns"]
