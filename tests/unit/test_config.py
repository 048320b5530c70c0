"""Model configuration: parsing, Triton's JSON form, auto-fill, normalization, validation.

Expected configs marked "Triton 2.51" are what the real Triton returned from
GET /v2/models/<m>/config for the same config.pbtxt.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from pytriton_core import proto
from pytriton_core.config import (
    config_from_json,
    config_to_json_dict,
    fill_server_side_fields,
    list_version_dirs,
    normalize_config,
    parse_config_text,
    read_model_config,
    select_versions,
    validate_config,
)
from pytriton_core.errors import InvalidArgumentError, ModelConfigError

KIND = proto.enum_type("inference.ModelInstanceGroup.Kind")

ADD_SUB_PBTXT = """
name: "add_sub"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { max_queue_delay_microseconds: 100 }
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters: { key: "EXECUTION_ENV_PATH" value: { string_value: "$$TRITON_MODEL_DIRECTORY/env" } }
"""

# Triton 2.51, for ADD_SUB_PBTXT with model.py in version 1.
ADD_SUB_JSON: dict[str, Any] = {
    "name": "add_sub",
    "platform": "",
    "backend": "python",
    "runtime": "",
    "version_policy": {"latest": {"num_versions": 1}},
    "max_batch_size": 8,
    "input": [
        {
            "name": name,
            "data_type": "TYPE_FP32",
            "format": "FORMAT_NONE",
            "dims": [4],
            "is_shape_tensor": False,
            "allow_ragged_batch": False,
            "optional": False,
            "is_non_linear_format_io": False,
        }
        for name in ("INPUT0", "INPUT1")
    ],
    "output": [
        {
            "name": "OUTPUT0",
            "data_type": "TYPE_FP32",
            "dims": [4],
            "label_filename": "",
            "is_shape_tensor": False,
            "is_non_linear_format_io": False,
        }
    ],
    "batch_input": [],
    "batch_output": [],
    "optimization": {
        "priority": "PRIORITY_DEFAULT",
        "input_pinned_memory": {"enable": True},
        "output_pinned_memory": {"enable": True},
        "gather_kernel_buffer_threshold": 0,
        "eager_batching": False,
    },
    "dynamic_batching": {
        "preferred_batch_size": [8],
        "max_queue_delay_microseconds": 100,
        "preserve_ordering": False,
        "priority_levels": 0,
        "default_priority_level": 0,
        "priority_queue_policy": {},
    },
    "instance_group": [
        {
            "name": "add_sub_0",
            "kind": "KIND_CPU",
            "count": 2,
            "gpus": [],
            "secondary_devices": [],
            "profile": [],
            "passive": False,
            "host_policy": "",
        }
    ],
    "default_model_filename": "model.py",
    "cc_model_filenames": {},
    "metric_tags": {},
    "parameters": {"EXECUTION_ENV_PATH": {"string_value": "$$TRITON_MODEL_DIRECTORY/env"}},
    "model_warmup": [],
}


def make_model_dir(root: Path, name: str, files: dict[str, str] | None = None) -> Path:
    """A model folder holding ``files`` (relative path -> text; a trailing "/" makes a dir)."""
    model_dir = root / name
    model_dir.mkdir(parents=True)
    for relative, text in (files or {}).items():
        path = model_dir / relative
        if relative.endswith("/"):
            path.mkdir(parents=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    return model_dir


def load(text: str, model_dir: Path, *, gpu_ids: tuple[int, ...] = ()) -> Any:
    """The server-side part of a model load: parse, fill, normalize, validate."""
    config = parse_config_text(text, str(model_dir / "config.pbtxt"))
    fill_server_side_fields(config, model_dir.name, model_dir)
    normalize_config(config, gpu_ids=gpu_ids)
    validate_config(config)
    return config


def python_model(tmp_path: Path, name: str = "m") -> Path:
    return make_model_dir(tmp_path, name, {"1/model.py": ""})


TENSORS = """
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


# ---- parsing -------------------------------------------------------------------------


