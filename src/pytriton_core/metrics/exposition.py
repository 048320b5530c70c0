"""The Prometheus text exposition format (version 0.0.4), as prometheus-cpp writes it:
``# HELP`` and ``# TYPE`` for every family, then one line per sample with the labels in
name order (``quantile`` / ``le`` last)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from pytriton_core.metrics.families import Labels, Sample

CONTENT_TYPE = b"text/plain; charset=utf-8"


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def escape_label_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_value(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def _labels(base: Labels, extra: Labels) -> str:
    last = ("quantile", "le")  # prometheus-cpp writes these after the series' labels
    ordered = sorted(base + tuple(label for label in extra if label[0] not in last))
    ordered += [label for label in extra if label[0] in last]
    if not ordered:
        return ""
    return "{" + ",".join(f'{k}="{escape_label_value(v)}"' for k, v in ordered) + "}"


def write_family(
    out: list[str],
    name: str,
    kind: str,
    help_text: str,
    series: Iterable[tuple[Labels, Iterable[Sample]]],
) -> None:
    """Append one family: its header, then each series' samples with its base labels."""
    out.append(f"# HELP {name} {escape_help(help_text)}\n")
    out.append(f"# TYPE {name} {kind}\n")
    for base, samples in series:
        for sample in samples:
            out.append(
                f"{name}{sample.suffix}{_labels(base, sample.labels)} "
                f"{format_value(sample.value)}\n"
            )
