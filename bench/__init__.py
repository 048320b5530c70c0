"""Side-by-side benchmarks: pytriton-core, the real Triton and Python peers, one run, one machine.

    python -m bench                  # default preset; installs what it needs into .cache/
    python -m bench --quick          # a small subset, under 3 minutes
    python -m bench --servers ours --no-install --out /tmp/b

Each server under test serves the same model repository on free loopback ports and is driven by
the same clients (perf_analyzer where the server speaks enough of Triton's protocol, one common
HTTP load generator for all). Results land in ``--out``: ``results.csv``, ``results.json``,
``results.md`` (tables with ratios to the real Triton and to the peer) and PNG plots.
See docs/benchmarks.md.

Modules, by responsibility: ``cli`` (options), ``environment`` (installs into .cache/),
``toolbox`` (finds the installed tools), ``servers`` (start/stop, /proc accounting),
``procstats`` (CPU time and RSS of a process tree), ``payloads`` (model repositories and request
bodies), ``clients`` (perf_analyzer, wrk, the Python load generator), ``scenarios`` (presets),
``raw_backend`` (the model's execute in a loop), ``frameworks`` (the framework backends' MLP,
and the raw framework at the batch sizes served; ``backends.py`` is a command over it),
``runner`` (orchestration), ``results`` (CSV/JSON), ``report`` (Markdown), ``plots`` (PNG);
``peers/`` holds the Python peers' model code, run in their own venvs.
"""
