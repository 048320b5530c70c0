"""Tree models (backend "fil"): the CPU predictors compared, and served vs raw throughput.

    python bench/tree_models.py                         # both parts, every model type
    python bench/tree_models.py --part predictors       # no server: which predictor is fastest
    python bench/tree_models.py --part served --types xgboost --window-ms 3000

The forests (tests/integration/tree_models.py, trained on the spot): an XGBoost binary
classifier (100 trees, depth 6), a LightGBM one (100 trees, 63 leaves) and a scikit-learn
random forest (100 trees, depth 10, as a Treelite checkpoint), 32 FP32 features. Every
predictor runs one thread (``cpu_nthread`` 1), leaving the other core of a 2-core machine
to the server and the client.

``predictors``: rows/s of each library call in a plain loop at batch sizes 1, 8, 64 and 512:
the library's own (XGBoost ``inplace_predict``, LightGBM ``predict``; scikit-learn's
``predict_proba`` only for reference, FIL cannot serve a pickle), Treelite's GTIL, and the
TL2cgen-compiled library; the figures behind the backend's per-type choice
(``AUTO_PREDICTORS``).

``served``: each model served by pytriton-core alone (``max_batch_size`` 1024,
``dynamic_batching {}``, one CPU instance, ``predict_proba``), perf_analyzer over HTTP: one
row per request at concurrency 1 (every batch is one row) and 16 (the dynamic batcher merges
them), and 256 rows per request at concurrency 2; raw = the chosen predictor's library
call on the batch sizes the server formed (its statistics), weighted as the server ran
them. served/raw is the share of the predictor's own speed that reaches clients.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the checkout's root holds the bench package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import frameworks, toolbox
from bench.backends import served_throughput
from bench.clients.perf_analyzer import PerfAnalyzer, PerfAnalyzerRun
from bench.servers import OURS, run_server

FEATURES = 32
MAX_BATCH_SIZE = 1024
PREDICTOR_BATCHES = (1, 8, 64, 512)
# (concurrency, rows per request): lone one-row requests, many merged by the dynamic
# batcher, and a few large client batches (where the predictor's time dominates).
SCENARIOS = ((1, 1), (16, 1), (2, 256))
RAW_SECONDS_PER_BATCH_SIZE = 2.0


@dataclass(frozen=True)
class TreeModel:
    key: str  # --types name
    filename: str
    train: Callable[[Any], Any]  # tree_models -> Trained
    model_type: str


MODELS = {
    m.key: m
    for m in (
        TreeModel(
            "xgboost",
            "xgboost.json",
            lambda tm: tm.train_xgboost("binary", trees=100, depth=6, width=FEATURES),
            "xgboost_json",
        ),
        TreeModel(
            "lightgbm",
            "model.txt",
            lambda tm: tm.train_lightgbm("binary", trees=100, leaves=63, width=FEATURES),
            "lightgbm",
        ),
        TreeModel(
            "sklearn",
            "checkpoint.tl",
            lambda tm: tm.train_random_forest("binary", trees=100, depth=10, width=FEATURES),
            "treelite_checkpoint",
        ),
    )
}


class Built:
    """One model written to a repository, with a raw runner per predictor."""

    def __init__(self, spec: TreeModel, repository: Path) -> None:
        from pytriton_core.backends.fil.forest import load_forest
        from pytriton_core.backends.fil.settings import ModelFormat

        tm = frameworks.integration_module("tree_models")
        self.spec = spec
        self.name = f"{spec.key}_forest"
        self.trained = spec.train(tm)
        write = {
            "xgboost": tm.write_xgboost,
            "lightgbm": tm.write_lightgbm,
            "sklearn": tm.write_treelite_checkpoint,
        }[spec.key]
        config = tm.fil_config(
            max_batch_size=MAX_BATCH_SIZE,
            queue_delay_us=0,
            instances=1,
            model_type=spec.model_type,
            predict_proba="true",
            cpu_nthread="1",
        )
        folder = tm.write_model(
            repository / self.name, config, lambda p: write(self.trained, p), spec.filename
        )
        self.forest = load_forest(
            folder / "1" / spec.filename, ModelFormat.parse(spec.model_type), False
        )
        self._compiled: Any = None

    def runner(self, predictor: str) -> Callable[[Any], Any]:
        """The library's own call for ``predictor`` on a batch, one thread."""
        if predictor == "compiled":
            import tl2cgen

            from pytriton_core.backends.fil.predictors import CompiledForest, find_compiler

            if self._compiled is None:
                self._compiled = CompiledForest(self.forest, find_compiler() or "gcc", self.name)
            compiled = tl2cgen.Predictor(str(self._compiled.library), nthread=1)
            return lambda x: compiled.predict(tl2cgen.DMatrix(x))
        if predictor == "gtil":
            import treelite

            model = self.forest.model
            return lambda x: treelite.gtil.predict(model, x, nthread=1)
        booster = self.trained.model
        if self.spec.key == "xgboost":
            booster.set_param({"nthread": 1})
            return lambda x: booster.inplace_predict(x)
        if self.spec.key == "lightgbm":
            return lambda x: booster.predict(x, num_threads=1)
        booster.set_params(n_jobs=1)
        return lambda x: booster.predict_proba(x)

    def auto_predictor(self) -> str:
        from pytriton_core.backends.fil.predictors import resolve_kind
        from pytriton_core.backends.fil.settings import FilSettings

        settings = FilSettings.from_parameters(
            {"model_type": self.spec.model_type, "output_class": "true", "threshold": "0.5"},
            self.name,
        )
        return resolve_kind(self.forest, settings, self.name).value

    def close(self) -> None:
        if self._compiled is not None:
            self._compiled.remove()


