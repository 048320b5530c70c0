"""Metrics, logging and tracing pieces without a server: the exposition format, summaries
and histograms, the CPU and GPU collectors, the trace settings and files, the log settings,
and the flags that configure them."""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pytriton_core.cli import build_parser, options_from_args
from pytriton_core.config import ModelSpec, config_from_json
from pytriton_core.errors import InvalidArgumentError, UnsupportedError
from pytriton_core.inference.statistics import (
    ComputeTiming,
    FailureReason,
    Histogram,
    ModelStatistics,
    SlidingSummary,
)
from pytriton_core.logging_settings import LogControl, TritonFormatter
from pytriton_core.metrics import FAMILIES, MetricsReporter
from pytriton_core.metrics.exposition import format_value, write_family
from pytriton_core.metrics.families import Sample
from pytriton_core.metrics.system import CpuCollector, GpuCollector
from pytriton_core.options import LogFormat, LogOptions, MetricsOptions, TraceMode, TraceOptions
from pytriton_core.tracing import TraceManager

# --------------------------------------------------------------------------- exposition


def test_values_and_labels_are_written_as_prometheus_reads_them() -> None:
    assert [format_value(v) for v in (3, 2.0, 0.25, math.nan, math.inf)] == [
        "3",
        "2",
        "0.25",
        "NaN",
        "+Inf",
    ]
    out: list[str] = []
    write_family(
        out,
        "x_seconds",
        "summary",
        'Help with \\ and "quotes"\nand a newline',
        [((("version", "1"), ("model", 'a"b\\c')), [Sample((("quantile", "0.5"),), 1.5)])],
    )
    text = "".join(out)
    assert 'x_seconds{model="a\\"b\\\\c",version="1",quantile="0.5"} 1.5\n' in text
    (family,) = text_string_to_metric_families(text)
    assert family.documentation == 'Help with \\ and "quotes"\nand a newline'
    assert family.samples[0].labels == {"model": 'a"b\\c', "version": "1", "quantile": "0.5"}


def test_family_table_is_consistent() -> None:
    names = [f.name for f in FAMILIES]
    assert len(names) == len(set(names))
    for family in FAMILIES:
        assert family.name.startswith("nv_")
        assert (family.per_model is None) != (family.system is None), family.name
        assert family.help and "\n" not in family.help


# --------------------------------------------------------------------------- distributions


def test_summary_quantiles_over_a_sliding_window() -> None:
    summary = SlidingSummary(max_age_s=10, capacity=100)
    assert all(math.isnan(v) for v in summary.quantiles([0.5], 0))
    for i, value in enumerate(range(1, 11)):
        summary.observe(value, now_ns=i)
    assert summary.quantiles([0.5, 0.9, 0.99], 10) == [5, 9, 10]
    assert (summary.count, summary.sum) == (10, 55)
    summary.observe(100, now_ns=int(30e9))  # the others are older than 10 s now
    assert summary.quantiles([0.5], int(30e9)) == [100]
    assert summary.count == 11


def test_histogram_buckets_are_cumulative() -> None:
    histogram = Histogram([1.0, 5.0])
    for value in (0.5, 1.0, 3.0, 7.0):
        histogram.observe(value)
    assert histogram.cumulative() == [2, 3, 4]
    assert (histogram.count, histogram.sum) == (4, 11.5)


def test_statistics_keep_failures_by_reason_and_optional_distributions() -> None:
    plain = ModelStatistics.create(None)
    assert plain.summaries is None and plain.first_response is None
    plain.record_request_failure(0, 10, FailureReason.REJECTED)
    plain.record_request_failure(0, 5)
    assert plain.failures == {
        FailureReason.REJECTED: 1,
        FailureReason.CANCELED: 0,
        FailureReason.BACKEND: 0,
        FailureReason.OTHER: 1,
    }
    assert (plain.fail.count, plain.fail.ns) == (2, 15)
    config = {
        "model_metrics": {
            "metric_control": [
                {
                    "metric_identifier": {"family": "nv_inference_first_response_histogram_ms"},
                    "histogram_options": {"buckets": [50, 10]},
                }
            ]
        }
    }
    options = MetricsOptions(summary_latencies=True, histogram_latencies=True)
    spec = ModelSpec.from_config(config_from_json(config), 1)
    stats = ModelStatistics.create(options, spec.histogram_buckets)
    assert stats.first_response is not None and stats.first_response.bounds == (10.0, 50.0)
    timing = ComputeTiming(start_ns=3000, input_end_ns=5000, infer_end_ns=9000, end_ns=10_000)
    stats.record_request_success(0, 1000, timing, 12_500)
    assert stats.summaries is not None
    assert (stats.summaries.request.sum, stats.summaries.queue.sum) == (12, 2)


# --------------------------------------------------------------------------- collectors


