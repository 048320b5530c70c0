"""Load-time checks of sequence models, and the fields the server refuses or warns about.

The sequence_batching messages are Triton's (model_config_utils.cc, sequence_state.cc and
the sequence batcher's initial-state checks); every row of config.unsupported's table has a
config here that sets it, so a new row cannot go untested.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytriton_core.config import (
    ModelSpec,
    fill_server_side_fields,
    normalize_config,
    parse_config_text,
    validate_config,
)
from pytriton_core.config.unsupported import UNSUPPORTED_FIELDS
from pytriton_core.errors import ModelConfigError
from pytriton_core.scheduling.sequence_state import state_templates

IO = (
    "max_batch_size: 4\n"
    'input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
    'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
)


def _config(text: str, tmp_path: Path, backend: str = 'backend: "python"') -> Any:
    model_dir = tmp_path / "m"
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "1" / "model.py").write_text("")
    config = parse_config_text(backend + "\n" + IO + text, "config.pbtxt")
    fill_server_side_fields(config, "m", model_dir)
    normalize_config(config)
    return config


def _load(text: str, tmp_path: Path, backend: str = 'backend: "python"') -> Any:
    config = _config(text, tmp_path, backend)
    validate_config(config)
    return config


def _error(text: str, tmp_path: Path, backend: str = 'backend: "python"') -> str:
    with pytest.raises(ModelConfigError) as caught:
        _load(text, tmp_path, backend)
    return str(caught.value)


def _control(name: str, kind: str, body: str) -> str:
    return f'{{ name: "{name}" control [ {{ kind: {kind} {body} }} ] }}'


START = _control("START", "CONTROL_SEQUENCE_START", "int32_false_true: [ 0, 1 ]")


@pytest.mark.parametrize(
    ("sequence", "message"),
    [
        (
            f"control_input [ {START}, {START.replace('START', 'BEGIN', 1)} ]",
            "sequence batching specifies multiple CONTROL_SEQUENCE_START tensors for m",
        ),
        (
            f"control_input [ {START}, {START} ]",
            "sequence batching control tensor 'START' is specified for multiple control kinds "
            "for m",
        ),
        (
            "control_input [ { control [ { kind: CONTROL_SEQUENCE_START } ] } ]",
            "sequence batching control tensor must have a name for m",
        ),
        (
            "control_input [ " + _control("S", "CONTROL_SEQUENCE_START", "") + " ]",
            "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
            "'bool_false_true' for CONTROL_SEQUENCE_START for m",
        ),
        (
            "control_input [ "
            + _control(
                "S",
                "CONTROL_SEQUENCE_END",
                "int32_false_true: [ 0, 1 ] fp32_false_true: [ 0, 1 ]",
            )
            + " ]",
            "sequence batching specifies more than one from 'int32_false_true', "
            "'fp32_false_true' and 'bool_false_true' for CONTROL_SEQUENCE_END for m",
        ),
        (
            "control_input [ "
            + _control("S", "CONTROL_SEQUENCE_READY", "bool_false_true: [ true ]")
            + " ]",
            "sequence batching control 'bool_false_true' must have exactly 2 entries for "
            "CONTROL_SEQUENCE_READY for m",
        ),
        (
            "control_input [ "
            + _control("C", "CONTROL_SEQUENCE_CORRID", "data_type: TYPE_FP32")
            + " ]",
            "unexpected data type for control CONTROL_SEQUENCE_CORRID for m. Allowed data types "
            "are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING",
        ),
        (
            "control_input [ "
            + _control(
                "C", "CONTROL_SEQUENCE_CORRID", "data_type: TYPE_UINT64 int32_false_true: [0, 1]"
            )
            + " ]",
            "sequence batching must not specify either 'int32_false_true', 'fp32_false_true' "
            "or 'bool_false_true' for CONTROL_SEQUENCE_CORRID for m",
        ),
        (
            "oldest { preferred_batch_size: [ 0 ] }",
            "sequence batching preferred batch size must be positive for m",
        ),
        (
            'state [ { input_name: "INPUT" output_name: "S_OUT" data_type: TYPE_INT32 '
            "dims: [ 1 ] } ]",
            "sequence_batching.state 'INPUT': input_name is already an input of the model",
        ),
        (
            'state [ { input_name: "S" output_name: "S_OUT" data_type: TYPE_INT32 dims: [ 1 ] '
            "use_growable_memory: true } ]",
            "In order to 'use_growable_memory', you must also enable 'use_single_buffer' for "
            "state input name 'S'.",
        ),
        (
            'state [ { input_name: "S" output_name: "S_OUT" data_type: TYPE_INT32 dims: [ 1 ] '
            "use_same_buffer_for_input_output: true use_growable_memory: true } ]",
            "'use_growable_memory' can only work with KIND_GPU model instances right now. "
            "Please either change the instance type to KIND_GPU or set 'use_growable_memory' "
            "to false for state input 'S'.",
        ),
    ],
)
def test_sequence_batching_errors(tmp_path: Path, sequence: str, message: str) -> None:
    assert _error(f"sequence_batching {{ {sequence} }}", tmp_path) == f"model 'm': {message}"


@pytest.mark.parametrize(
    "sequence",
    [
        'state [ { input_name: "S" output_name: "S_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]',
        "oldest { max_candidate_sequences: 2 preserve_ordering: true }",
    ],
)
def test_decoupled_models_load_with_state_and_ordering(tmp_path: Path, sequence: str) -> None:
    """Triton refuses neither (implicit state and preserve_ordering of a decoupled model)."""
    text = f"model_transaction_policy {{ decoupled: true }}\nsequence_batching {{ {sequence} }}"
    config = _load(text, tmp_path)
    spec = ModelSpec.from_config(config, 1)
    assert spec.decoupled and spec.sequence_batching is not None


def test_a_model_with_every_control_kind_loads(tmp_path: Path) -> None:
    controls = ", ".join(
        [
            START,
            _control("END", "CONTROL_SEQUENCE_END", "fp32_false_true: [ 0, 1 ]"),
            _control("READY", "CONTROL_SEQUENCE_READY", "bool_false_true: [ false, true ]"),
            _control("CORRID", "CONTROL_SEQUENCE_CORRID", "data_type: TYPE_STRING"),
        ]
    )
    config = _load(f"sequence_batching {{ control_input [ {controls} ] }}", tmp_path)
    spec = ModelSpec.from_config(config, 1)
    added = {name: (t.datatype.wire_name, t.dims) for name, t in spec.model_inputs.items()}
    assert added == {
        "INPUT": ("INT32", (1,)),
        "START": ("INT32", (1,)),
        "END": ("FP32", (1,)),
        "READY": ("BOOL", (1,)),
        "CORRID": ("BYTES", (1,)),
    }


# ------------------------------------------------------------------------ initial state


def _state(initial: str) -> str:
    return (
        'sequence_batching { state [ { input_name: "S" output_name: "S_OUT" '
        f"data_type: TYPE_INT32 dims: [ 2 ] {initial} }} ] }}"
    )


def _templates(text: str, tmp_path: Path) -> Any:
    spec = ModelSpec.from_config(_load(text, tmp_path), 1)
    return state_templates(spec, tmp_path / "m")


def test_initial_state_from_a_file_in_the_model_folder(tmp_path: Path) -> None:
    folder = tmp_path / "m" / "initial_state"
    folder.mkdir(parents=True)
    (folder / "s.bin").write_bytes(np.array([7, 9, 11], np.int32).tobytes())  # one extra
    initial = 'initial_state { name: "s" data_type: TYPE_INT32 dims: [ 2 ] data_file: "s.bin" }'
    (template,) = _templates(_state(initial), tmp_path)
    assert template.initial.tolist() == [[7, 9]]  # the batch dimension first
    assert not template.initial.flags.writeable


@pytest.mark.parametrize(
    ("initial", "message"),
    [
        (
            'initial_state { name: "s" data_type: TYPE_INT32 dims: [ 2 ] '
            'data_file: "../../escape.bin" }',
            "initial_state data_file '../../escape.bin' of state input 'S' with normalized "
            "path '{tmp}/escape.bin' must stay within the model directory",
        ),
        (
            'initial_state { name: "s" data_type: TYPE_INT32 dims: [ 2 ] data_file: "short.bin" }',
            "initial_state setting expects 8 bytes, but the data provided from short.binonly "
            "has 4 bytes.",
        ),
        (
            'initial_state { name: "s" data_type: TYPE_FP32 dims: [ 2 ] zero_data: true }',
            "The data type used for 'initial_state' field of state 'S' does not match the "
            "state data type.",
        ),
        (
            "initial_state { data_type: TYPE_INT32 dims: [ 2 ] zero_data: true }",
            "Field 'name' must be set when using initial_state for state input 'S'.",
        ),
        (
            'initial_state { name: "s" data_type: TYPE_INT32 dims: [ 3 ] zero_data: true }',
            "'initial_state' dim for input name 'S' doesn't match 'state' dim description. 3 != 2",
        ),
    ],
)
def test_initial_state_errors(tmp_path: Path, initial: str, message: str) -> None:
    folder = tmp_path / "m" / "initial_state"
    folder.mkdir(parents=True)
    (folder / "short.bin").write_bytes(b"\x01\x00\x00\x00")
    (tmp_path / "escape.bin").write_bytes(bytes(8))
    with pytest.raises(ModelConfigError) as caught:
        _templates(_state(initial), tmp_path)
    assert str(caught.value) == f"model 'm': {message.format(tmp=tmp_path)}"


# ---------------------------------------------------------- fields the server does not implement

# A config that sets each row of UNSUPPORTED_FIELDS (and the backend line it needs).
SETS_FIELD: dict[str, tuple[str, str]] = {
    "instance_group.passive": ("instance_group [ { kind: KIND_CPU passive: true } ]", ""),
    "instance_group.host_policy": (
        'instance_group [ { kind: KIND_CPU host_policy: "numa0" } ]',
        "",
    ),
    "instance_group.secondary_devices": (
        "instance_group [ { kind: KIND_CPU secondary_devices [ { kind: KIND_NVDLA device_id: 0 } "
        "] } ]",
        "",
    ),
    "metric_tags": ('metric_tags { key: "team" value: "a" }', ""),
    "batch_input": (
        'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_INT32 '
        'source_input: "INPUT" } ]',
        "",
    ),
    "batch_output": (
        'batch_output [ { target_name: "OUTPUT" kind: BATCH_SCATTER_WITH_INPUT_SHAPE '
        'source_input: "INPUT" } ]',
        "",
    ),
    "cc_model_filenames": ('cc_model_filenames { key: "8.0" value: "a.plan" }', ""),
    "model_operations": ('model_operations { op_library_filename: "ops.so" }', ""),
    "is_non_linear_format_io": (
        'input [ { name: "NL" data_type: TYPE_FP32 dims: [ 1 ] is_non_linear_format_io: true } ]',
        "",
    ),
    "runtime": ('runtime: "libtriton_other.so"', ""),
    "sequence_batching.state": (
        'sequence_batching { state [ { input_name: "S" output_name: "S_OUT" '
        "data_type: TYPE_INT32 dims: [ 1 ] } ] }",
        'platform: "tensorrt_plan"',
    ),
    "optimization.cuda": ("optimization { cuda { graphs: true } }", ""),
    "optimization.priority": ("optimization { priority: PRIORITY_MAX }", ""),
    "optimization.gather_kernel_buffer_threshold": (
        "optimization { gather_kernel_buffer_threshold: 2 }",
        "",
    ),
    "optimization.eager_batching": ("optimization { eager_batching: true }", ""),
    "optimization.input_pinned_memory / output_pinned_memory": (
        "optimization { input_pinned_memory { enable: false } }",
        "",
    ),
    "optimization.graph / execution_accelerators": ("optimization { graph { level: 1 } }", ""),
}


def test_every_unsupported_field_has_a_case() -> None:
    assert sorted(SETS_FIELD) == sorted(entry.field for entry in UNSUPPORTED_FIELDS)


@pytest.mark.parametrize("entry", UNSUPPORTED_FIELDS, ids=lambda entry: entry.field)
def test_unsupported_fields_are_named(
    entry: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text, backend = SETS_FIELD[entry.field]
    config = _config(text, tmp_path, backend or 'backend: "python"')
    expected = f"model 'm': '{entry.field}' is set, but this server does not support it: "
    if entry.warn_only:
        with caplog.at_level(logging.WARNING):
            validate_config(config)
        assert any(expected in record.getMessage() for record in caplog.records)
    else:
        with pytest.raises(ModelConfigError) as caught:
            validate_config(config)
        assert str(caught.value) == expected + entry.why


@pytest.mark.parametrize(
    "text",
    [
        "response_cache { enable: true }",
        'instance_group [ { kind: KIND_CPU rate_limiter { resources [ { name: "R" count: 2 } ] '
        "priority: 3 } } ]",
        'model_repository_agents { agents [ { name: "checksum" '
        'parameters { key: "MD5:1/model.py" value: "d41d8cd98f00b204e9800998ecf8427e" } } ] }',
        'runtime: "model.py"',  # a Python-based backend's (docs/backend-plugins.md)
        'runtime: "libtriton_python.so"',
    ],
)
def test_implemented_fields_once_listed_load(
    text: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        _load(text, tmp_path)
    assert not [r for r in caplog.records if "does not support it" in r.getMessage()]


def test_a_plain_config_sets_none_of_them(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        _load("", tmp_path)
    assert not [r for r in caplog.records if "does not support it" in r.getMessage()]


def test_the_documented_table_lists_each_field() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    rows = {
        cells[0].strip().strip("`"): cells[1].strip()
        for line in docs.read_text().splitlines()
        if line.startswith("| `")
        and len(cells := [c for c in line.strip().strip("|").split("|")]) >= 3
    }
    for entry in UNSUPPORTED_FIELDS:
        assert entry.field in rows, f"docs/configuration.md lacks '{entry.field}'"
        assert rows[entry.field] == ("warning" if entry.warn_only else "load fails")
