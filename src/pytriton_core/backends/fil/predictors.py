"""What runs the trees: one ``Predictor`` per instance, chosen per model format.

Every predictor turns a (rows, features) FP32 batch into (rows, classes) FP32 scores with
the model's link function applied (sigmoid, softmax, ...); forest.fil_outputs then applies
FIL's output conventions. Each calls its library through ctypes, which releases the GIL
for the length of the prediction, so instances of one model (and other models) predict
in parallel while the event loop keeps serving.

``AUTO_PREDICTORS`` is the choice measured on this project's machines (docs/tree-models.md
has the figures and the command): TL2cgen-compiled code for XGBoost models and Treelite
checkpoints, LightGBM's own predictor for LightGBM models. A compiled predictor needs a C
compiler at load time; without one the load says so in the log and uses Treelite's GTIL.

GPU instances run XGBoost models on XGBoost's own CUDA predictor (``device=cuda:<id>``);
batches of at most ``transfer_threshold`` rows stay on the CPU, as in FIL.
"""

from __future__ import annotations

import abc
import hashlib
import logging
import os
import platform
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pytriton_core.backends.fil.forest import Forest
from pytriton_core.backends.fil.settings import FilSettings, ModelFormat, PredictorKind
from pytriton_core.errors import ModelConfigError, UnsupportedError

log = logging.getLogger(__name__)

# Measured per format (docs/tree-models.md): the first is used, the next where it cannot run.
AUTO_PREDICTORS: dict[ModelFormat, tuple[PredictorKind, ...]] = {
    ModelFormat.XGBOOST: (PredictorKind.COMPILED, PredictorKind.GTIL),
    ModelFormat.XGBOOST_JSON: (PredictorKind.COMPILED, PredictorKind.GTIL),
    ModelFormat.XGBOOST_UBJ: (PredictorKind.COMPILED, PredictorKind.GTIL),
    ModelFormat.LIGHTGBM: (PredictorKind.NATIVE,),
    ModelFormat.TREELITE: (PredictorKind.COMPILED, PredictorKind.GTIL),
}
COMPILERS = ("gcc", "clang")  # the toolchains TL2cgen drives
# -O1 compiles large forests about twice as fast as -O2/-O3 and predicted as fast here.
COMPILE_OPTIONS = ["-O1"]
# Below this many rows a batch runs on one thread (Predictor); measured here, two threads
# lost to one up to 1024 rows and were at best even at 8192.
PARALLEL_MIN_ROWS = 4096


class Predictor(abc.ABC):
    """``nthread`` is ``cpu_nthread``: <= 0 for every core. Batches smaller than
    ``PARALLEL_MIN_ROWS`` run on one thread whatever it says: handing a small batch to a
    thread pool costs more than it saves (measured: docs/tree-models.md)."""

    def __init__(self, nthread: int) -> None:
        self.nthread = nthread

    def parallel(self, rows: np.ndarray) -> bool:
        return self.nthread != 1 and len(rows) >= PARALLEL_MIN_ROWS

    @abc.abstractmethod
    def scores(self, rows: np.ndarray) -> np.ndarray:
        """(rows, features) FP32, C-contiguous -> (rows, classes) FP32 scores."""


class GtilPredictor(Predictor):
    """Treelite's GTIL, over the model already read."""

    def __init__(self, forest: Forest, nthread: int) -> None:
        import treelite

        super().__init__(nthread)
        self._predict = treelite.gtil.predict
        self._model = forest.model

    def scores(self, rows: np.ndarray) -> np.ndarray:
        threads = (self.nthread if self.nthread > 0 else -1) if self.parallel(rows) else 1
        out = self._predict(self._model, rows, nthread=threads)
        return _as_scores(out[:, 0, :])


