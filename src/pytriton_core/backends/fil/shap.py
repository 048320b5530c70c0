"""SHAP values of a forest: FIL's ``treeshap_output``.

Triton's FIL backend computes them when the config lists an output named
``treeshap_output`` (FP32, ``[features + 1]`` for a binary classifier or a regressor,
``[classes, features + 1]`` for a multi-class model; the last column is the bias), and only
on a GPU. Here they come from each library's own exact TreeSHAP on the CPU: XGBoost's
``pred_contribs`` and LightGBM's ``pred_contrib``. Both are in the model's margin space
(before the sigmoid or softmax), and a row's values sum to its margin. Treelite
checkpoints (scikit-learn forests) have no TreeSHAP in any library here: such a config is
refused at load, naming the output.

Each library is called through ctypes, which releases the GIL for the length of the call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pytriton_core.backends.fil.forest import TREESHAP_OUTPUT_NAME, Forest
from pytriton_core.backends.fil.settings import ModelFormat
from pytriton_core.errors import UnsupportedError


def shap_dims(forest: Forest) -> tuple[int, ...]:
    """``treeshap_output``'s dims without the batch dimension, as in FIL."""
    width = forest.num_feature + 1
    return (forest.num_class, width) if forest.num_class > 1 else (width,)


class ShapExplainer:
    """One per instance: ``values(rows)`` -> (rows, *shap_dims) FP32."""

    def __init__(self, forest: Forest, model_name: str, nthread: int) -> None:
        self._dims = shap_dims(forest)
        self._contributions: Callable[[np.ndarray], Any]
        fmt = forest.model_format
        if fmt is ModelFormat.LIGHTGBM:
            import lightgbm

            booster: Any = lightgbm.Booster(model_file=str(forest.path))
            threads = max(nthread, 0)  # 0: LightGBM's default, every core
            self._contributions = lambda rows: booster.predict(
                rows, pred_contrib=True, num_threads=threads
            )
        elif fmt.is_xgboost:
            import xgboost

            booster = xgboost.Booster(model_file=str(forest.path))
            booster.set_param({"nthread": nthread if nthread > 0 else 0})
            self._contributions = lambda rows: booster.predict(
                xgboost.DMatrix(rows), pred_contribs=True
            )
        else:
            raise UnsupportedError(
                f"model '{model_name}': output '{TREESHAP_OUTPUT_NAME}' (SHAP values) needs an "
                f"XGBoost or LightGBM model (their own TreeSHAP); model_type "
                f"'{fmt.model_type}' has none here"
            )

    def values(self, rows: np.ndarray) -> np.ndarray:
        out = np.asarray(self._contributions(rows))
        # LightGBM lays a multi-class row out flat, class after class.
        return np.ascontiguousarray(out.reshape(len(rows), *self._dims), dtype=np.float32)
