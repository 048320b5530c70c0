"""The model spec: a loaded version's settings, read once from the validated config."""

from __future__ import annotations

import dataclasses

import pytest

from pytriton_core import types
from pytriton_core.config import ModelSpec, normalize_config, parse_config_text, validate_config
from pytriton_core.config.spec import (
    DirectStrategy,
    EnsembleStep,
    OldestStrategy,
    QueuePolicy,
    SequenceControl,
    SequenceInitialState,
    TensorSpec,
)

FP32 = types.BY_WIRE_NAME["FP32"]
INT32 = types.BY_WIRE_NAME["INT32"]


def _spec(text: str, version: int = 1) -> ModelSpec:
    config = parse_config_text(text, "test")
    normalize_config(config, gpu_ids=[])
    validate_config(config)
    return ModelSpec.from_config(config, version)


def test_tensors_batching_and_the_dynamic_batcher() -> None:
    spec = _spec(
        """
        name: "m" backend: "python" max_batch_size: 8
        input [
          { name: "X" data_type: TYPE_FP32 dims: [ -1, 4 ] allow_ragged_batch: true },
          { name: "S" data_type: TYPE_INT32 dims: [ 1 ] reshape: { } optional: true }
        ]
        output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" } ]
        dynamic_batching {
          preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 100
          priority_levels: 2 default_priority_level: 2
          default_queue_policy { max_queue_size: 5 }
          priority_queue_policy { key: 1 value { timeout_action: DELAY
            default_timeout_microseconds: 50 allow_timeout_override: true } }
        }
        parameters { key: "K" value: { string_value: "v" } }
        model_transaction_policy { decoupled: true }
        """,
        version=3,
    )
    assert (spec.name, spec.version, spec.backend, spec.reported_platform) == (
        "m",
        3,
        "python",
        "python",
    )
    assert spec.batching and spec.max_batch_size == 8
    assert list(spec.inputs) == ["X", "S"] and spec.required_inputs == ("X",)
    assert spec.inputs["X"] == TensorSpec("X", FP32, (-1, 4), allow_ragged_batch=True)
    scalar = spec.inputs["S"]
    assert (scalar.datatype, scalar.model_shape, scalar.reshaped, scalar.optional) == (
        INT32,
        (),
        True,
        True,
    )
    assert spec.outputs["Y"].label_filename == "labels.txt"
    assert spec.full_shape(spec.inputs["X"]) == [-1, -1, 4]
    batching = spec.dynamic_batching
    assert batching is not None
    assert batching.preferred_batch_sizes == (2, 4) and batching.max_queue_delay_us == 100
    assert (batching.priority_levels, batching.default_priority_level) == (2, 2)
    assert batching.default_queue_policy == QueuePolicy(max_queue_size=5)
    assert batching.priority_queue_policies == {
        1: QueuePolicy(delay_on_timeout=True, default_timeout_us=50, allow_timeout_override=True)
    }
    assert batching.priority_queue_policies[1].timeout_us(20) == 20
    assert spec.sequence_batching is None and spec.ensemble_scheduling is None
    assert dict(spec.parameters) == {"K": "v"} and spec.decoupled
    assert [(g.name, g.kind, g.count) for g in spec.instance_groups] == [("m", "KIND_CPU", 1)]
    assert spec.version_policy.choice == "latest" and spec.version_policy.num_versions == 1


def test_sequence_batching_is_modelled_in_full() -> None:
    spec = _spec(
        """
        name: "seq" backend: "python" max_batch_size: 4
        input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
        sequence_batching {
          oldest { max_candidate_sequences: 3 preferred_batch_size: [ 2 ] }
          control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START
            fp32_false_true: [ 0, 1 ] } ] },
            { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_INT32 } ] } ]
          state [ { input_name: "IN_STATE" output_name: "OUT_STATE" data_type: TYPE_FP32
            dims: [ 2 ] initial_state [ { name: "zeros" data_type: TYPE_FP32 dims: [ 2 ]
            zero_data: true } ] } ]
        }
        """
    )
    sequence = spec.sequence_batching
    assert sequence is not None
    assert sequence.max_sequence_idle_us == 1_000_000  # Triton's default, by normalization
    assert sequence.strategy == OldestStrategy(
        max_candidate_sequences=3, preferred_batch_sizes=(2,)
    )
    start, corrid = sequence.control_inputs
    assert start.controls == (
        SequenceControl("CONTROL_SEQUENCE_START", fp32_false_true=(0.0, 1.0)),
    )
    assert corrid.controls[0].datatype is INT32
    (state,) = sequence.states
    assert (state.input_name, state.output_name, state.datatype, state.dims) == (
        "IN_STATE",
        "OUT_STATE",
        FP32,
        (2,),
    )
    assert state.initial_states == (SequenceInitialState("zeros", FP32, (2,), zero_data=True),)
    direct = _spec(
        """
        name: "d" backend: "python" max_batch_size: 2
        input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
        sequence_batching { }
        """
    ).sequence_batching
    assert direct is not None and direct.strategy == DirectStrategy()


def test_ensemble_steps() -> None:
    spec = _spec(
        """
        name: "ens" platform: "ensemble" max_batch_size: 1
        input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
        ensemble_scheduling { step [
          { model_name: "a" model_version: -1 input_map { key: "X" value: "IN" }
            output_map { key: "Y" value: "mid" } },
          { model_name: "b" model_version: 2 input_map { key: "X" value: "mid" }
            output_map { key: "Y" value: "OUT" } } ] }
        """
    )
    ensemble = spec.ensemble_scheduling
    assert ensemble is not None and spec.instance_groups == ()
    assert ensemble.steps == (
        EnsembleStep("a", -1, {"X": "IN"}, {"Y": "mid"}),
        EnsembleStep("b", 2, {"X": "mid"}, {"Y": "OUT"}),
    )
    assert spec.reported_platform == "ensemble"


def test_the_spec_is_frozen() -> None:
    spec = _spec(
        """
        name: "m" backend: "python"
        input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
        """
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.max_batch_size = 4  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.inputs["Z"] = spec.inputs["X"]  # type: ignore[index]
