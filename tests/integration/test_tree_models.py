"""Tree models (backend "fil") served end to end and held to their libraries' predictions.

XGBoost, LightGBM and scikit-learn forests are trained here in well under a second each
(tree_models.py), written in the files Triton's FIL backend expects, served by a real server
and called through the real tritonclient over HTTP and gRPC. Served outputs must equal what
each library predicts for the same rows under FIL's conventions: class scores with
``predict_proba`` ([1-p, p] for a binary model), classes without (``p > threshold``, or the
most probable class), regression values; for every predictor (compiled, GTIL, native).
Also: auto-complete, dynamic batching, and bad configurations refused with clear messages
while the server keeps serving.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tree_models as tm
import tritonclient.http as httpclient
from harness import ServerHandle, batch_counts, pytriton_cli_flags, run_pytriton_server
from tritonclient.utils import InferenceServerException

for _module in ("treelite", "tl2cgen", "lightgbm", "xgboost", "sklearn"):
    pytest.importorskip(_module, reason=f"{_module} (the fil extra / test extra) is not installed")

DEFAULT_MAX_BATCH_SIZE = 64
PROTOCOLS = ["http", "grpc"] if "--grpc-use-ssl" in pytriton_cli_flags() else ["http"]
ROWS = 64


@dataclass(frozen=True)
class Served:
    """One model of the repository: which forest, in which file, served how."""

    forest: str  # key of FORESTS
    filename: str
    parameters: dict[str, str]
    max_batch_size: int | None = None
    queue_delay_us: int | None = None  # the dynamic batcher's, when on

    def setting(self, key: str, default: str = "") -> str:
        return self.parameters.get(key, default)


# forest key -> (trainer, task)
FORESTS: dict[str, tuple[Callable[[str], tm.Trained], str]] = {
    "xgb_binary": (tm.train_xgboost, "binary"),
    "xgb_multi": (tm.train_xgboost, "multiclass"),
    "xgb_regression": (tm.train_xgboost, "regression"),
    "lgb_binary": (tm.train_lightgbm, "binary"),
    "lgb_multi": (tm.train_lightgbm, "multiclass"),
    "lgb_regression": (tm.train_lightgbm, "regression"),
    "rf_multi": (tm.train_random_forest, "multiclass"),
    "rf_regression": (tm.train_random_forest, "regression"),
}
PROBA = {"predict_proba": "true"}


def shap_config(classes: int, output_width: int, *, shap_dims: str = "", extra: str = "") -> str:
    """A config listing FIL's ``treeshap_output``: ``[features + 1]``, or
    ``[classes, features + 1]`` for a multi-class model (the last column is the bias)."""
    width = tm.FEATURES + 1
    dims = shap_dims or (f"{classes}, {width}" if classes > 1 else f"{width}")
    return (
        'backend: "fil"\nmax_batch_size: 64\ndynamic_batching { }\n'
        f'input [ {{ name: "input__0", data_type: TYPE_FP32, dims: [ {tm.FEATURES} ] }} ]\n'
        f'output [ {{ name: "output__0", data_type: TYPE_FP32, dims: [ {output_width} ] }},\n'
        f'         {{ name: "treeshap_output", data_type: TYPE_FP32, dims: [ {dims} ] }} ]\n'
        + extra
    )


# model -> (forest, file, config.pbtxt): SHAP values from the library's own TreeSHAP
SHAP: dict[str, tuple[str, str, str]] = {
    "xgb_shap": ("xgb_binary", "xgboost.json", shap_config(1, 1)),
    "xgb_multi_shap": ("xgb_multi", "xgboost.ubj", shap_config(3, 1)),
    "xgb_regression_shap": ("xgb_regression", "xgboost.json", shap_config(1, 1)),
    "lgb_shap": ("lgb_binary", "model.txt", shap_config(1, 1)),
    "lgb_multi_shap": ("lgb_multi", "model.txt", shap_config(3, 1)),
}
GOOD: dict[str, Served] = {
    # Only `backend: "fil"`: auto-complete reads the rest from the file.
    "xgb_auto": Served("xgb_binary", "xgboost.json", {}),
    "xgb_proba": Served(
        "xgb_binary",
        "xgboost.ubj",
        {"model_type": "xgboost_ubj", "output_class": "true", "threshold": "0.5", **PROBA},
        max_batch_size=64,
        queue_delay_us=200_000,
    ),
    "xgb_threshold": Served("xgb_binary", "xgboost.json", {"threshold": "0.3"}),
    "xgb_gtil": Served("xgb_binary", "xgboost.json", {"predictor": "gtil", **PROBA}),
    "xgb_native": Served("xgb_binary", "xgboost.json", {"predictor": "native", **PROBA}),
    "xgb_multi": Served("xgb_multi", "xgboost.json", {}),
    "xgb_multi_proba": Served("xgb_multi", "xgboost.json", PROBA),
    "xgb_regression": Served("xgb_regression", "xgboost.json", {}),
    "lgb_auto": Served("lgb_binary", "model.txt", {}),
    "lgb_proba": Served("lgb_binary", "model.txt", PROBA),
    "lgb_compiled": Served("lgb_binary", "model.txt", {"predictor": "compiled", **PROBA}),
    "lgb_gtil": Served("lgb_binary", "model.txt", {"predictor": "gtil", **PROBA}),
    "lgb_multi_proba": Served("lgb_multi", "model.txt", PROBA),
    "lgb_regression": Served("lgb_regression", "model.txt", {}),
    "rf_multi": Served("rf_multi", "checkpoint.tl", {}),
    "rf_multi_proba": Served("rf_multi", "checkpoint.tl", PROBA),
    "rf_gtil": Served("rf_multi", "checkpoint.tl", {"predictor": "gtil", **PROBA}),
    "rf_regression": Served("rf_regression", "checkpoint.tl", {}),
    # FIL's GPU knobs, its experimental flag and a misspelt thread count: loaded, each logged.
    "xgb_tuned": Served(
        "xgb_binary",
        "xgboost.json",
        {
            "algo": "NAIVE",
            "storage_type": "SPARSE",
            "use_experimental_optimizations": "true",
            "threads": "2",
        },
    ),
}
# model -> (forest, file, config.pbtxt, what the load error must say)
BAD: dict[str, tuple[str, str, str, str]] = {
    "bad_model_type": (
        "xgb_binary",
        "xgboost.json",
        tm.fil_config(model_type="catboost"),
        "'catboost' not recognized as a valid serialization format",
    ),
    "bad_boolean": (
        "xgb_binary",
        "xgboost.json",
        tm.fil_config(predict_proba="yes"),
        "Expected 'true' or 'false' for parameter 'predict_proba', got: 'yes'",
    ),
    "bad_threshold": (
        "xgb_binary",
        "xgboost.json",
        tm.fil_config(threshold="high"),
        "Bad input for parameter threshold",
    ),
    "bad_algo": (
        "xgb_binary",
        "xgboost.json",
        tm.fil_config(algo="FASTEST"),
        "parameter 'algo' must be one of",
    ),
    "bad_input_name": (
        "xgb_binary",
        "xgboost.json",
        'backend: "fil"\nmax_batch_size: 8\n'
        'input [ { name: "X", data_type: TYPE_FP32, dims: [ 8 ] } ]\n'
        'output [ { name: "output__0", data_type: TYPE_FP32, dims: [ 1 ] } ]\n',
        "unexpected input 'X', the model's inputs are: 'input__0'",
    ),
    "bad_features": (
        "xgb_binary",
        "xgboost.json",
        'backend: "fil"\nmax_batch_size: 8\n'
        'input [ { name: "input__0", data_type: TYPE_FP32, dims: [ 7 ] } ]\n'
        'output [ { name: "output__0", data_type: TYPE_FP32, dims: [ 1 ] } ]\n',
        "input 'input__0' has dims [7] in the model configuration",
    ),
    "bad_output_width": (
        "xgb_binary",
        "xgboost.json",
        'backend: "fil"\nmax_batch_size: 8\n'
        'input [ { name: "input__0", data_type: TYPE_FP32, dims: [ 8 ] } ]\n'
        'output [ { name: "output__0", data_type: TYPE_FP32, dims: [ 1 ] } ]\n'
        + tm.fil_config(**PROBA).removeprefix('backend: "fil"\n'),
        "output 'output__0' has dims [1] in the model configuration",
    ),
    "bad_missing_file": (
        "xgb_binary",
        "xgboost.json",
        tm.fil_config(model_type="lightgbm"),
        "model.txt' (model_type 'lightgbm')",
    ),
    "bad_treeshap_checkpoint": (
        "rf_multi",
        "checkpoint.tl",
        shap_config(3, 3, extra=tm.fil_config(**PROBA).removeprefix('backend: "fil"\n')),
        "output 'treeshap_output' (SHAP values) needs an XGBoost or LightGBM model",
    ),
    "bad_treeshap_dims": (
        "xgb_binary",
        "xgboost.json",
        shap_config(1, 1, shap_dims="9, 1"),
        "output 'treeshap_output' has dims [9, 1] in the model configuration",
    ),
    "bad_native_checkpoint": (
        "rf_multi",
        "checkpoint.tl",
        tm.fil_config(predictor="native"),
        "'native' needs an XGBoost or LightGBM model",
    ),
}
CORRUPT = "bad_corrupt_file"  # an xgboost.json that is not one


@functools.cache
def trained(forest: str) -> tm.Trained:
    trainer, task = FORESTS[forest]
    return trainer(task)


def _write_forest(forest: str, path: Path) -> Path:
    model = trained(forest)
    if path.name.startswith("xgboost"):
        return tm.write_xgboost(model, path)
    if path.name == "model.txt":
        return tm.write_lightgbm(model, path)
    return tm.write_treelite_checkpoint(model, path)


def build_repository(root: Path) -> Path:
    for name, served in GOOD.items():
        config = tm.fil_config(
            max_batch_size=served.max_batch_size,
            queue_delay_us=served.queue_delay_us,
            **served.parameters,
        )
        tm.write_model(
            root / name,
            config,
            functools.partial(_write_forest, served.forest),
            served.filename,
        )
    for name, (forest, filename, config) in SHAP.items():
        tm.write_model(root / name, config, functools.partial(_write_forest, forest), filename)
    for name, (forest, filename, config, _) in BAD.items():
        tm.write_model(root / name, config, functools.partial(_write_forest, forest), filename)

    def corrupt(path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('{"learner": "not a model"')
        return path

    tm.write_model(root / CORRUPT, tm.fil_config(model_type="xgboost_json"), corrupt, "x.json")
    (root / CORRUPT / "config.pbtxt").write_text(
        tm.fil_config(model_type="xgboost_json") + 'default_model_filename: "x.json"\n'
    )
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    repository = build_repository(tmp_path_factory.mktemp("tree_models"))
    with run_pytriton_server(
        repository,
        "--model-control-mode=explicit",
        *(f"--load-model={name}" for name in (*GOOD, *SHAP)),
        f"--backend-config=default-max-batch-size={DEFAULT_MAX_BATCH_SIZE}",
        timeout=240,
    ) as handle:
        yield handle


@contextlib.contextmanager
def client_for(server: ServerHandle, protocol: str) -> Iterator[tuple[Any, Any]]:
    module: Any = httpclient
    if protocol == "grpc":
        import tritonclient.grpc as grpcclient

        module = grpcclient
        client: Any = module.InferenceServerClient(server.grpc_url)
    else:
        client = module.InferenceServerClient(server.http_url, concurrency=16)
    try:
        yield client, module
    finally:
        client.close()


def infer(client: Any, module: Any, model: str, rows: np.ndarray) -> np.ndarray:
    tensor = module.InferInput("input__0", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)
    result: np.ndarray = client.infer(model, [tensor]).as_numpy("output__0")
    return result


# ------------------------------------------------------------------- the oracle


def expected(served: Served, rows: np.ndarray) -> np.ndarray:
    """What FIL returns, computed from the library's own prediction."""
    scores = np.asarray(trained(served.forest).predict(rows), dtype=np.float64)
    scores = scores.reshape(len(rows), -1)
    classifier = FORESTS[served.forest][1] != "regression"
    if served.setting("predict_proba") == "true":
        if scores.shape[1] == 1:
            return np.hstack((1.0 - scores, scores))
        return scores
    if classifier:
        if scores.shape[1] == 1:
            return (scores > float(served.setting("threshold", "0.5"))).astype(np.float64)
        return np.argmax(scores, axis=1).reshape(-1, 1).astype(np.float64)
    return scores


