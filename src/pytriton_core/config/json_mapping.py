"""Triton's JSON rendering of a ModelConfig (GET /v2/models/<m>/config, Python auto-complete)."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from pytriton_core import proto

# The proto3 JSON mapping writes 64-bit integers as strings; Triton turns exactly these
# fields back into numbers (clients read dims and delays as numbers). "*" steps into every
# element of a list or every value of a map. Other 64-bit fields stay strings, as in Triton.
_INT64_AS_NUMBER: tuple[tuple[str, ...], ...] = (
    ("input", "*", "dims"),
    ("input", "*", "reshape", "shape"),
    ("output", "*", "dims"),
    ("output", "*", "reshape", "shape"),
    ("version_policy", "specific", "versions"),
    ("dynamic_batching", "max_queue_delay_microseconds"),
    ("dynamic_batching", "priority_levels"),
    ("dynamic_batching", "default_priority_level"),
    ("dynamic_batching", "default_queue_policy", "default_timeout_microseconds"),
    ("dynamic_batching", "priority_queue_policy", "*", "default_timeout_microseconds"),
    ("sequence_batching", "max_sequence_idle_microseconds"),
    ("sequence_batching", "oldest", "max_queue_delay_microseconds"),
    ("sequence_batching", "direct", "max_queue_delay_microseconds"),
    ("sequence_batching", "state", "*", "dims"),
    ("sequence_batching", "state", "*", "initial_state", "*", "dims"),
    ("ensemble_scheduling", "step", "*", "model_version"),
    ("model_warmup", "*", "inputs", "*", "dims"),
)


def config_to_json_dict(config: Message) -> dict[str, Any]:
    """The config as Triton renders it: snake_case names, every scalar, enums by name."""
    rendered: dict[str, Any] = json_format.MessageToDict(
        config,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
        use_integers_for_enums=False,
        descriptor_pool=proto.POOL,
    )
    for path in _INT64_AS_NUMBER:
        _numbers_at(rendered, path)
    return rendered


def _numbers_at(node: Any, path: tuple[str, ...]) -> None:
    """Turn the int64 strings found at ``path`` under ``node`` into ints, in place."""
    head, rest = path[0], path[1:]
    if head == "*":
        for child in node.values() if isinstance(node, dict) else node:
            _numbers_at(child, rest)
        return
    if not isinstance(node, dict) or head not in node:
        return
    if rest:
        _numbers_at(node[head], rest)
    elif isinstance(node[head], list):
        node[head] = [int(item) for item in node[head]]
    else:
        node[head] = int(node[head])
