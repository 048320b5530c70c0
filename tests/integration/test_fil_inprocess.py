"""The FIL backend driven in-process through the backend contract (no server).

What the served tests cannot show directly: that a prediction releases the GIL (a second
instance of the model answers while the first is still predicting a large batch), FIL's
strict reading of a config when auto-complete is off, and the choice of predictor when
the server has no C compiler.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tree_models as tm

for _module in ("treelite", "tl2cgen", "lightgbm", "xgboost", "sklearn"):
    pytest.importorskip(_module, reason=f"{_module} (the fil extra / test extra) is not installed")

# The fil package imports treelite: only after the skips above.
from pytriton_core.backends.base import InstanceSpec  # noqa: E402
from pytriton_core.backends.fil.settings import PredictorKind  # noqa: E402
from pytriton_core.errors import ModelConfigError, UnsupportedError  # noqa: E402

LONG_PREDICTION_S = 0.3  # the first instance's batch takes at least this long
MAX_ROWS = 1 << 21


def _instance(model: Any, index: int) -> Any:
    return model.create_instance(InstanceSpec(f"m_{index}", "CPU", 0))


def _xgboost_model(folder: Path, trained: tm.Trained, **parameters: str) -> Path:
    return tm.write_model(
        folder,
        tm.fil_config(max_batch_size=MAX_ROWS, **parameters),
        lambda path: tm.write_xgboost(trained, path),
        "xgboost.json",
    )


@pytest.fixture(scope="module")
def large_forests() -> dict[str, tm.Trained]:
    """Forests big enough that a batch of ~10^5 rows takes a noticeable time."""
    return {
        "xgboost": tm.train_xgboost("binary", trees=200, depth=6),
        "lightgbm": tm.train_lightgbm("binary", trees=200, leaves=63),
    }


def _rows_for(instance: Any, seconds: float) -> np.ndarray:
    """A batch that takes ``instance`` at least ``seconds`` to predict (doubling)."""
    rows = tm.features(4096, seed=3)
    while True:
        start = time.perf_counter()
        tm.execute(instance, [rows])
        if time.perf_counter() - start >= seconds or len(rows) * 2 > MAX_ROWS:
            return rows
        rows = np.concatenate([rows, rows])


def _answers_during_the_prediction(first: Any, big: np.ndarray, second: Any) -> bool:
    """Run ``big`` on instance ``first`` in a thread and, once its predictor is called, one
    row on ``second`` in another: whether that answer came while the predictor of
    ``first`` was still running (its call's start and end are stamped around it)."""
    stamps: dict[str, float] = {}
    inside = threading.Event()
    predict = first._cpu.scores

    def stamped(rows: np.ndarray) -> np.ndarray:
        stamps["enter"] = time.perf_counter()
        inside.set()
        scores: np.ndarray = predict(rows)
        stamps["exit"] = time.perf_counter()
        return scores

    first._cpu.scores = stamped
    long_thread = threading.Thread(target=tm.execute, args=(first, [big]))
    long_thread.start()
    inside.wait()
    # Let the first thread get from the stamp into the predictor before the second starts
    # (on a loaded machine the second could otherwise finish in that gap).
    time.sleep(0.05)

    def answer() -> None:
        tm.execute(second, [tm.features(1, seed=4)])
        stamps["answered"] = time.perf_counter()

    short_thread = threading.Thread(target=answer)
    short_thread.start()
    short_thread.join()
    long_thread.join()
    return stamps["enter"] < stamps["answered"] < stamps["exit"]


@pytest.mark.parametrize(
    ("library", "predictor"),
    [
        ("xgboost", "compiled"),
        ("xgboost", "gtil"),
        ("xgboost", "native"),
        ("lightgbm", "native"),
    ],
)
def test_a_second_instance_answers_while_the_first_predicts(
    tmp_path: Path, large_forests: dict[str, tm.Trained], library: str, predictor: str
) -> None:
    """The GIL is released for the length of a prediction: with it held, instance 1 could
    not run a line of Python until instance 0's batch was done."""
    trained = large_forests[library]
    parameters = {"predictor": predictor, "cpu_nthread": "1", "predict_proba": "true"}
    if library == "xgboost":
        folder = _xgboost_model(tmp_path / "m", trained, **parameters)
    else:
        folder = tm.write_model(
            tmp_path / "m",
            tm.fil_config(max_batch_size=MAX_ROWS, **parameters),
            lambda path: tm.write_lightgbm(trained, path),
            "model.txt",
        )
    model, _ = tm.load_in_process(folder)
    assert model.kind is PredictorKind(predictor)
    first, second = _instance(model, 0), _instance(model, 1)
    big = _rows_for(first, LONG_PREDICTION_S)
    assert _answers_during_the_prediction(first, big, second)
    model.finalize()


def test_the_overlap_check_catches_a_prediction_that_holds_the_gil(tmp_path: Path) -> None:
    """The check above can fail: a predictor that keeps the GIL (the regex engine does,
    here on a pattern that backtracks for a while) lets no other instance run meanwhile."""
    folder = _xgboost_model(tmp_path / "m", tm.train_xgboost("binary"), predictor="gtil")
    model, _ = tm.load_in_process(folder)
    first, second = _instance(model, 0), _instance(model, 1)
    pattern, text = re.compile(r"(a+)+b"), "a" * 18
    while True:  # as long as the predictions above
        start = time.perf_counter()
        pattern.match(text)
        if time.perf_counter() - start >= LONG_PREDICTION_S:
            break
        text += "a"

    def holds_the_gil(rows: np.ndarray) -> np.ndarray:
        pattern.match(text)
        return np.zeros((len(rows), 1), np.float32)

    first._cpu.scores = holds_the_gil
    assert not _answers_during_the_prediction(first, tm.features(1), second)
    model.finalize()


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"model_type": "xgboost_json"}, "Required parameter output_class not found in config"),
        (
            {"model_type": "xgboost_json", "output_class": "true"},
            "Required parameter threshold not found in config",
        ),
        (
            {"model_type": "xgboost_json", "output_class": "true", "is_classifier": "false"},
            "'output_class' and 'is_classifier' (its newer name) disagree",
        ),
    ],
)
def test_without_auto_complete_fils_required_parameters_are_required(
    tmp_path: Path, parameters: dict[str, str], message: str
) -> None:
    folder = tmp_path / "strict"
    config = (
        tm.fil_config(max_batch_size=8, **parameters)
        + 'input [ { name: "input__0", data_type: TYPE_FP32, dims: [ 8 ] } ]\n'
        + 'output [ { name: "output__0", data_type: TYPE_FP32, dims: [ 1 ] } ]\n'
    )
    tm.write_model(
        folder, config, lambda p: tm.write_xgboost(tm.train_xgboost("binary"), p), "xgboost.json"
    )
    with pytest.raises(ModelConfigError, match=re.escape(message)):
        tm.load_in_process(folder, auto_complete=False)


