"""Load generators: perf_analyzer (Triton's own) and the common HTTP generators (wrk, Python).

Each one measures a single window and returns a :class:`~bench.clients.base.Window`; the runner
takes several and reports their median.
"""