def predictor_table(built: list[Built], seconds: float) -> None:
    print(f"\nraw rows/s, one thread, {FEATURES} features (best of 5 windows per size)")
    print(
        f"{'model':<9} {'predictor':<9} "
        + " ".join(f"{f'batch {n}':>11}" for n in PREDICTOR_BATCHES)
    )
    for model in built:
        chosen = model.auto_predictor()
        for predictor in ("native", "gtil", "compiled"):
            rates = frameworks.raw_throughputs(
                model.runner(predictor), PREDICTOR_BATCHES, seconds, features=FEATURES
            )
            mark = " (auto)" if predictor == chosen else ""
            cells = " ".join(f"{rates[n]:>11.0f}" for n in PREDICTOR_BATCHES)
            print(f"{model.spec.key:<9} {predictor:<9} {cells}{mark}")


@dataclass(frozen=True)
class ServedResult:
    model: str
    predictor: str
    concurrency: int
    rows_per_request: int
    served: float
    raw: frameworks.RawMix

    @property
    def ratio(self) -> float:
        raw = self.raw.inf_per_s
        return self.served / raw if raw else float("nan")


def served_table(
    built: list[Built], repository: Path, analyzer: PerfAnalyzer, args: argparse.Namespace
) -> None:
    logs = repository.parent
    tools = toolbox.discover((OURS,))
    results = []
    names = tuple(m.name for m in built)
    with run_server(OURS, repository, tools, logs, "tree-models", names) as server:
        for model in built:
            for concurrency, rows in SCENARIOS:
                run = PerfAnalyzerRun(
                    url=server.http_url,
                    protocol="http",
                    elements=FEATURES,
                    concurrency=concurrency,
                    window_ms=args.window_ms,
                    model=model.name,
                    input_name="input__0",
                    batch_size=rows,
                )
                tag = f"{model.name}-c{concurrency}-b{rows}"
                measured = served_throughput(analyzer, server, run, logs, tag, args.windows)
                served, batches = measured.throughput, measured.batches
                predictor = model.auto_predictor()
                raw_by_size = frameworks.raw_throughputs(
                    model.runner(predictor),
                    batches,
                    RAW_SECONDS_PER_BATCH_SIZE,
                    features=FEATURES,
                )
                mix = frameworks.RawMix(dict(sorted(batches.items())), raw_by_size)
                results.append(
                    ServedResult(
                        model.spec.key,
                        predictor,
                        concurrency,
                        rows,
                        served,
                        mix,
                    )
                )
    print(
        f"\nserved (HTTP, perf_analyzer, median of {args.windows} runs) vs raw (the same "
        "predictor on the batches formed), rows/s"
    )
    print(
        f"{'model':<9} {'predictor':<9} {'conc.':>5} {'rows/req':>8} {'served':>9} {'raw':>9} "
        f"{'served/raw':>11}  mean batch  batches formed (size:count)"
    )
    for r in results:
        print(
            f"{r.model:<9} {r.predictor:<9} {r.concurrency:>5} {r.rows_per_request:>8} "
            f"{r.served:>9.0f} "
            f"{r.raw.inf_per_s or 0:>9.0f} {r.ratio:>11.2f}  {r.raw.average_batch or 0:>10.1f}"
            f"  {r.raw.formed()}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--types", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--part", choices=["predictors", "served", "both"], default="both")
    parser.add_argument(
        "--window-ms", type=int, default=2000, help="perf_analyzer's -p (3 per run)"
    )
    parser.add_argument("--windows", type=int, default=3, help="perf_analyzer runs, median taken")
    parser.add_argument(
        "--seconds", type=float, default=2.0, help="raw seconds per batch size (predictors)"
    )
    args = parser.parse_args()
    analyzer = None
    if args.part != "predictors":
        found = toolbox.find_perf_analyzer()
        if found.path is None:
            print(found.reason, file=sys.stderr)
            return 2
        analyzer = PerfAnalyzer(found.path)
    with tempfile.TemporaryDirectory(prefix="bench-trees-") as tmp:
        repository = Path(tmp) / "repository"
        built = [Built(MODELS[key], repository) for key in args.types]
        try:
            if args.part != "served":
                predictor_table(built, args.seconds)
            if analyzer is not None:
                served_table(built, repository, analyzer, args)
        finally:
            for model in built:
                model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
