"""Runs a preset: the raw backend, then each repository phase with its servers side by side.

The phases: the identity model as shipped, the identity model with dynamic batching, then the
framework backends' MLPs (pytriton-core only: the other servers have no such backends here),
followed by the raw framework on the batches each framework measurement formed.

All selected servers of a phase run at once (idle ones cost next to nothing) and the windows
are interleaved: window 1 of every server, then window 2 of every server, and so on. On a
shared, noisy machine a burst of background load then hits all servers alike, which keeps the
ratios steady even when absolute numbers move.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from bench import frameworks
from bench.clients.base import ClientError, Window
from bench.clients.http_target import HttpTarget, verify
from bench.clients.perf_analyzer import PerfAnalyzer, PerfAnalyzerRun
from bench.clients.pyload import PythonLoad
from bench.clients.wrk import Wrk
from bench.environment import COMMAND_ENV
from bench.payloads import INPUT_NAME, MODEL_NAME, HttpBody, http_body, prepare_repository
from bench.raw_backend import measure_raw
from bench.results import FAILED, OK, PARTIAL, SKIPPED, Measurement, RunResults, ServerRun
from bench.scenarios import (
    GRPC,
    HTTP_BINARY,
    HTTP_JSON,
    HTTP_LOAD,
    PERF_ANALYZER,
    SHM_SYSTEM,
    SMALL,
    Preset,
    Scenario,
)
from bench.servers import (
    FLOOR,
    KSERVE,
    KSERVE_NO_BATCHER,
    LABELS,
    OURS,
    TRITON,
    RunningServer,
    ServerStartError,
    run_server,
    unavailable_reason,
)
from bench.toolbox import REPO_ROOT, Toolbox

HTTP_PROTOCOLS = (HTTP_BINARY, HTTP_JSON)
LOOPBACK = "127.0.0.1"
WARMUP_S = 1
RAW_SECONDS_PER_BATCH_SIZE = 0.5  # framework scenarios: raw loop time per batch size formed
NO_FRAMEWORK_BACKENDS = {
    TRITON: "the real Triton's PyPI build (nvidia-pytriton) has no onnxruntime or pytorch backend",
    KSERVE: "the KServe peer serves only the identity model (bench/peers)",
    FLOOR: "the floor answers only the identity model's requests",
}
IDLE_PROBE_S, IDLE_CPU, IDLE_WAIT_S = 0.1, 0.2, 20.0


@dataclass(frozen=True)
class RunOptions:
    """The resolved options of one run (see bench.cli)."""

    preset: Preset
    servers: tuple[str, ...]
    out: Path
    windows: int
    http_client: str  # "auto", "wrk" or "python"
    ours_workers: int = 1  # pytriton-core's --workers


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Runner:
    def __init__(self, options: RunOptions, tools: Toolbox) -> None:
        self.options = options
        self.tools = tools
        self.logs = options.out / "logs"
        self.work = options.out / "work"
        for folder in (self.logs, self.work):
            folder.mkdir(parents=True, exist_ok=True)
        self.perf_analyzer: PerfAnalyzer | None = None
        self.perf_analyzer_reason = tools.perf_analyzer.reason
        if tools.perf_analyzer.path is not None:
            self.perf_analyzer = PerfAnalyzer(tools.perf_analyzer.path)
        self.http_load, self.http_load_note = self._pick_http_load()
        self.results = RunResults(info={})
        self._unavailable: dict[str, str] = {}  # framework backend -> why not
        self._done = 0
        self._planned = sum(
            len(s.clients) * len(s.concurrencies) * len(options.servers)
            for s in options.preset.scenarios
        )

    def _pick_http_load(self) -> tuple[Wrk | PythonLoad, str]:
        choice = self.options.http_client
        if choice == "python" or (choice == "auto" and self.tools.wrk.path is None):
            note = "" if choice == "python" else f"{self.tools.wrk.reason}: using the Python one"
            return PythonLoad(), note
        if self.tools.wrk.path is None:
            raise SystemExit(f"--http-client wrk: {self.tools.wrk.reason}")
        return Wrk(self.tools.wrk.path), ""

    # ---- the run -------------------------------------------------------------------------

    def run(self) -> RunResults:
        started = time.time()
        self.results.info = self._info(started)
        if self.http_load_note:
            self.results.notes.append(f"HTTP load generator: {self.http_load_note}")
        identity = [s for s in self.options.preset.scenarios if s.backend is None]
        if identity:
            self._measure_raw()
        for batching in (False, True):
            scenarios = [s for s in identity if s.dynamic_batching == batching]
            if scenarios:
                tag = "dynamic-batching" if batching else "default"
                repository = prepare_repository(self.work, dynamic_batching=batching)
                skipped = {KSERVE: KSERVE_NO_BATCHER} if batching else {}
                self._phase(tag, repository, scenarios, (MODEL_NAME,), skipped)
        framework = [s for s in self.options.preset.scenarios if s.backend is not None]
        if framework:
            self._frameworks_phase(framework)
        self.results.info["duration_s"] = round(time.time() - started, 1)
        self.results.info["load_average_end"] = _load_average()
        return self.results

    def _measure_raw(self) -> None:
        preset = self.options.preset
        log(f"raw backend: execute() in a loop, batch sizes {preset.raw_batch_sizes}")
        try:
            self.results.raw = measure_raw(
                preset.raw_batch_sizes, SMALL, preset.raw_window_s, self.options.windows
            )
        except Exception as error:  # the rest of the run does not depend on it
            self.results.notes.append(f"raw backend not measured: {type(error).__name__}: {error}")

    def _frameworks_phase(self, scenarios: list[Scenario]) -> None:
        backends = list(dict.fromkeys(s.backend for s in scenarios if s.backend))
        for backend in backends:
            reason = frameworks.missing(backend)
            if reason:
                self._unavailable[backend] = reason
        available = [b for b in backends if b not in self._unavailable]
        skipped = dict(NO_FRAMEWORK_BACKENDS)
        repository = self._frameworks_repository
        folder = repository.parent
        if available:
            log(f"building the framework models: {', '.join(available)}")
            try:
                repository = frameworks.build_repository(folder, available)
            except Exception as error:
                for backend in available:
                    self._unavailable[backend] = f"the model was not built: {error}"
                available = []
        if not available:
            skipped[OURS] = "; ".join(sorted(set(self._unavailable.values())))
        models = tuple(frameworks.MODELS[b].name for b in available)
        self._phase("frameworks", repository, scenarios, models, skipped)
        for backend in available:
            rows = [
                m
                for m in self.results.measurements
                if m.server == OURS and m.scenario.backend == backend and m.has_figures
            ]
            if not rows:
                continue
            log(f"raw {backend}: the framework in a loop at the batch sizes the server formed")
            try:
                mixes = frameworks.raw_mixes(
                    backend,
                    repository,
                    [m.batches for m in rows],
                    seconds_per_size=RAW_SECONDS_PER_BATCH_SIZE,
                )
            except Exception as error:  # the served figures stand without it
                self.results.notes.append(
                    f"raw {backend} not measured: {type(error).__name__}: {error}"
                )
                continue
            for row, mix in zip(rows, mixes, strict=True):
                row.raw = mix

    def _phase(
        self,
        tag: str,
        repository: Path,
        scenarios: list[Scenario],
        models: tuple[str, ...],
        skipped: dict[str, str],
    ) -> None:
        with contextlib.ExitStack() as stack:
            running: dict[str, RunningServer] = {}
            runs: dict[str, ServerRun] = {}
            for key in self.options.servers:
                run = ServerRun(key, tag)
                runs[key] = run
                self.results.servers.append(run)
                reason = skipped.get(key) or unavailable_reason(key, self.tools)
                if reason:
                    run.status, run.reason = SKIPPED, reason
                    continue
                log(f"starting {LABELS[key]} ({tag} repository)")
                try:
                    server = stack.enter_context(
                        run_server(
                            key,
                            repository,
                            self.tools,
                            self.logs,
                            tag,
                            models,
                            ours_workers=self.options.ours_workers,
                        )
                    )
                except ServerStartError as error:
                    run.status, run.reason = FAILED, str(error).splitlines()[0]
                    log(f"{LABELS[key]} failed to start: {error}")
                    continue
                running[key] = server
                sample = server.sample()
                run.version, run.started_s = server.version, round(server.started_s, 2)
                run.idle_rss_bytes = sample.rss_bytes
                log(f"{LABELS[key]} {server.version} ready in {server.started_s:.1f} s")
            for scenario in scenarios:
                self._scenario(scenario, running, runs)
            for key, server in running.items():
                if server.alive():
                    sample = server.sample()
                    runs[key].peak_rss_bytes, runs[key].cpu_s = sample.hwm_bytes, sample.cpu_s
            log(f"stopping the servers of the {tag} phase")

    def _scenario(
        self, scenario: Scenario, running: dict[str, RunningServer], runs: dict[str, ServerRun]
    ) -> None:
        payload, body_file = None, None
        if scenario.protocol in HTTP_PROTOCOLS and scenario.backend is None:
            payload = http_body(scenario.elements, binary=scenario.protocol == HTTP_BINARY)
            body_file = self.work / f"body-{scenario.key}.bin"
            body_file.write_bytes(payload.body)
        wrong_answer: dict[str, str | None] = {}  # per server, checked once per scenario
        for client in scenario.clients:
            for concurrency in scenario.concurrencies:
                rows: dict[str, Measurement] = {}
                for key in self.options.servers:
                    row = self._new_row(key, client, scenario, concurrency)
                    reason = self._why_not(key, client, scenario, running, runs)
                    if reason is None and payload is not None and body_file is not None:
                        if key not in wrong_answer:
                            port = running[key].http_port
                            wrong_answer[key] = verify(
                                HttpTarget(LOOPBACK, port, payload, body_file)
                            )
                        if wrong_answer[key] is not None:
                            row.status, row.reason = FAILED, f"wrong answer: {wrong_answer[key]}"
                            self._report(row)
                            continue
                    if reason is not None:
                        row.status, row.reason = SKIPPED, reason
                        self._report(row)
                        continue
                    rows[key] = row
                if rows:
                    self._measure_group(rows, client, scenario, running, payload, body_file)
                for key, row in rows.items():
                    if running[key].alive():
                        row.peak_rss_bytes = running[key].sample().hwm_bytes
                    self._report(row)

    def _new_row(self, key: str, client: str, scenario: Scenario, concurrency: int) -> Measurement:
        windows = self.options.windows
        if client == PERF_ANALYZER:
            name, settings = PERF_ANALYZER, ""
            if self.perf_analyzer is not None:
                run = self._pa_run(scenario, "", concurrency)
                settings = f"{self.perf_analyzer.settings(run)}; median of {windows} runs"
        else:
            name = self.http_load.name
            settings = (
                f"{self.http_load.settings(scenario.http_window_s)}; "
                f"{WARMUP_S}s warm-up, median of {windows} windows"
            )
        row = Measurement(key, scenario, name, settings, concurrency)
        self.results.measurements.append(row)
        return row

    def _why_not(
        self,
        key: str,
        client: str,
        scenario: Scenario,
        running: dict[str, RunningServer],
        runs: dict[str, ServerRun],
    ) -> str | None:
        if key not in running:
            return runs[key].reason or f"{LABELS[key]} is not running"
        if scenario.backend in self._unavailable:
            return self._unavailable[scenario.backend]
        capabilities = running[key].capabilities
        if client == PERF_ANALYZER:
            if self.perf_analyzer is None:
                return self.perf_analyzer_reason
            if capabilities.perf_analyzer:
                return capabilities.perf_analyzer
        elif scenario.protocol not in HTTP_PROTOCOLS:
            return f"the HTTP load generator does not speak {scenario.protocol}"
        elif scenario.backend is not None:
            return "the HTTP load generator sends the identity model's request only"
        if scenario.protocol == GRPC and capabilities.grpc:
            return capabilities.grpc
        if scenario.protocol == SHM_SYSTEM and capabilities.system_shared_memory:
            return capabilities.system_shared_memory
        if scenario.dynamic_batching and capabilities.dynamic_batching:
            return capabilities.dynamic_batching
        return None

    def _pa_run(self, scenario: Scenario, url: str, concurrency: int) -> PerfAnalyzerRun:
        return PerfAnalyzerRun(
            url=url,
            protocol="grpc" if scenario.protocol == GRPC else "http",
            elements=scenario.elements,
            concurrency=concurrency,
            window_ms=scenario.pa_window_ms,
            shared_memory="system" if scenario.protocol == SHM_SYSTEM else "none",
            model=_model_name(scenario),
            input_name=frameworks.MODELS[scenario.backend].input
            if scenario.backend
            else INPUT_NAME,
            # The framework models compute on the raw loop's numbers (bench/frameworks.py).
            input_data=frameworks.input_data_path(self._frameworks_repository, scenario.backend)
            if scenario.backend
            else None,
        )

    @property
    def _frameworks_repository(self) -> Path:
        return self.work / "repo-frameworks" / "repository"

    def _window_function(
        self,
        client: str,
        scenario: Scenario,
        server: RunningServer,
        concurrency: int,
        payload: HttpBody | None,
        body_file: Path | None,
    ) -> Callable[[str], Window]:
        """``measure(label) -> Window`` for one server; a label ending in "warmup" is short."""
        if client == PERF_ANALYZER:
            analyzer = self.perf_analyzer
            assert analyzer is not None
            url = server.grpc_url if scenario.protocol == GRPC else server.http_url
            pa_run = self._pa_run(scenario, url, concurrency)
            folder = self.logs / "perf_analyzer"
            folder.mkdir(exist_ok=True)
            return lambda label: analyzer.measure(pa_run, folder, label)
        assert payload is not None and body_file is not None
        target = HttpTarget(LOOPBACK, server.http_port, payload, body_file)
        folder = self.logs / "http-load"
        folder.mkdir(exist_ok=True)
        generator = self.http_load

        def measure(label: str) -> Window:
            seconds = WARMUP_S if label.endswith("warmup") else scenario.http_window_s
            return generator.measure(target, concurrency, seconds, folder / f"{label}.log")

        return measure

    def _measure_group(
        self,
        rows: dict[str, Measurement],
        client: str,
        scenario: Scenario,
        running: dict[str, RunningServer],
        payload: HttpBody | None,
        body_file: Path | None,
    ) -> None:
        """Interleaved windows for every server in ``rows``: w1 of each, w2 of each, ..."""
        measure = {
            key: self._window_function(
                client, scenario, running[key], row.concurrency, payload, body_file
            )
            for key, row in rows.items()
        }
        # perf_analyzer has no warm-up of its own; a framework's first calls are slow (the
        # TorchScript executor profiles and optimizes each new batch shape).
        if client == HTTP_LOAD or scenario.backend is not None:
            for key, row in rows.items():
                self._window(row, running[key], measure[key], "warmup", record=False)
        for index in range(self.options.windows):
            for key, row in rows.items():
                if row.status != FAILED:
                    self._window(row, running[key], measure[key], f"w{index + 1}")
        for row in rows.values():
            if row.status == FAILED:
                continue
            if not row.windows:
                row.status = FAILED
            elif len(row.windows) < self.options.windows:
                row.status = PARTIAL

    def _window(
        self,
        row: Measurement,
        server: RunningServer,
        measure: Callable[[str], Window],
        name: str,
        *,
        record: bool = True,
    ) -> None:
        if not server.alive():
            row.status = FAILED
            row.reason = (
                f"{server.label} exited ({server.process.returncode}): {server.log_tail(3)}"
            )
            return
        label = f"{row.server}-{row.scenario.key}-{row.client}-c{row.concurrency}-{name}"
        model = _model_name(row.scenario)
        counts_before = server.counts(model)
        cpu_before = server.sample().cpu_s
        try:
            window = measure(label)
        except ClientError as error:
            row.note(name, str(error))
            _wait_until_idle(server)
            if not server.alive():
                row.status = FAILED
            return
        cpu_window_end = server.sample().cpu_s
        # Requests the client gave up on at the end of the window may still be running: let
        # them finish, so they take no CPU from the next server's window.
        _wait_until_idle(server)
        if window.requests == 0 or window.throughput <= 0:
            row.note(name, f"no request completed within the window ({window.duration_s:.0f} s)")
            return
        if not record:
            return
        counts_after = server.counts(model)
        served = executions = None
        cpu_s = cpu_window_end - cpu_before  # per the client's count of requests
        if counts_before is not None and counts_after is not None:
            # The server's own count includes the requests that finished after the window.
            counts = counts_after.since(counts_before)
            served, executions = counts.requests, counts.executions
            for size, count in counts.batches.items():
                row.batches[size] = row.batches.get(size, 0) + count
            cpu_s = server.sample().cpu_s - cpu_before
        row.windows.append(
            dataclasses.replace(
                window,
                cpu_s=cpu_s,
                server_requests=served,
                server_executions=executions,
            )
        )

    def _report(self, row: Measurement) -> None:
        self._done += 1
        where = f"[{self._done}/{self._planned}] {LABELS[row.server]} {row.scenario.title} "
        where += f"{row.client} c{row.concurrency}"
        if not row.has_figures:
            log(f"{where}: {row.status} {row.reason}")
            return
        summary = row.summary()
        log(
            f"{where}: {summary['throughput']:,.0f} inf/s, p50 {summary['p50_us'] / 1000:.2f} ms, "
            f"p99 {summary['p99_us'] / 1000:.2f} ms"
            + (f" ({row.status}: {row.reason})" if row.status != OK else "")
        )

    def _info(self, started: float) -> dict[str, object]:
        return {
            "preset": self.options.preset.name,
            "started_at": datetime.fromtimestamp(started, timezone.utc).isoformat(
                timespec="seconds"
            ),
            "command": os.environ.get(COMMAND_ENV) or " ".join(["python -m bench", *sys.argv[1:]]),
            "servers": list(self.options.servers),
            "windows": self.options.windows,
            "git_commit": _git_commit(),
            "python": platform.python_version(),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
            "load_average_start": _load_average(),
            "perf_analyzer": self.perf_analyzer.version if self.perf_analyzer else None,
            "http_load_generator": f"{self.http_load.name} {self.http_load.version}",
        }


def _model_name(scenario: Scenario) -> str:
    return frameworks.MODELS[scenario.backend].name if scenario.backend else MODEL_NAME


def _wait_until_idle(server: RunningServer) -> None:
    """Until the server's process tree uses under IDLE_CPU of a core (bounded by IDLE_WAIT_S)."""
    deadline = time.monotonic() + IDLE_WAIT_S
    last = server.sample().cpu_s
    while server.alive() and time.monotonic() < deadline:
        time.sleep(IDLE_PROBE_S)
        now = server.sample().cpu_s
        if now - last < IDLE_CPU * IDLE_PROBE_S:
            return
        last = now


def _load_average() -> list[float]:
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return []


def _git_commit() -> str:
    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return f"{commit}{'+dirty' if dirty else ''}" if commit else "?"