def test_parse_realistic_config() -> None:
    config: Any = parse_config_text(ADD_SUB_PBTXT, "add_sub/config.pbtxt")
    assert config.name == "add_sub"
    assert config.backend == "python"
    assert config.max_batch_size == 8
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [
        ("INPUT0", proto.DataType.Value("TYPE_FP32"), [4]),
        ("INPUT1", proto.DataType.Value("TYPE_FP32"), [4]),
    ]
    assert config.WhichOneof("scheduling_choice") == "dynamic_batching"
    assert config.dynamic_batching.max_queue_delay_microseconds == 100
    assert len(config.instance_group) == 1
    group = config.instance_group[0]
    assert (group.count, group.kind) == (2, KIND.Value("KIND_CPU"))
    assert config.parameters["EXECUTION_ENV_PATH"].string_value == "$$TRITON_MODEL_DIRECTORY/env"
    assert not config.HasField("version_policy")


def test_read_model_config_reads_config_pbtxt(tmp_path: Path) -> None:
    model_dir = make_model_dir(tmp_path, "add_sub", {"config.pbtxt": ADD_SUB_PBTXT})
    config: Any = read_model_config(model_dir)
    assert config == parse_config_text(ADD_SUB_PBTXT, "x")


def test_read_model_config_absent_is_none(tmp_path: Path) -> None:
    assert read_model_config(make_model_dir(tmp_path, "m")) is None


def test_read_model_config_prefers_named_custom_config(tmp_path: Path) -> None:
    model_dir = make_model_dir(
        tmp_path,
        "m",
        {"config.pbtxt": "max_batch_size: 1", "configs/big.pbtxt": "max_batch_size: 64"},
    )

    def max_batch_size(config_name: str | None) -> int:
        config: Any = read_model_config(model_dir, config_name)
        return int(config.max_batch_size)

    assert max_batch_size("big") == 64
    # An unknown custom name falls back to config.pbtxt, as in Triton.
    assert max_batch_size("nope") == 1
    assert max_batch_size(None) == 1


def test_parse_error_names_file_line_column_and_field(tmp_path: Path) -> None:
    text = 'name: "m"\nmax_batch_size: 8\ninput [ { name: "I" data_typ: TYPE_FP32 } ]\n'
    model_dir = make_model_dir(tmp_path, "m", {"config.pbtxt": text})
    with pytest.raises(ModelConfigError) as caught:
        read_model_config(model_dir)
    message = str(caught.value)
    assert str(model_dir / "config.pbtxt") in message
    assert "3:21" in message
    assert '"data_typ"' in message
    assert isinstance(caught.value, InvalidArgumentError)


def test_parse_error_for_bad_enum_value() -> None:
    with pytest.raises(ModelConfigError, match=r"src\.pbtxt: 1:32 .*TYPE_FP33"):
        parse_config_text('input [ { name: "I" data_type: TYPE_FP33 } ]', "src.pbtxt")


def test_read_model_config_rejects_non_utf8(tmp_path: Path) -> None:
    model_dir = make_model_dir(tmp_path, "m")
    (model_dir / "config.pbtxt").write_bytes(b'name: "\xff"')
    with pytest.raises(ModelConfigError, match="not UTF-8"):
        read_model_config(model_dir)


# ---- JSON ----------------------------------------------------------------------------


def test_json_rendering_matches_triton(tmp_path: Path) -> None:
    model_dir = python_model(tmp_path, "add_sub")
    config = load(ADD_SUB_PBTXT, model_dir)
    assert config_to_json_dict(config) == ADD_SUB_JSON


