"""The HTTP/REST API around inference: health, metadata, readiness, config, statistics, index.

Exact values, checked through the real ``tritonclient.http`` client and, where the client hides
the status or the body, raw ``http.client``. Expected answers are Triton 2.51's (see
../shared/spec/protocol.md §1); set HTTP_TESTS_AGAINST_REAL_TRITON=1 to run the same module
against the real Triton (../shared/tools/real-triton) and confirm them.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from harness import (
    EXAMPLES_REPOSITORY,
    TEST_MODELS_REPOSITORY,
    ServerHandle,
    http_exchange,
    run_pytriton_server,
    run_real_triton,
)

import pytriton_core

AGAINST_REAL_TRITON = os.environ.get("HTTP_TESTS_AGAINST_REAL_TRITON") == "1"

# This module's server serves exactly these models (linked into a temporary repository), so
# the repository index and the all-models statistics have exact expected values. Each
# statistics test infers on a model no other test here sends requests to.
SERVED_MODELS = {
    "add_sub": EXAMPLES_REPOSITORY,
    "identity_fp32": EXAMPLES_REPOSITORY,
    "auto_complete": TEST_MODELS_REPOSITORY,
    "classifier": TEST_MODELS_REPOSITORY,
    "fixed_shape": TEST_MODELS_REPOSITORY,
    "raise_error": TEST_MODELS_REPOSITORY,
    "triton_error": TEST_MODELS_REPOSITORY,
    "versioned": TEST_MODELS_REPOSITORY,
}
READY_VERSIONS = [(name, "1") for name in sorted(SERVED_MODELS) if name != "versioned"] + [
    ("versioned", "1"),
    ("versioned", "2"),
]
READY_VERSIONS.sort()

# core/src/server.cc, in this order.
TRITON_EXTENSIONS = [
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
]
ZERO = {"count": 0, "ns": 0}
INFERENCE_STAT_KEYS = [
    "success",
    "fail",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    repository = tmp_path_factory.mktemp("http-api-models")
    for name, source in SERVED_MODELS.items():
        (repository / name).symlink_to(source / name, target_is_directory=True)
    run = run_real_triton if AGAINST_REAL_TRITON else run_pytriton_server
    with run(repository) as handle:
        yield handle


@pytest.fixture(scope="module")
def client(server: ServerHandle) -> Iterator[httpclient.InferenceServerClient]:
    with httpclient.InferenceServerClient(server.http_url) as triton:
        yield triton


def raw(server: ServerHandle, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
    status, _, answer = http_exchange(server, method, path, body)
    return status, answer


def error(message: str) -> bytes:
    return json.dumps({"error": message}, separators=(",", ":")).encode()


def infer_fp32(
    client: httpclient.InferenceServerClient, model: str, data: np.ndarray
) -> httpclient.InferResult:
    tensor = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    return client.infer(model, [tensor])


# --------------------------------------------------------------------------- health


def test_server_is_live_and_ready(
    server: ServerHandle, client: httpclient.InferenceServerClient
) -> None:
    assert client.is_server_live() is True
    assert client.is_server_ready() is True
    assert raw(server, "GET", "/v2/health/live") == (200, b"")
    assert raw(server, "GET", "/v2/health/ready") == (200, b"")


@pytest.mark.parametrize("path", ["/v2/health/live", "/v2/health/ready"])
def test_health_answers_only_get(server: ServerHandle, path: str) -> None:
    assert raw(server, "POST", path) == (405, error("Method Not Allowed"))


# --------------------------------------------------------------------------- server metadata


def test_server_metadata(server: ServerHandle, client: httpclient.InferenceServerClient) -> None:
    metadata = client.get_server_metadata()
    assert list(metadata) == ["name", "version", "extensions"]
    assert metadata["name"] == "triton"
    if not AGAINST_REAL_TRITON:
        assert metadata["version"] == pytriton_core.__version__
    extensions = metadata["extensions"]
    # Only the extensions this server implements, in Triton's order, each once.
    assert extensions == [name for name in TRITON_EXTENSIONS if name in extensions]
    implemented = {
        "classification",
        "sequence",
        "schedule_policy",
        "model_configuration",
        "binary_tensor_data",
        "parameters",
        "statistics",
    }
    assert implemented <= set(extensions)
    status, body = raw(server, "GET", "/v2")
    assert status == 200
    assert json.loads(body) == metadata


# --------------------------------------------------------------------------- model metadata


def test_model_metadata_without_batching(client: httpclient.InferenceServerClient) -> None:
    fp32_4 = {"datatype": "FP32", "shape": [4]}
    assert client.get_model_metadata("add_sub") == {
        "name": "add_sub",
        "versions": ["1"],
        "platform": "python",
        "inputs": [{"name": "INPUT0", **fp32_4}, {"name": "INPUT1", **fp32_4}],
        "outputs": [{"name": "OUTPUT0", **fp32_4}, {"name": "OUTPUT1", **fp32_4}],
    }


def test_model_metadata_prepends_the_batch_dimension(
    client: httpclient.InferenceServerClient,
) -> None:
    assert client.get_model_metadata("classifier") == {
        "name": "classifier",
        "versions": ["1"],
        "platform": "python",
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 5]}],
        "outputs": [
            {"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 5]},
            {"name": "OUTPUT1", "datatype": "INT32", "shape": [-1, 5]},
        ],
    }


def test_model_metadata_of_an_auto_completed_config(
    client: httpclient.InferenceServerClient,
) -> None:
    metadata = client.get_model_metadata("auto_complete")
    assert metadata["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 2]}]
    assert metadata["outputs"] == [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 2]}]


@pytest.mark.parametrize(("version", "versions"), [("", ["1", "2"]), ("1", ["1"]), ("2", ["2"])])
def test_model_metadata_lists_versions(
    client: httpclient.InferenceServerClient, version: str, versions: list[str]
) -> None:
    metadata = client.get_model_metadata("versioned", version)
    assert metadata == {
        "name": "versioned",
        "versions": versions,
        "platform": "python",
        "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1]}],
        "outputs": [{"name": "OUTPUT0", "datatype": "INT32", "shape": [1]}],
    }


@pytest.mark.parametrize("suffix", ["", "/config"])
def test_model_metadata_and_config_of_unknown_model(server: ServerHandle, suffix: str) -> None:
    # protocol.md §0.1: an unknown model is NOT_FOUND (404), as Triton 2.51 answers.
    assert raw(server, "GET", f"/v2/models/nope{suffix}") == (
        404,
        error("Request for unknown model: 'nope' is not found"),
    )


@pytest.mark.parametrize("suffix", ["", "/config"])
def test_model_metadata_and_config_of_unknown_version(server: ServerHandle, suffix: str) -> None:
    assert raw(server, "GET", f"/v2/models/versioned/versions/3{suffix}") == (
        404,
        error("Request for unknown model: 'versioned' version 3 is not found"),
    )


def test_non_numeric_version_matches_no_route(server: ServerHandle) -> None:
    assert raw(server, "GET", "/v2/models/versioned/versions/latest") == (
        404,
        error("Not Found"),
    )


# --------------------------------------------------------------------------- model ready


@pytest.mark.parametrize(
    ("model", "version", "ready"),
    [
        ("add_sub", "", True),
        ("versioned", "", True),
        ("versioned", "1", True),
        ("versioned", "2", True),
        ("versioned", "3", False),
        ("nope", "", False),
        ("nope", "1", False),
    ],
)
def test_model_ready(
    client: httpclient.InferenceServerClient, model: str, version: str, ready: bool
) -> None:
    assert client.is_model_ready(model, version) is ready


@pytest.mark.parametrize(
    "path",
    [
        "/v2/models/add_sub/ready",
        "/v2/models/versioned/ready",
        "/v2/models/versioned/versions/2/ready",
    ],
)
def test_model_ready_answers_200_with_an_empty_body(server: ServerHandle, path: str) -> None:
    assert raw(server, "GET", path) == (200, b"")


@pytest.mark.parametrize("path", ["/v2/models/versioned/versions/3/ready", "/v2/models/nope/ready"])
def test_model_not_ready_answers_400(server: ServerHandle, path: str) -> None:
    assert raw(server, "GET", path) == (400, error("Model version not ready"))


# --------------------------------------------------------------------------- model config

ADD_SUB_CONFIG: dict[str, Any] = {
    "name": "add_sub",
    "platform": "",
    "backend": "python",
    "runtime": "",
    "version_policy": {"latest": {"num_versions": 1}},
    "max_batch_size": 0,
    "input": [
        {
            "name": name,
            "data_type": "TYPE_FP32",
            "format": "FORMAT_NONE",
            "dims": [4],
            "is_shape_tensor": False,
            "allow_ragged_batch": False,
            "optional": False,
            "is_non_linear_format_io": False,
        }
        for name in ("INPUT0", "INPUT1")
    ],
    "output": [
        {
            "name": name,
            "data_type": "TYPE_FP32",
            "dims": [4],
            "label_filename": "",
            "is_shape_tensor": False,
            "is_non_linear_format_io": False,
        }
        for name in ("OUTPUT0", "OUTPUT1")
    ],
    "batch_input": [],
    "batch_output": [],
    "optimization": {
        "priority": "PRIORITY_DEFAULT",
        "input_pinned_memory": {"enable": True},
        "output_pinned_memory": {"enable": True},
        "gather_kernel_buffer_threshold": 0,
        "eager_batching": False,
    },
    "instance_group": [
        {
            "name": "add_sub_0",
            "kind": "KIND_CPU",
            "count": 1,
            "gpus": [],
            "secondary_devices": [],
            "profile": [],
            "passive": False,
            "host_policy": "",
        }
    ],
    "default_model_filename": "model.py",
    "cc_model_filenames": {},
    "metric_tags": {},
    "parameters": {},
    "model_warmup": [],
}


def test_model_config_json_is_the_full_normalized_config(
    server: ServerHandle, client: httpclient.InferenceServerClient
) -> None:
    assert client.get_model_config("add_sub") == ADD_SUB_CONFIG
    status, body = raw(server, "GET", "/v2/models/add_sub/versions/1/config")
    assert status == 200
    assert json.loads(body) == ADD_SUB_CONFIG


def test_model_config_of_an_auto_completed_model(client: httpclient.InferenceServerClient) -> None:
    config = client.get_model_config("auto_complete")
    assert config["max_batch_size"] == 4
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [
        ("INPUT0", "TYPE_FP32", [2])
    ]
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["output"]] == [
        ("OUTPUT0", "TYPE_FP32", [2])
    ]
    assert config["backend"] == "python"


def test_model_config_keeps_label_files_and_version_policy(
    client: httpclient.InferenceServerClient,
) -> None:
    outputs = client.get_model_config("classifier")["output"]
    assert [(t["name"], t["label_filename"]) for t in outputs] == [
        ("OUTPUT0", "labels.txt"),
        ("OUTPUT1", ""),
    ]
    config = client.get_model_config("versioned", "2")
    assert config["version_policy"] == {"all": {}}
    assert config["input"][0]["data_type"] == "TYPE_INT32"


# --------------------------------------------------------------------------- statistics


def counts(stats: dict[str, Any]) -> dict[str, int]:
    return {key: stats["inference_stats"][key]["count"] for key in INFERENCE_STAT_KEYS}


def test_statistics_of_an_unused_model_are_zero(client: httpclient.InferenceServerClient) -> None:
    assert client.get_inference_statistics("add_sub") == {
        "model_stats": [
            {
                "name": "add_sub",
                "version": "1",
                "last_inference": 0,
                "inference_count": 0,
                "execution_count": 0,
                "inference_stats": {key: ZERO for key in INFERENCE_STAT_KEYS},
                "response_stats": {},
                "batch_stats": [],
                "memory_usage": [],
            }
        ]
    }


def test_statistics_count_executions_and_batch_elements(
    client: httpclient.InferenceServerClient,
) -> None:
    before_ms = int(time.time() * 1000)
    for batch in (3, 3, 1):
        infer_fp32(client, "auto_complete", np.ones((batch, 2), np.float32))
    after_ms = int(time.time() * 1000)

    (stats,) = client.get_inference_statistics("auto_complete")["model_stats"]
    assert (stats["name"], stats["version"]) == ("auto_complete", "1")
    assert before_ms <= stats["last_inference"] <= after_ms
    assert stats["inference_count"] == 7  # batch elements
    assert stats["execution_count"] == 3
    assert counts(stats) == {
        "success": 3,
        "fail": 0,
        "queue": 3,
        "compute_input": 3,
        "compute_infer": 3,
        "compute_output": 3,
        "cache_hit": 0,
        "cache_miss": 0,
    }
    assert stats["inference_stats"]["success"]["ns"] > 0
    assert stats["inference_stats"]["compute_infer"]["ns"] > 0
    assert stats["inference_stats"]["fail"] == ZERO
    assert [
        (b["batch_size"], b["compute_input"]["count"], b["compute_infer"]["count"])
        for b in stats["batch_stats"]
    ] == [(1, 1, 1), (3, 2, 2)]
    assert stats["response_stats"] == {}


def test_statistics_ignore_requests_rejected_before_execution(
    client: httpclient.InferenceServerClient,
) -> None:
    # Triton validates a request against the config before it reaches the model's
    # statistics: a wrong shape leaves every counter at zero.
    tensor = httpclient.InferInput("INPUT0", [3, 2], "FP32")
    tensor.set_data_from_numpy(np.ones((3, 2), np.float32))
    row = httpclient.InferInput("INPUT1", [3], "INT32")
    row.set_data_from_numpy(np.ones(3, np.int32))
    with pytest.raises(httpclient.InferenceServerException):
        client.infer("fixed_shape", [tensor, row])
    (stats,) = client.get_inference_statistics("fixed_shape")["model_stats"]
    assert (stats["inference_count"], stats["execution_count"], stats["last_inference"]) == (
        0,
        0,
        0,
    )
    assert stats["inference_stats"] == {key: ZERO for key in INFERENCE_STAT_KEYS}
    assert stats["batch_stats"] == []


def test_statistics_count_a_raising_execute_as_failure(
    client: httpclient.InferenceServerClient,
) -> None:
    with pytest.raises(httpclient.InferenceServerException):
        infer_fp32(client, "raise_error", np.array([1.0, -1.0], np.float32))
    infer_fp32(client, "raise_error", np.array([1.0, 2.0], np.float32))

    (stats,) = client.get_inference_statistics("raise_error")["model_stats"]
    assert stats["execution_count"] == 2
    assert stats["inference_count"] == 1  # the failed execution produced no inference
    assert counts(stats) == {
        "success": 1,
        "fail": 1,
        "queue": 1,
        "compute_input": 1,
        "compute_infer": 1,
        "compute_output": 1,
        "cache_hit": 0,
        "cache_miss": 0,
    }
    assert stats["inference_stats"]["fail"]["ns"] > 0


def test_statistics_count_an_error_response_as_executed(
    client: httpclient.InferenceServerClient,
) -> None:
    # A model that returns InferenceResponse(error=...) has executed the request: Triton's
    # Python backend reports it as a success of the execution (the client still gets the
    # error).
    with pytest.raises(httpclient.InferenceServerException):
        infer_fp32(client, "triton_error", np.array([-1.0], np.float32))
    (stats,) = client.get_inference_statistics("triton_error")["model_stats"]
    assert (stats["inference_count"], stats["execution_count"]) == (1, 1)
    assert stats["inference_stats"]["success"]["count"] == 1
    assert stats["inference_stats"]["fail"] == ZERO


def test_statistics_of_all_models_and_of_each_version(
    client: httpclient.InferenceServerClient,
) -> None:
    everything = client.get_inference_statistics()["model_stats"]
    assert [(s["name"], s["version"]) for s in everything] == READY_VERSIONS
    by_model = client.get_inference_statistics("versioned")["model_stats"]
    assert [(s["name"], s["version"]) for s in by_model] == [("versioned", "1"), ("versioned", "2")]
    by_version = client.get_inference_statistics("versioned", "2")["model_stats"]
    assert [(s["name"], s["version"]) for s in by_version] == [("versioned", "2")]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/v2/models/nope/stats", "requested model 'nope' is not available"),
        (
            "/v2/models/versioned/versions/3/stats",
            "requested model version is not available for model 'versioned'",
        ),
    ],
)
def test_statistics_of_unknown_model_or_version(
    server: ServerHandle, path: str, message: str
) -> None:
    assert raw(server, "GET", path) == (400, error(message))


# --------------------------------------------------------------------------- repository index


def test_repository_index(server: ServerHandle, client: httpclient.InferenceServerClient) -> None:
    expected = [
        {"name": name, "version": version, "state": "READY"} for name, version in READY_VERSIONS
    ]
    # The client posts an empty body.
    assert client.get_model_repository_index() == expected
    for body in (b"{}", b'{"ready": true}', b'{"ready": false}'):
        status, answer = raw(server, "POST", "/v2/repository/index", body)
        assert (status, json.loads(answer)) == (200, expected), body


def test_repository_index_answers_only_post(server: ServerHandle) -> None:
    assert raw(server, "GET", "/v2/repository/index") == (405, error("Method Not Allowed"))
