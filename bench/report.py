"""The Markdown report: tables with ratios, server costs, served vs raw, and what was skipped.

Also copies a run's report and plots into docs/ (``--publish-docs``): the results section of
docs/benchmarks.md between two marker comments, and the PNGs under docs/benchmarks/.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from bench.results import (
    FAILED,
    MIB,
    OK,
    PARTIAL,
    SKIPPED,
    Measurement,
    RunResults,
)
from bench.scenarios import HTTP_BINARY, SMALL
from bench.servers import FLOOR, KSERVE, LABELS, OURS, TRITON
from bench.toolbox import SERVER_KEYS

TABLE_HEADER_START = "| scenario | client | conc |"
DOCS_START = "<!-- bench:results:start -->"
DOCS_END = "<!-- bench:results:end -->"
PLOTS = ("throughput_vs_concurrency.png", "latency_percentiles.png")


class _Notes:
    """Numbered footnotes, one per distinct reason."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def mark(self, reason: str) -> str:
        reason = reason.strip() or "no reason given"
        if reason not in self.reasons:
            self.reasons.append(reason)
        return f"[{self.reasons.index(reason) + 1}]"

    def lines(self) -> list[str]:
        return [f"{number}. {reason}" for number, reason in enumerate(self.reasons, 1)]


def _servers(results: RunResults) -> list[str]:
    selected = set(results.info.get("servers", SERVER_KEYS))
    return [key for key in SERVER_KEYS if key in selected]


def _groups(results: RunResults) -> list[tuple[str, str, int]]:
    seen: dict[tuple[str, str, int], None] = {}
    for measurement in results.measurements:
        seen.setdefault(measurement.group, None)
    return list(seen)


def _first(results: RunResults, group: tuple[str, str, int]) -> Measurement:
    return next(m for m in results.measurements if m.group == group)


