"""The response cache through the real tritonclient: identical answers, exact hit and miss
counts, eviction by size, Triton's load refusals, and its metrics.

One server with ``--cache-config local,size=10000`` serves the models each test builds; a
request whose inputs (name, datatype, shape, bytes) were answered before is answered from
the cache without executing. Triton 2.51 beside it (when its local cache library is
installed, see docs/response-cache.md) answers the same traffic with the same counts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from harness import ServerHandle, real_triton_home, run_pytriton_server, run_real_triton
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

CACHE_SIZE = 10_000

# OUTPUT0 = 2 * INPUT0; a negative first element is answered with an error.
DOUBLING_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if x.size and x.flat[0] < 0:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("negative")))
                continue
            out = pb_utils.Tensor("OUTPUT0", (x * 2).astype(x.dtype))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""

DECOUPLED_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return None
"""


def write_model(
    root: Path,
    name: str,
    *,
    cache: bool = True,
    datatype: str = "TYPE_FP32",
    extra: str = "",
    source: str = DOUBLING_MODEL,
) -> None:
    folder = root / name
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(source)
    (folder / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n'
        f'input [ {{ name: "INPUT0" data_type: {datatype} dims: [ -1 ] }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: {datatype} dims: [ -1 ] }} ]\n'
        "instance_group [ { kind: KIND_CPU count: 1 } ]\n"
        + ("response_cache { enable: true }\n" if cache else "")
        + extra
    )


def write_ensemble(root: Path, name: str, step_model: str, steps: int = 1) -> None:
    """An ensemble with the cache on: ``steps`` runs of ``step_model``, INPUT0 -> OUTPUT0."""
    tensors = ["INPUT0", *(f"T{i}" for i in range(1, steps)), "OUTPUT0"]
    step_text = ", ".join(
        f'{{ model_name: "{step_model}" model_version: -1 '
        f'input_map {{ key: "INPUT0" value: "{tensors[i]}" }} '
        f'output_map {{ key: "OUTPUT0" value: "{tensors[i + 1]}" }} }}'
        for i in range(steps)
    )
    folder = root / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        "response_cache { enable: true }\n"
        f"ensemble_scheduling {{ step [ {step_text} ] }}\n"
    )


def build_repository(root: Path) -> Path:
    write_model(root, "cached")
    write_model(root, "cached_grpc")
    write_model(root, "cached_int", datatype="TYPE_INT32")
    write_model(root, "uncached", cache=False)
    write_model(root, "big")
    write_model(root, "ordered", extra="dynamic_batching { preserve_ordering: true }\n")
    write_model(
        root,
        "decoupled_cached",
        source=DECOUPLED_MODEL,
        extra="model_transaction_policy { decoupled: true }\n",
    )
    write_model(root, "sequence_cached", extra="sequence_batching { }\n")
    # Ensembles: the composing models have no cache of their own.
    write_model(root, "step", cache=False)
    write_ensemble(root, "ensemble_cached", "step", steps=2)
    write_model(
        root,
        "decoupled_step",
        cache=False,
        source=DECOUPLED_MODEL,
        extra="model_transaction_policy { decoupled: true }\n",
    )
    write_ensemble(root, "ensemble_decoupled", "decoupled_step")
    write_model(root, "sequence_step", cache=False, extra="sequence_batching { }\n")
    write_ensemble(root, "ensemble_sequence", "sequence_step")
    write_model(root, "changing_step", cache=False)
    write_ensemble(root, "ensemble_of_changing_step", "changing_step")
    return root


READY_MODELS = (
    "cached",
    "cached_grpc",
    "cached_int",
    "uncached",
    "big",
    "ordered",
    "ensemble_cached",
)

# An ensemble whose step is decoupled is decoupled itself: its version fails to load.
ENSEMBLE_DECOUPLED_REFUSAL = (
    "load failed for model 'ensemble_decoupled': version 1 is at UNAVAILABLE state: Invalid "
    "argument: Response Cache does not currently support model ensemble_decoupled with "
    "'decoupled' transaction policy. Please disable the response cache.;"
)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("cache-repo"))


def start_flags() -> list[str]:
    return [
        f"--cache-config=local,size={CACHE_SIZE}",
        "--model-control-mode=explicit",
        *(f"--load-model={name}" for name in READY_MODELS),
    ]


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[ServerHandle]:
    with run_pytriton_server(repository, *start_flags(), metrics=True) as handle:
        yield handle


@pytest.fixture(scope="module")
def client(server: ServerHandle) -> Iterator[httpclient.InferenceServerClient]:
    with httpclient.InferenceServerClient(server.http_url) as http_client:
        yield http_client