def test_json_renders_listed_int64_fields_as_numbers() -> None:
    config = config_from_json(
        {
            "name": "m",
            "version_policy": {"specific": {"versions": [1, 3]}},
            "input": [{"name": "I", "dims": [-1, 2], "reshape": {"shape": [2, -1]}}],
            "output": [{"name": "O", "dims": [3], "reshape": {"shape": [3]}}],
            "dynamic_batching": {
                "max_queue_delay_microseconds": 10,
                "priority_levels": 2,
                "default_priority_level": 1,
                "default_queue_policy": {"default_timeout_microseconds": 5},
                "priority_queue_policy": {"2": {"default_timeout_microseconds": 6}},
            },
            "model_warmup": [{"name": "w", "inputs": {"I": {"dims": [2, 2], "zero_data": True}}}],
            "instance_group": [{"secondary_devices": [{"device_id": 7}]}],
        }
    )
    rendered = config_to_json_dict(config)
    assert rendered["version_policy"] == {"specific": {"versions": [1, 3]}}
    assert rendered["input"][0]["dims"] == [-1, 2]
    assert rendered["input"][0]["reshape"] == {"shape": [2, -1]}
    assert rendered["output"][0]["reshape"] == {"shape": [3]}
    batching = rendered["dynamic_batching"]
    assert batching["max_queue_delay_microseconds"] == 10
    assert batching["priority_levels"] == 2
    assert batching["default_priority_level"] == 1
    assert batching["default_queue_policy"]["default_timeout_microseconds"] == 5
    # Map keys stay strings; the values inside become numbers.
    assert batching["priority_queue_policy"]["2"]["default_timeout_microseconds"] == 6
    assert rendered["model_warmup"][0]["inputs"]["I"]["dims"] == [2, 2]
    # Not on Triton's list: stays a string, as Triton prints it.
    assert rendered["instance_group"][0]["secondary_devices"][0]["device_id"] == "7"
    json.dumps(rendered)  # plain JSON types only


def test_json_sequence_and_ensemble_int64_fields() -> None:
    sequence = config_from_json(
        {
            "sequence_batching": {
                "max_sequence_idle_microseconds": 5000,
                "oldest": {"max_queue_delay_microseconds": 7},
                "state": [{"dims": [1], "initial_state": [{"dims": [2, 3], "zero_data": True}]}],
            }
        }
    )
    rendered = config_to_json_dict(sequence)["sequence_batching"]
    assert rendered["max_sequence_idle_microseconds"] == 5000
    assert rendered["oldest"]["max_queue_delay_microseconds"] == 7
    assert rendered["state"][0]["dims"] == [1]
    assert rendered["state"][0]["initial_state"][0]["dims"] == [2, 3]
    assert "direct" not in rendered

    direct = config_from_json({"sequence_batching": {"direct": {}}})
    assert config_to_json_dict(direct)["sequence_batching"]["direct"] == {
        "max_queue_delay_microseconds": 0,
        "minimum_slot_utilization": 0.0,
    }

    ensemble = config_from_json(
        {"platform": "ensemble", "ensemble_scheduling": {"step": [{"model_version": -1}]}}
    )
    step = config_to_json_dict(ensemble)["ensemble_scheduling"]["step"][0]
    assert step == {
        "model_name": "",
        "model_version": -1,
        "input_map": {},
        "output_map": {},
        "model_namespace": "",
    }


def test_json_round_trip(tmp_path: Path) -> None:
    config = load(ADD_SUB_PBTXT, python_model(tmp_path, "add_sub"))
    rendered = config_to_json_dict(config)
    again = config_from_json(json.dumps(rendered))
    assert again == config
    assert config_to_json_dict(again) == rendered


def test_config_from_json_accepts_names_enums_and_strings() -> None:
    text = json.dumps(
        {
            "name": "m",
            "maxBatchSize": "4",  # camelCase and an integer as a string, as protobuf allows
            "input": [{"name": "I", "data_type": "TYPE_STRING", "dims": ["-1"]}],
            "instance_group": [{"kind": "KIND_GPU", "gpus": [0, 1]}],
        }
    )
    for value in (text, text.encode(), json.loads(text)):
        config: Any = config_from_json(value)
        assert config.max_batch_size == 4
        assert config.input[0].data_type == proto.DataType.Value("TYPE_STRING")
        assert list(config.input[0].dims) == [-1]
        assert config.instance_group[0].kind == KIND.Value("KIND_GPU")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('{"bogus_field": 1}', 'no field named "bogus_field"'),
        ('{"max_batch_size": "x"}', "max_batch_size"),
        ('{"instance_group": [{"kind": "KIND_TPU"}]}', "KIND_TPU"),
        ("{not json", "invalid model config JSON"),
        ("[1, 2]", "expected an object, got list"),
    ],
)
def test_config_from_json_errors(value: str, expected: str) -> None:
    with pytest.raises(ModelConfigError) as caught:
        config_from_json(value)
    assert expected in str(caught.value)
    assert "\n" not in str(caught.value)