def test_cpu_collector_reads_proc(tmp_path: Path) -> None:
    (tmp_path / "meminfo").write_text(
        "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    400 kB\n"
    )
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3\n")
    cpu = CpuCollector(tmp_path)
    cpu.refresh()
    assert (cpu.memory_total_bytes, cpu.memory_used_bytes) == (1_024_000, 614_400)
    assert cpu.utilization == 0.0  # one reading: no interval yet
    stat.write_text("cpu  250 0 150 800 100 0 0 0 0 0\n")  # +200 busy, +100 idle
    cpu.refresh()
    assert cpu.utilization == pytest.approx(2 / 3)


def test_gpu_collector_through_a_fake_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    class NotSupported(Exception):
        pass

    def unsupported(handle: object) -> None:
        raise NotSupported

    energy_mj = iter([1000, 4000])
    nvml = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: f"gpu{i}",
        nvmlDeviceGetUUID=lambda h: b"GPU-1234",
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=40),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=16, used=4),
        nvmlDeviceGetPowerUsage=lambda h: 150_000,
        nvmlDeviceGetPowerManagementLimit=unsupported,
        nvmlDeviceGetTotalEnergyConsumption=lambda h: next(energy_mj),
    )
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    gpu = GpuCollector.open()
    assert gpu is not None
    gpu.refresh()
    (reading,) = gpu.readings
    assert reading.uuid == "GPU-1234"
    assert (reading.utilization, reading.memory_total_bytes, reading.memory_used_bytes) == (
        0.4,
        16,
        4,
    )
    assert (reading.power_usage_w, reading.power_limit_w, reading.energy_j) == (150.0, 0.0, 3.0)


