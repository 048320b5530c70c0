"""The framework backends' shared batch path and auto-complete, without a framework."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytriton_core import proto, types
from pytriton_core.backends.base import DeferredResponses, ModelLocation
from pytriton_core.backends.batching import Batch, BatchRunner, failed_responses
from pytriton_core.backends.framework import (
    ModelTensor,
    check_config_io,
    complete_config,
    default_max_batch_size,
    flag,
)
from pytriton_core.config import ModelSpec, config_from_json
from pytriton_core.errors import InternalError, ModelConfigError
from pytriton_core.inference.request import InferenceRequest, RequestedOutput
from pytriton_core.inference.statistics import ComputeTiming
from pytriton_core.inference.tensor import Tensor
from pytriton_core.memory.pinned import StagingPool

FP32 = types.BY_WIRE_NAME["FP32"]
BYTES = types.BY_WIRE_NAME["BYTES"]


def _spec(config: dict[str, Any]) -> ModelSpec:
    """The spec of a config given in Triton's JSON form."""
    return ModelSpec.from_config(config_from_json(config), 1)


def _config(max_batch_size: int = 8, **extra: Any) -> dict[str, Any]:
    return {
        "name": "m",
        "max_batch_size": max_batch_size,
        "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [2]}],
        "output": [
            {"name": "A", "data_type": "TYPE_FP32", "dims": [2]},
            {"name": "B", "data_type": "TYPE_FP32", "dims": [1], "reshape": {"shape": []}},
        ],
        **extra,
    }


def _request(rows: int, start: float, outputs: list[str] | None = None) -> InferenceRequest:
    data = np.arange(start, start + 2 * rows, dtype=np.float32).reshape(rows, 2)
    data.flags.writeable = False  # as received: a view over the request body
    requested = None if outputs is None else {n: RequestedOutput(n) for n in outputs}
    return InferenceRequest(
        "m",
        inputs={"X": Tensor("X", FP32, data)},
        requested_outputs=requested,
        batch_size=rows,
    )


def _model(batch: Batch) -> Mapping[str, np.ndarray]:
    x = batch.inputs["X"]
    return {"A": x * 2, "B": x.sum(axis=1)}


def test_batch_is_gathered_run_once_and_scattered() -> None:
    runner = BatchRunner(_spec(_config()), "m")
    calls: list[Batch] = []

    def run(batch: Batch) -> Mapping[str, np.ndarray]:
        calls.append(batch)
        return _model(batch)

    requests = [_request(1, 0), _request(3, 10), _request(2, 100)]
    timing = ComputeTiming(start_ns=1)
    responses = runner.execute(requests, timing, run)
    assert len(calls) == 1 and calls[0].size == 6 and calls[0].sizes == [1, 3, 2]
    assert calls[0].inputs["X"].shape == (6, 2)
    assert timing.input_end_ns > 0 and timing.infer_end_ns >= timing.input_end_ns
    for request, response in zip(requests, responses, strict=True):
        x = request.inputs["X"].data
        assert response.error is None
        a, b = response.outputs
        assert (a.name, b.name) == ("A", "B")
        np.testing.assert_array_equal(a.data, x * 2)
        # reshape {shape: []}: the model's per-item scalar is dims [1] to clients.
        assert b.shape == (x.shape[0], 1)
        np.testing.assert_array_equal(b.data[:, 0], x.sum(axis=1))


def test_gpu_instances_gather_into_the_staging_pool() -> None:
    # Without a GPU the staging pool is pageable; its accounting shows the batch came from it.
    staging = StagingPool(1 << 20)
    runner = BatchRunner(_spec(_config()), "m", staging=staging)
    seen: list[np.ndarray] = []

    def run(batch: Batch) -> Mapping[str, np.ndarray]:
        seen.append(batch.inputs["X"])
        assert staging.stats()["pageable"]["in_use_bytes"] > 0
        return _model(batch)

    requests = [_request(1, 0), _request(3, 10)]
    responses = runner.execute(requests, ComputeTiming(), run)
    np.testing.assert_array_equal(seen[0], np.concatenate([r.inputs["X"].data for r in requests]))
    assert seen[0].flags.c_contiguous and seen[0].dtype == np.float32
    assert all(response.error is None for response in responses)
    seen.clear()  # the last reference to the batch: its buffer goes back to the pool
    assert staging.stats()["pageable"]["in_use_bytes"] == 0


def test_batch_of_one_is_handed_over_without_copy() -> None:
    runner = BatchRunner(_spec(_config()), "m")
    request = _request(2, 0)
    seen: list[np.ndarray] = []

    def run(batch: Batch) -> Mapping[str, np.ndarray]:
        seen.append(batch.inputs["X"])
        return _model(batch)

    runner.execute([request], ComputeTiming(), run)
    assert seen[0] is request.inputs["X"].data