# ---- server-side auto-fill -----------------------------------------------------------


@pytest.mark.parametrize(
    ("files", "backend", "platform", "filename"),
    [
        ({"1/model.savedmodel/": ""}, "tensorflow", "tensorflow_savedmodel", "model.savedmodel"),
        ({"1/model.graphdef": ""}, "tensorflow", "tensorflow_graphdef", "model.graphdef"),
        ({"1/model.plan": ""}, "tensorrt", "tensorrt_plan", "model.plan"),
        ({"1/model.onnx": ""}, "onnxruntime", "onnxruntime_onnx", "model.onnx"),
        ({"1/model.onnx/model.onnx": ""}, "onnxruntime", "onnxruntime_onnx", "model.onnx"),
        ({"1/model.xml": "", "1/model.bin": ""}, "openvino", "", "model.xml"),
        ({"1/model.pt": ""}, "pytorch", "pytorch_libtorch", "model.pt"),
        ({"1/model.pt2": ""}, "pytorch", "torch_aoti", "model.pt2"),
        ({"1/model.py": ""}, "python", "", "model.py"),
    ],
)
def test_autofill_from_model_file(
    tmp_path: Path, files: dict[str, str], backend: str, platform: str, filename: str
) -> None:
    model_dir = make_model_dir(tmp_path, "m", files)
    config: Any = proto.ModelConfig()
    fill_server_side_fields(config, "m", model_dir)
    assert (config.name, config.backend, config.platform, config.default_model_filename) == (
        "m",
        backend,
        platform,
        filename,
    )


def test_autofill_ignores_a_file_with_a_dir_only_name_and_vice_versa(tmp_path: Path) -> None:
    # model.savedmodel must be a folder and model.plan a file; model.py is found after them.
    model_dir = make_model_dir(
        tmp_path, "m", {"1/model.savedmodel": "", "1/model.plan/": "", "1/model.py": ""}
    )
    config: Any = proto.ModelConfig()
    fill_server_side_fields(config, "m", model_dir)
    assert config.backend == "python"


def test_autofill_inspects_the_lexicographically_first_version(tmp_path: Path) -> None:
    model_dir = make_model_dir(tmp_path, "m", {"10/model.onnx": "", "2/model.py": ""})
    config: Any = proto.ModelConfig()
    fill_server_side_fields(config, "m", model_dir)
    assert config.backend == "onnxruntime"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (
            {"backend": "onnxruntime"},
            ("onnxruntime", "onnxruntime_onnx", "model.onnx"),
        ),
        ({"platform": "tensorrt_plan"}, ("tensorrt", "tensorrt_plan", "model.plan")),
        ({"platform": "pytorch_libtorch"}, ("pytorch", "pytorch_libtorch", "model.pt")),
        ({"platform": "libtorch"}, ("pytorch", "libtorch", "model.pt")),
        (
            {"default_model_filename": "model.graphdef"},
            ("tensorflow", "tensorflow_graphdef", "model.graphdef"),
        ),
        ({"backend": "python", "default_model_filename": "custom.py"}, ("python", "", "custom.py")),
        ({"backend": "pytorch"}, ("pytorch", "torch_aoti", "model.pt2")),
        ({"backend": "dali"}, ("dali", "", "")),
        ({"platform": "ensemble"}, ("", "ensemble", "")),
    ],
)
def test_autofill_from_config_fields(
    tmp_path: Path, given: dict[str, str], expected: tuple[str, str, str]
) -> None:
    # The version folder holds model.pt2 only: it decides just where the config leaves room.
    model_dir = make_model_dir(tmp_path, "m", {"1/model.pt2": ""})
    config: Any = proto.ModelConfig(**given)
    fill_server_side_fields(config, "m", model_dir)
    assert (config.backend, config.platform, config.default_model_filename) == expected


def test_autofill_custom_backend_from_model_name(tmp_path: Path) -> None:
    model_dir = make_model_dir(tmp_path, "model.identity", {"1/": ""})
    config: Any = proto.ModelConfig()
    fill_server_side_fields(config, "model.identity", model_dir)
    assert (config.name, config.backend, config.default_model_filename) == (
        "model.identity",
        "identity",
        "model.identity",
    )


