"""``python -m bench``: options, then install (unless ``--no-install``), run, and write files.

Until the bench has re-run itself in its venv, only the standard library is importable: this
module imports the rest of the package (numpy, matplotlib...) inside :func:`run`.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench import environment, toolbox
from bench.scenarios import PRESETS, Preset, select
from bench.toolbox import SERVER_KEYS

MIN_WINDOWS = 3


def _servers(text: str) -> tuple[str, ...]:
    names = {name.strip() for name in text.split(",") if name.strip()}
    unknown = names - set(SERVER_KEYS)
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"servers are a comma-separated list of {', '.join(SERVER_KEYS)}"
        )
    return tuple(key for key in SERVER_KEYS if key in names)


def _scenarios(text: str) -> tuple[str, ...]:
    patterns = tuple(word.strip() for word in text.split(",") if word.strip())
    if not patterns:
        raise argparse.ArgumentTypeError("a comma-separated list of parts of scenario keys")
    return patterns


def _preset(args: argparse.Namespace) -> Preset:
    """The chosen preset, less the scenarios ``--scenarios`` leaves out."""
    preset = PRESETS[args.preset]
    if args.scenarios is None:
        return preset
    chosen = select(preset, args.scenarios)
    if not chosen.scenarios:
        keys = ", ".join(s.key for s in preset.scenarios)
        raise SystemExit(f"--scenarios matches none of the {preset.name} preset's: {keys}")
    return chosen


def _windows(text: str) -> int:
    value = int(text)
    if value < MIN_WINDOWS:
        raise argparse.ArgumentTypeError(f"at least {MIN_WINDOWS} windows")
    return value


def _workers(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("at least 1 worker")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark pytriton-core side by side with the real Triton and KServe.",
        allow_abbrev=False,
    )
    preset = parser.add_mutually_exclusive_group()
    preset.add_argument("--preset", choices=sorted(PRESETS), default="default")
    preset.add_argument(
        "--quick", action="store_const", const="quick", dest="preset", help="--preset quick"
    )
    parser.add_argument(
        "--servers",
        type=_servers,
        default=SERVER_KEYS,
        help=f"comma-separated, from {','.join(SERVER_KEYS)} (default: all)",
    )
    parser.add_argument(
        "--scenarios",
        type=_scenarios,
        help="comma-separated; run only the preset's scenarios whose key contains one of them "
        "(e.g. mlp, or 16-grpc,1Mi-grpc); the keys are in docs/benchmarks.md",
    )
    parser.add_argument(
        "--out", type=Path, help="results folder (default: .cache/bench-results/<UTC time>)"
    )
    parser.add_argument(
        "--windows",
        type=_windows,
        default=MIN_WINDOWS,
        help=f"windows per figure, median taken (default and minimum {MIN_WINDOWS})",
    )
    parser.add_argument(
        "--http-client",
        choices=("auto", "wrk", "python"),
        default="auto",
        help="the common HTTP load generator (auto: wrk when installed)",
    )
    parser.add_argument(
        "--ours-workers",
        type=_workers,
        default=1,
        help="run pytriton-core with --workers N (default 1: one process, one event loop); "
        "the report's command line says which",
    )
    parser.add_argument(
        "--no-install",
        action="store_true",
        help="use this interpreter and the tools already installed; create no venv",
    )
    parser.add_argument(
        "--publish-docs",
        action="store_true",
        help="also write the report into docs/benchmarks.md and the plots into docs/benchmarks/",
    )
    return parser


def _stop_on_sigterm(signum: int, frame: object) -> None:
    # Unwinds the runner's context managers, which stop the servers it started.
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    argv = list(sys.argv[1:] if argv is None else argv)
    out = args.out or toolbox.CACHE / "bench-results" / time.strftime(
        "%Y%m%d-%H%M%S", time.gmtime()
    )
    out = out.resolve()
    preset = _preset(args)
    if not args.no_install:
        try:
            python = environment.install(
                args.servers,
                args.http_client,
                frameworks=any(s.backend for s in preset.scenarios),
            )
        except environment.InstallError as error:
            print(f"bench: {error}", file=sys.stderr)
            return 2
        # The same command in the bench venv, writing where this one would have.
        environment.reexec(python, [*_without_option(argv, "--out"), f"--out={out}"])
    return run(args, out)


def run(args: argparse.Namespace, out: Path) -> int:
    from bench.plots import matplotlib_missing, write_plots
    from bench.report import publish_docs, render
    from bench.results import write_csv, write_json
    from bench.runner import Runner, RunOptions, log

    out.mkdir(parents=True, exist_ok=True)
    options = RunOptions(
        preset=_preset(args),
        servers=args.servers,
        out=out,
        windows=args.windows,
        http_client=args.http_client,
        ours_workers=args.ours_workers,
    )
    results = Runner(options, toolbox.discover(args.servers)).run()
    write_csv(results, out / "results.csv")
    missing = matplotlib_missing()
    plots = [] if missing else write_plots(results, out)
    if missing:
        results.notes.append(f"plots skipped: {missing}")
    write_json(results, out / "results.json")
    markdown = render(results, [plot.name for plot in plots])
    (out / "results.md").write_text(markdown)
    if args.publish_docs:
        page = publish_docs(
            render(results, [plot.name for plot in plots], image_dir="benchmarks"),
            plots,
            toolbox.REPO_ROOT / "docs",
        )
        log(f"published to {page}")
    print(markdown)
    log(f"results in {out} (results.csv, results.json, results.md, plots)")
    return 0 if any(m.has_figures for m in results.measurements) else 1


def _without_option(argv: Sequence[str], name: str) -> list[str]:
    """``argv`` without ``name VALUE`` / ``name=VALUE``."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == name:
            skip = True
        elif not arg.startswith(f"{name}="):
            kept.append(arg)
    return kept
