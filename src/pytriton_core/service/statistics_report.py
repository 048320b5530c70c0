"""The statistics extension's document (``/v2/models[/{m}[/versions/{v}]]/stats``) for a
list of loaded model versions, rendered from their ``ModelStatistics``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pytriton_core.inference.statistics import Duration, ModelStatistics, ResponseDurations
from pytriton_core.runtime.model import Model


def statistics_document(models: Iterable[Model]) -> dict[str, Any]:
    return {"model_stats": [_model_stats(m) for m in models]}


def _duration(d: Duration) -> dict[str, int]:
    return {"count": d.count, "ns": d.ns}


def _model_stats(model: Model) -> dict[str, Any]:
    s: ModelStatistics = model.stats
    return {
        "name": model.name,
        "version": str(model.version),
        "last_inference": s.last_inference_ms,
        "inference_count": s.inference_count,
        "execution_count": s.execution_count,
        "inference_stats": {
            "success": _duration(s.success),
            "fail": _duration(s.fail),
            "queue": _duration(s.queue),
            "compute_input": _duration(s.compute_input),
            "compute_infer": _duration(s.compute_infer),
            "compute_output": _duration(s.compute_output),
            "cache_hit": _duration(s.cache_hit),
            "cache_miss": _duration(s.cache_miss),
        },
        # Keyed by the index as a string, in string order, as Triton's map sorts them.
        "response_stats": {
            key: _response_stats(s.response_stats[index])
            for key, index in sorted((str(i), i) for i in s.response_stats)
        },
        "batch_stats": [
            {
                "batch_size": size,
                "compute_input": _duration(b.compute_input),
                "compute_infer": _duration(b.compute_infer),
                "compute_output": _duration(b.compute_output),
            }
            for size, b in sorted(s.batch_stats.items())
        ],
        "memory_usage": [
            {"type": usage.kind, "id": usage.device_id, "byte_size": usage.byte_size}
            for usage in s.memory_usage
        ],
    }


def _response_stats(r: ResponseDurations) -> dict[str, dict[str, int]]:
    return {
        "compute_infer": _duration(r.compute_infer),
        "compute_output": _duration(r.compute_output),
        "success": _duration(r.success),
        "fail": _duration(r.fail),
        "empty_response": _duration(r.empty_response),
        "cancel": _duration(r.cancel),
    }
