"""Run the fuzzers: each for ``--seconds`` from its seed corpus, then a table of executions
and coverage. CI runs every one for a few seconds (tests/integration/test_fuzzers.py); a longer
run is, e.g.::

    .venv/bin/python tools/fuzz/run.py --seconds 600

New inputs go to a scratch corpus (``--work``, default .cache/fuzz/<target>), never into
the seeds in the repository; a crashing input is written to .cache/fuzz/artifacts/ and the
run fails with the target's traceback.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from instrumentation import ENVIRONMENT, SCOPES

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TARGETS = (
    "http_framing",
    "json_infer",
    "binary_split",
    "bytes_tensor",
    "grpc_infer",
    "h2_connection",
    "hpack_decode",
    "shm_parameters",
    "load_overrides",
    "model_config",
)
_STATUS = re.compile(r"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+)")
_EXECUTED = re.compile(r"stat::number_of_executed_units: (\d+)")


@dataclass
class Outcome:
    target: str
    returncode: int
    executions: int
    coverage: int
    features: int
    seconds: float
    output: str


def run_target(
    target: str, seconds: int, work: Path, extra: list[str], instrument: str = "all"
) -> Outcome:
    corpus = work / target
    corpus.mkdir(parents=True, exist_ok=True)
    artifacts = work / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        str(HERE / f"{target}.py"),
        str(corpus),
        str(HERE / "corpus" / target),
        f"-max_total_time={seconds}",
        "-timeout=30",  # one input running this long is a hang
        "-rss_limit_mb=3072",  # a leak or an unbounded allocation ends the run
        "-max_len=65536",
        "-print_final_stats=1",
        f"-artifact_prefix={artifacts}/{target}-",
        *extra,
    ]
    started = time.monotonic()
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=seconds + 1800,  # startup, fully instrumented, takes minutes on a busy machine
        cwd=REPO,
        env={**os.environ, ENVIRONMENT: instrument},
    )
    output = result.stdout + result.stderr
    statuses = _STATUS.findall(output)
    executed = _EXECUTED.findall(output)
    last = statuses[-1] if statuses else ("0", "0", "0")
    return Outcome(
        target,
        result.returncode,
        int(executed[-1]) if executed else int(last[0]),
        int(last[1]),
        int(last[2]),
        time.monotonic() - started,
        output,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*", help=f"default: all of {', '.join(TARGETS)}")
    parser.add_argument("--seconds", type=int, default=60, help="per target (default 60)")
    parser.add_argument("--work", type=Path, default=REPO / ".cache" / "fuzz")
    parser.add_argument("--fresh", action="store_true", help="start from the seeds only")
    parser.add_argument(
        "--instrument",
        choices=SCOPES,
        default="all",
        help="Python code given coverage counters: all (default) or the target's subject",
    )
    parser.add_argument(
        "--libfuzzer", action="append", default=[], metavar="FLAG", help="e.g. -jobs=2"
    )
    args = parser.parse_args(argv)
    unknown = [target for target in args.targets if target not in TARGETS]
    if unknown:
        parser.error(f"no such fuzzer: {', '.join(unknown)} (there are {', '.join(TARGETS)})")
    extra = args.libfuzzer
    if args.fresh:
        shutil.rmtree(args.work, ignore_errors=True)
    failed = []
    print(f"{'target':16} {'executions':>11} {'exec/s':>7} {'cov':>6} {'ft':>6}  result")
    for target in args.targets or TARGETS:
        outcome = run_target(target, args.seconds, args.work, extra, args.instrument)
        rate = outcome.executions / max(outcome.seconds, 1e-9)
        verdict = "ok" if outcome.returncode == 0 else f"FAILED ({outcome.returncode})"
        print(
            f"{target:16} {outcome.executions:>11} {rate:>7.0f} {outcome.coverage:>6} "
            f"{outcome.features:>6}  {verdict}",
            flush=True,
        )
        if outcome.returncode != 0:
            failed.append(outcome)
    for outcome in failed:
        print(f"\n----- {outcome.target} -----\n{outcome.output[-6000:]}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
