"""The first step of a load: read a model folder and its config, as Triton's poll does.

``poll_model`` reads the config (or the load's override), fills the fields the server
derives itself, and checks everything that does not need the backend. Whatever fails here
fails the load as Triton fails it: ``failed to load '<m>', failed to poll from model
repository`` (INTERNAL) for the client, the detail in the log. A model whose folder and
config have not changed since it was loaded polls as unmodified, and its load is a no-op.
What needs the backend (auto-complete, the inputs and outputs, the model files) is checked
when each version loads, and fails with Triton's ``load failed for model`` instead.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import Message

from pytriton_core import config as model_config
from pytriton_core import proto
from pytriton_core.config.parse import config_path
from pytriton_core.errors import InternalError, ServerError
from pytriton_core.repository.agents import AgentChain, AgentRegistry
from pytriton_core.repository.identity import ModelId
from pytriton_core.repository.overrides import OverrideDirectory
from pytriton_core.repository.timestamps import ModelTimestamp

log = logging.getLogger(__name__)


@dataclass
class PolledModel:
    """A model folder ready to load: where it is, its config and its timestamp."""

    model_id: ModelId
    model_dir: Path
    # After the server-side fill, before normalization: each version normalizes its own
    # copy once the backend has completed it.
    config: Message
    timestamp: ModelTimestamp
    override: OverrideDirectory | None = None  # the folder made of a load's files
    # The repository agents the model went through (model_dir is the last one's folder).
    agents: AgentChain | None = None

    def release(self) -> None:
        if self.override is not None:
            self.override.cleanup()
            self.override = None


def poll_failure(name: str) -> ServerError:
    """What the client hears when the poll step failed (the detail is in the log)."""
    return InternalError(f"failed to load '{name}', failed to poll from model repository")


class PollError(Exception):
    """The poll step failed; ``detail`` is what Triton logs ("Poll failed for ...")."""

    def __init__(self, detail: str, refusal: ServerError | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        # A repository agent refused the model: its client hears why (Triton's client only
        # hears that the poll failed).
        self.refusal = refusal


@dataclass(frozen=True)
class PollSettings:
    model_config_name: str | None
    disable_auto_complete: bool
    gpu_ids: Sequence[int]
    agents: AgentRegistry | None = None  # model_repository_agents


def poll_model(
    model_id: ModelId,
    model_dir: Path | None,
    settings: PollSettings,
    *,
    config_json: str | None = None,
    files: Mapping[str, bytes] | None = None,
    loaded: ModelTimestamp | None = None,
) -> PolledModel | None:
    """Read and check one model; None when it is unchanged since ``loaded``.

    ``model_dir`` is the model's folder in its repository (None when the load brings its
    own files). Raises PollError.
    """
    if files and config_json is None:
        raise PollError("Load parameter 'config' must be specified for model file override")
    override: OverrideDirectory | None = None
    agents: AgentChain | None = None
    try:
        if files:
            try:
                override = OverrideDirectory(model_id.name, files)
            except OSError as exc:  # e.g. a file name longer than the file system allows
                raise PollError(f"Invalid file parameter: {exc}") from exc
            model_dir = override.model_dir
        if model_dir is None:
            raise PollError("model not found in any model repository.")
        if override is not None:
            timestamp = ModelTimestamp.overridden()
        else:
            config_file = config_path(model_dir, settings.model_config_name)
            timestamp = ModelTimestamp.read(model_dir, config_file)
            if config_json is not None:
                # Versions whose folder did not change keep serving if the config is the
                # same as the one they serve with (Triton compares the two).
                timestamp = timestamp.with_config_overridden()
            elif loaded is not None and not loaded.modified(timestamp):
                return None
        config = _read_config(model_dir, settings, config_json)
        if settings.agents is not None:
            # As Triton: the agents see the config as read, before the server fills it in;
            # the model loads from the folder the last one left.
            try:
                agents = settings.agents.run_load(model_id.name, model_dir, config)
            except ServerError as exc:
                raise PollError(exc.message, refusal=exc) from exc
            if agents is not None:
                model_dir = agents.location
        model_config.fill_server_side_fields(config, model_id.name, model_dir)
        checked = proto.ModelConfig()
        checked.CopyFrom(config)
        model_config.normalize_config(checked, gpu_ids=settings.gpu_ids)
        model_config.validate_config(checked, check_tensors=settings.disable_auto_complete)
    except ServerError as exc:
        _give_up(override, agents)
        raise PollError(exc.message) from exc
    except PollError:
        _give_up(override, agents)
        raise
    return PolledModel(model_id, model_dir, config, timestamp, override, agents)


def _give_up(override: OverrideDirectory | None, agents: AgentChain | None) -> None:
    if override is not None:
        override.cleanup()
    if agents is not None:
        agents.load_finished(False)


def _read_config(model_dir: Path, settings: PollSettings, config_json: str | None) -> Message:
    if config_json is not None:
        try:
            return model_config.config_from_json(config_json)
        except ServerError as exc:
            detail = exc.message.removeprefix("invalid model config JSON: ")
            raise PollError(f"Invalid config override: {detail}") from exc
    config = model_config.read_model_config(model_dir, settings.model_config_name)
    if config is None:
        if settings.disable_auto_complete:
            raise PollError(
                f"failed to read model config {config_path(model_dir)}: no such file "
                "(auto-complete is disabled, so the model needs one)"
            )
        config = proto.ModelConfig()
    return config
