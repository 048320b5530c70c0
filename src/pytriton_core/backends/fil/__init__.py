"""FIL backend (``backend: "fil"``): XGBoost, LightGBM and scikit-learn forests, as Triton's
FIL backend serves them.

A version folder holds the model file FIL expects for its ``model_type``: ``xgboost.model``,
``xgboost.json``, ``xgboost.ubj``, ``model.txt`` (LightGBM) or ``checkpoint.tl`` (Treelite,
which is how scikit-learn forests are exported), or the config's ``default_model_filename``.
One FP32 input ``input__0`` [features] and one FP32 output ``output__0`` (classes, class
scores or regression values; forest.py), and, when the config lists it, FIL's
``treeshap_output`` (SHAP values, shap.py). The parameters are FIL's (settings.py);
auto-complete fills them, the I/O and ``max_batch_size`` from the model file.

Batches gather into one (rows, features) array, the instance's predictor (predictors.py)
scores it with the GIL released, and the rows scatter back to the requests.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf.message import Message

from pytriton_core import types
from pytriton_core.backends.base import (
    Backend,
    BackendInstance,
    BackendModel,
    InstanceSpec,
    ModelLocation,
)
from pytriton_core.backends.batching import Batch, BatchRunner
from pytriton_core.backends.fil.forest import (
    INPUT_NAME,
    OUTPUT_NAME,
    TREESHAP_OUTPUT_NAME,
    Forest,
    fil_outputs,
    load_forest,
)
from pytriton_core.backends.fil.predictors import (
    CompiledForest,
    Predictor,
    cpu_predictor,
    find_compiler,
    gpu_predictor,
    resolve_kind,
)
from pytriton_core.backends.fil.settings import (
    DEFAULT_MODEL_TYPE,
    DEFAULT_THRESHOLD,
    FilSettings,
    ModelFormat,
    PredictorKind,
)
from pytriton_core.backends.fil.shap import ShapExplainer, shap_dims
from pytriton_core.backends.framework import VARIABLE, ModelTensor, check_config_io, complete_config
from pytriton_core.config.spec import ModelSpec
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ComputeTiming

log = logging.getLogger(__name__)

# --backend-config=fil,compile-cache-dir=<dir>: where compiled forests are kept across loads.
COMPILE_CACHE_SETTING = "compile-cache-dir"

FP32 = types.BY_WIRE_NAME["FP32"]
# default_model_filename's suffix -> model_type, for auto-complete.
_FORMAT_BY_SUFFIX = {
    ".model": ModelFormat.XGBOOST,
    ".json": ModelFormat.XGBOOST_JSON,
    ".ubj": ModelFormat.XGBOOST_UBJ,
    ".txt": ModelFormat.LIGHTGBM,
    ".tl": ModelFormat.TREELITE,
}


def model_file(location: ModelLocation, default_model_filename: str, fmt: ModelFormat) -> Path:
    """The version's model file: ``default_model_filename`` if set, else FIL's for the type."""
    return location.version_dir / (default_model_filename or fmt.filename)


def _model_tensors(forest: Forest, settings: FilSettings) -> tuple[ModelTensor, ModelTensor]:
    return (
        ModelTensor(INPUT_NAME, FP32, (VARIABLE, forest.num_feature)),
        ModelTensor(OUTPUT_NAME, FP32, (VARIABLE, forest.output_width(settings))),
    )


class FilBackend(Backend):
    name = "fil"

    def auto_complete_config(self, config: Message, location: ModelLocation) -> None:
        """FIL's parameters from the model file where the config leaves them out
        (``model_type`` from the file present, ``output_class`` from the model's task,
        ``threshold`` 0.5 for a classifier), then inputs, outputs and ``max_batch_size``."""
        cfg: Any = config
        parameters = {str(k): str(v.string_value) for k, v in cfg.parameters.items()}
        if "model_type" not in parameters:
            found = _detect_format(location, cfg.default_model_filename)
            if found is not None:
                cfg.parameters["model_type"].string_value = found.model_type
                parameters["model_type"] = found.model_type
        fmt = ModelFormat.parse(parameters.get("model_type", DEFAULT_MODEL_TYPE))
        forest = load_forest(
            model_file(location, cfg.default_model_filename, fmt),
            fmt,
            parameters.get("xgboost_allow_unknown_field") == "true",
        )
        if "output_class" not in parameters and "is_classifier" not in parameters:
            parameters["output_class"] = "true" if forest.task.is_classifier else "false"
            cfg.parameters["output_class"].string_value = parameters["output_class"]
        if parameters.get("output_class", parameters.get("is_classifier")) == "true":
            if "threshold" not in parameters:
                parameters["threshold"] = str(DEFAULT_THRESHOLD)
                cfg.parameters["threshold"].string_value = parameters["threshold"]
        settings = FilSettings.from_parameters(parameters, location.name)
        model_input, model_output = _model_tensors(forest, settings)
        complete_config(config, [model_input], [model_output], location)

    def load_model(self, spec: ModelSpec, location: ModelLocation, config: Message) -> BackendModel:
        return FilModel(spec, location)


def _detect_format(location: ModelLocation, default_model_filename: str) -> ModelFormat | None:
    if default_model_filename:
        return _FORMAT_BY_SUFFIX.get(Path(default_model_filename).suffix)
    return next((f for f in ModelFormat if (location.version_dir / f.filename).is_file()), None)


class FilModel(BackendModel):
    def __init__(self, spec: ModelSpec, location: ModelLocation) -> None:
        self.location = location
        self.model_spec = spec
        self.settings = FilSettings.from_parameters(spec.parameters, location.name)
        fmt = self.settings.model_format
        self.forest = load_forest(
            model_file(location, spec.default_model_filename, fmt),
            fmt,
            self.settings.allow_unknown_field,
        )
        if self.settings.predict_proba and not self.settings.output_class:
            log.warning(
                "model '%s': predict_proba is set on a model whose output_class is false; "
                "its scores are returned as class scores",
                location.name,
            )
        model_input, model_output = _model_tensors(self.forest, self.settings)
        outputs = [model_output]
        self.explains = TREESHAP_OUTPUT_NAME in spec.outputs
        if self.explains:
            shap_output = (VARIABLE, *shap_dims(self.forest))
            outputs.append(ModelTensor(TREESHAP_OUTPUT_NAME, FP32, shap_output))
        check_config_io(spec, [model_input], outputs, location.name)
        self.kind = resolve_kind(self.forest, self.settings, location.name)
        self._compiled: CompiledForest | None = None
        if self.kind is PredictorKind.COMPILED:
            toolchain = find_compiler()
            assert toolchain is not None  # resolve_kind checked
            cache_dir = location.backend_config.get(COMPILE_CACHE_SETTING)
            self._compiled = CompiledForest(
                self.forest,
                toolchain,
                location.name,
                Path(cache_dir).expanduser() if cache_dir else None,
            )
        log.info(
            "model '%s': %s %s, %d features, %d score columns; CPU predictor: %s",
            location.name,
            fmt.model_type,
            self.forest.task.name.lower(),
            self.forest.num_feature,
            self.forest.num_class,
            self.kind.value,
        )

    def cpu_predictor(self) -> Predictor:
        return cpu_predictor(self.kind, self.forest, self.settings, self._compiled)

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        return FilInstance(self, spec)

    def finalize(self) -> None:
        if self._compiled is not None:
            self._compiled.remove()


class FilInstance(BackendInstance):
    def __init__(self, model: FilModel, spec: InstanceSpec) -> None:
        self._settings = model.settings
        self._runner = BatchRunner.for_instance(model.model_spec, model.location)
        self._gpu: Predictor | None = None
        self._cpu: Predictor | None = None
        if spec.kind == "GPU":
            self._gpu = gpu_predictor(model.forest, model.settings, spec.device_id)
        if self._gpu is None or model.settings.transfer_threshold > 0:
            self._cpu = model.cpu_predictor()
        self._features = model.forest.num_feature
        self._explainer: ShapExplainer | None = None
        if model.explains:
            self._explainer = ShapExplainer(
                model.forest, model.location.name, model.settings.cpu_nthread
            )

    def execute(
        self, requests: Sequence[InferenceRequest], timing: ComputeTiming
    ) -> Sequence[InferenceResponse | None]:
        return self._runner.execute(requests, timing, self._run)

    def _run(self, batch: Batch) -> dict[str, np.ndarray]:
        rows = np.ascontiguousarray(batch.inputs[INPUT_NAME], dtype=np.float32)
        rows = rows.reshape(-1, self._features)
        predictor = self._gpu
        if predictor is None or len(rows) <= self._settings.transfer_threshold:
            predictor = self._cpu
        assert predictor is not None
        outputs: dict[str, np.ndarray] = {}
        if OUTPUT_NAME in batch.output_names:
            outputs[OUTPUT_NAME] = fil_outputs(predictor.scores(rows), self._settings)
        if self._explainer is not None and TREESHAP_OUTPUT_NAME in batch.output_names:
            # SHAP costs far more than a prediction: only for batches that ask for it.
            outputs[TREESHAP_OUTPUT_NAME] = self._explainer.values(rows)
        return outputs


def create_backend() -> Backend:
    return FilBackend()


__all__ = ["FilBackend", "create_backend"]