class CompiledPredictor(Predictor):
    """TL2cgen predictors over the library ``CompiledForest`` built: a one-thread one, and
    (made on the first large batch) one with ``nthread`` threads."""

    def __init__(self, library: Path, nthread: int) -> None:
        import tl2cgen

        super().__init__(nthread)
        self._library = library
        self._matrix = tl2cgen.DMatrix
        self._make = tl2cgen.Predictor
        self._single = tl2cgen.Predictor(str(library), nthread=1)
        self._pool: Any = None

    def scores(self, rows: np.ndarray) -> np.ndarray:
        predictor = self._single
        if self.parallel(rows):
            if self._pool is None:
                threads = self.nthread if self.nthread > 0 else None
                self._pool = self._make(str(self._library), nthread=threads)
            predictor = self._pool
        out = predictor.predict(self._matrix(rows))
        return _as_scores(out[:, 0, :])


class LightGBMPredictor(Predictor):
    """LightGBM's own ``Booster.predict`` (double precision inside, as LightGBM computes)."""

    def __init__(self, forest: Forest, nthread: int) -> None:
        import lightgbm

        super().__init__(nthread)
        self._booster = lightgbm.Booster(model_file=str(forest.path))
        self._columns = forest.num_class

    def scores(self, rows: np.ndarray) -> np.ndarray:
        # 0: LightGBM's default (OpenMP's, every core)
        threads = max(self.nthread, 0) if self.parallel(rows) else 1
        out = self._booster.predict(rows, num_threads=threads)
        return _as_scores(np.asarray(out).reshape(len(rows), self._columns))


class XGBoostPredictor(Predictor):
    """XGBoost's own in-place predictor, on the CPU or (``gpu`` given) on that CUDA device."""

    def __init__(self, forest: Forest, nthread: int, gpu: int | None = None) -> None:
        import xgboost

        if gpu is not None and not xgboost.build_info().get("USE_CUDA"):
            raise UnsupportedError(
                f"xgboost {xgboost.__version__} here is a CPU-only build; GPU instances of "
                "XGBoost models need the CUDA build (pip install pytriton-core[fil-gpu])"
            )
        super().__init__(nthread)
        self._booster = xgboost.Booster(model_file=str(forest.path))
        # XGBoost's thread count is the booster's: cpu_nthread as given, for every batch.
        params: dict[str, Any] = {"nthread": nthread if nthread > 0 else 0}
        if gpu is not None:
            params["device"] = f"cuda:{gpu}"
        self._booster.set_param(params)
        self._columns = forest.num_class
        self._to_device: Callable[[np.ndarray], Any] = lambda rows: rows
        self._to_host: Callable[[Any], np.ndarray] = np.asarray
        if gpu is not None:
            from pytriton_core.memory.device import cupy_module

            cupy = cupy_module()
            self._to_device = cupy.asarray
            self._to_host = cupy.asnumpy

    def scores(self, rows: np.ndarray) -> np.ndarray:
        data = self._to_device(rows)
        out = self._booster.inplace_predict(data)
        if self._columns > 1 and out.ndim == 1:
            # multi:softmax predicts labels; FIL scores such a model with softmax.
            margins = self._to_host(self._booster.inplace_predict(data, predict_type="margin"))
            exp = np.exp(margins - margins.max(axis=1, keepdims=True))
            return _as_scores(exp / exp.sum(axis=1, keepdims=True))
        return _as_scores(self._to_host(out).reshape(len(rows), self._columns))


