"""The pure-Python half of ``triton_python_backend_utils``: ModelConfig and dict/type helpers.

Re-exported by :mod:`pytriton_core.backends.python.pb_utils`; nothing here touches the
server. The numpy tables mirror the keys and values that Triton's module defines (no BF16
entries, numpy ``U`` strings unknown) and are derived from :mod:`pytriton_core.types`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from pytriton_core import types

# Triton's helper tables predate BF16 and leave it out; so do these.
_LEGACY_TYPES = tuple(dt for dt in types.DATATYPES if dt.wire_name != "BF16")

TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    # Triton maps TYPE_BOOL to the builtin ``bool``; every other entry is a numpy scalar type.
    dt.config_name: bool if dt.wire_name == "BOOL" else dt.numpy_dtype.type
    for dt in _LEGACY_TYPES
}
_NUMPY_BY_CONFIG_VALUE: dict[int, type[Any]] = {
    dt.config_value: dt.numpy_dtype.type for dt in _LEGACY_TYPES
}
_CONFIG_VALUE_BY_NUMPY: dict[np.dtype[Any], int] = {
    dt.numpy_dtype: dt.config_value for dt in _LEGACY_TYPES
}


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """``"TYPE_FP32"`` → ``np.float32``; KeyError for names the table lacks (as in Triton)."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int) -> type[Any] | None:
    """TRITONSERVER datatype value (1 = BOOL ... 13 = BYTES) → numpy type, or None."""
    return _NUMPY_BY_CONFIG_VALUE.get(data_type)


def numpy_to_triton_type(data_type: Any) -> int | None:
    """numpy dtype or scalar type → TRITONSERVER datatype value, or None when unmapped.

    ``np.object_`` and every ``S`` (bytes) dtype map to 13 (BYTES).
    """
    if data_type is None:
        return None
    try:
        dtype = np.dtype(data_type)
    except TypeError:
        return None
    if dtype.kind == "S":
        return _CONFIG_VALUE_BY_NUMPY[np.dtype(np.object_)]
    return _CONFIG_VALUE_BY_NUMPY.get(dtype)


def _find_by_name(entries: Any, name: str) -> dict[str, Any] | None:
    for entry in entries or ():
        if entry.get("name") == name:
            return entry  # type: ignore[no-any-return]
    return None


def get_input_config_by_name(model_config: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """The ``input`` entry of a model-config dict named ``name``, or None."""
    return _find_by_name(model_config.get("input"), name)


def get_output_config_by_name(model_config: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """The ``output`` entry of a model-config dict named ``name``, or None."""
    return _find_by_name(model_config.get("output"), name)


def using_decoupled_model_transaction_policy(model_config: Mapping[str, Any]) -> bool:
    """True when the config dict sets ``model_transaction_policy { decoupled: true }``."""
    policy = model_config.get("model_transaction_policy") or {}
    return bool(policy.get("decoupled", False))


_INPUT_KEYS = ("name", "data_type", "dims", "optional")
_OUTPUT_KEYS = ("name", "data_type", "dims")


class ModelConfig:
    """A model configuration as ``auto_complete_config`` sees it: a dict parsed from JSON.

    Only ``max_batch_size``, the scheduler choice, inputs, outputs and the transaction
    policy may change; each setter refuses (ValueError) to contradict what the config
    file already states.
    """

    def __init__(self, model_config: str | bytes) -> None:
        self._model_config: dict[str, Any] = json.loads(model_config)

    def as_dict(self) -> dict[str, Any]:
        """The configuration dict itself (edits through the setters show here)."""
        return self._model_config

    @property
    def _model_name(self) -> str:
        return str(self._model_config.get("name", ""))

    def set_max_batch_size(self, max_batch_size: int) -> None:
        """Raise max_batch_size to ``max_batch_size``; never lower a value the config set."""
        current = int(self._model_config.get("max_batch_size", 0))
        if max_batch_size < 0:
            raise ValueError(
                f"auto_complete_config of model '{self._model_name}' set a negative "
                f"max_batch_size ({max_batch_size})"
            )
        if current > max_batch_size:
            raise ValueError(
                f"the configuration of model '{self._model_name}' sets max_batch_size "
                f"{current}, but its auto_complete_config sets the smaller {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        """Choose dynamic batching, unless the config already chose another scheduler."""
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._model_config:
                raise ValueError(
                    f"the configuration of model '{self._model_name}' chooses '{other}', so "
                    "its auto_complete_config cannot choose 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: Mapping[str, Any]) -> None:  # Triton names it "input"
        """Add an input, or complete the config's input of the same name."""
        self._add_tensor("input", _INPUT_KEYS, input)

    def add_output(self, output: Mapping[str, Any]) -> None:
        """Add an output, or complete the config's output of the same name."""
        self._add_tensor("output", _OUTPUT_KEYS, output)

    def _add_tensor(self, kind: str, allowed: tuple[str, ...], entry: Mapping[str, Any]) -> None:
        shown = f"{kind} '{entry['name']}'" if "name" in entry else kind
        where = f"in auto_complete_config of model '{self._model_name}'"
        unknown = [key for key in entry if key not in allowed]
        if unknown:
            names = ", ".join(f"'{key}'" for key in allowed)
            raise ValueError(f"{shown} {where} has properties {unknown}; only {names} are allowed")
        for key in allowed:
            if key != "optional" and key not in entry:
                raise ValueError(f"{shown} {where} lacks the '{key}' property")

        name, data_type, dims = entry["name"], entry["data_type"], list(entry["dims"])
        entries: list[dict[str, Any]] = self._model_config.setdefault(kind, [])
        existing = _find_by_name(entries, name)
        if existing is None:
            entries.append({**entry, "dims": dims})
            return
        # The mismatch messages are Triton's words: they reach clients in load errors.
        configured_type = existing.get("data_type", "TYPE_INVALID")
        if configured_type not in ("TYPE_INVALID", data_type):
            raise ValueError(
                f"unable to load model '{self._model_name}', configuration expects datatype "
                f"{configured_type} for {kind} '{name}', model provides {data_type}"
            )
        configured_dims = list(existing.get("dims") or [])
        if configured_dims and configured_dims != dims:
            raise ValueError(
                f"model '{self._model_name}', tensor '{name}': the model expects dims {dims} "
                f"but the model configuration specifies dims {configured_dims}"
            )
        if "optional" in entry and existing.get("optional", entry["optional"]) != entry["optional"]:
            raise ValueError(
                f"model '{self._model_name}', tensor '{name}': the model expects optional "
                f"{entry['optional']} but the model configuration specifies optional "
                f"{existing['optional']}"
            )
        existing["data_type"] = data_type
        existing["dims"] = dims
        if "optional" in entry:
            existing["optional"] = entry["optional"]

    def set_model_transaction_policy(self, transaction_policy_dict: Mapping[str, Any]) -> None:
        """Set ``model_transaction_policy`` (only ``decoupled``); never flip a configured value."""
        unknown = [key for key in transaction_policy_dict if key != "decoupled"]
        if unknown:
            raise ValueError(
                f"the transaction policy set by auto_complete_config of model "
                f"'{self._model_name}' has properties {unknown}; only 'decoupled' is allowed"
            )
        policy: dict[str, Any] = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" not in transaction_policy_dict:
            return
        wanted = transaction_policy_dict["decoupled"]
        if "decoupled" in policy and policy["decoupled"] != wanted:
            raise ValueError(
                f"auto_complete_config of model '{self._model_name}' cannot change "
                f"'decoupled', which the configuration sets to '{policy['decoupled']}'"
            )
        policy["decoupled"] = wanted
