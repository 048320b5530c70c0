"""PNG plots of a run (matplotlib, Agg backend): throughput vs concurrency, latency percentiles.

One panel per scenario and client; one colour per server. Without matplotlib the run still
writes its tables, and says the plots were skipped.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.results import Measurement, RunResults
from bench.servers import LABELS
from bench.toolbox import SERVER_KEYS

COLORS = {"ours": "#1f77b4", "triton": "#76b900", "kserve": "#d62728", "floor": "#7f7f7f"}
THROUGHPUT_PNG = "throughput_vs_concurrency.png"
LATENCY_PNG = "latency_percentiles.png"


def matplotlib_missing() -> str | None:
    try:
        import matplotlib  # noqa: F401
    except ImportError as error:
        return f"matplotlib is not installed ({error})"
    return None


def _panels(results: RunResults) -> dict[tuple[str, str], list[Measurement]]:
    panels: dict[tuple[str, str], list[Measurement]] = {}
    for measurement in results.measurements:
        if measurement.has_figures:
            key = (measurement.scenario.title, measurement.client)
            panels.setdefault(key, []).append(measurement)
    return panels


def _figure(count: int) -> tuple[Any, list[Any]]:  # (Figure, [Axes]): matplotlib is optional
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(3, max(1, count))
    rows = max(1, math.ceil(count / columns))
    figure, axes = plt.subplots(
        rows, columns, figsize=(4.6 * columns, 3.4 * rows), squeeze=False, dpi=80
    )
    flat = list(axes.ravel())
    for unused in flat[count:]:
        unused.set_visible(False)
    return figure, flat


def _draw(
    results: RunResults,
    path: Path,
    title: str,
    ylabel: str,
    series: Callable[[Any, list[Measurement], str], None],
    log_y: bool,
) -> Path:
    panels = _panels(results)
    figure, axes = _figure(len(panels))
    for axis, ((scenario, client), measurements) in zip(axes, panels.items(), strict=False):
        for key in SERVER_KEYS:
            mine = sorted((m for m in measurements if m.server == key), key=lambda m: m.concurrency)
            if mine:
                series(axis, mine, key)
        concurrencies = sorted({m.concurrency for m in measurements})
        axis.set_xscale("log", base=2)
        axis.set_xticks(concurrencies, [str(c) for c in concurrencies])
        axis.minorticks_off()
        if log_y:
            axis.set_yscale("log")
        else:
            axis.set_ylim(bottom=0)
        axis.set_title(f"{scenario} · {client}", fontsize=9)
        axis.set_xlabel("concurrency", fontsize=8)
        axis.set_ylabel(ylabel, fontsize=8)
        axis.tick_params(labelsize=7)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=7)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    _save_small(figure, path)
    import matplotlib.pyplot as plt

    plt.close(figure)
    return path


def _save_small(figure: Any, path: Path) -> None:
    """PNG with a 32-colour palette: a quarter of the size, for plots committed under docs/."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    try:
        from PIL import Image  # matplotlib depends on Pillow
    except ImportError:
        path.write_bytes(buffer.getvalue())
        return
    with Image.open(buffer) as image:
        image.convert("RGB").quantize(colors=32).save(path, format="PNG", optimize=True)


def _throughput_series(axis: Any, measurements: list[Measurement], key: str) -> None:
    axis.plot(
        [m.concurrency for m in measurements],
        [m.median("throughput") for m in measurements],
        marker="o",
        color=COLORS[key],
        label=LABELS[key],
    )


def _latency_series(axis: Any, measurements: list[Measurement], key: str) -> None:
    concurrencies = [m.concurrency for m in measurements]
    for name, style, marker in (("p50_us", "-", "o"), ("p99_us", "--", "^")):
        axis.plot(
            concurrencies,
            [(m.median(name) or math.nan) / 1000 for m in measurements],
            linestyle=style,
            marker=marker,
            color=COLORS[key],
            label=LABELS[key] if name == "p50_us" else None,
        )


def write_plots(results: RunResults, out: Path) -> list[Path]:
    """Both PNGs into ``out``; [] when there is nothing measured to plot."""
    if not _panels(results):
        return []
    preset = results.info.get("preset")
    return [
        _draw(
            results,
            out / THROUGHPUT_PNG,
            f"Throughput vs concurrency ({preset} preset, median of windows)",
            "inferences/s",
            _throughput_series,
            log_y=False,
        ),
        _draw(
            results,
            out / LATENCY_PNG,
            f"Latency p50 (solid) and p99 (dashed) ({preset} preset)",
            "latency, ms",
            _latency_series,
            log_y=True,
        ),
    ]