class CompiledForest:
    """The forest compiled once per model version.

    Without a cache folder the library lives in a private temporary folder removed at
    unload. With ``--backend-config=fil,compile-cache-dir=<dir>`` it is kept there under a
    key of everything that decides the compiled code (the model file's bytes, how it is
    read, the library versions, the toolchain and its options), so that a reload or a
    restart of the same model skips the compile (seconds to tens of seconds for a large
    forest). A library is written under a temporary name and renamed into place, so that
    servers sharing the folder never load a half-written one."""

    def __init__(
        self,
        forest: Forest,
        toolchain: str,
        model_name: str,
        cache_dir: Path | None = None,
    ) -> None:
        self._folder: Path | None = None
        if cache_dir is not None:
            self.library = cache_dir / f"{_compile_key(forest, toolchain)}.so"
            if self.library.is_file():
                log.info("model '%s': compiled forest found in %s", model_name, cache_dir)
                return
            cache_dir.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix="pytriton-fil-", dir=cache_dir))
            try:
                self._compile(forest, toolchain, model_name, staging / "forest.so")
                os.replace(staging / "forest.so", self.library)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            return
        self._folder = Path(tempfile.mkdtemp(prefix="pytriton-fil-"))
        self.library = self._folder / "forest.so"
        try:
            self._compile(forest, toolchain, model_name, self.library)
        except Exception:
            self.remove()
            raise

    @staticmethod
    def _compile(forest: Forest, toolchain: str, model_name: str, library: Path) -> None:
        import tl2cgen

        cores = os.cpu_count() or 1
        log.info("model '%s': compiling its forest with %s (TL2cgen)", model_name, toolchain)
        tl2cgen.export_lib(
            forest.model,
            toolchain=toolchain,
            libpath=str(library),
            params={"parallel_comp": cores},
            nthread=cores,
            options=COMPILE_OPTIONS,
        )

    def remove(self) -> None:
        """Removes a private library; a cached one stays for the next load."""
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)


def _compile_key(forest: Forest, toolchain: str) -> str:
    import tl2cgen
    import treelite

    digest = hashlib.sha256()
    for part in (
        forest.model_format.model_type,
        tl2cgen.__version__,
        treelite.__version__,
        toolchain,
        shutil.which(toolchain) or "",
        " ".join(COMPILE_OPTIONS),
        platform.machine(),
    ):
        digest.update(part.encode() + b"\0")
    with forest.path.open("rb") as source:
        for block in iter(lambda: source.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def find_compiler() -> str | None:
    return next((name for name in COMPILERS if shutil.which(name)), None)


def resolve_kind(forest: Forest, settings: FilSettings, model_name: str) -> PredictorKind:
    """The predictor a model's CPU instances use: ``predictor`` if given, else the table's."""
    requested = settings.predictor
    fmt = forest.model_format
    if requested is PredictorKind.NATIVE and fmt is ModelFormat.TREELITE:
        raise ModelConfigError(
            "parameter 'predictor': 'native' needs an XGBoost or LightGBM model; "
            "a treelite_checkpoint runs 'compiled' or 'gtil'"
        )
    if requested is PredictorKind.COMPILED and find_compiler() is None:
        raise UnsupportedError(
            f"parameter 'predictor': 'compiled' needs a C compiler ({' or '.join(COMPILERS)}) "
            "on the server's PATH"
        )
    if requested is not PredictorKind.AUTO:
        return requested
    for kind in AUTO_PREDICTORS[fmt]:
        if kind is PredictorKind.COMPILED and find_compiler() is None:
            log.warning(
                "model '%s': no C compiler (%s) on PATH to compile the forest; predicting "
                "with Treelite's GTIL instead (slower)",
                model_name,
                " or ".join(COMPILERS),
            )
            continue
        return kind
    raise UnsupportedError(f"no predictor for model_type '{fmt.model_type}'")


def cpu_predictor(
    kind: PredictorKind, forest: Forest, settings: FilSettings, compiled: CompiledForest | None
) -> Predictor:
    nthread = settings.cpu_nthread
    if kind is PredictorKind.COMPILED:
        assert compiled is not None
        return CompiledPredictor(compiled.library, nthread)
    if kind is PredictorKind.GTIL:
        return GtilPredictor(forest, nthread)
    if forest.model_format is ModelFormat.LIGHTGBM:
        return LightGBMPredictor(forest, nthread)
    return XGBoostPredictor(forest, nthread)


def gpu_predictor(forest: Forest, settings: FilSettings, device_id: int) -> Predictor:
    if not forest.model_format.is_xgboost:
        raise UnsupportedError(
            f"GPU instances of model_type '{forest.model_format.model_type}' are not "
            "supported: only XGBoost models have a GPU predictor here (XGBoost's own); "
            "use instance_group kind KIND_CPU"
        )
    return XGBoostPredictor(forest, settings.cpu_nthread, gpu=device_id)


def _as_scores(array: Any) -> np.ndarray:
    return np.ascontiguousarray(array, dtype=np.float32)