def _number(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "—"
    if digits == 0 and abs(value) < 10:  # a few requests per second: keep two figures
        return f"{value:.2g}" if value else "0"
    return f"{value:,.{digits}f}"


def _ms(value: float | None) -> str:
    if value is None:
        return "—"
    milliseconds = value / 1000
    return f"{milliseconds:.2f}" if milliseconds < 10 else f"{milliseconds:.0f}"


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def _cell_missing(measurement: Measurement | None, notes: _Notes) -> str | None:
    if measurement is None:
        return "—"
    if measurement.status in (SKIPPED, FAILED) or not measurement.windows:
        word = "failed" if measurement.status == FAILED else "n/a"
        return f"{word} {notes.mark(measurement.reason)}"
    return None


def _client_text(measurement: Measurement, windows: int) -> str:
    scenario = measurement.scenario
    if measurement.client == "perf_analyzer":
        return f"perf_analyzer, {windows}x[3x{scenario.pa_window_ms} ms]"
    return f"{measurement.client}, {windows}x{scenario.http_window_s} s"


def throughput_table(results: RunResults, notes: _Notes) -> list[str]:
    servers = _servers(results)
    others = [key for key in (TRITON, KSERVE, FLOOR) if key in servers and OURS in servers]
    header = ["scenario", "client", "conc"]
    for key in servers:
        header += [f"{LABELS[key]} inf/s", f"{LABELS[key]} p50 / p99 ms"]
    for key in others:
        header += [f"ours/{LABELS[key]} inf/s", f"ours/{LABELS[key]} p50"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    windows = int(results.info.get("windows", 3))
    for group in _groups(results):
        first = _first(results, group)
        cells = [first.scenario.title, _client_text(first, windows), str(first.concurrency)]
        for key in servers:
            measurement = results.find(key, group)
            missing = _cell_missing(measurement, notes)
            if missing is not None or measurement is None:
                cells += [missing or "—", "—"]
                continue
            summary = measurement.summary()
            flag = ""
            if measurement.status == PARTIAL or summary["errors"]:
                detail = f"{summary['errors']} errors; " if summary["errors"] else ""
                flag = " " + notes.mark(f"{detail}{measurement.reason}".strip("; "))
            cells.append(_number(summary["throughput"]) + flag)
            cells.append(f"{_ms(summary['p50_us'])} / {_ms(summary['p99_us'])}")
        ours = results.find(OURS, group)
        for key in others:
            if ours is None:
                cells += ["—", "—"]
                continue
            cells.append(_ratio(results.ratio(ours, key, "throughput")))
            cells.append(_ratio(results.ratio(ours, key, "p50_us")))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def cost_table(results: RunResults, notes: _Notes) -> list[str]:
    servers = _servers(results)
    header = ["scenario", "client", "conc"]
    header += [f"{LABELS[key]} CPU µs/req" for key in servers]
    header += [f"{LABELS[key]} avg batch" for key in servers if key not in (KSERVE, FLOOR)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    windows = int(results.info.get("windows", 3))
    for group in _groups(results):
        first = _first(results, group)
        cells = [first.scenario.title, _client_text(first, windows), str(first.concurrency)]
        found = [results.find(key, group) for key in servers]
        for measurement in found:
            missing = _cell_missing(measurement, notes)
            if missing is not None or measurement is None:
                cells.append("—" if missing is None else missing.split(" ", 1)[-1])
            else:
                cells.append(_number(measurement.cpu_us_per_request()))
        for key, measurement in zip(servers, found, strict=True):
            if key in (KSERVE, FLOOR):
                continue
            batch = measurement.average_batch() if measurement and measurement.windows else None
            cells.append(_number(batch, 2))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def memory_table(results: RunResults, notes: _Notes) -> list[str]:
    lines = [
        "| server | version | repository | ready after s | RSS idle MiB | peak RSS MiB | CPU s |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in results.servers:
        if run.status != OK:
            lines.append(
                f"| {LABELS[run.server]} | — | {run.repository} | {run.status} "
                f"{notes.mark(run.reason)} | — | — | — |"
            )
            continue
        idle = run.idle_rss_bytes / MIB if run.idle_rss_bytes else None
        peak = run.peak_rss_bytes / MIB if run.peak_rss_bytes else None
        lines.append(
            f"| {LABELS[run.server]} | {run.version} | {run.repository} | "
            f"{_number(run.started_s, 1)} | {_number(idle)} | {_number(peak)} | "
            f"{_number(run.cpu_s, 1)} |"
        )
    return lines


def _best(results: RunResults, server: str, dynamic_batching: bool) -> Measurement | None:
    """The highest-throughput [16] HTTP-binary measurement of ``server``."""
    candidates = [
        m
        for m in results.measurements
        if m.server == server
        and m.has_figures
        and m.scenario.backend is None
        and m.scenario.elements == SMALL
        and m.scenario.protocol == HTTP_BINARY
        and m.scenario.dynamic_batching == dynamic_batching
    ]
    return max(candidates, key=lambda m: m.median("throughput") or 0.0, default=None)


def raw_table(results: RunResults) -> list[str]:
    if not results.raw:
        return ["The raw backend was not measured."]
    servers = [key for key in (OURS, TRITON) if key in _servers(results)]
    header = ["batch size", "raw execute() inf/s", "µs/inf"]
    for key in servers:
        header += [f"{LABELS[key]} served inf/s", f"{LABELS[key]} served/raw"]
    header.append("served figure from")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for raw in results.raw:
        cells = [str(raw.batch_size), _number(raw.inf_per_s), _number(raw.us_per_inference, 2)]
        sources = []
        for key in servers:
            # Batch 1: plain scheduling; larger batches come from the dynamic batcher.
            best = _best(results, key, dynamic_batching=raw.batch_size > 1)
            served = best.median("throughput") if best else None
            cells += [_number(served), _ratio(served / raw.inf_per_s if served else None)]
            if best is not None:
                sources.append(
                    f"{LABELS[key]}: {best.scenario.title} {best.client} c{best.concurrency}"
                )
        cells.append("; ".join(sources) or "—")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def framework_table(results: RunResults, notes: _Notes) -> list[str]:
    """Served vs the raw framework, per framework measurement of pytriton-core."""
    rows = [m for m in results.measurements if m.scenario.backend and m.server == OURS]
    if not rows:
        return []
    lines = [
        "### Framework backends: served vs raw",
        "",
        "Served: pytriton-core's figure from the table above. Raw: the framework's own call in "
        "a loop in the bench's process (same intra-op threads, no server), at each batch size "
        "the server formed during those windows (its statistics, `batch_stats`), weighted as "
        "the server ran them: rows ÷ the raw time of the same batches.",
        "",
        "| scenario | client | conc | served inf/s | avg batch | raw inf/s, same batches | "
        "served/raw | batches formed (size:count) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    windows = int(results.info.get("windows", 3))
    for m in rows:
        cells = [m.scenario.title, _client_text(m, windows), str(m.concurrency)]
        missing = _cell_missing(m, notes)
        if missing is not None:
            lines.append("| " + " | ".join([*cells, missing, "—", "—", "—", "—"]) + " |")
            continue
        raw = m.raw.inf_per_s if m.raw else None
        cells += [
            _number(m.median("throughput")),
            _number(m.average_batch(), 2),
            _number(raw),
            _ratio(m.served_vs_raw()),
            m.raw.formed() if m.raw else "—",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def render(results: RunResults, plots: Iterable[str] = PLOTS, image_dir: str = ".") -> str:
    info = results.info
    notes = _Notes()
    throughput = throughput_table(results, notes)
    cost = cost_table(results, notes)
    memory = memory_table(results, notes)
    framework = framework_table(results, notes)
    identity_raw: list[str] = []
    if results.raw or any(m.scenario.backend is None for m in results.measurements):
        identity_raw = [
            "### Served vs raw backend",
            "",
            "Raw: the identity model's `execute()` called in a loop in-process with pb_utils "
            "requests (pytriton-core's pb_utils), no server. Served: the best [16] HTTP-binary "
            "figure, without dynamic batching for batch 1, with it for larger batches.",
            "",
            *raw_table(results),
            "",
        ]
    load = info.get("load_average_start"), info.get("load_average_end")
    lines = [
        f"## Results: {info.get('preset')} preset, {info.get('started_at')}",
        "",
        f"`{info.get('command')}` on {info.get('machine')}; commit {info.get('git_commit')}, "
        f"Python {info.get('python')}; took {info.get('duration_s')} s; load average "
        f"{load[0]} at the start, {load[1]} at the end. Each figure is the median of "
        f"{info.get('windows')} windows; a ratio is ours ÷ theirs for the same scenario, client "
        "and concurrency in this run, the median of the per-window ratios (windows ran back to "
        "back), so it can differ from the ratio of the medians shown; inf/s above 1 and p50 "
        "below 1 favour pytriton-core.",
        "",
        "### Throughput and latency",
        "",
        *throughput,
        "",
        "### Server cost",
        "",
        "CPU time of the server's whole process tree per request served (from /proc), "
        "and the average batch the model executed (statistics extension).",
        "",
        *cost,
        "",
        *memory,
        "",
        *identity_raw,
        *framework,
    ]
    plot_list = list(plots)
    if plot_list:
        lines += ["### Plots", ""]
        lines += [f"![{name}]({image_dir}/{name})" for name in plot_list]
        lines.append("")
    if results.notes or notes.reasons:
        lines += ["### Notes", "", *notes.lines(), *[f"- {note}" for note in results.notes], ""]
    lines += ["### Clients", ""]
    settings = sorted({(m.client, m.settings) for m in results.measurements if m.settings})
    lines += [f"- `{client}`: {text}" for client, text in settings]
    return "\n".join(lines) + "\n"


def publish_docs(markdown: str, plot_files: Iterable[Path], docs_dir: Path) -> Path:
    """Put ``markdown`` between the markers of docs/benchmarks.md and the plots beside it."""
    page = docs_dir / "benchmarks.md"
    images = docs_dir / "benchmarks"
    images.mkdir(parents=True, exist_ok=True)
    for plot in plot_files:
        shutil.copyfile(plot, images / plot.name)
    text = page.read_text() if page.exists() else f"# Benchmarks\n\n{DOCS_START}\n{DOCS_END}\n"
    if DOCS_START not in text or DOCS_END not in text:
        text = text.rstrip("\n") + f"\n\n{DOCS_START}\n{DOCS_END}\n"
    head, rest = text.split(DOCS_START, 1)
    _, tail = rest.split(DOCS_END, 1)
    page.write_text(f"{head}{DOCS_START}\n{markdown.rstrip()}\n{DOCS_END}{tail}")
    return page