def test_autofill_unknown_backend(tmp_path: Path) -> None:
    model_dir = make_model_dir(tmp_path, "m", {"1/weights.bin": ""})
    with pytest.raises(ModelConfigError) as caught:
        fill_server_side_fields(proto.ModelConfig(), "m", model_dir)
    assert str(caught.value) == (
        "Invalid model name: Could not determine backend for model 'm' with no backend in "
        "model configuration. Expected model name of the form 'model.<backend_name>'."
    )


def test_autofill_name_mismatch(tmp_path: Path) -> None:
    model_dir = python_model(tmp_path, "m")
    with pytest.raises(ModelConfigError, match="unexpected directory name 'm'"):
        fill_server_side_fields(proto.ModelConfig(name="other"), "m", model_dir)


def test_autofill_keeps_a_matching_name(tmp_path: Path) -> None:
    config: Any = proto.ModelConfig(name="m")
    fill_server_side_fields(config, "m", python_model(tmp_path, "m"))
    assert config.backend == "python"


# ---- normalization -------------------------------------------------------------------


def groups(config: Any) -> list[tuple[str, str, int, list[int]]]:
    return [(g.name, KIND.Name(g.kind), g.count, list(g.gpus)) for g in config.instance_group]


def test_normalize_defaults(tmp_path: Path) -> None:
    config = load(TENSORS, python_model(tmp_path))
    assert config_to_json_dict(config)["version_policy"] == {"latest": {"num_versions": 1}}
    # No instance_group: one group named after the model itself (Triton 2.51: "m", not "m_0").
    assert groups(config) == [("m", "KIND_CPU", 1, [])]
    assert config.optimization.input_pinned_memory.enable is True
    assert config.optimization.output_pinned_memory.enable is True
    assert not config.HasField("dynamic_batching")


def test_normalize_instance_groups(tmp_path: Path) -> None:
    text = TENSORS + (
        'instance_group [ { kind: KIND_AUTO }, { name: "named" kind: KIND_CPU count: 3 },'
        " { kind: KIND_GPU count: 2 }, { kind: KIND_AUTO gpus: [ 1 ] }, { kind: KIND_MODEL } ]"
    )
    config = load(text, python_model(tmp_path), gpu_ids=(0, 1))
    assert groups(config) == [
        ("m_0", "KIND_GPU", 1, [0, 1]),
        ("named", "KIND_CPU", 3, []),
        ("m_2", "KIND_GPU", 2, [0, 1]),
        ("m_3", "KIND_GPU", 1, [1]),
        ("m_4", "KIND_MODEL", 1, []),
    ]


def test_normalize_kind_auto_without_gpus_is_cpu(tmp_path: Path) -> None:
    config = load(TENSORS + "instance_group [ { kind: KIND_AUTO } ]", python_model(tmp_path))
    assert groups(config) == [("m_0", "KIND_CPU", 1, [])]


def test_normalize_kind_auto_with_an_absent_gpu_is_cpu(tmp_path: Path) -> None:
    # Triton then rejects the GPU list on a CPU group.
    text = TENSORS + "instance_group [ { kind: KIND_AUTO gpus: [ 3 ] } ]"
    with pytest.raises(ModelConfigError, match="has kind KIND_CPU but lists GPUs"):
        load(text, python_model(tmp_path), gpu_ids=(0,))


def test_normalize_two_cpu_instances_for_onnxruntime_and_tensorflow(tmp_path: Path) -> None:
    for backend in ("onnxruntime", "tensorflow", "python"):
        text = f'backend: "{backend}"\n' + TENSORS
        config = load(text, make_model_dir(tmp_path / backend, "m", {"1/": ""}))
        assert groups(config) == [("m", "KIND_CPU", 1 if backend == "python" else 2, [])]


def test_normalize_gpu_group_without_gpus_fails(tmp_path: Path) -> None:
    text = TENSORS + "instance_group [ { kind: KIND_GPU } ]"
    with pytest.raises(ModelConfigError) as caught:
        load(text, python_model(tmp_path))
    assert str(caught.value) == (
        "model 'm': instance group 'm_0' has kind KIND_GPU but no GPUs are available"
    )