def undecided(served: Served, rows: np.ndarray) -> np.ndarray:
    """Rows whose class float rounding could flip (within 1e-5 of the decision)."""
    scores = np.asarray(trained(served.forest).predict(rows)).reshape(len(rows), -1)
    if scores.shape[1] == 1:
        return np.abs(scores[:, 0] - float(served.setting("threshold", "0.5"))) < 1e-5
    top = np.sort(scores, axis=1)
    return (top[:, -1] - top[:, -2]) < 1e-5


def assert_matches(served: Served, rows: np.ndarray, got: np.ndarray) -> None:
    want = expected(served, rows)
    assert got.dtype == np.float32
    assert got.shape == want.shape
    gives_classes = served.setting("predict_proba") != "true" and (
        FORESTS[served.forest][1] != "regression"
    )
    if gives_classes:
        decided = ~undecided(served, rows)
        assert decided.sum() >= len(rows) - 2  # the comparison is not vacuous
        np.testing.assert_array_equal(got[decided], want[decided])
    else:
        # FIL computes in FP32; LightGBM and scikit-learn in FP64.
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)


# ---------------------------------------------------------------------- tests


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", sorted(GOOD))
def test_predictions_equal_the_librarys(server: ServerHandle, model: str, protocol: str) -> None:
    rows = tm.features(ROWS, seed=11)
    with client_for(server, protocol) as (client, module):
        got = infer(client, module, model, rows)
    assert_matches(GOOD[model], rows, got)


