"""The FIL backend's config ``parameters``, read once into one frozen ``FilSettings``.

Names, defaults and strictness follow Triton's FIL backend (the 24.10 release that ships
with Triton 2.51, and the names 25.09 renamed): booleans are exactly ``true`` or ``false``,
``output_class`` is required, and so is ``threshold`` for a classifier. Auto-complete
(``settings_to_complete``) fills those from the model file, so a config may leave them out.

Every parameter is accounted for: each one FIL knows is either acted on here, or (the GPU
tuning knobs of RAPIDS FIL, which do not change results) checked and logged as having no
effect; a parameter FIL does not know is logged by name, since FIL itself ignores it.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from pytriton_core.errors import ModelConfigError, UnsupportedError

log = logging.getLogger(__name__)


class ModelFormat(enum.Enum):
    """``model_type``: the serialization format, with FIL's default file name for it."""

    XGBOOST = ("xgboost", "xgboost.model")  # XGBoost's legacy binary format
    XGBOOST_JSON = ("xgboost_json", "xgboost.json")
    XGBOOST_UBJ = ("xgboost_ubj", "xgboost.ubj")
    LIGHTGBM = ("lightgbm", "model.txt")
    TREELITE = ("treelite_checkpoint", "checkpoint.tl")

    def __init__(self, model_type: str, filename: str) -> None:
        self.model_type = model_type
        self.filename = filename

    @property
    def is_xgboost(self) -> bool:
        return self in (ModelFormat.XGBOOST, ModelFormat.XGBOOST_JSON, ModelFormat.XGBOOST_UBJ)

    @classmethod
    def parse(cls, value: str) -> ModelFormat:
        for member in cls:
            if member.model_type == value:
                return member
        known = ", ".join(m.model_type for m in cls)
        raise UnsupportedError(
            f"parameter 'model_type': '{value}' not recognized as a valid serialization "
            f"format (one of: {known})"
        )


class PredictorKind(enum.Enum):
    """What runs the trees on the CPU (the ``predictor`` parameter; see predictors.py)."""

    AUTO = "auto"  # the fastest measured for the model's format (docs/tree-models.md)
    COMPILED = "compiled"  # TL2cgen: the forest compiled to a shared library at load
    GTIL = "gtil"  # Treelite's own tree walker, no compiler needed
    NATIVE = "native"  # the training library's own predictor (XGBoost, LightGBM)


DEFAULT_MODEL_TYPE = ModelFormat.XGBOOST.model_type  # FIL's default when none is given
DEFAULT_THRESHOLD = 0.5

# RAPIDS FIL's GPU tuning (24.10 names, then 25.09's): accepted values, None for an integer.
# They change speed, never results, and the GPU path here is XGBoost's own.
_GPU_TUNING: dict[str, frozenset[str] | None] = {
    "algo": frozenset({"ALGO_AUTO", "NAIVE", "TREE_REORG", "BATCH_TREE_REORG"}),
    "storage_type": frozenset({"AUTO", "DENSE", "SPARSE", "SPARSE8"}),
    "blocks_per_sm": None,
    "threads_per_tree": None,
    "layout": frozenset({"depth_first", "breadth_first", "layered"}),
    "chunk_size": None,
}
# Names people reach for that FIL spells otherwise.
_SPELLED_OTHERWISE = {"threads": "cpu_nthread", "nthread": "cpu_nthread"}
_KNOWN = frozenset(
    {
        "model_type",
        "output_class",
        "is_classifier",
        "predict_proba",
        "threshold",
        "xgboost_allow_unknown_field",
        "cpu_nthread",
        "transfer_threshold",
        "use_experimental_optimizations",
        "predictor",
        *_GPU_TUNING,
    }
)