def test_normalize_gpu_group_with_an_absent_gpu_fails(tmp_path: Path) -> None:
    text = TENSORS + "instance_group [ { kind: KIND_GPU gpus: [ 0, 5 ] } ]"
    with pytest.raises(ModelConfigError, match="lists GPU 5, which is not available"):
        load(text, python_model(tmp_path), gpu_ids=(0, 1))


def test_normalize_keeps_explicit_pinned_memory_off(tmp_path: Path) -> None:
    text = TENSORS + "optimization { input_pinned_memory { enable: false } }"
    config = load(text, python_model(tmp_path))
    assert config.optimization.input_pinned_memory.enable is False
    assert config.optimization.output_pinned_memory.enable is True


def test_normalize_dynamic_batching_preferred_size(tmp_path: Path) -> None:
    config = load(TENSORS + "dynamic_batching { }", python_model(tmp_path))
    assert list(config.dynamic_batching.preferred_batch_size) == [8]
    kept = load(
        TENSORS + "dynamic_batching { preferred_batch_size: [ 2, 4 ] }", python_model(tmp_path, "k")
    )
    assert list(kept.dynamic_batching.preferred_batch_size) == [2, 4]


def test_normalize_dynamic_batching_without_batching_dim(tmp_path: Path) -> None:
    config: Any = proto.ModelConfig(name="m", backend="python")
    config.dynamic_batching.SetInParent()
    normalize_config(config)
    assert list(config.dynamic_batching.preferred_batch_size) == []


def test_normalize_sequence_batching(tmp_path: Path) -> None:
    direct = load(TENSORS + "sequence_batching { }", python_model(tmp_path))
    sequence = direct.sequence_batching
    assert sequence.max_sequence_idle_microseconds == 1_000_000
    # Direct is the default strategy, but like Triton we leave the oneof unset.
    assert sequence.WhichOneof("strategy_choice") is None

    oldest = load(
        TENSORS + "sequence_batching { max_sequence_idle_microseconds: 5000 oldest { } }",
        python_model(tmp_path, "o"),
    )
    assert oldest.sequence_batching.max_sequence_idle_microseconds == 5000
    assert list(oldest.sequence_batching.oldest.preferred_batch_size) == [8]


ENSEMBLE_PBTXT = """
platform: "ensemble"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [ { model_name: "add_sub" model_version: -1
  input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } ] }
"""


def test_normalize_ensemble(tmp_path: Path) -> None:
    config = load(ENSEMBLE_PBTXT, make_model_dir(tmp_path, "ens", {"1/": ""}))
    rendered = config_to_json_dict(config)
    assert rendered["backend"] == ""
    assert rendered["platform"] == "ensemble"
    assert rendered["instance_group"] == []
    assert "optimization" not in rendered
    assert rendered["version_policy"] == {"latest": {"num_versions": 1}}


# ---- validation ----------------------------------------------------------------------


def _invalid(text: str, tmp_path: Path) -> str:
    with pytest.raises(ModelConfigError) as caught:
        load(text, python_model(tmp_path))
    return str(caught.value)