def infer(client: httpclient.InferenceServerClient, model: str, data: np.ndarray) -> np.ndarray:
    tensor = httpclient.InferInput("INPUT0", list(data.shape), _wire(data))
    tensor.set_data_from_numpy(data)
    result = client.infer(model, [tensor]).as_numpy("OUTPUT0")
    assert result is not None
    return result


def _wire(data: np.ndarray) -> str:
    return {np.dtype(np.float32): "FP32", np.dtype(np.int32): "INT32"}[data.dtype]


def counts(client: Any, model: str) -> dict[str, int]:
    stats = client.get_inference_statistics(model)["model_stats"][0]
    inference = stats["inference_stats"]
    return {
        "success": int(inference["success"]["count"]),
        "hit": int(inference["cache_hit"]["count"]),
        "miss": int(inference["cache_miss"]["count"]),
        "compute": int(inference["compute_infer"]["count"]),
        "inferences": int(stats["inference_count"]),
        "executions": int(stats["execution_count"]),
    }


def test_repeated_requests_are_answered_from_the_cache(
    client: httpclient.InferenceServerClient,
) -> None:
    first = np.arange(8, dtype=np.float32).reshape(1, 8)
    other = first + 1
    answers = [infer(client, "cached", x) for x in (first, first, other, first, other, first)]
    for x, answer in zip((first, first, other, first, other, first), answers, strict=True):
        np.testing.assert_array_equal(answer, x * 2)
    assert counts(client, "cached") == {
        "success": 6,
        "hit": 4,
        "miss": 2,
        "compute": 2,  # compute counts leave out the hits, as Triton's statistics do
        "inferences": 2,
        "executions": 2,
    }


def test_the_key_takes_shape_datatype_and_bytes(client: httpclient.InferenceServerClient) -> None:
    base = np.zeros((1, 4), np.int32)
    # Same bytes (all zero) in other shapes, and other bytes in the same shape: all misses.
    for x in (base, base.reshape(2, 2), np.zeros((1, 2), np.int32), base + 1, base):
        np.testing.assert_array_equal(infer(client, "cached_int", x), x * 2)
    assert counts(client, "cached_int")["miss"] == 4
    assert counts(client, "cached_int")["hit"] == 1


def test_grpc_hits_and_http_hits_share_the_cache(server: ServerHandle) -> None:
    data = np.full((1, 3), 7, np.float32)
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc_client:
        for _ in range(3):
            tensor = grpcclient.InferInput("INPUT0", [1, 3], "FP32")
            tensor.set_data_from_numpy(data)
            out = grpc_client.infer("cached_grpc", [tensor]).as_numpy("OUTPUT0")
            np.testing.assert_array_equal(out, data * 2)
    with httpclient.InferenceServerClient(server.http_url) as http_client:
        np.testing.assert_array_equal(infer(http_client, "cached_grpc", data), data * 2)
        assert counts(http_client, "cached_grpc") == {
            "success": 4,
            "hit": 3,
            "miss": 1,
            "compute": 1,
            "inferences": 1,
            "executions": 1,
        }


def test_errors_are_not_cached(client: httpclient.InferenceServerClient) -> None:
    bad = np.full((1, 2), -1, np.float32)
    before = counts(client, "cached")
    for _ in range(2):
        with pytest.raises(InferenceServerException, match="negative"):
            infer(client, "cached", bad)
    after = counts(client, "cached")
    # Both executed (Triton 2.51 caches the first error and answers the second with an
    # empty success); neither counts as a hit or a miss.
    assert after["executions"] == before["executions"] + 2
    assert (after["hit"], after["miss"]) == (before["hit"], before["miss"])


def test_a_model_without_response_cache_is_not_cached(
    client: httpclient.InferenceServerClient,
) -> None:
    data = np.ones((1, 2), np.float32)
    for _ in range(3):
        infer(client, "uncached", data)
    assert counts(client, "uncached") == {
        "success": 3,
        "hit": 0,
        "miss": 0,
        "compute": 3,
        "inferences": 3,
        "executions": 3,
    }


