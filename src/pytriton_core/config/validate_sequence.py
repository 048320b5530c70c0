"""Load-time checks of ``sequence_batching``: Triton's rules and messages
(ValidateModelConfig, Get*SequenceControlProperties, SequenceStates::Initialize), plus the
combinations this server refuses outright where Triton would misbehave later.

The ``initial_state`` checks that need the model's files run when the scheduler is built
(``scheduling.sequence_state``).
"""

from __future__ import annotations

from typing import Any, NoReturn, Protocol

from pytriton_core import proto, types

_Control = proto.enum_type("inference.ModelSequenceBatching.Control.Kind")
_BOOLEAN_KINDS = ("CONTROL_SEQUENCE_START", "CONTROL_SEQUENCE_END", "CONTROL_SEQUENCE_READY")
_CORRID = "CONTROL_SEQUENCE_CORRID"
_CORRID_TYPES = ("TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING")
_KIND_GPU = proto.enum_type("inference.ModelInstanceGroup.Kind").Value("KIND_GPU")
_DATATYPE = proto.enum_type("inference.DataType")


class Fail(Protocol):
    def fail(self, detail: str) -> NoReturn: ...


def check_sequence_batching(check: Fail, cfg: Any) -> None:
    """Raise (through ``check.fail``) for the first rule ``cfg.sequence_batching`` breaks."""
    model = cfg.name
    sequence = cfg.sequence_batching
    if cfg.response_cache.enable:
        check.fail(
            f"Response Cache does not currently support model {model} with sequence batching "
            "scheduler. Please disable the response cache."
        )
    _check_controls(check, model, sequence)
    if sequence.HasField("oldest"):
        for size in sequence.oldest.preferred_batch_size:
            if size <= 0:
                check.fail(f"sequence batching preferred batch size must be positive for {model}")
            if size > cfg.max_batch_size:
                check.fail(
                    f"sequence batching preferred batch size must be <= max batch size for {model}"
                )
    utilization = sequence.direct.minimum_slot_utilization
    if not 0.0 <= utilization <= 1.0:
        check.fail(
            f"sequence batching minimum slot utilization must be in range (0.0, 1.0] for {model}"
        )
    _check_states(check, cfg)


def _check_controls(check: Fail, model: str, sequence: Any) -> None:
    names: set[str] = set()
    seen_kinds: set[str] = set()
    for entry in sequence.control_input:
        if not entry.name:
            check.fail(f"sequence batching control tensor must have a name for {model}")
        if entry.name in names:
            check.fail(
                f"sequence batching control tensor '{entry.name}' is specified for multiple "
                f"control kinds for {model}"
            )
        names.add(entry.name)
        if len(entry.control) != 1:
            check.fail(
                f"sequence batching control tensor '{entry.name}' must have exactly one control "
                f"for {model}, got {len(entry.control)}"
            )
        control = entry.control[0]
        kind = _Control.Name(control.kind)
        if kind in seen_kinds:
            check.fail(f"sequence batching specifies multiple {kind} tensors for {model}")
        seen_kinds.add(kind)
        lists = {
            "int32_false_true": len(control.int32_false_true),
            "fp32_false_true": len(control.fp32_false_true),
            "bool_false_true": len(control.bool_false_true),
        }
        given = [name for name, count in lists.items() if count]
        if kind == _CORRID:
            if given:
                check.fail(
                    "sequence batching must not specify either 'int32_false_true', "
                    f"'fp32_false_true' or 'bool_false_true' for {kind} for {model}"
                )
            if _DATATYPE.Name(control.data_type) not in _CORRID_TYPES:
                check.fail(
                    f"unexpected data type for control {kind} for {model}. Allowed data types "
                    "are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"
                )
            continue
        assert kind in _BOOLEAN_KINDS
        if not given:
            check.fail(
                "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
                f"'bool_false_true' for {kind} for {model}"
            )
        if len(given) > 1:
            check.fail(
                "sequence batching specifies more than one from 'int32_false_true', "
                f"'fp32_false_true' and 'bool_false_true' for {kind} for {model}"
            )
        if lists[given[0]] != 2:
            check.fail(
                f"sequence batching control '{given[0]}' must have exactly 2 entries for {kind} "
                f"for {model}"
            )


def _check_states(check: Fail, cfg: Any) -> None:
    sequence = cfg.sequence_batching
    if not sequence.state:
        return
    taken = {entry.name for entry in cfg.input} | {c.name for c in sequence.control_input}
    inputs: set[str] = set()
    outputs: set[str] = set()
    for state in sequence.state:
        where = f"sequence_batching.state '{state.input_name}'"
        if not state.input_name or not state.output_name:
            check.fail("sequence_batching.state must set both input_name and output_name")
        if state.input_name in taken:
            check.fail(f"{where}: input_name is already an input of the model")
        if state.input_name in inputs:
            check.fail(f"{where}: duplicate 'input_name' in the state configuration")
        if state.output_name in outputs:
            check.fail(
                f"{where}: duplicate 'output_name' '{state.output_name}' in the state configuration"
            )
        inputs.add(state.input_name)
        outputs.add(state.output_name)
        if state.data_type not in types.BY_CONFIG_VALUE:
            check.fail(f"{where} has no valid data_type")
        if not state.dims or any(d < 1 and d != -1 for d in state.dims):
            check.fail(f"{where} dims must be >= 1 or -1 (variable size), got {list(state.dims)}")
        for entry in cfg.output:
            if entry.name == state.output_name and entry.data_type != state.data_type:
                check.fail(
                    f"{where}: output '{entry.name}' has a different data_type than the state"
                )
        if state.use_growable_memory:
            if not state.use_same_buffer_for_input_output:
                check.fail(
                    "In order to 'use_growable_memory', you must also enable 'use_single_buffer' "
                    f"for state input name '{state.input_name}'."
                )
            if any(group.kind != _KIND_GPU for group in cfg.instance_group):
                check.fail(
                    "'use_growable_memory' can only work with KIND_GPU model instances right "
                    "now. Please either change the instance type to KIND_GPU or set "
                    f"'use_growable_memory' to false for state input '{state.input_name}'."
                )