def test_outputs_scatter_as_views() -> None:
    runner = BatchRunner(_spec(_config()), "m")
    produced: dict[str, np.ndarray] = {}

    def run(batch: Batch) -> Mapping[str, np.ndarray]:
        produced.update(_model(batch))
        return produced

    responses = runner.execute([_request(1, 0), _request(2, 5)], ComputeTiming(), run)
    assert np.shares_memory(responses[1].outputs[0].data, produced["A"])


def test_only_requested_outputs_are_computed_and_returned() -> None:
    runner = BatchRunner(_spec(_config()), "m")
    asked: list[list[str]] = []

    def run(batch: Batch) -> Mapping[str, np.ndarray]:
        asked.append(batch.output_names)
        return _model(batch)

    responses = runner.execute([_request(1, 0, ["B"]), _request(1, 4, ["B"])], ComputeTiming(), run)
    assert asked == [["B"]]
    assert [[t.name for t in r.outputs] for r in responses] == [["B"], ["B"]]
    responses = runner.execute([_request(1, 0, ["B"]), _request(1, 4, ["A"])], ComputeTiming(), run)
    assert asked[-1] == ["A", "B"]
    assert [[t.name for t in r.outputs] for r in responses] == [["B"], ["A"]]


def test_model_without_batching_runs_each_request() -> None:
    config = _config(0)
    config["input"][0]["dims"] = [-1, 2]
    config["output"] = [{"name": "A", "data_type": "TYPE_FP32", "dims": [-1, 2]}]
    runner = BatchRunner(_spec(config), "m")
    sizes: list[int] = []

    def run(batch: Batch) -> Mapping[str, np.ndarray]:
        sizes.append(batch.size)
        return {"A": batch.inputs["X"] + 1}

    responses = runner.execute([_request(3, 0), _request(2, 0)], ComputeTiming(), run)
    assert sizes == [1, 1]
    assert [r.outputs[0].shape for r in responses] == [(3, 2), (2, 2)]


def test_a_failing_batch_raises_for_the_core_to_fail_it() -> None:
    runner = BatchRunner(_spec(_config()), "m")

    def boom(batch: Batch) -> Mapping[str, np.ndarray]:
        raise RuntimeError("kernel exploded")

    with pytest.raises(InternalError, match="model 'm': RuntimeError: kernel exploded"):
        runner.execute([_request(1, 0), _request(1, 1)], ComputeTiming(), boom)


def test_without_batching_only_the_failing_request_fails() -> None:
    config = _config(0)
    config["output"] = [{"name": "A", "data_type": "TYPE_FP32", "dims": [2]}]
    config["input"][0]["dims"] = [-1, 2]
    config["output"][0]["dims"] = [-1, 2]
    runner = BatchRunner(_spec(config), "m")

    def picky(batch: Batch) -> Mapping[str, np.ndarray]:
        x = batch.inputs["X"]
        if x.shape[0] == 2:
            raise ValueError("two rows")
        return {"A": x}

    first, second, third = runner.execute(
        [_request(1, 0), _request(2, 0), _request(3, 0)], ComputeTiming(), picky
    )
    assert first.error is None and third.error is None
    assert second.error is not None and "ValueError: two rows" in second.error.message


@pytest.mark.parametrize(
    ("outputs", "message"),
    [
        ({"A": np.zeros((3, 2), np.float32)}, "produced no output 'B'"),
        (
            {"A": np.zeros((3, 2), np.float64), "B": np.zeros(3, np.float32)},
            "output 'A' has datatype FP64, but the model configuration says FP32",
        ),
        (
            {"A": np.zeros((2, 2), np.float32), "B": np.zeros(2, np.float32)},
            "expected the batch size 3 first",
        ),
    ],
)
def test_malformed_outputs_fail_with_the_output_named(
    outputs: dict[str, np.ndarray], message: str
) -> None:
    runner = BatchRunner(_spec(_config()), "m")
    responses = runner.execute([_request(1, 0), _request(2, 0)], ComputeTiming(), lambda b: outputs)
    # The responses are built where the core finishes them (on the loop): the error too.
    assert isinstance(responses, DeferredResponses) and len(responses) == 2
    with pytest.raises(InternalError, match=re.escape(message)):
        responses.finish()


def test_failed_responses_are_distinct_objects() -> None:
    error = InternalError("x")
    first, second = failed_responses([_request(1, 0), _request(1, 0)], error)
    assert first is not second and first.error is error


