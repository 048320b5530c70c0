"""GPU instances of tree models (backend "fil"): XGBoost models on XGBoost's CUDA predictor.

They skip, with the reason, without a CUDA build of xgboost, without cupy or without a
CUDA device; tools/gpu-checks.sh installs the first two and runs this file on a GPU
machine. The model is loaded in-process through the backend contract, as the server
loads it, with a GPU instance, and held to XGBoost's own CPU prediction.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

import tree_models as tm

xgboost = pytest.importorskip("xgboost", reason="xgboost is not installed")
if not xgboost.build_info().get("USE_CUDA"):
    pytest.skip(
        f"xgboost {xgboost.__version__} is a CPU-only build: the GPU tree-model tests need "
        "the CUDA build (pytriton-core[fil-gpu]; tools/gpu-checks.sh installs it)",
        allow_module_level=True,
    )
cupy = pytest.importorskip("cupy", reason="cupy (pytriton-core[fil-gpu]) is not installed")
try:
    DEVICES = int(cupy.cuda.runtime.getDeviceCount())
except Exception as exc:  # no driver, no device
    pytest.skip(f"no CUDA device usable here ({exc})", allow_module_level=True)
if DEVICES == 0:
    pytest.skip("no CUDA device visible", allow_module_level=True)

from pytriton_core.backends.base import InstanceSpec  # noqa: E402

GPU_SPEC = InstanceSpec("m_0", "GPU", 0)


def _model(tmp_path: Path, trained: tm.Trained, **parameters: str) -> Any:
    folder = tm.write_model(
        tmp_path / "xgb_gpu",
        tm.fil_config(max_batch_size=256, **parameters)
        + "instance_group [ { kind: KIND_GPU, count: 1 } ]\n",
        lambda path: tm.write_xgboost(trained, path),
        "xgboost.json",
    )
    model, _ = tm.load_in_process(folder, gpu_ids=(0,))
    return model


def test_binary_scores_on_the_gpu(tmp_path: Path) -> None:
    trained = tm.train_xgboost("binary")
    model = _model(tmp_path, trained, predict_proba="true")
    instance = model.create_instance(GPU_SPEC)
    assert instance._gpu is not None and instance._cpu is None
    batches = [tm.features(rows, seed=20 + rows) for rows in (1, 7, 100)]
    for rows, scores in zip(batches, tm.execute(instance, batches), strict=True):
        np.testing.assert_allclose(scores[:, 1], trained.predict(rows), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(scores[:, 0], 1 - trained.predict(rows), rtol=1e-5, atol=1e-6)
    model.finalize()


def test_multiclass_classes_on_the_gpu(tmp_path: Path) -> None:
    trained = tm.train_xgboost("multiclass")
    model = _model(tmp_path, trained)
    instance = model.create_instance(GPU_SPEC)
    rows = tm.features(64, seed=30)
    (classes,) = tm.execute(instance, [rows])
    probabilities = trained.predict(rows)
    top = np.sort(probabilities, axis=1)
    decided = (top[:, -1] - top[:, -2]) > 1e-5
    np.testing.assert_array_equal(classes[decided, 0], probabilities[decided].argmax(axis=1))
    model.finalize()


def test_small_batches_stay_on_the_cpu_below_transfer_threshold(tmp_path: Path) -> None:
    trained = tm.train_xgboost("regression")
    model = _model(tmp_path, trained, transfer_threshold="4")
    instance = model.create_instance(GPU_SPEC)
    assert instance._gpu is not None and instance._cpu is not None
    for size in (2, 4, 5, 50):  # one execution each: 2 and 4 rows on the CPU, then the GPU
        rows = tm.features(size, seed=40 + size)
        (values,) = tm.execute(instance, [rows])
        np.testing.assert_allclose(values[:, 0], trained.predict(rows), rtol=1e-5, atol=1e-5)
    model.finalize()