def test_threshold_changes_the_decision(server: ServerHandle) -> None:
    rows = tm.features(ROWS, seed=12)
    with client_for(server, "http") as (client, module):
        default = infer(client, module, "xgb_auto", rows)
        lowered = infer(client, module, "xgb_threshold", rows)
    probability = trained("xgb_binary").predict(rows)
    between = (probability > 0.3 + 1e-5) & (probability < 0.5 - 1e-5)
    assert between.any()  # rows the two thresholds decide differently
    assert (default[between] == 0).all() and (lowered[between] == 1).all()


@pytest.mark.parametrize(
    ("model", "parameters", "output_dims"),
    [
        ("xgb_auto", {"model_type": "xgboost_json", "output_class": "true", "threshold": "0.5"}, 1),
        ("xgb_regression", {"model_type": "xgboost_json", "output_class": "false"}, 1),
        ("lgb_proba", {"model_type": "lightgbm", "output_class": "true", "threshold": "0.5"}, 2),
        ("rf_multi_proba", {"model_type": "treelite_checkpoint", "output_class": "true"}, 3),
    ],
)
def test_auto_complete(
    server: ServerHandle, model: str, parameters: dict[str, str], output_dims: int
) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    config = client.get_model_config(model)
    assert config["backend"] == "fil"
    assert config["max_batch_size"] == DEFAULT_MAX_BATCH_SIZE
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
        ("input__0", "TYPE_FP32", [tm.FEATURES])
    ]
    assert [(o["name"], o["data_type"], o["dims"]) for o in config["output"]] == [
        ("output__0", "TYPE_FP32", [output_dims])
    ]
    completed = {k: v["string_value"] for k, v in config["parameters"].items()}
    assert parameters.items() <= completed.items()
    assert "dynamic_batching" in config
    metadata = client.get_model_metadata(model)
    assert metadata["inputs"] == [
        {"name": "input__0", "datatype": "FP32", "shape": [-1, tm.FEATURES]}
    ]


