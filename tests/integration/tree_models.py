"""Small tree models trained on the spot (no downloads), shared by the tests and bench/.

Each ``train_*`` fits a forest on a fixed synthetic data set in well under a second and
returns it with the library's own prediction function (the oracle the served outputs are
held to); each ``write_*`` saves one in the file the FIL backend expects. The libraries
(xgboost, lightgbm, scikit-learn, treelite) are imported inside the functions.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FEATURES = 8
CLASSES = 3  # the multi-class models'
TRAIN_ROWS = 2000


@dataclass(frozen=True)
class Trained:
    """A fitted model, and what its library predicts: ``(rows, features) -> scores``
    (probability of the positive class, class probabilities, or regression values)."""

    model: Any
    predict: Callable[[np.ndarray], np.ndarray]


def features(rows: int, seed: int = 0, width: int = FEATURES) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, width), dtype=np.float32)


def _labels(x: np.ndarray, task: str) -> np.ndarray:
    signal = x[:, 0] + 0.5 * x[:, 1] * x[:, 2] - 0.25 * x[:, 3]
    if task == "binary":
        return (signal > 0).astype(np.int32)
    if task == "multiclass":
        return np.digitize(signal, [-0.5, 0.5]).astype(np.int32)
    return signal.astype(np.float32)


def train_xgboost(task: str, trees: int = 20, depth: int = 4, width: int = FEATURES) -> Trained:
    import xgboost

    x = features(TRAIN_ROWS, width=width)
    params: dict[str, Any] = {"max_depth": depth, "nthread": 1, "seed": 0}
    params["objective"] = {
        "binary": "binary:logistic",
        "multiclass": "multi:softprob",
        "regression": "reg:squarederror",
    }[task]
    if task == "multiclass":
        params["num_class"] = CLASSES
    booster = xgboost.train(params, xgboost.DMatrix(x, _labels(x, task)), trees)
    return Trained(booster, lambda rows: booster.predict(xgboost.DMatrix(rows)))


def train_lightgbm(task: str, trees: int = 20, leaves: int = 15, width: int = FEATURES) -> Trained:
    import lightgbm

    x = features(TRAIN_ROWS, width=width)
    params: dict[str, Any] = {
        "objective": task,
        "num_leaves": leaves,
        "num_threads": 1,
        "verbose": -1,
        "seed": 0,
    }
    if task == "multiclass":
        params["num_class"] = CLASSES
    booster = lightgbm.train(params, lightgbm.Dataset(x, _labels(x, task)), trees)
    return Trained(booster, lambda rows: booster.predict(rows, num_threads=1))


def train_random_forest(
    task: str, trees: int = 10, depth: int = 6, width: int = FEATURES
) -> Trained:
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

    x = features(TRAIN_ROWS, width=width)
    if task == "regression":
        regressor = RandomForestRegressor(trees, max_depth=depth, random_state=0, n_jobs=1)
        regressor.fit(x, _labels(x, task))
        return Trained(regressor, regressor.predict)
    classifier = RandomForestClassifier(trees, max_depth=depth, random_state=0, n_jobs=1)
    classifier.fit(x, _labels(x, task))
    return Trained(classifier, classifier.predict_proba)


def write_xgboost(trained: Trained, path: Path) -> Path:
    """``xgboost.json`` or ``xgboost.ubj``: the suffix picks the format."""
    path.parent.mkdir(parents=True, exist_ok=True)
    trained.model.save_model(str(path))
    return path


def write_lightgbm(trained: Trained, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    trained.model.save_model(str(path))
    return path


def write_treelite_checkpoint(trained: Trained, path: Path) -> Path:
    """A scikit-learn forest as FIL takes one: converted by Treelite to ``checkpoint.tl``."""
    import treelite

    path.parent.mkdir(parents=True, exist_ok=True)
    treelite.sklearn.import_model(trained.model).serialize(str(path))
    return path


def fil_config(
    *,
    max_batch_size: int | None = None,
    queue_delay_us: int | None = None,
    instances: int | None = None,
    **parameters: str,
) -> str:
    """A ``backend: "fil"`` config.pbtxt with these FIL ``parameters`` (the rest left to
    auto-complete); ``queue_delay_us`` turns the dynamic batcher on with that delay."""
    lines = ['backend: "fil"']
    if max_batch_size is not None:
        lines.append(f"max_batch_size: {max_batch_size}")
    if queue_delay_us is not None:
        lines.append(f"dynamic_batching {{ max_queue_delay_microseconds: {queue_delay_us} }}")
    if instances is not None:
        lines.append(f"instance_group [ {{ count: {instances}, kind: KIND_CPU }} ]")
    for key, value in parameters.items():
        lines.append(f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}')
    return "\n".join(lines) + "\n"


def write_model(folder: Path, config: str, write: Callable[[Path], Path], filename: str) -> Path:
    """``folder/config.pbtxt`` and ``folder/1/<filename>``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(textwrap.dedent(config))
    write(folder / "1" / filename)
    return folder


def load_in_process(
    folder: Path,
    *,
    auto_complete: bool = True,
    gpu_ids: tuple[int, ...] = (),
    backend_config: dict[str, str] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """The model in ``folder`` loaded as the server loads it (server-side fields,
    auto-complete unless disabled, normalization, validation), without a server:
    the backend model and its final config."""
    from pytriton_core import config as model_config
    from pytriton_core.backends.base import ModelLocation
    from pytriton_core.backends.registry import BackendRegistry

    backend = BackendRegistry().get("fil")
    config_path = folder / "config.pbtxt"
    config: Any = model_config.parse_config_text(config_path.read_text(), str(config_path))
    model_config.fill_server_side_fields(config, folder.name, folder)
    location = ModelLocation(folder.name, 1, folder, folder / "1", backend_config or {}, {})
    if auto_complete:
        backend.auto_complete_config(config, location)
    model_config.normalize_config(config, gpu_ids=list(gpu_ids))
    model_config.validate_config(config)
    spec = model_config.ModelSpec.from_config(config, 1)
    return backend.load_model(spec, location, config), model_config.config_to_json_dict(config)


def execute(instance: Any, batches: list[np.ndarray]) -> list[np.ndarray]:
    """One ``execute`` of ``instance`` over one request per batch; each request's output."""
    from pytriton_core import types
    from pytriton_core.inference.request import InferenceRequest
    from pytriton_core.inference.statistics import ComputeTiming
    from pytriton_core.inference.tensor import Tensor

    fp32 = types.BY_WIRE_NAME["FP32"]
    requests = [
        InferenceRequest(
            "m", inputs={"input__0": Tensor("input__0", fp32, rows)}, batch_size=len(rows)
        )
        for rows in batches
    ]
    responses = instance.execute(requests, ComputeTiming())
    outputs = []
    for response in responses:
        assert response is not None and response.error is None, response
        outputs.append(response.outputs[0].data)
    return outputs