def test_string_outputs_become_bytes() -> None:
    config = _config()
    config["output"] = [{"name": "S", "data_type": "TYPE_STRING", "dims": [1]}]
    runner = BatchRunner(_spec(config), "m")
    responses = runner.execute(
        [_request(1, 0), _request(1, 0)],
        ComputeTiming(),
        lambda b: {"S": np.array([["a"], ["bé"]], dtype=object)},
    )
    assert responses[1].outputs[0].data.tolist() == [["bé".encode()]]
    assert responses[1].outputs[0].datatype is BYTES


# ---------------------------------------------------------------- auto-complete


def _location(**global_settings: str) -> ModelLocation:
    return ModelLocation("m", 1, Path("/m"), Path("/m/1"), {}, global_settings)


IN = ModelTensor("X", FP32, (-1, 16))
OUT = ModelTensor("Y", FP32, (-1, 8))


def test_complete_config_from_a_batchable_model() -> None:
    config: Any = proto.ModelConfig(name="m")
    complete_config(config, [IN], [OUT], _location())
    assert config.max_batch_size == 4  # Triton's default-max-batch-size
    assert config.HasField("dynamic_batching")
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [("X", 11, [16])]
    assert [(o.name, list(o.dims)) for o in config.output] == [("Y", [8])]


def test_default_max_batch_size_comes_from_backend_config() -> None:
    config: Any = proto.ModelConfig(name="m")
    complete_config(config, [IN], [OUT], _location(**{"default-max-batch-size": "16"}))
    assert config.max_batch_size == 16
    own = ModelLocation("m", 1, Path("/m"), Path("/m/1"), {"default-max-batch-size": "2"}, {})
    assert default_max_batch_size(own) == 2
    with pytest.raises(ModelConfigError, match="default-max-batch-size"):
        default_max_batch_size(_location(**{"default-max-batch-size": "x"}))


def test_batch_size_one_gets_no_dynamic_batcher() -> None:
    config: Any = proto.ModelConfig(name="m")
    complete_config(config, [IN], [OUT], _location(**{"default-max-batch-size": "1"}))
    assert config.max_batch_size == 1 and not config.HasField("dynamic_batching")


def test_fixed_first_dim_means_no_batching() -> None:
    config: Any = proto.ModelConfig(name="m")
    complete_config(config, [ModelTensor("X", FP32, (1, 16))], [OUT], _location())
    assert config.max_batch_size == 0
    assert list(config.input[0].dims) == [1, 16]
    config = proto.ModelConfig(name="m", max_batch_size=4)
    with pytest.raises(ModelConfigError, match="does not support batching"):
        complete_config(config, [ModelTensor("X", FP32, (1, 16))], [OUT], _location())


def test_scalar_per_item_gets_dims_one_and_an_empty_reshape() -> None:
    config: Any = proto.ModelConfig(name="m")
    complete_config(config, [IN], [ModelTensor("S", FP32, (-1,))], _location())
    assert list(config.output[0].dims) == [1]
    assert config.output[0].HasField("reshape") and not config.output[0].reshape.shape


def test_a_config_with_inputs_and_outputs_is_left_alone() -> None:
    config: Any = proto.ModelConfig(name="m")
    config.input.add(name="X", data_type=11, dims=[16])
    config.output.add(name="Y", data_type=11, dims=[8])
    complete_config(config, [IN], [OUT], _location())
    assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")


def test_unsupported_model_type_is_named() -> None:
    config: Any = proto.ModelConfig(name="m")
    odd = ModelTensor("X", None, (-1, 2), "tensor(complex64)")
    with pytest.raises(ModelConfigError, match=r"tensor\(complex64\)"):
        complete_config(config, [odd], [OUT], _location())


def test_check_config_io() -> None:
    io = _spec(
        {
            "max_batch_size": 4,
            "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [16]}],
            "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [8]}],
        }
    )
    check_config_io(io, [IN], [OUT], "m")
    with pytest.raises(ModelConfigError, match="unexpected input 'X'"):
        check_config_io(io, [ModelTensor("Z", FP32, (-1, 16))], [OUT], "m")
    with pytest.raises(ModelConfigError, match="unexpected datatype TYPE_FP32"):
        check_config_io(io, [ModelTensor("X", BYTES, (-1, 16))], [OUT], "m")
    with pytest.raises(ModelConfigError, match=r"dims \[8\].*expects \[9\]"):
        check_config_io(io, [IN], [ModelTensor("Y", FP32, (-1, 9))], "m")


def test_flag() -> None:
    assert flag("YES") and flag("true") and flag("1")
    assert not flag("no") and not flag(None) and flag(None, default=True)
    with pytest.raises(ModelConfigError):
        flag("maybe")
