"""The benchmark product (bench/): its --quick preset against this project only.

Runs ``python -m bench --quick --servers ours --no-install`` with this interpreter (no venv is
created) and checks that the files it writes are well formed. Timing is not checked: the
machine is shared and numbers are noisy. The parsers of the tools' reports and the ratio
arithmetic are checked on fixed inputs.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # bench/ is a folder of the checkout, not an installed package
    sys.path.insert(0, str(REPO_ROOT))
RUN_TIMEOUT_S = 420  # the preset takes about a minute here
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PLOTS = ("throughput_vs_concurrency.png", "latency_percentiles.png")
STATUSES = {"ok", "partial", "skipped", "failed"}
CSV_REQUIRED = (
    "server",
    "server_version",
    "scenario",
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
    "p99_us",
    "throughput_vs_triton",
    "throughput_vs_kserve",
    "cpu_us_per_request",
    "peak_rss_mib",
)
MEASUREMENT_TYPES = {
    "server": str,
    "scenario": str,
    "client": str,
    "settings": str,
    "concurrency": int,
    "status": str,
    "windows": int,
    "window_list": list,
}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench") / "results"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            "--servers",
            "ours",
            "--no-install",
            f"--out={out}",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=480,
        check=False,
    )
    assert result.returncode == 0, (
        f"bench failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    )
    return out


def _number(text: str) -> float:
    value = float(text)
    assert math.isfinite(value), text
    return value


@pytest.mark.timeout(600)
def test_csv_has_one_row_per_measurement(quick_run: Path) -> None:
    with (quick_run / "results.csv").open(newline="") as file:
        reader = csv.DictReader(file)
        assert reader.fieldnames is not None
        missing = [column for column in CSV_REQUIRED if column not in reader.fieldnames]
        assert not missing, f"results.csv lacks columns {missing}"
        rows = list(reader)
    assert rows, "results.csv has no rows"
    assert {row["server"] for row in rows} == {"ours"}
    assert {int(row["concurrency"]) for row in rows} == {1, 8}
    assert all(row["status"] in STATUSES for row in rows)
    assert all(row["settings"] for row in rows), "every row names its tool settings"
    measured = [row for row in rows if row["status"] in ("ok", "partial")]
    assert measured, f"no row was measured: {[(r['client'], r['reason']) for r in rows]}"
    for row in measured:
        assert int(row["windows"]) >= 1
        assert _number(row["throughput_infer_per_s"]) > 0
        assert 0 < _number(row["p50_us"]) <= _number(row["p99_us"])
        assert _number(row["cpu_us_per_request"]) > 0
        assert _number(row["peak_rss_mib"]) > 0
    for row in rows:
        if row["status"] == "ok":
            assert int(row["windows"]) >= 3, "a figure is the median of at least 3 windows"
        if row["status"] in ("skipped", "failed"):
            assert row["reason"], "a skipped or failed row says why"


@pytest.mark.timeout(600)
def test_json_follows_the_schema(quick_run: Path) -> None:
    document = json.loads((quick_run / "results.json").read_text())
    assert document["schema"] == "pytriton-core-bench/1"
    assert document["run"]["preset"] == "quick"
    assert document["run"]["servers"] == ["ours"]
    assert isinstance(document["run"]["duration_s"], int | float)
    assert [server["server"] for server in document["servers"]] == ["ours"]
    assert document["servers"][0]["status"] == "ok"
    raw = document["raw_backend"]
    assert raw and all(entry["infer_per_s"] > 0 for entry in raw)
    assert document["measurements"]
    for measurement in document["measurements"]:
        for key, kind in MEASUREMENT_TYPES.items():
            assert isinstance(measurement[key], kind), (key, measurement)
        assert measurement["windows"] == len(measurement["window_list"])
        for window in measurement["window_list"]:
            assert window["throughput"] > 0
            assert window["p50_us"] <= window["p99_us"]


@pytest.mark.timeout(600)
def test_markdown_report_has_the_tables(quick_run: Path) -> None:
    markdown = (quick_run / "results.md").read_text()
    assert "| scenario | client | conc | pytriton-core inf/s | pytriton-core p50 / p99 ms |" in (
        markdown
    )
    assert "### Served vs raw backend" in markdown
    assert "| [16] http-binary |" in markdown


@pytest.mark.timeout(600)
def test_plots_are_png(quick_run: Path) -> None:
    if importlib.util.find_spec("matplotlib") is None:
        notes = json.loads((quick_run / "results.json").read_text())["notes"]
        assert any("plots skipped" in note for note in notes), notes
        pytest.skip("matplotlib is not installed here: the run says it skipped the plots")
    for name in PLOTS:
        data = (quick_run / name).read_bytes()
        assert data.startswith(PNG_SIGNATURE), f"{name} is not a PNG"
        assert len(data) > 1000, f"{name} is nearly empty"


PERF_ANALYZER_CSV = """\
Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,\
Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,\
p50 latency,p90 latency,p95 latency,p99 latency
1,1495.78,2,588,27,9,16,17,1,569,778,888,3418
"""
WRK_OUTPUT = """\
Running 1s test @ http://127.0.0.1:52359/v2/models/identity_fp32/infer
Requests/sec:    930.27
BENCH_WRK {"requests":1023,"duration_us":1099679,"connect":0,"read":0,"write":0,"status":3,\
"timeout":0,"p50_us":648,"p90_us":4658,"p95_us":6230,"p99_us":9538,"mean_us":1754.7}
"""


def test_perf_analyzer_csv_report_is_parsed() -> None:
    from bench.clients.perf_analyzer import parse_csv

    window = parse_csv(PERF_ANALYZER_CSV)
    assert window.throughput == pytest.approx(1495.78)
    assert (window.p50_us, window.p90_us, window.p95_us, window.p99_us) == (569, 778, 888, 3418)
    assert window.mean_us == 2 + 588 + 27 + 9 + 16 + 17 + 1  # the latency components' sum


def test_wrk_report_line_is_parsed() -> None:
    from bench.clients.wrk import parse_report

    window = parse_report(WRK_OUTPUT)
    assert window.requests == 1023
    assert window.errors == 3
    assert window.throughput == pytest.approx((1023 - 3) / 1.099679)
    assert (window.p50_us, window.p99_us) == (648, 9538)


@pytest.mark.parametrize("binary", [True, False])
def test_identity_answers_are_checked(binary: bool) -> None:
    import numpy as np

    from bench.payloads import HEADER_LENGTH, check_http_response, http_body, input_array

    payload = http_body(16, binary=binary)
    data = input_array(16)
    output = {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 16]}
    if binary:
        output["parameters"] = {"binary_data_size": data.nbytes}
        head = json.dumps({"outputs": [output]}).encode()
        headers, body = {HEADER_LENGTH: str(len(head))}, head + data.tobytes()
        wrong = head + (data + 1).tobytes()
    else:
        output["data"] = data.ravel().tolist()
        headers, body = {}, json.dumps({"outputs": [output]}).encode()
        output["data"] = np.zeros(16).tolist()
        wrong = json.dumps({"outputs": [output]}).encode()
    assert check_http_response(payload, 200, headers, body) is None
    assert "differs" in (check_http_response(payload, 200, headers, wrong) or "")
    assert "HTTP 400" in (check_http_response(payload, 400, headers, b"{}") or "")


def test_ratios_are_medians_of_paired_windows() -> None:
    from bench.clients.base import Window
    from bench.results import Measurement, RunResults
    from bench.scenarios import QUICK

    def row(server: str, rates: list[float]) -> Measurement:
        windows = [Window(rate, 1.0, 2.0, 3.0, 4.0, None, 1.0, None) for rate in rates]
        return Measurement(server, QUICK.scenarios[0], "wrk", "", 8, windows=windows)

    # Background load halves both servers in window 2: the paired ratio stays 2.
    ours, triton = row("ours", [2000, 1000, 2000]), row("triton", [1000, 500, 1000])
    results = RunResults(info={}, measurements=[ours, triton])
    assert results.ratio(ours, "triton", "throughput") == pytest.approx(2.0)
    assert results.ratio(ours, "kserve", "throughput") is None


def test_served_vs_raw_weighs_the_batches_served() -> None:
    from bench.frameworks import RawMix

    # 10 batches of 1 at 1000 inf/s (10 ms) + 5 batches of 4 at 4000 inf/s (5 ms): 30 rows.
    mix = RawMix({1: 10, 4: 5}, {1: 1000.0, 4: 4000.0})
    assert mix.rows == 30
    assert mix.average_batch == pytest.approx(2.0)
    assert mix.inf_per_s == pytest.approx(30 / 0.015)
    assert mix.formed() == "1:10 4:5"
    assert RawMix({}, {}).inf_per_s is None


def test_scenarios_are_selected_by_key() -> None:
    from bench.scenarios import DEFAULT, select

    framework = select(DEFAULT, ("mlp",)).scenarios
    assert [s.key for s in framework] == [
        "onnx-mlp-256-http-binary-dynbatch",
        "torchscript-mlp-256-http-binary-dynbatch",
        "onnx-mlp-large-1Ki-http-binary-dynbatch",
        "numpy-mlp-256-http-binary-dynbatch",
        "numpy-mlp-batched-256-http-binary-dynbatch",
    ]
    assert all(s.backend and s.dynamic_batching for s in framework)
    assert not select(DEFAULT, ("no-such-scenario",)).scenarios


def test_cuda_shm_bench_runs_its_non_cuda_modes_on_the_cpu(tmp_path: Path) -> None:
    """bench.cuda_shm runs on GPU machines (tools/gpu-checks.sh); ``--kind cpu`` keeps its
    socket and system shared-memory modes, the report and the output check running here."""
    run_bench("bench.cuda_shm", "--kind", "cpu", "--seconds", "0.3", "--out", str(tmp_path))
    rows = json.loads((tmp_path / "cuda_shm.json").read_text())
    assert [r["mode"] for r in rows] == ["http-binary", "grpc", "http-system-shm"]
    assert all(r["inferences"] > 0 for r in rows)
    assert "| http-system-shm |" in (tmp_path / "cuda_shm.md").read_text()


def test_openai_stream_bench_counts_every_chunk(tmp_path: Path) -> None:
    """bench.openai_stream checks each request's chunk count itself (and fails on a wrong
    one); a short run shows every endpoint measured at both concurrencies."""
    run_bench(
        "bench.openai_stream", "--seconds", "0.3", "--concurrency", "1,2", "--out", str(tmp_path)
    )
    rows = json.loads((tmp_path / "openai_stream.json").read_text())
    assert [(r["server"], r["concurrency"]) for r in rows] == [
        (endpoint, concurrency)
        for endpoint in ("chat", "completions", "generate_stream")
        for concurrency in (1, 2)
    ]
    assert all(r["requests"] > 0 and r["tokens_per_s"] > 0 for r in rows)
    assert "| chat | 1 |" in (tmp_path / "openai_stream.md").read_text()


def run_bench(module: str, *args: str) -> None:
    """``python -m <module> <args>`` from the checkout, which must succeed."""
    result = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