IO = 'input [ { name: "I" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_batch_size: -1\n" + IO, "model 'm': 'max_batch_size' must be >= 0, got -1"),
        ("input [ { data_type: TYPE_FP32 dims: [ 4 ] } ]", "model 'm': input #0 has no name"),
        ('input [ { name: "I" dims: [ 4 ] } ]', "model 'm': input 'I' has no data_type"),
        ('input [ { name: "I" data_type: 99 dims: [ 4 ] } ]', "has an unknown data_type 99"),
        ('output [ { name: "O" data_type: TYPE_FP32 } ]', "model 'm': output 'O' has no dims"),
        (
            'input [ { name: "I" data_type: TYPE_FP32 dims: [] reshape { shape: [ 1 ] } } ]',
            "model 'm': input 'I' has no dims",
        ),
        (
            'input [ { name: "I" data_type: TYPE_FP32 dims: [ 4, 0 ] } ]',
            "model 'm': input 'I' dims must be >= 1 or -1 (variable size), got [4, 0]",
        ),
        ('input [ { name: "I" data_type: TYPE_FP32 dims: [ -2 ] } ]', "got [-2]"),
        (
            'output [ { name: "O" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 0, 4 ] } } ]',
            "model 'm': output 'O' reshape.shape must be >= 1 or -1",
        ),
        (
            'input [ { name: "I" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 2, 3 ] } } ]',
            "model 'm': input 'I' has different sizes in dims [4] and reshape.shape [2, 3]",
        ),
        (
            'input [ { name: "I" data_type: TYPE_FP32 dims: [ 2, -1 ] reshape { shape: [ 2 ] } } ]',
            "has different sizes in dims",
        ),
        (IO + IO, "model 'm': duplicate input name 'I'"),
        (
            "max_batch_size: 8\n" + IO + "dynamic_batching { preferred_batch_size: [ 16 ] }",
            "model 'm': dynamic_batching.preferred_batch_size 16 must be in [1, max_batch_size=8]",
        ),
        (
            "max_batch_size: 8\n" + IO + "dynamic_batching { preferred_batch_size: [ 0 ] }",
            "preferred_batch_size 0 must be in [1, max_batch_size=8]",
        ),
        (
            "max_batch_size: 8\n" + IO + "dynamic_batching { priority_levels: 2 }",
            "model 'm': dynamic_batching.default_priority_level must be in [1, 2], got 0",
        ),
        (
            "max_batch_size: 8\n" + IO + "dynamic_batching { priority_levels: 2 "
            "default_priority_level: 1 priority_queue_policy { key: 3 value { } } }",
            "model 'm': dynamic_batching.priority_queue_policy key 3 must be in [1, 2]",
        ),
        (
            "max_batch_size: 8\n" + IO + "dynamic_batching { preserve_ordering: true "
            "priority_levels: 2 default_priority_level: 1 }",
            "dynamic_batching.preserve_ordering allows only one priority level",
        ),
        (
            "max_batch_size: 8\n" + IO + "dynamic_batching { preserve_ordering: true "
            "default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 10 } }",
            "dynamic_batching.default_queue_policy.timeout_action DELAY is not allowed",
        ),
        (
            "max_batch_size: 8\n" + IO + "dynamic_batching { preserve_ordering: true "
            "priority_queue_policy { key: 1 value { timeout_action: DELAY "
            "default_timeout_microseconds: 10 } } }",
            "dynamic_batching.priority_queue_policy[1].timeout_action DELAY is not allowed",
        ),
        (
            "max_batch_size: 2\n" + IO + "sequence_batching { oldest { preferred_batch_size: 3 } }",
            "sequence batching preferred batch size must be <= max batch size for m",
        ),
        (
            IO + "sequence_batching { direct { minimum_slot_utilization: 1.5 } }",
            "sequence batching minimum slot utilization must be in range (0.0, 1.0] for m",
        ),
        (
            IO + "sequence_batching { } response_cache { enable: true }",
            "Response Cache does not currently support model m with sequence batching scheduler",
        ),
        (
            'platform: "onnxruntime_onnx"\n' + IO,
            "model 'm': backend 'python' requires an empty platform, got 'onnxruntime_onnx'",
        ),
        (
            IO + "instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]",
            "model 'm': instance group 'm_0' has kind KIND_CPU but lists GPUs",
        ),
        (
            IO + "ensemble_scheduling { }",
            "ensemble scheduling cannot be set for model 'm' whose platform is not ensemble",
        ),
    ],
)
def test_validation_errors(tmp_path: Path, text: str, message: str) -> None:
    assert message in _invalid('backend: "python"\n' + text, tmp_path)


