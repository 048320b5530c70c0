"""Model warm-up: samples built from the config, run through a backend instance."""

from __future__ import annotations

import copy
import struct
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytriton_core.backends.base import BackendInstance
from pytriton_core.config import ModelSpec, config_from_json
from pytriton_core.errors import InternalError, InvalidArgumentError, ModelConfigError
from pytriton_core.inference.request import InferenceRequest
from pytriton_core.inference.response import InferenceResponse
from pytriton_core.inference.statistics import ComputeTiming
from pytriton_core.runtime.warmup import WarmupSample, run_warmup, warmup_samples


def _config(warmup: list[dict[str, Any]], max_batch_size: int = 4) -> dict[str, Any]:
    return {
        "name": "m",
        "max_batch_size": max_batch_size,
        "input": [
            {"name": "X", "data_type": "TYPE_FP32", "dims": [3]},
            {"name": "S", "data_type": "TYPE_STRING", "dims": [2]},
        ],
        "model_warmup": warmup,
    }


def _samples(config: dict[str, Any], model_dir: Path) -> list[WarmupSample]:
    """The samples of a config given in Triton's JSON form. A false ``zero_data`` or
    ``random_data`` reads as unset (the one member of its oneof a config can set)."""
    config = copy.deepcopy(config)
    for setting in config.get("model_warmup", ()):
        for data in setting.get("inputs", {}).values():
            for key in ("zero_data", "random_data"):
                if data.get(key) is False:
                    del data[key]
    return warmup_samples(ModelSpec.from_config(config_from_json(config), 1), model_dir)


def _sample(**inputs: dict[str, Any]) -> dict[str, Any]:
    return {"name": "s", "batch_size": 2, "count": 3, "inputs": inputs}


X_ZERO = {"data_type": "TYPE_FP32", "dims": [3], "zero_data": True}
S_ZERO = {"data_type": "TYPE_STRING", "dims": [2], "zero_data": True}


def test_zero_random_and_file_data(tmp_path: Path) -> None:
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "x.bin").write_bytes(np.arange(5, dtype=np.float32).tobytes())
    strings = b"".join(struct.pack("<I", len(s)) + s for s in (b"ab", b"c"))
    (tmp_path / "warmup" / "s.bin").write_bytes(strings)
    config = _config(
        [
            _sample(X=X_ZERO, S=S_ZERO),
            _sample(X={**X_ZERO, "zero_data": False, "random_data": True}),
            _sample(
                X={"data_type": "TYPE_FP32", "dims": [3], "input_data_file": "x.bin"},
                S={"data_type": "TYPE_STRING", "dims": [2], "input_data_file": "s.bin"},
            ),
        ]
    )
    zero, random, from_file = _samples(config, tmp_path)
    assert (zero.batch_size, zero.count) == (2, 3)
    assert zero.inputs["X"].shape == (1, 3) and not zero.inputs["X"].data.any()
    assert zero.inputs["S"].data.tolist() == [[b"", b""]]
    assert random.inputs["X"].data.dtype == np.float32 and random.inputs["X"].shape == (1, 3)
    assert from_file.inputs["X"].data.tolist() == [[0.0, 1.0, 2.0]]  # the first bytes
    assert from_file.inputs["S"].data.tolist() == [[b"ab", b"c"]]


def test_model_without_batching_has_no_batch_dim() -> None:
    config = _config([{**_sample(X=X_ZERO), "batch_size": 1}], max_batch_size=0)
    (sample,) = _samples(config, Path("/nonexistent"))
    assert sample.inputs["X"].shape == (3,)


@pytest.mark.parametrize(
    ("sample", "message"),
    [
        (_sample(Z=X_ZERO), "has no input 'Z'"),
        (_sample(X={**X_ZERO, "data_type": "TYPE_INT32"}), "is TYPE_INT32, but the model"),
        (_sample(X={**X_ZERO, "dims": [-1]}), "must all be >= 0"),
        (_sample(X={"data_type": "TYPE_FP32", "dims": [3]}), "sets none of"),
        ({**_sample(X=X_ZERO), "batch_size": 9}, "exceeds max_batch_size 4"),
        (
            _sample(X={"data_type": "TYPE_FP32", "dims": [3], "input_data_file": "no.bin"}),
            "cannot read",
        ),
    ],
)
def test_bad_samples_are_config_errors(sample: dict[str, Any], message: str) -> None:
    with pytest.raises(ModelConfigError, match=message):
        _samples(_config([sample]), Path("/nonexistent"))


def test_short_data_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "x.bin").write_bytes(b"\0" * 8)
    sample = _sample(X={"data_type": "TYPE_FP32", "dims": [3], "input_data_file": "x.bin"})
    with pytest.raises(ModelConfigError, match="byte size"):
        _samples(_config([sample]), tmp_path)


class _Recorder(BackendInstance):
    def __init__(self, answer: Any = None, decoupled: bool = False) -> None:
        self.batches: list[Sequence[InferenceRequest]] = []
        self._answer = answer
        self._decoupled = decoupled

    def execute(
        self, requests: Sequence[InferenceRequest], timing: ComputeTiming
    ) -> Sequence[InferenceResponse | None]:
        self.batches.append(requests)
        if isinstance(self._answer, Exception):
            raise self._answer
        if self._decoupled:
            for request in requests:
                threading.Thread(
                    target=request.send_threadsafe, args=(InferenceResponse(), True)
                ).start()
            return [None] * len(requests)
        return [self._answer or InferenceResponse() for _ in requests]


def test_run_warmup_executes_batch_size_requests_count_times() -> None:
    samples = _samples(_config([_sample(X=X_ZERO, S=S_ZERO)]), Path("/x"))
    instance = _Recorder()
    run_warmup(instance, samples, "m_0")
    assert len(instance.batches) == 3
    assert all(len(batch) == 2 for batch in instance.batches)
    assert all(r.batch_size == 1 and set(r.inputs) == {"X", "S"} for r in instance.batches[0])


def test_decoupled_warmup_waits_for_the_final_responses() -> None:
    samples = _samples(_config([_sample(X=X_ZERO)]), Path("/x"))
    run_warmup(_Recorder(decoupled=True), samples, "m_0")


@pytest.mark.parametrize(
    "answer",
    [
        InferenceResponse.failed(InvalidArgumentError("bad shape")),
        InvalidArgumentError("bad shape"),
    ],
)
def test_failing_warmup_raises(answer: Any) -> None:
    samples = _samples(_config([_sample(X=X_ZERO)]), Path("/x"))
    expected = "failed to warm up model 'm' instance 'm_0' with sample 's': bad shape"
    with pytest.raises(InternalError, match=expected):
        run_warmup(_Recorder(answer), samples, "m_0")
