"""``python -m bench``: see bench/__init__.py and docs/benchmarks.md."""

from bench.cli import main

raise SystemExit(main())