def test_preserve_ordering_with_hits(client: httpclient.InferenceServerClient) -> None:
    data = np.ones((1, 5), np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(infer(client, "ordered", data), data * 2)
    assert counts(client, "ordered")["hit"] == 2


def test_eviction_by_size_least_recently_used_first(
    client: httpclient.InferenceServerClient,
) -> None:
    # 1024 FP32 values: 4096 bytes of data each, so two entries fit in the cache, not three.
    a, b, c = (np.full((1, 1024), v, np.float32) for v in (1, 2, 3))
    for x in (a, b, a, c):  # a is used again before c comes, so b is the coldest
        infer(client, "big", x)
    assert counts(client, "big")["miss"] == 3
    infer(client, "big", a)  # still cached
    assert counts(client, "big")["hit"] == 2
    infer(client, "big", b)  # evicted: runs again
    assert counts(client, "big")["miss"] == 4
    assert counts(client, "big")["executions"] == 4


def test_an_entry_larger_than_the_cache_is_never_stored(
    client: httpclient.InferenceServerClient,
) -> None:
    huge = np.ones((1, 4096), np.float32)  # 16 KiB, more than the whole cache
    for _ in range(2):
        np.testing.assert_array_equal(infer(client, "big", huge), huge * 2)
    before = counts(client, "big")
    infer(client, "big", huge)
    assert counts(client, "big")["executions"] == before["executions"] + 1


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (
            "decoupled_cached",
            "Response Cache does not currently support model decoupled_cached with "
            "'decoupled' transaction policy. Please disable the response cache.",
        ),
        (
            "sequence_cached",
            "Response Cache does not currently support model sequence_cached with sequence "
            "batching scheduler. Please disable the response cache.",
        ),
    ],
)
def test_refused_for_decoupled_and_sequence_models(
    server: ServerHandle, client: httpclient.InferenceServerClient, model: str, message: str
) -> None:
    # As Triton: the config check is part of the poll, whose failure the client hears in
    # general words; the reason is in the log.
    with pytest.raises(InferenceServerException) as failure:
        client.load_model(model)
    assert f"failed to load '{model}', failed to poll from model repository" in str(failure.value)
    assert message in server.log()
    assert not client.is_model_ready(model)


ENSEMBLE_TRAFFIC = [np.full((1, 4), v, np.float32) for v in (1, 2, 1, 1, -1, -1, 2)]


def ensemble_answers(client: httpclient.InferenceServerClient) -> list[np.ndarray | str]:
    """The ensemble's answers to ENSEMBLE_TRAFFIC (a negative input fails in its step)."""
    answers: list[np.ndarray | str] = []
    for x in ENSEMBLE_TRAFFIC:
        try:
            answers.append(infer(client, "ensemble_cached", x))
        except InferenceServerException as exc:
            answers.append(str(exc.message()))
    return answers


def test_an_ensemble_is_answered_from_the_cache_without_running_its_steps(
    server: ServerHandle, client: httpclient.InferenceServerClient
) -> None:
    answers = ensemble_answers(client)
    for x, answer in zip(ENSEMBLE_TRAFFIC, answers, strict=True):
        if x.flat[0] < 0:
            assert answer == "in ensemble 'ensemble_cached', negative"
        else:
            np.testing.assert_array_equal(answer, x * 4)
    # Two misses and three hits; the failures are neither (nor stored: both ran).
    assert counts(client, "ensemble_cached") == {
        "success": 5,
        "hit": 3,
        "miss": 2,
        "compute": 2,
        "inferences": 2,
        "executions": 2,
    }
    # Each miss ran both steps; each failure the first one.
    assert counts(client, "step")["executions"] == 2 * 2 + 2
    families = scrape(server)
    labels = {"model": "ensemble_cached", "version": "1"}
    assert sample(families, "nv_cache_num_hits_per_model", **labels) == 3
    assert sample(families, "nv_cache_num_misses_per_model", **labels) == 2


def test_an_ensemble_with_a_decoupled_step_refuses_the_cache(
    client: httpclient.InferenceServerClient,
) -> None:
    with pytest.raises(InferenceServerException) as failure:
        client.load_model("ensemble_decoupled")
    assert ENSEMBLE_DECOUPLED_REFUSAL in str(failure.value)
    assert not client.is_model_ready("ensemble_decoupled")


def test_an_ensemble_with_a_sequence_step_refuses_the_cache(
    client: httpclient.InferenceServerClient,
) -> None:
    # Triton 2.51 loads this one and answers a second sequence from the cache without the
    # stateful model seeing it; its documentation says the ensemble inherits the step's
    # limitation, which is what happens here.
    with pytest.raises(InferenceServerException) as failure:
        client.load_model("ensemble_sequence")
    assert (
        "Response Cache does not currently support model ensemble_sequence with sequence "
        "batching scheduler in its composing model sequence_step. Please disable the "
        "response cache."
    ) in str(failure.value)
    assert not client.is_model_ready("ensemble_sequence")
    assert client.is_model_ready("sequence_step")  # the composing model itself is fine