def test_dynamic_batching_keeps_each_requests_rows(server: ServerHandle) -> None:
    served = GOOD["xgb_proba"]
    client = httpclient.InferenceServerClient(server.http_url, concurrency=16)
    before = batch_counts(client, "xgb_proba")
    sizes = [1, 2, 1, 3, 1, 1, 2, 1, 4, 1]
    batches = [tm.features(n, seed=200 + i) for i, n in enumerate(sizes)]
    pending = []
    for rows in batches:
        tensor = httpclient.InferInput("input__0", list(rows.shape), "FP32")
        tensor.set_data_from_numpy(rows)
        pending.append(client.async_infer("xgb_proba", [tensor]))
    for rows, request in zip(batches, pending, strict=True):
        assert_matches(served, rows, request.get_result().as_numpy("output__0"))
    after = batch_counts(client, "xgb_proba")
    formed = {size: after[size] - before.get(size, 0) for size in after}
    assert sum(size * count for size, count in formed.items()) == sum(sizes)
    assert max(size for size, count in formed.items() if count) > 1, formed
    client.close()


@pytest.mark.parametrize("model", sorted(BAD))
def test_bad_config_is_refused_clearly(server: ServerHandle, model: str) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as failure:
        client.load_model(model)
    assert BAD[model][3] in str(failure.value)
    assert not client.is_model_ready(model)
    assert client.is_model_ready("xgb_auto")  # the rest keeps serving