@dataclass(frozen=True)
class FilSettings:
    model_format: ModelFormat
    output_class: bool  # a classifier: outputs classes (or, with predict_proba, scores)
    predict_proba: bool
    threshold: float  # a binary classifier's decision threshold
    allow_unknown_field: bool  # XGBoost JSON/UBJSON: ignore fields the loader does not know
    cpu_nthread: int  # threads per prediction; <= 0: the predictor's default (every core)
    transfer_threshold: int  # GPU instances: batches of at most this many rows stay on the CPU
    predictor: PredictorKind

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, str], model: str) -> FilSettings:
        """Read and check the parameters, logging those that have no effect here."""
        _log_unused(parameters, model)
        output_class = _output_class(parameters)
        return cls(
            model_format=ModelFormat.parse(parameters.get("model_type", DEFAULT_MODEL_TYPE)),
            output_class=output_class,
            predict_proba=_bool(parameters, "predict_proba", False),
            threshold=_float(parameters, "threshold") if output_class else DEFAULT_THRESHOLD,
            allow_unknown_field=_bool(parameters, "xgboost_allow_unknown_field", False),
            cpu_nthread=_int(parameters, "cpu_nthread", -1),
            transfer_threshold=_int(parameters, "transfer_threshold", 0, minimum=0),
            predictor=_predictor(parameters),
        )


def _output_class(parameters: Mapping[str, str]) -> bool:
    old = _optional_bool(parameters, "output_class")
    new = _optional_bool(parameters, "is_classifier")
    if old is not None and new is not None and old != new:
        raise ModelConfigError(
            "parameters 'output_class' and 'is_classifier' (its newer name) disagree"
        )
    value = old if old is not None else new
    if value is None:
        raise ModelConfigError("Required parameter output_class not found in config")
    return value


def _predictor(parameters: Mapping[str, str]) -> PredictorKind:
    value = parameters.get("predictor", PredictorKind.AUTO.value)
    try:
        return PredictorKind(value)
    except ValueError:
        known = ", ".join(k.value for k in PredictorKind)
        raise ModelConfigError(
            f"parameter 'predictor' must be one of {known}, got '{value}'"
        ) from None


def _log_unused(parameters: Mapping[str, str], model: str) -> None:
    for key, value in parameters.items():
        if key in _GPU_TUNING:
            allowed = _GPU_TUNING[key]
            if allowed is None:
                _int(parameters, key, 0)
            elif value not in allowed:
                raise ModelConfigError(
                    f"parameter '{key}' must be one of {', '.join(sorted(allowed))}, got '{value}'"
                )
            log.warning(
                "model '%s': parameter '%s' tunes RAPIDS FIL's GPU kernels; it has no effect "
                "here (results are the same)",
                model,
                key,
            )
        elif key == "use_experimental_optimizations" and _bool(parameters, key, False):
            log.warning(
                "model '%s': parameter 'use_experimental_optimizations' has no effect here: "
                "the CPU predictor is already the fastest measured for the model type "
                "(parameter 'predictor' chooses another)",
                model,
            )
        elif key not in _KNOWN:
            hint = (
                f" (the FIL backend's name for it is '{_SPELLED_OTHERWISE[key]}')"
                if key in _SPELLED_OTHERWISE
                else ""
            )
            log.warning(
                "model '%s': parameter '%s' is not a FIL backend parameter and is ignored%s",
                model,
                key,
                hint,
            )


def _bool(parameters: Mapping[str, str], key: str, default: bool) -> bool:
    value = _optional_bool(parameters, key)
    return default if value is None else value


def _optional_bool(parameters: Mapping[str, str], key: str) -> bool | None:
    value = parameters.get(key)
    if value is None:
        return None
    if value in ("true", "false"):
        return value == "true"
    raise ModelConfigError(f"Expected 'true' or 'false' for parameter '{key}', got: '{value}'")


def _float(parameters: Mapping[str, str], key: str) -> float:
    value = parameters.get(key)
    if value is None:
        raise ModelConfigError(f"Required parameter {key} not found in config")
    try:
        return float(value)
    except ValueError:
        raise ModelConfigError(f"Bad input for parameter {key}: '{value}'") from None


def _int(
    parameters: Mapping[str, str], key: str, default: int, *, minimum: int | None = None
) -> int:
    value = parameters.get(key)
    if value is None:
        return default
    try:
        parsed = int(value)
    except ValueError:
        raise ModelConfigError(f"Bad input for parameter {key}: '{value}'") from None
    if minimum is not None and parsed < minimum:
        raise ModelConfigError(f"parameter '{key}' must be >= {minimum}, got {parsed}")
    return parsed
