"""A run's results: measurements (windows and their medians), ratios, CSV and JSON files.

Every figure is the median over a measurement's windows. Ratios compare a server with the real
Triton and with the Python peer measured in the same run, for the same scenario, client and
concurrency (a framework scenario's measurement also carries its served/raw ratio, see
bench.frameworks): ``throughput ratio`` = this server's / the other's (above 1: faster), ``p50
ratio`` = this server's median latency / the other's (below 1: quicker); each is the median of
the per-window ratios (see :meth:`RunResults.ratio`).
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.clients.base import Window
from bench.frameworks import RawMix
from bench.raw_backend import RawResult
from bench.scenarios import Scenario
from bench.servers import KSERVE, LABELS, TRITON

SCHEMA = "pytriton-core-bench/1"
OK, PARTIAL, SKIPPED, FAILED = "ok", "partial", "skipped", "failed"
MIB = 1 << 20


@dataclass
class Measurement:
    server: str  # "ours", "triton", "kserve"
    scenario: Scenario
    client: str  # the tool: perf_analyzer, wrk, python-asyncio
    settings: str  # the tool's version and settings
    concurrency: int
    status: str = OK
    reason: str = ""
    windows: list[Window] = field(default_factory=list)
    peak_rss_bytes: int | None = None  # the server's VmHWM after this measurement
    problems: dict[str, list[str]] = field(default_factory=dict)  # message -> window names
    batches: dict[int, int] = field(default_factory=dict)  # batch size -> executions, all windows
    raw: RawMix | None = None  # framework scenarios: the raw framework on the same batches

    def note(self, window: str, message: str) -> None:
        """Record what went wrong in ``window``; ``reason`` lists every distinct message."""
        self.problems.setdefault(message, []).append(window)
        self.reason = "; ".join(
            f"{', '.join(windows)}: {text}" for text, windows in self.problems.items()
        )

    @property
    def group(self) -> tuple[str, str, int]:
        """Measurements in one group are comparable: same scenario, client and concurrency."""
        return (self.scenario.key, self.client, self.concurrency)

    @property
    def has_figures(self) -> bool:
        return self.status in (OK, PARTIAL) and bool(self.windows)

    def median(self, name: str) -> float | None:
        values = [getattr(w, name) for w in self.windows if getattr(w, name) is not None]
        return float(statistics.median(values)) if values else None

    def cpu_us_per_request(self) -> float | None:
        """Median over windows of the server's CPU time / the requests it served in the window."""
        per_window = []
        for window in self.windows:
            served = window.server_requests
            if served is None and window.requests is not None:
                served = window.requests - window.errors
            if window.cpu_s is not None and served:
                per_window.append(window.cpu_s * 1e6 / served)
        return statistics.median(per_window) if per_window else None

    def average_batch(self) -> float | None:
        requests = sum(w.server_requests or 0 for w in self.windows)
        executions = sum(w.server_executions or 0 for w in self.windows)
        return requests / executions if executions else None

    def served_vs_raw(self) -> float | None:
        served = self.median("throughput")
        raw = self.raw.inf_per_s if self.raw else None
        return served / raw if served and raw else None

    def errors(self) -> int:
        return sum(w.errors for w in self.windows)

    def summary(self) -> dict[str, Any]:
        return {
            "throughput": self.median("throughput"),
            "p50_us": self.median("p50_us"),
            "p90_us": self.median("p90_us"),
            "p95_us": self.median("p95_us"),
            "p99_us": self.median("p99_us"),
            "mean_us": self.median("mean_us"),
            "cpu_us_per_request": self.cpu_us_per_request(),
            "average_batch": self.average_batch(),
            "errors": self.errors(),
            "peak_rss_mib": self.peak_rss_bytes / MIB if self.peak_rss_bytes else None,
        }


@dataclass
class ServerRun:
    """One server process: which repository it served, how it started, what it used."""

    server: str
    repository: str  # "default" or "dynamic-batching"
    version: str = "?"
    status: str = OK
    reason: str = ""
    started_s: float | None = None
    idle_rss_bytes: int | None = None
    peak_rss_bytes: int | None = None
    cpu_s: float | None = None


