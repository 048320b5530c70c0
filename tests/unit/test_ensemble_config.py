"""Ensemble configs checked at load, with the messages Triton 2.51 gives for each case
(each one compared with the real Triton's log for the same config)."""

from __future__ import annotations

import pytest

from pytriton_core.config import ModelSpec, normalize_config, parse_config_text, validate_config
from pytriton_core.config.ensemble import check_ensemble_steps
from pytriton_core.errors import InvalidArgumentError, ModelConfigError

IO = """
input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "S" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def _step(model: str, inputs: dict[str, str], outputs: dict[str, str], version: int = -1) -> str:
    maps = "".join(f' input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    maps += "".join(f' output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: {version}{maps} }}'


def _ensemble(name: str, steps: list[str], io: str = IO, extra: str = "") -> str:
    return (
        f'name: "{name}" platform: "ensemble"\n{io}\n{extra}\n'
        f"ensemble_scheduling {{ step [ {', '.join(steps)} ] }}"
    )


ADD_SUB = {"INPUT0": "A", "INPUT1": "B"}


def _validated(text: str) -> ModelSpec:
    config = parse_config_text(text, "test")
    normalize_config(config, gpu_ids=[])
    validate_config(config)
    return ModelSpec.from_config(config, 1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            _ensemble(
                "e", [_step("add_sub", ADD_SUB, {"OUTPUT0": "S"})], extra="instance_group [ { } ]"
            ),
            "instance group should not be specified for ensemble 'e'",
        ),
        (
            _ensemble(
                "e", [_step("add_sub", ADD_SUB, {"OUTPUT0": "S"})], extra="model_warmup [ { } ]"
            ),
            "model_warmup can not be specified for ensemble 'e'",
        ),
        (
            f'name: "e" platform: "ensemble" {IO} ensemble_scheduling {{ }}',
            "must specify 'step' for ensemble 'e'",
        ),
        (
            _ensemble("e", ['{ model_version: -1 input_map { key: "X" value: "A" } }']),
            "must specify 'model_name' in step 0 of ensemble 'e'",
        ),
        (
            _ensemble("e", ['{ model_name: "m" output_map { key: "X" value: "S" } }']),
            "must specify 'input_map' in step 0 of ensemble 'e'",
        ),
        (
            _ensemble("e", ['{ model_name: "m" input_map { key: "X" value: "A" } }']),
            "must specify 'output_map' in step 0 of ensemble 'e'",
        ),
        (
            _ensemble(
                "e",
                [
                    _step("add_sub", ADD_SUB, {"OUTPUT0": "S"}),
                    _step("add_sub", ADD_SUB, {"OUTPUT0": "S"}),
                ],
            ),
            "ensemble tensor 'S' can appear in an output map only once for ensemble 'e' step 1",
        ),
        (
            _ensemble(
                "e",
                [_step("add_sub", ADD_SUB, {"OUTPUT0": "S"})],
                io=IO + 'input [ { name: "C" data_type: TYPE_FP32 dims: [ 4 ] } ]',
            ),
            "ensemble input 'C' for ensemble e' is not used",
        ),
        (
            _ensemble(
                "e",
                [_step("add_sub", ADD_SUB, {"OUTPUT0": "S"})],
                io=IO + 'output [ { name: "D" data_type: TYPE_FP32 dims: [ 4 ] } ]',
            ),
            "ensemble output 'D' for ensemble e' is not used",
        ),
        (
            _ensemble(
                "e",
                [
                    _step("add_sub", {"INPUT0": "A", "INPUT1": "t2"}, {"OUTPUT0": "t1"}),
                    _step(
                        "add_sub",
                        {"INPUT0": "t1", "INPUT1": "B"},
                        {"OUTPUT0": "t2", "OUTPUT1": "S"},
                    ),
                ],
            ),
            "output 'S' for ensemble 'e' is not written: at least one of its depending tensors, "
            "'t2', is not connected",
        ),
        (
            _ensemble(
                "e",
                [_step("add_sub", ADD_SUB, {"OUTPUT0": "S", "OUTPUT1": "dangling"})],
            ),
            "ensemble tensor 'dangling' is unused in ensemble 'e'",
        ),
        (
            'name: "e" backend: "python" ' + IO + " ensemble_scheduling { }",
            "ensemble scheduling cannot be set for model 'e' whose platform is not ensemble",
        ),
    ],
)
def test_the_graph_is_checked_from_the_config_alone(text: str, message: str) -> None:
    config = parse_config_text(text, "test")
    normalize_config(config, gpu_ids=[])
    with pytest.raises(ModelConfigError) as caught:
        validate_config(config)
    assert caught.value.message == message


def _model(name: str, text: str) -> ModelSpec:
    return _validated(f'name: "{name}" backend: "python" {text}')


ADD_SUB_MODEL = _model(
    "add_sub",
    """
    input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
            { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
             { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
    """,
)
BATCHED = _model(
    "batched",
    """
    max_batch_size: 4
    input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
    output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
    """,
)
STREAM = _model(
    "stream",
    """
    input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
    output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
    model_transaction_policy { decoupled: true }
    """,
)
STREAM2 = _model(
    "stream2",
    """
    input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
    output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
    model_transaction_policy { decoupled: true }
    """,
)
MODELS = {m.name: m for m in (ADD_SUB_MODEL, BATCHED, STREAM, STREAM2)}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            _ensemble("e", [_step("add_sub", {**ADD_SUB, "INPUTX": "B"}, {"OUTPUT0": "S"})]),
            "in ensemble e, ensemble tensor B is mapping to non-existing input INPUTX in model "
            "add_sub",
        ),
        (
            _ensemble("e", [_step("add_sub", ADD_SUB, {"OUTPUTX": "S"})]),
            "in ensemble e, ensemble tensor S is mapped from non-existing output OUTPUTX in "
            "model add_sub",
        ),
        (
            _ensemble(
                "e",
                [_step("add_sub", ADD_SUB, {"OUTPUT0": "S"})],
                io=IO.replace('"A" data_type: TYPE_FP32', '"A" data_type: TYPE_INT32'),
            ),
            "in ensemble e, ensemble tensor A: inconsistent data type: TYPE_INT32 is inferred "
            "from model e while TYPE_FP32 is inferred from model add_sub",
        ),
        (
            _ensemble(
                "e",
                [_step("add_sub", ADD_SUB, {"OUTPUT0": "S"})],
                io=IO.replace(
                    '"A" data_type: TYPE_FP32 dims: [ 4 ]', '"A" data_type: TYPE_FP32 dims: [ 5 ]'
                ),
            ),
            "in ensemble e, ensemble tensor A: inconsistent shape: [5] is inferred from model e "
            "while [4] is inferred from model add_sub",
        ),
        (
            _ensemble(
                "e",
                [
                    _step("add_sub", {"INPUT0": "A", "INPUT1": "A"}, {"OUTPUT0": "mid"}),
                    _step("add_sub", {"INPUT0": "mid"}, {"OUTPUT0": "S"}),
                ],
                io=IO.replace(',\n        { name: "B" data_type: TYPE_FP32 dims: [ 4 ] }', ""),
            ),
            "in ensemble e, input INPUT1 in model add_sub is not mapped to any ensemble tensors",
        ),
        (
            _ensemble(
                "e",
                [_step("batched", {"X": "A"}, {"Y": "S"})],
                io='max_batch_size: 8 input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] } ] '
                'output [ { name: "S" data_type: TYPE_FP32 dims: [ 4 ] } ]',
            ),
            "ensemble e allows maximum batch size 8, but it contains model batched which only "
            "allows maximum batch size to be 4",
        ),
        (
            _ensemble(
                "e",
                [
                    _step("stream", {"X": "A"}, {"Y": "s1"}),
                    _step("stream2", {"X": "A"}, {"Y": "s2"}),
                    _step("add_sub", {"INPUT0": "s1", "INPUT1": "s2"}, {"OUTPUT0": "mid"}),
                    _step("batched", {"X": "mid"}, {"Y": "S"}),
                ],
                io='input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] } ] '
                'output [ { name: "S" data_type: TYPE_FP32 dims: [ 4 ] } ]',
            ),
            "in ensemble e, step of model 'add_sub' receives inputs originated from different "
            "decoupled models",
        ),
    ],
)
def test_steps_are_checked_against_the_composing_models(text: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        check_ensemble_steps(_validated(text), MODELS)
    assert caught.value.message == message


def test_a_decoupled_step_makes_the_ensemble_decoupled() -> None:
    one_in = 'input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] } ] '
    plain = _ensemble(
        "e",
        [_step("batched", {"X": "A"}, {"Y": "S"})],
        io=one_in + 'output [ { name: "S" data_type: TYPE_FP32 dims: [ 4 ] } ]',
    )
    # A non-batching ensemble may use a batching model: full shapes [-1, 4] agree.
    assert check_ensemble_steps(_validated(plain), MODELS) is False
    streaming = _ensemble(
        "e",
        [_step("stream", {"X": "A"}, {"Y": "mid"}), _step("batched", {"X": "mid"}, {"Y": "S"})],
        io=one_in + 'output [ { name: "S" data_type: TYPE_FP32 dims: [ 4 ] } ]',
    )
    assert check_ensemble_steps(_validated(streaming), MODELS) is True