def test_a_step_reloaded_as_sequence_batched_unloads_the_cached_ensemble(
    server: ServerHandle, client: httpclient.InferenceServerClient
) -> None:
    client.load_model("ensemble_of_changing_step")
    assert client.is_model_ready("ensemble_of_changing_step")
    config = client.get_model_config("changing_step")
    config["sequence_batching"] = {}
    config.pop("dynamic_batching", None)
    client.load_model("changing_step", config=json.dumps(config))
    assert client.is_model_ready("changing_step")
    assert not client.is_model_ready("ensemble_of_changing_step")
    assert (
        "Response Cache does not currently support model ensemble_of_changing_step with "
        "sequence batching scheduler in its composing model changing_step."
    ) in server.log()


def scrape(server: ServerHandle) -> dict[str, Any]:
    import urllib.request

    assert server.metrics_url is not None
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def sample(families: dict[str, Any], name: str, **labels: str) -> float:
    found = [
        s.value
        for family in families.values()
        for s in family.samples
        if s.name in (name, f"{name}_total") and labels.items() <= s.labels.items()
    ]
    assert len(found) == 1, (name, labels, found)
    return float(found[0])


def test_cache_metrics(server: ServerHandle, client: httpclient.InferenceServerClient) -> None:
    data = np.full((1, 6), 3, np.float32)
    for _ in range(3):
        infer(client, "cached_grpc", data)
    families = scrape(server)
    stats = counts(client, "cached_grpc")
    labels = {"model": "cached_grpc", "version": "1"}
    assert sample(families, "nv_cache_num_hits_per_model", **labels) == stats["hit"]
    assert sample(families, "nv_cache_num_misses_per_model", **labels) == stats["miss"]
    assert families["nv_cache_num_hits_per_model"].type == "counter"
    assert sample(families, "nv_cache_hit_duration_per_model", **labels) >= 0
    # Only models with the cache on have the per-model cache series.
    models = {s.labels["model"] for s in families["nv_cache_num_hits_per_model"].samples}
    assert "uncached" not in models and "cached" in models
    # The cache's own gauges, over every model.
    assert families["nv_cache_num_entries"].type == "gauge"
    assert sample(families, "nv_cache_num_lookups") == sample(
        families, "nv_cache_num_hits"
    ) + sample(families, "nv_cache_num_misses")
    assert 0 < sample(families, "nv_cache_util") <= 1
    assert sample(families, "nv_cache_num_evictions") >= 1  # the eviction test's


def test_response_cache_without_a_server_cache_does_nothing(repository: Path) -> None:
    with (
        run_pytriton_server(
            repository, "--model-control-mode=explicit", "--load-model=cached"
        ) as plain,
        httpclient.InferenceServerClient(plain.http_url) as plain_client,
    ):
        data = np.ones((1, 2), np.float32)
        for _ in range(2):
            infer(plain_client, "cached", data)
        assert counts(plain_client, "cached")["executions"] == 2
        assert counts(plain_client, "cached")["hit"] == 0


def _local_cache_installed() -> bool:
    return (real_triton_home() / "dist" / "caches" / "local" / "libtritoncache_local.so").is_file()


@pytest.mark.real_triton
def test_counts_equal_the_real_triton(repository: Path) -> None:
    if not _local_cache_installed():
        pytest.skip("the real Triton has no local cache library (docs/response-cache.md)")
    data = [np.full((1, 4), v, np.float32) for v in (1, 2, 1, 1, 3, 2)]
    results = []
    for run in (run_pytriton_server, run_real_triton):
        with (
            run(repository, *start_flags()) as handle,
            httpclient.InferenceServerClient(handle.http_url) as http_client,
        ):
            answers = [infer(http_client, "cached", x) for x in data]
            answers += ensemble_answers(http_client)
            with pytest.raises(InferenceServerException) as refusal:
                http_client.load_model("ensemble_decoupled")
            results.append(
                (
                    answers,
                    [counts(http_client, m) for m in ("cached", "ensemble_cached", "step")],
                    str(refusal.value),
                )
            )
    (ours, our_counts, our_refusal), (theirs, their_counts, their_refusal) = results
    for mine, real in zip(ours, theirs, strict=True):
        if isinstance(real, str):
            assert mine == real
        else:
            np.testing.assert_array_equal(mine, real)
    assert our_counts == their_counts
    assert ENSEMBLE_DECOUPLED_REFUSAL in our_refusal
    assert ENSEMBLE_DECOUPLED_REFUSAL in their_refusal