def test_is_classifier_is_fils_newer_name_for_output_class(tmp_path: Path) -> None:
    trained = tm.train_xgboost("binary")
    folder = _xgboost_model(tmp_path / "m", trained, is_classifier="true", threshold="0.5")
    model, config = tm.load_in_process(folder)
    assert "output_class" not in config["parameters"]
    rows = tm.features(16, seed=5)
    (classes,) = tm.execute(_instance(model, 0), [rows])
    probability = trained.predict(rows)
    decided = np.abs(probability - 0.5) > 1e-5
    np.testing.assert_array_equal(classes[decided, 0], (probability[decided] > 0.5))
    model.finalize()


def test_without_a_compiler_the_forest_runs_on_gtil(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    trained = tm.train_xgboost("binary")
    folder = _xgboost_model(tmp_path / "m", trained, predict_proba="true")
    monkeypatch.setenv("PATH", str(tmp_path))  # no gcc, no clang
    with caplog.at_level(logging.WARNING):
        model, _ = tm.load_in_process(folder)
    assert model.kind is PredictorKind.GTIL
    assert "no C compiler (gcc or clang) on PATH" in caplog.text
    rows = tm.features(8, seed=6)
    (scores,) = tm.execute(_instance(model, 0), [rows])
    np.testing.assert_allclose(scores[:, 1], trained.predict(rows), rtol=1e-5, atol=1e-6)
    model.finalize()

    explicit = _xgboost_model(tmp_path / "compiled", trained, predictor="compiled")
    with pytest.raises(UnsupportedError, match="'compiled' needs a C compiler"):
        tm.load_in_process(explicit)


def test_the_compiled_library_is_removed_at_unload(tmp_path: Path) -> None:
    folder = _xgboost_model(tmp_path / "m", tm.train_xgboost("binary"), predictor="compiled")
    model, _ = tm.load_in_process(folder)
    library = model._compiled.library
    assert library.is_file()
    model.finalize()
    assert not library.exists()


def test_a_compile_cache_folder_keeps_the_library_for_the_next_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from pytriton_core.backends.settings import backend_config_notes

    cache = tmp_path / "cache"
    setting = {"compile-cache-dir": str(cache)}
    assert backend_config_notes({"fil": setting}) == []  # a setting the fil backend reads
    trained = tm.train_xgboost("binary")
    folder = _xgboost_model(tmp_path / "m", trained, predictor="compiled", predict_proba="true")
    rows = tm.features(16, seed=8)
    with caplog.at_level(logging.INFO):
        first, _ = tm.load_in_process(folder, backend_config=setting)
    assert "compiling its forest" in caplog.text
    library = first._compiled.library
    assert library.parent == cache and library.is_file()
    first.finalize()
    assert library.is_file()  # kept at unload
    assert [p.name for p in cache.iterdir()] == [library.name]  # no staging folder left

    caplog.clear()
    with caplog.at_level(logging.INFO):
        second, _ = tm.load_in_process(folder, backend_config=setting)
    assert "compiling its forest" not in caplog.text
    assert "compiled forest found" in caplog.text
    assert second._compiled.library == library
    (scores,) = tm.execute(_instance(second, 0), [rows])
    np.testing.assert_allclose(scores[:, 1], trained.predict(rows), rtol=1e-5, atol=1e-6)
    second.finalize()

    # Another forest in the same file name is another key: compiled, not confused.
    other = tm.train_xgboost("binary", trees=7)
    changed = _xgboost_model(tmp_path / "m2", other, predictor="compiled", predict_proba="true")
    third, _ = tm.load_in_process(changed, backend_config=setting)
    assert third._compiled.library != library
    (scores,) = tm.execute(_instance(third, 0), [rows])
    np.testing.assert_allclose(scores[:, 1], other.predict(rows), rtol=1e-5, atol=1e-6)
    third.finalize()


def test_gpu_instances_need_an_xgboost_model(tmp_path: Path) -> None:
    trained = tm.train_lightgbm("binary")
    folder = tm.write_model(
        tmp_path / "m", tm.fil_config(), lambda p: tm.write_lightgbm(trained, p), "model.txt"
    )
    model, _ = tm.load_in_process(folder)
    with pytest.raises(UnsupportedError, match="GPU instances of model_type 'lightgbm'"):
        model.create_instance(InstanceSpec("m_0", "GPU", 0))
    model.finalize()


def test_gpu_instances_need_xgboosts_cuda_build(tmp_path: Path) -> None:
    import xgboost

    if xgboost.build_info().get("USE_CUDA"):
        pytest.skip("this xgboost has CUDA: tests/gpu/test_fil_gpu.py runs its GPU path")
    folder = _xgboost_model(tmp_path / "m", tm.train_xgboost("binary"))
    model, _ = tm.load_in_process(folder)
    with pytest.raises(UnsupportedError, match="CPU-only build; GPU instances"):
        model.create_instance(InstanceSpec("m_0", "GPU", 0))
    model.finalize()


@pytest.mark.parametrize("predictor", ["compiled", "gtil", "native"])
def test_cpu_nthread_applies_to_large_batches_only(tmp_path: Path, predictor: str) -> None:
    """Small batches run on one thread (a pool costs more than it saves there), batches of
    PARALLEL_MIN_ROWS and more on cpu_nthread threads; the scores are the same."""
    from pytriton_core.backends.fil.predictors import PARALLEL_MIN_ROWS

    trained = tm.train_lightgbm("binary")
    folder = tm.write_model(
        tmp_path / "m",
        tm.fil_config(
            max_batch_size=PARALLEL_MIN_ROWS,
            predictor=predictor,
            cpu_nthread="2",
            **{"predict_proba": "true"},
        ),
        lambda p: tm.write_lightgbm(trained, p),
        "model.txt",
    )
    model, _ = tm.load_in_process(folder)
    instance = _instance(model, 0)
    scorer = instance._cpu
    small, large = tm.features(8, seed=8), tm.features(PARALLEL_MIN_ROWS, seed=9)
    assert not scorer.parallel(small) and scorer.parallel(large)
    for rows in (small, large):
        (scores,) = tm.execute(instance, [rows])
        np.testing.assert_allclose(scores[:, 1], trained.predict(rows), rtol=1e-5, atol=2e-6)
    if predictor == "compiled":
        assert scorer._pool is not None
    model.finalize()