@pytest.mark.parametrize(
    "text",
    [
        # Triton 2.51 accepts each of these.
        'input [ { name: "I" data_type: TYPE_FP32 dims: [ 1 ] reshape { } } ]',
        'input [ { name: "I" data_type: TYPE_FP32 dims: [ -1, 4 ]'
        " reshape { shape: [ -1, 2, 2 ] } } ]",
        'input [ { name: "I" data_type: TYPE_FP32 dims: [ 2, 4, -1, 6 ]'
        " reshape { shape: [ 8, -1, 1, 6 ] } } ]",
        # An input and an output may share a name.
        IO + 'output [ { name: "I" data_type: TYPE_FP32 dims: [ 4 ] } ]',
        # Priority queue keys are only checked when priority levels are in use.
        "max_batch_size: 8\n"
        + IO
        + "dynamic_batching { priority_queue_policy { key: 9 value {} } }",
        # DELAY without a timeout never reorders requests.
        "max_batch_size: 8\n" + IO + "dynamic_batching { preserve_ordering: true "
        "default_queue_policy { timeout_action: DELAY } }",
        IO + "sequence_batching { direct { } }",
        IO + "instance_group [ { kind: KIND_CPU count: -2 } ]",
    ],
)
def test_validation_accepts(tmp_path: Path, text: str) -> None:
    load('backend: "python"\n' + text, python_model(tmp_path))


def test_validation_of_ensembles(tmp_path: Path) -> None:
    with_group = ENSEMBLE_PBTXT + "instance_group [ { kind: KIND_CPU } ]"
    config = parse_config_text(with_group, "ens/config.pbtxt")
    fill_server_side_fields(config, "ens", make_model_dir(tmp_path, "ens", {"1/": ""}))
    with pytest.raises(
        ModelConfigError, match=r"^instance group should not be specified for ensemble 'ens'$"
    ):
        validate_config(config)

    no_steps = parse_config_text('name: "e" platform: "ensemble"', "e/config.pbtxt")
    with pytest.raises(
        ModelConfigError,
        match=r"^ensemble scheduling must be set for ensemble e whose platform is ensemble$",
    ):
        validate_config(no_steps)

    with_backend = parse_config_text(ENSEMBLE_PBTXT + 'name: "e" backend: "python"', "x")
    with pytest.raises(
        ModelConfigError,
        match=r"^Ensemble model 'e' must have platform type 'ensemble' and empty backend type$",
    ):
        validate_config(with_backend)


def test_validation_needs_a_name() -> None:
    with pytest.raises(ModelConfigError, match="must specify 'name'"):
        validate_config(proto.ModelConfig())


# ---- versions ------------------------------------------------------------------------


def test_list_version_dirs(tmp_path: Path) -> None:
    model_dir = make_model_dir(
        tmp_path,
        "m",
        {
            "1/": "",
            "3/": "",
            "12/": "",
            "0/": "",
            "007/": "",
            "1a/": "",
            "configs/": "",
            "4": "a file, not a version",
            "config.pbtxt": "",
        },
    )
    assert list_version_dirs(model_dir) == [1, 3, 12]


def policy(text: str) -> Any:
    return parse_config_text(f'name: "m" {text}', "m/config.pbtxt")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", [12]),
        ("version_policy { latest { num_versions: 1 } }", [12]),
        ("version_policy { latest { num_versions: 2 } }", [3, 12]),
        ("version_policy { latest { num_versions: 10 } }", [1, 3, 12]),
        ("version_policy { all { } }", [1, 3, 12]),
        ("version_policy { specific { versions: [ 3, 1 ] } }", [1, 3]),
    ],
)
def test_select_versions(text: str, expected: list[int]) -> None:
    assert select_versions(policy(text), [3, 1, 12]) == expected


def test_select_versions_specific_missing_is_logged_and_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = policy("version_policy { specific { versions: [ 1, 3 ] } }")
    with caplog.at_level(logging.ERROR, logger="pytriton_core.config.versions"):
        assert select_versions(config, [1, 2]) == [1]
    assert caplog.messages == [
        "version 3 is specified for model 'm', but the version directory is not present"
    ]


@pytest.mark.parametrize(
    ("text", "available"),
    [
        ("version_policy { specific { versions: [ 3 ] } }", [1, 2]),
        ("", []),
        ("version_policy { latest { num_versions: 0 } }", [1]),
    ],
)
def test_select_versions_nothing_selected(text: str, available: list[int]) -> None:
    with pytest.raises(ModelConfigError, match="at least one version must be available"):
        select_versions(policy(text), available)