def test_unreadable_model_file_is_refused_clearly(server: ServerHandle) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException, match=r"cannot read .*x\.json' as model_type"):
        client.load_model(CORRUPT)


def test_parameters_without_effect_are_logged(server: ServerHandle) -> None:
    log = server.log()
    for expected_line in (
        "parameter 'algo' tunes RAPIDS FIL's GPU kernels; it has no effect here",
        "parameter 'storage_type' tunes RAPIDS FIL's GPU kernels",
        "parameter 'use_experimental_optimizations' has no effect here",
        "parameter 'threads' is not a FIL backend parameter and is ignored "
        "(the FIL backend's name for it is 'cpu_nthread')",
    ):
        assert expected_line in log
    assert httpclient.InferenceServerClient(server.http_url).is_model_ready("xgb_tuned")


def test_wrong_feature_count_is_a_clear_request_error(server: ServerHandle) -> None:
    with client_for(server, "http") as (client, module):
        with pytest.raises(InferenceServerException, match="input__0"):
            infer(client, module, "xgb_auto", tm.features(2, width=tm.FEATURES + 1))
        assert infer(client, module, "xgb_auto", tm.features(2)).shape == (2, 1)


def library_contributions(forest: str, rows: np.ndarray) -> np.ndarray:
    """The library's own TreeSHAP: (rows, features + 1), or (rows, classes, features + 1)."""
    model = trained(forest).model
    if forest.startswith("xgb"):
        import xgboost

        values = model.predict(xgboost.DMatrix(rows), pred_contribs=True)
    else:
        values = model.predict(rows, pred_contrib=True, num_threads=1)
    values = np.asarray(values).reshape(len(rows), -1, tm.FEATURES + 1)
    return values[:, 0] if values.shape[1] == 1 else values


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", sorted(SHAP))
def test_treeshap_output_equals_the_librarys_shap_values(
    server: ServerHandle, model: str, protocol: str
) -> None:
    forest = SHAP[model][0]
    rows = tm.features(ROWS, seed=13)
    with client_for(server, protocol) as (client, module):
        tensor = module.InferInput("input__0", list(rows.shape), "FP32")
        tensor.set_data_from_numpy(rows)
        result = client.infer(model, [tensor])
        values = result.as_numpy("treeshap_output")
        prediction = result.as_numpy("output__0")
    want = library_contributions(forest, rows)
    assert values.dtype == np.float32 and values.shape == want.shape
    np.testing.assert_allclose(values, want, rtol=1e-5, atol=1e-5)
    # The values explain the margin: each row's sum is the model's raw score.
    np.testing.assert_allclose(
        values.sum(axis=-1), margins(forest, rows).reshape(values.shape[:-1]), atol=1e-4
    )
    assert prediction.shape == (ROWS, 1)


def margins(forest: str, rows: np.ndarray) -> np.ndarray:
    """The model's raw scores, before its sigmoid or softmax."""
    model = trained(forest).model
    if forest.startswith("xgb"):
        import xgboost

        return np.asarray(model.predict(xgboost.DMatrix(rows), output_margin=True))
    return np.asarray(model.predict(rows, raw_score=True, num_threads=1))


def test_treeshap_output_is_computed_only_when_asked(server: ServerHandle) -> None:
    rows = tm.features(4, seed=14)
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("input__0", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)
    only_prediction = [httpclient.InferRequestedOutput("output__0")]
    result = client.infer("xgb_multi_shap", [tensor], outputs=only_prediction)
    assert result.as_numpy("treeshap_output") is None
    assert result.as_numpy("output__0").shape == (4, 1)
    only_values = [httpclient.InferRequestedOutput("treeshap_output")]
    result = client.infer("xgb_multi_shap", [tensor], outputs=only_values)
    assert result.as_numpy("output__0") is None
    assert result.as_numpy("treeshap_output").shape == (4, tm.CLASSES, tm.FEATURES + 1)
    client.close()
