"""Every flag of tritonserver's --help is accepted, and each works, is noted or is refused
with the reason; never argparse's "unrecognized arguments"."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from pytriton_core.backends.settings import backend_config_notes
from pytriton_core.cli import build_parser, main, options_from_args
from pytriton_core.cli_server_flags import NOTED_FLAGS, startup_notes
from pytriton_core.cli_workers import refusals

# tritonserver 2.51's --help, and the flags 2.73 adds (its command_line_parser.cc). The
# flags owned by another part of the work (--http-restricted-api, --grpc-restricted-protocol)
# are checked where they are implemented.
TRITONSERVER_FLAGS = """
--allow-client-shm --allow-cpu-metrics --allow-gpu-metrics --allow-grpc --allow-http
--allow-metrics --allow-sagemaker --allow-vertex-ai --backend-config --backend-directory
--buffer-manager-thread-count --cache-config --cache-directory --cuda-memory-pool-byte-size
--cuda-virtual-address-size --disable-auto-complete-config --enable-peer-access
--exit-on-error --exit-timeout-secs --grpc-address --grpc-header-forward-pattern
--grpc-http2-max-ping-strikes --grpc-http2-max-pings-without-data
--grpc-http2-min-recv-ping-interval-without-data --grpc-infer-allocation-pool-size
--grpc-infer-response-compression-level --grpc-infer-thread-count
--grpc-keepalive-permit-without-calls --grpc-keepalive-time --grpc-keepalive-timeout
--grpc-max-connection-age --grpc-max-connection-age-grace --grpc-max-response-pool-size
--grpc-port --grpc-root-cert --grpc-server-cert --grpc-server-key --grpc-use-ssl
--grpc-use-ssl-mutual --host-policy --http-address --http-header-forward-pattern
--http-max-input-size --http-port --http-thread-count --id --load-model --log-error
--log-file --log-format --log-info --log-verbose --log-warning --metrics-address
--metrics-config --metrics-interval-ms --metrics-port --min-supported-compute-capability
--model-config-name --model-control-mode --model-load-gpu-limit --model-load-retry-count
--model-load-thread-count --model-namespacing --model-repository --model-store
--pinned-memory-pool-byte-size --rate-limit --rate-limit-resource --repoagent-directory
--repository-poll-secs --response-cache-byte-size --reuse-grpc-port --reuse-http-port
--sagemaker-port --sagemaker-safe-port-range --sagemaker-thread-count --strict-model-config
--strict-readiness --trace-config --trace-count --trace-file --trace-level
--trace-log-frequency --trace-rate --vertex-ai-default-model --vertex-ai-port
--vertex-ai-thread-count
""".split()
LEFT_TO_THEIR_OWN_TESTS = {"--http-restricted-api", "--grpc-restricted-protocol"}


def _our_flags() -> set[str]:
    return {flag for action in build_parser()._actions for flag in action.option_strings}


def test_every_tritonserver_flag_is_accepted() -> None:
    assert set(TRITONSERVER_FLAGS) - _our_flags() == set()


def test_the_installed_tritonserver_has_no_flag_we_lack() -> None:
    home = Path(os.environ.get("REAL_TRITON_HOME", "~/.cache/real-triton")).expanduser()
    binary = home / "dist" / "bin" / "tritonserver"
    if not binary.is_file():
        pytest.skip(f"no tritonserver under {home}")
    libraries = [str(p) for p in (home / "venv" / "lib").glob("python3*/site-packages/*.libs")]
    env = {**os.environ, "LD_LIBRARY_PATH": ":".join(libraries)}
    listing = subprocess.run(
        [str(binary), "--help"], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    theirs = set(re.findall(r"^\s+(--[a-z][a-z0-9-]*)", listing.stdout + listing.stderr, re.M))
    if not theirs:
        pytest.skip(f"tritonserver --help printed no flags: {listing.stderr[:200]}")
    assert theirs - _our_flags() - LEFT_TO_THEIR_OWN_TESTS == set()


def _parse(*argv: str) -> object:
    return options_from_args(build_parser().parse_args(["--model-repository=.", *argv]))


@pytest.mark.parametrize(
    ("flag", "value", "field", "expected"),
    [
        ("--model-load-thread-count", "8", "model_load_thread_count", 8),
        ("--model-load-retry-count", "2", "model_load_retry_count", 2),
        ("--model-namespacing", "true", "model_namespacing", True),
        ("--reuse-http-port", "1", "reuse_http_port", True),
        ("--http-header-forward-pattern", "^x-", "http_header_forward_pattern", "^x-"),
        ("--min-supported-compute-capability", "7.5", "min_supported_compute_capability", 7.5),
    ],
)
def test_flags_that_work_set_their_option(
    flag: str, value: str, field: str, expected: object
) -> None:
    assert getattr(_parse(f"{flag}={value}"), field) == expected


def test_gpu_limits_and_grpc_forwarding() -> None:
    options = _parse(
        "--model-load-gpu-limit=0:0.5",
        "--model-load-gpu-limit=1:0.9",
        "--grpc-header-forward-pattern=^x-",
    )
    assert dict(options.model_load_gpu_limit) == {0: 0.5, 1: 0.9}  # type: ignore[attr-defined]
    assert options.grpc.header_forward_pattern == "^x-"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "argv",
    [
        ["--model-load-gpu-limit=0:1.5"],
        ["--model-load-gpu-limit=gpu0"],
        ["--model-load-thread-count=0"],
        ["--model-load-retry-count=-1"],
        ["--http-header-forward-pattern=("],
    ],
)
def test_bad_values_are_argument_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["--host-policy=gpu_0,numa-node=0"], "no host policies yet"),
    ],
)
def test_missing_features_are_refused_with_the_reason(argv: list[str], reason: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _parse(*argv)
    message = str(exit_info.value.code)
    assert message.startswith(f"error: {argv[0]}")
    assert reason in message


def test_the_values_that_ask_for_nothing_are_accepted() -> None:
    _parse("--rate-limit=off", "--response-cache-byte-size=0")


def test_each_noted_flag_is_said_once_at_startup() -> None:
    argv = [f"{flag}=1" for flag in NOTED_FLAGS]
    args = build_parser().parse_args(["--model-repository=.", *argv])
    notes = startup_notes(args, grpc_pool_size_given=True)
    assert len(notes) == len(NOTED_FLAGS) + 1
    for flag, note in zip(NOTED_FLAGS, notes, strict=False):
        assert note.startswith(f"{flag}=1: ")
    assert startup_notes(build_parser().parse_args([]), grpc_pool_size_given=False) == []


def test_backend_config_keys_that_nothing_reads_are_said_at_startup() -> None:
    options = _parse(
        "--backend-config=python,shm-default-byte-size=16777216",
        "--backend-config=onnxruntime,intra_op_thread_count=2",
        "--backend-config=default-max-batch-size=8",
        "--backend-config=tensorrt,no-such-key=1",
        "--backend-config=tensorflow,allow-soft-placement=true",
    )
    notes = backend_config_notes(options.backend_config)  # type: ignore[attr-defined]
    assert notes == [
        "--backend-config=python,shm-default-byte-size=16777216: the Python backend runs "
        "models in this process, without Triton's stub process and its shared-memory pools; "
        "the setting is not used",
        "--backend-config=tensorrt,no-such-key=1: not a setting the tensorrt backend here "
        "reads; not used",
        "--backend-config=tensorflow,allow-soft-placement=true: this server has no backend "
        "'tensorflow'; not used",
    ]


@pytest.mark.parametrize(("flags", "named"), [(["--http-port=0"], "--http-port=0")])
def test_workers_refuse_what_they_cannot_share(flags: list[str], named: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--workers=2", *flags])
    assert "--workers 2" in str(exit_info.value) and named in str(exit_info.value)


def test_workers_share_the_latency_summaries() -> None:
    options = options_from_args(
        build_parser().parse_args(["--workers=2", "--metrics-config=summary_latencies=true"])
    )
    assert refusals(options) == []


def test_workers_count() -> None:
    parser = build_parser()
    assert options_from_args(parser.parse_args(["--workers=3"])).workers == 3
    assert options_from_args(parser.parse_args(["--workers=auto"])).workers == len(
        os.sched_getaffinity(0)
    )
    for bad in ("0", "-1", "many"):
        with pytest.raises(SystemExit):
            parser.parse_args([f"--workers={bad}"])


def test_the_worker_change_timeout_needs_workers_and_positive_seconds() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--worker-change-timeout-secs=5"])
    assert "--worker-change-timeout-secs applies to --workers N > 1" in str(exit_info.value)
    parser = build_parser()
    assert parser.parse_args(["--worker-change-timeout-secs=2.5"]).worker_change_timeout_secs == 2.5
    for bad in ("0", "-1", "soon"):
        with pytest.raises(SystemExit):
            parser.parse_args([f"--worker-change-timeout-secs={bad}"])


def test_the_openai_flags_set_their_options_and_need_allow_openai() -> None:
    options = _parse("--allow-openai=true", "--openai-port=9100", "--openai-address=127.0.0.1")
    assert (options.allow_openai, options.openai_port, options.openai_address) == (  # type: ignore[attr-defined]
        True,
        9100,
        "127.0.0.1",
    )
    assert _parse().openai_port == 9000  # type: ignore[attr-defined]
    for flag in ("--openai-port=9100", "--openai-address=127.0.0.1"):
        with pytest.raises(SystemExit) as exit_info:
            _parse(flag)
        name = flag.split("=")[0]
        assert exit_info.value.code == (
            f"error: {name} is for the OpenAI front end: add --allow-openai=true"
        )


def test_allow_openai_adds_the_bundled_openai_models_to_the_default_repository() -> None:
    def repositories(*argv: str) -> list[str]:
        options = options_from_args(build_parser().parse_args(list(argv)))
        return [path.name for path in options.model_repositories]  # type: ignore[attr-defined]

    assert repositories() == ["model_repository"]
    assert repositories("--allow-openai=true") == ["model_repository", "openai_models"]