def test_gpu_collector_off_without_nvml(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    with caplog.at_level(logging.INFO):
        assert GpuCollector.open() is None
    assert "GPU metrics are off" in caplog.text


class _FakeModel:
    def __init__(self, name: str, version: int) -> None:
        self.name, self.version = name, version
        self.stats = ModelStatistics()
        self.cache_enabled = False

    def pending_request_count(self) -> int:
        return 2


def test_reporter_renders_each_model_and_custom_families() -> None:
    from pytriton_core.backends.python.pb_utils_metrics import (
        MetricFamily,
        MetricRegistry,
        set_metric_registry,
    )

    registry = MetricRegistry()
    previous = set_metric_registry(registry)
    try:
        MetricFamily("my_gauge", "A gauge", MetricFamily.GAUGE).Metric({"k": "v"}).set(7)
    finally:
        set_metric_registry(previous)
    model = _FakeModel("m", 3)
    model.stats.success.add(2500, 1)
    reporter = MetricsReporter(
        MetricsOptions(allow_cpu_metrics=False, allow_gpu_metrics=False),
        lambda: [model],  # type: ignore[list-item, return-value]
        registry.snapshot,
    )
    families = {f.name: f for f in text_string_to_metric_families(reporter.render())}
    success = families["nv_inference_request_success"].samples[0]
    assert (success.labels, success.value) == ({"model": "m", "version": "3"}, 1)
    assert families["nv_inference_request_duration_us"].samples[0].value == 2
    assert families["nv_inference_pending_request_count"].samples[0].value == 2
    assert families["my_gauge"].samples[0].value == 7
    assert not any(name.startswith(("nv_cpu", "nv_gpu")) for name in families)


# --------------------------------------------------------------------------- tracing


def _options(tmp_path: Path, **kw: Any) -> TraceOptions:
    return TraceOptions(level=frozenset({"TIMESTAMPS"}), rate=1, file=tmp_path / "t.json", **kw)


def test_trace_sampling_rate_and_count(tmp_path: Path) -> None:
    tracer = TraceManager(_options(tmp_path))
    assert tracer.update(None, {"trace_rate": ["3"], "trace_count": ["2"]})["trace_count"] == "2"
    sampled = [tracer.sample("m") is not None for _ in range(9)]
    assert sampled == [True, False, False, True, False, False, False, False, False]
    assert tracer.settings()["trace_count"] == "0"


def test_trace_settings_inherit_and_fall_back(tmp_path: Path) -> None:
    tracer = TraceManager(_options(tmp_path))
    tracer.update("m", {"trace_rate": ["5"]})
    tracer.update(None, {"trace_level": ["OFF"], "log_frequency": ["2"]})
    model = tracer.settings("m")
    assert (model["trace_rate"], model["trace_level"], model["log_frequency"]) == (
        "5",
        ["OFF"],
        "2",
    )
    assert tracer.update("m", {"trace_rate": None})["trace_rate"] == "1"
    assert tracer.update(None, {"trace_level": None})["trace_level"] == ["TIMESTAMPS"]
    # Unrecognised level names leave the level as it was, as Triton does.
    assert tracer.update(None, {"trace_level": ["BAD"]})["trace_level"] == ["TIMESTAMPS"]
    with pytest.raises(UnsupportedError):
        tracer.update(None, {"trace_file": ["x.json"]})
    with pytest.raises(InvalidArgumentError, match="Expecting value >= 0"):
        tracer.update(None, {"log_frequency": ["-1"]})


def test_trace_files_by_log_frequency(tmp_path: Path) -> None:
    tracer = TraceManager(_options(tmp_path, log_frequency=2))
    for i in range(5):
        trace = tracer.sample("m")
        assert trace is not None
        trace.stamp("REQUEST_START", 10 + i)
        trace.record_tensor("TENSOR_QUEUE_INPUT", "IN", "INT32", (2,), np.array([1, 2]))
        trace.finish()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json.0", "t.json.1"]
    tracer.close()  # the fifth goes to the next file
    entries = json.loads((tmp_path / "t.json.2").read_text())
    assert entries[0] == {"id": 5, "model_name": "m", "model_version": -1}
    assert entries[1] == {"id": 5, "timestamps": [{"name": "REQUEST_START", "ns": 14}]}
    assert len(entries) == 2  # TIMESTAMPS only: no tensors


def test_opentelemetry_mode_without_its_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk", None)
    with pytest.raises(InvalidArgumentError, match="pip install opentelemetry-api"):
        TraceManager(TraceOptions(mode=TraceMode.OPENTELEMETRY))


# --------------------------------------------------------------------------- logging


def _record(level: int) -> logging.LogRecord:
    return logging.LogRecord("pytriton_core.x", level, "/a/file.py", 12, "hello", None, None)


@pytest.fixture
def server_logger_level() -> Any:
    logger = logging.getLogger("pytriton_core")
    level = logger.level
    yield
    logger.setLevel(level)


@pytest.mark.usefixtures("server_logger_level")
def test_log_control_switches_levels_separately() -> None:
    control = LogControl(LogOptions(warning=False))
    assert [control.enabled(lvl) for lvl in (5, 10, 20, 30, 40)] == [
        False,
        False,
        True,
        False,
        True,
    ]
    control.update({"log_verbose_level": 2, "log_error": False})
    assert [control.enabled(lvl) for lvl in (8, 9, 10, 40)] == [False, True, True, False]
    assert logging.getLogger("pytriton_core").level == 9
    control.update({"log_verbose_level": 0})
    assert logging.getLogger("pytriton_core").level == logging.INFO
    with pytest.raises(InvalidArgumentError):
        control.update({"log_file": "x"})


def test_log_formats() -> None:
    default = TritonFormatter(LogFormat.DEFAULT).format(_record(logging.WARNING))
    assert default.startswith("W") and default.endswith(" file.py:12] hello")
    assert len(default.split()[1]) == len("08:52:31.777173")
    iso = TritonFormatter(LogFormat.ISO8601).format(_record(logging.INFO))
    assert iso[:4].isdigit() and iso[10] == "T" and iso[19:23] == "Z I "


# --------------------------------------------------------------------------- flags


def _parse(*argv: str) -> Any:
    return options_from_args(build_parser().parse_args(["--model-repository", ".", *argv]))


def test_metrics_log_and_trace_flags() -> None:
    options = _parse(
        "--metrics-config=summary_latencies=true",
        "--metrics-config=summary_quantiles=0.5:0.05,0.99:0.001",
        "--metrics-interval-ms=500",
        "--allow-gpu-metrics=false",
        "--log-verbose=2",
        "--log-info=false",
        "--log-format=ISO8601",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=level=TENSORS",
        "--trace-config=rate=10",
        "--trace-config=triton,file=/tmp/t.json",
        "--trace-config=triton,log-frequency=5",
        "--trace-config=opentelemetry,resource=a=1",
        "--trace-config=opentelemetry,resource=b=2",
    )
    assert options.metrics == MetricsOptions(
        allow_gpu_metrics=False,
        interval_ms=500,
        summary_latencies=True,
        summary_quantiles=((0.5, 0.05), (0.99, 0.001)),
    )
    assert (options.log.verbose, options.log.info, options.log.format) == (
        2,
        False,
        LogFormat.ISO8601,
    )
    trace = options.trace
    assert trace.level == {"TIMESTAMPS", "TENSORS"}
    assert (trace.rate, trace.file, trace.log_frequency) == (10, Path("/tmp/t.json"), 5)
    assert dict(trace.opentelemetry) == {"resource": "a=1,b=2"}
    deprecated = _parse("--trace-file=/tmp/x.json", "--trace-level=TIMESTAMPS", "--trace-rate=3")
    assert (deprecated.trace.file, deprecated.trace.level, deprecated.trace.rate) == (
        Path("/tmp/x.json"),
        {"TIMESTAMPS"},
        3,
    )


@pytest.mark.parametrize(
    "flag",
    [
        "--metrics-config=unknown=1",
        "--metrics-config=summary_latencies=maybe",
        "--metrics-config=summary_quantiles=0.5",
        "--trace-config=level=LOUD",
        "--trace-config=rate=0",
        "--trace-config=nosuchmode,file=x",
        "--trace-config=triton,url=x",
        "--metrics-interval-ms=0",
    ],
)
def test_bad_telemetry_flags_are_refused(flag: str) -> None:
    with pytest.raises((SystemExit, argparse.ArgumentError)):
        _parse(flag)
