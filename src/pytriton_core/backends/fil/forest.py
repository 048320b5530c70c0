"""A forest read from its model file with Treelite, and FIL's rules for its outputs.

Every format (XGBoost legacy binary, JSON and UBJSON, LightGBM text, Treelite checkpoints,
which is how scikit-learn forests travel) is read with Treelite, as the FIL backend reads
it: that gives the facts auto-complete and the load-time checks need (features, classes,
task) and the model the Treelite-based predictors run.

FIL's output conventions (``fil_outputs``), from the predictor's scores (one column per
class, the model's own link function applied):

* ``predict_proba``: a score per class; a binary model (one column) gets two, [1-p, p];
* else a classifier (``output_class``) gives its class: ``p > threshold`` for a binary
  model, the index of the largest score for a multi-class one;
* else (a regressor) the scores themselves.

All of it is FP32, as in FIL.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import treelite

from pytriton_core.backends.fil.settings import FilSettings, ModelFormat
from pytriton_core.errors import ModelConfigError, UnsupportedError

INPUT_NAME = "input__0"
OUTPUT_NAME = "output__0"
TREESHAP_OUTPUT_NAME = "treeshap_output"


class Task(enum.IntEnum):
    """Treelite's TaskType."""

    BINARY_CLASSIFIER = 0
    REGRESSOR = 1
    MULTICLASS_CLASSIFIER = 2
    LEARNING_TO_RANK = 3
    ISOLATION_FOREST = 4

    @property
    def is_classifier(self) -> bool:
        return self in (Task.BINARY_CLASSIFIER, Task.MULTICLASS_CLASSIFIER)


@dataclass(frozen=True)
class Forest:
    """A loaded forest: the Treelite model and what its header says."""

    path: Path
    model_format: ModelFormat
    model: Any  # treelite.Model
    num_feature: int
    num_class: int  # score columns: 1 for binary classifiers and regressors
    task: Task

    def output_width(self, settings: FilSettings) -> int:
        """``output__0``'s one dimension under FIL's conventions."""
        if settings.predict_proba:
            return max(2, self.num_class)
        if settings.output_class:
            return 1
        return self.num_class


def load_forest(path: Path, model_format: ModelFormat, allow_unknown_field: bool) -> Forest:
    """Read ``path`` as ``model_format``; ModelConfigError names the file when it cannot."""
    if not path.is_file():
        raise ModelConfigError(f"unable to find '{path}' (model_type '{model_format.model_type}')")
    try:
        model = _read(path, model_format, allow_unknown_field)
    except treelite.TreeliteError as exc:
        raise ModelConfigError(
            f"cannot read '{path}' as model_type '{model_format.model_type}': "
            f"{_first_line(str(exc))}"
        ) from None
    header = model.get_header_accessor()
    num_target = int(header.get_field("num_target")[0])
    if num_target != 1:
        raise UnsupportedError(
            f"'{path}' has {num_target} targets: multi-output models are not supported "
            "(as in the FIL backend)"
        )
    return Forest(
        path=path,
        model_format=model_format,
        model=model,
        num_feature=int(model.num_feature),
        num_class=int(header.get_field("num_class")[0]),
        task=Task(int(header.get_field("task_type")[0])),
    )


def _read(path: Path, model_format: ModelFormat, allow_unknown_field: bool) -> Any:
    frontend = treelite.frontend
    if model_format is ModelFormat.XGBOOST:
        return frontend.load_xgboost_model_legacy_binary(path)
    if model_format is ModelFormat.XGBOOST_JSON:
        return frontend.load_xgboost_model(
            path, format_choice="json", allow_unknown_field=allow_unknown_field
        )
    if model_format is ModelFormat.XGBOOST_UBJ:
        return frontend.load_xgboost_model(
            path, format_choice="ubjson", allow_unknown_field=allow_unknown_field
        )
    if model_format is ModelFormat.LIGHTGBM:
        return frontend.load_lightgbm_model(path)
    return treelite.Model.deserialize(path)


def _first_line(message: str) -> str:
    """Treelite's messages start with a timestamp and source location, then the reason."""
    line = message.strip().splitlines()[0] if message.strip() else message
    _, sep, reason = line.partition(": ")
    return reason if sep and line.startswith("[") else line


def fil_outputs(scores: np.ndarray, settings: FilSettings) -> np.ndarray:
    """``output__0`` from the predictor's (rows, classes) FP32 scores."""
    if settings.predict_proba:
        if scores.shape[1] == 1:
            positive = scores[:, 0]
            return np.stack((1.0 - positive, positive), axis=1)
        return scores
    if settings.output_class:
        classes: np.ndarray
        if scores.shape[1] == 1:
            classes = scores > np.float32(settings.threshold)
        else:
            classes = np.argmax(scores, axis=1).reshape(-1, 1)
        return classes.astype(np.float32)
    return scores