@dataclass
class RunResults:
    info: dict[str, Any]
    measurements: list[Measurement] = field(default_factory=list)
    servers: list[ServerRun] = field(default_factory=list)
    raw: list[RawResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def find(self, server: str, group: tuple[str, str, int]) -> Measurement | None:
        for measurement in self.measurements:
            if measurement.server == server and measurement.group == group:
                return measurement
        return None

    def ratio(self, measurement: Measurement, other: str, name: str) -> float | None:
        """``measurement``'s ``name`` divided by server ``other``'s, same group.

        The servers' windows ran back to back (window i of each, then window i + 1), so the
        ratio is the median of the per-window ratios, which cancels load that drifts over the
        run; without paired windows it is the ratio of the medians.
        """
        reference = self.find(other, measurement.group)
        if reference is None or not (reference.has_figures and measurement.has_figures):
            return None
        pairs = [
            (getattr(mine, name), getattr(theirs, name))
            for mine, theirs in zip(measurement.windows, reference.windows, strict=False)
        ]
        if len(measurement.windows) == len(reference.windows) and all(b for _, b in pairs):
            return float(statistics.median(a / b for a, b in pairs))
        mine, theirs = measurement.median(name), reference.median(name)
        if mine is None or not theirs:
            return None
        return mine / theirs


def _round(value: float | None, digits: int = 3) -> float | None:
    if value is None or math.isnan(value):
        return None
    return round(value, digits)


CSV_COLUMNS = (
    "server",
    "server_version",
    "scenario",
    "shape",
    "protocol",
    "dynamic_batching",
    "client",
    "settings",
    "concurrency",
    "status",
    "reason",
    "windows",
    "throughput_infer_per_s",
    "p50_us",
    "p90_us",
    "p95_us",
    "p99_us",
    "mean_us",
    "throughput_vs_triton",
    "p50_vs_triton",
    "throughput_vs_kserve",
    "p50_vs_kserve",
    "cpu_us_per_request",
    "average_batch",
    "raw_infer_per_s",
    "served_vs_raw",
    "batches_formed",
    "errors",
    "peak_rss_mib",
    "throughput_per_window",
)


def _versions(results: RunResults) -> dict[str, str]:
    return {run.server: run.version for run in results.servers if run.status == OK}


def measurement_record(results: RunResults, measurement: Measurement) -> dict[str, Any]:
    summary = measurement.summary()
    scenario = measurement.scenario
    return {
        "server": measurement.server,
        "server_version": _versions(results).get(measurement.server, "?"),
        "scenario": scenario.key,
        "shape": f"[1,{scenario.elements}]",
        "protocol": scenario.protocol,
        "dynamic_batching": scenario.dynamic_batching,
        "client": measurement.client,
        "settings": measurement.settings,
        "concurrency": measurement.concurrency,
        "status": measurement.status,
        "reason": measurement.reason,
        "windows": len(measurement.windows),
        "throughput_infer_per_s": _round(summary["throughput"], 1),
        "p50_us": _round(summary["p50_us"], 1),
        "p90_us": _round(summary["p90_us"], 1),
        "p95_us": _round(summary["p95_us"], 1),
        "p99_us": _round(summary["p99_us"], 1),
        "mean_us": _round(summary["mean_us"], 1),
        "throughput_vs_triton": _round(results.ratio(measurement, TRITON, "throughput")),
        "p50_vs_triton": _round(results.ratio(measurement, TRITON, "p50_us")),
        "throughput_vs_kserve": _round(results.ratio(measurement, KSERVE, "throughput")),
        "p50_vs_kserve": _round(results.ratio(measurement, KSERVE, "p50_us")),
        "cpu_us_per_request": _round(summary["cpu_us_per_request"], 1),
        "average_batch": _round(summary["average_batch"], 2),
        "raw_infer_per_s": _round(measurement.raw.inf_per_s, 1) if measurement.raw else None,
        "served_vs_raw": _round(measurement.served_vs_raw()),
        "batches_formed": measurement.raw.formed() if measurement.raw else None,
        "errors": summary["errors"],
        "peak_rss_mib": _round(summary["peak_rss_mib"], 1),
        "throughput_per_window": ";".join(f"{w.throughput:.1f}" for w in measurement.windows),
    }


def write_csv(results: RunResults, path: Path) -> None:
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for measurement in results.measurements:
            record = measurement_record(results, measurement)
            writer.writerow({key: "" if value is None else value for key, value in record.items()})


def to_json(results: RunResults) -> dict[str, Any]:
    measurements = []
    for measurement in results.measurements:
        record = measurement_record(results, measurement)
        record.pop("throughput_per_window")
        record["title"] = measurement.scenario.title
        record["elements"] = measurement.scenario.elements
        record["backend"] = measurement.scenario.backend
        if measurement.raw is not None:
            record["raw_infer_per_s_by_batch_size"] = {
                str(size): _round(rate, 1) for size, rate in measurement.raw.raw_by_size.items()
            }
        record["window_list"] = [
            {
                key: _round(value) if isinstance(value, float) else value
                for key, value in asdict(w).items()
            }
            for w in measurement.windows
        ]
        measurements.append(record)
    return {
        "schema": SCHEMA,
        "run": results.info,
        "servers": [
            {
                **asdict(run),
                "label": LABELS[run.server],
                "idle_rss_mib": _round(run.idle_rss_bytes / MIB, 1) if run.idle_rss_bytes else None,
                "peak_rss_mib": _round(run.peak_rss_bytes / MIB, 1) if run.peak_rss_bytes else None,
            }
            for run in results.servers
        ],
        "raw_backend": [
            {
                "batch_size": raw.batch_size,
                "shape": f"[1,{raw.elements}]",
                "infer_per_s": _round(raw.inf_per_s, 1),
                "us_per_inference": _round(raw.us_per_inference, 3),
                "infer_per_s_per_window": [_round(rate, 1) for rate in raw.windows_inf_per_s],
            }
            for raw in results.raw
        ],
        "measurements": measurements,
        "notes": results.notes,
    }


def write_json(results: RunResults, path: Path) -> None:
    path.write_text(json.dumps(to_json(results), indent=2) + "\n")
